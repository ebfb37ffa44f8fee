//! A site and the frames it is read from: the [`Site`] type and its [`SiteKind`], a frame read
//! as a site of the user's own or as the site rules see it, a frame's location, and the mixed
//! native and Python order of a stack's frames. [`crate::sites`] (which re-exports them and
//! holds the site rule) and [`crate::call_path`] (which follows a site's frames outward) both
//! build on these.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

use cuguard_symbolize::mixed::{self, Slot};
use cuguard_symbolize::rules::{Rules, Tier};
use cuguard_symbolize::site::SiteFrame;
use serde::Serialize;

use cuguard_format::{Frame, Stack};

/// What kind of frame a site is (`stacks[].site.kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteKind {
    /// The user's own frame.
    User,
    /// No user frame on the stack: the framework operation that asked (an autograd node).
    Operation,
    /// Neither: the first framework frame.
    Fallback,
}

impl SiteKind {
    /// The kind a report names (`user`, `operation`, `fallback`); `None` for others.
    pub fn parse(s: &str) -> Option<SiteKind> {
        match s {
            "user" => Some(SiteKind::User),
            "operation" => Some(SiteKind::Operation),
            "fallback" => Some(SiteKind::Fallback),
            _ => None,
        }
    }
}

/// The site of a leak or event.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Site {
    /// What groups leaks: `function (file:line)` for a site the shim chose; else the function
    /// name, or `module+0xoffset` (module file name only), or one of `<no stack>`,
    /// `<unknown stack N>`, `<empty stack>`.
    pub key: String,
    /// What [`Site::label`] prints before the location: the function (for an operation or a
    /// fallback, its qualified path without parameters), `module+0xoffset`, or the placeholder.
    pub name: String,
    /// The site's source location, `file:line`, when known.
    pub location: Option<String>,
    /// The function of the site's frame, when known.
    pub function: Option<String>,
    /// The module holding the site's frame (full path), when there is one.
    pub module: Option<String>,
    /// What kind of frame it is, when the report says (a site the shim chose: `user` when the
    /// report is older than kinds); `None` for sites found by the older rule, and placeholders.
    pub kind: Option<SiteKind>,
    /// For an operation: where it ran, when the stack tells (`on the autograd thread`).
    pub context: Option<String>,
    /// For a site that is not the user's own frame, on a stack made under an origin
    /// (`stacks[].origin`): where the work was started, the origin stack's site location
    /// (`train.py:42`), else its name. Part of the key.
    pub origin: Option<String>,
    /// For a site charged to the caller of an allocation helper ([`crate::call_path`]): the
    /// helper's frame the caller called. Part of the key and the label.
    pub via: Option<Box<Site>>,
}

impl Site {
    /// A site without a frame (`<no stack>`, `<unknown stack N>`): its key is its name.
    pub(crate) fn placeholder(key: String) -> Site {
        Site {
            name: key.clone(),
            key,
            location: None,
            function: None,
            module: None,
            kind: None,
            context: None,
            origin: None,
            via: None,
        }
    }

    /// The site for people, its location once: `name (location)`, or the name alone; an
    /// operation as `operation: name (location)` (or `on the autograd thread: …`), a fallback as
    /// `framework: name (location)`; with an origin, where the work was started after it
    /// (`on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520), backward from
    /// train.py:42`; elsewhere `…, from train.py:42`).
    pub fn label(&self) -> String {
        let prefix = match self.kind {
            Some(SiteKind::Operation) => {
                format!("{}: ", self.context.as_deref().unwrap_or("operation"))
            }
            Some(SiteKind::Fallback) => "framework: ".to_string(),
            _ => String::new(),
        };
        let mut label = match &self.location {
            Some(loc) => format!("{prefix}{} ({loc})", self.name),
            None => format!("{prefix}{}", self.name),
        };
        if let Some(origin) = &self.origin {
            let how = if self.context.as_deref() == Some(AUTOGRAD_THREAD) {
                "backward from"
            } else {
                "from"
            };
            label.push_str(&format!(", {how} {origin}"));
        }
        if let Some(helper) = &self.via {
            label.push_str(" via ");
            label.push_str(&helper.label());
        }
        label
    }
}

/// The built-in site and owner rules (`cuguard_symbolize::rules`), built once.
pub fn builtin_rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(Rules::builtin)
}

/// How many frames [`tier`] remembers per thread before it forgets them all.
pub(crate) const TIER_MEMO: usize = 4096;

/// The built-in rules' tier of a frame (`None` for the user's own frame), as
/// [`Rules::tier`] gives it, remembered per thread for up to [`TIER_MEMO`] distinct frames:
/// the tier depends on the frame's module, function and file alone, and a program's frames
/// recur across its stacks and reports, while each rule is a glob matched anew.
pub fn tier(frame: &SiteFrame<'_>) -> Option<Tier> {
    thread_local! {
        static MEMO: RefCell<(String, HashMap<String, Option<Tier>>)> =
            RefCell::new((String::new(), HashMap::new()));
    }
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        let (key, known) = &mut *memo;
        key.clear();
        // Each part with its length, so that no two frames share a key.
        let mut part = |s: Option<&str>| match s {
            Some(s) => {
                key.push_str(&s.len().to_string());
                key.push(':');
                key.push_str(s);
            }
            None => key.push('-'),
        };
        part(Some(frame.module));
        part(frame.function);
        part(frame.file);
        if let Some(&t) = known.get(key.as_str()) {
            return t;
        }
        let t = builtin_rules().tier(frame);
        if known.len() >= TIER_MEMO {
            known.clear();
        }
        known.insert(key.clone(), t);
        t
    })
}

/// The last component of a path.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `file:line` (file name only), or the file alone.
pub(crate) fn location(file: Option<&str>, line: Option<u32>) -> Option<String> {
    file.map(|file| match line {
        Some(line) => format!("{}:{line}", file_name(file)),
        None => file_name(file).to_string(),
    })
}

/// What an operation's context says of PyTorch's autograd engine's own threads (found in
/// [`crate::sites`]; [`Site::label`] reads it).
pub(crate) const AUTOGRAD_THREAD: &str = "on the autograd thread";

/// A Python frame's location: `file:line` (file name only), or, for a file the program named
/// (`display`, IPython's `Cell In[2]`), `Cell In[2], line 5`.
pub fn python_location(f: &cuguard_format::PyFrame) -> Option<String> {
    match (&f.display, f.line) {
        (Some(display), Some(line)) => Some(format!("{display}, line {line}")),
        (Some(display), None) => Some(display.clone()),
        (None, _) => location(Some(&f.file), f.line),
    }
}

/// A named native frame as a site of the user's own (`function (file:line)`, keyed as the
/// shim's sites are); `None` for a frame without a name. [`crate::call_path`] follows these.
pub fn user_frame_site(f: &Frame) -> Option<Site> {
    let function = f.function.as_deref().filter(|n| !n.is_empty())?.to_string();
    Some(user_site(
        function,
        location(f.file.as_deref(), f.line),
        Some(f.module.to_string()),
    ))
}

/// A Python frame as a site of the user's own (`function (file:line)`, or its display name's
/// `Cell In[2], line 5`).
pub fn python_frame_site(f: &cuguard_format::PyFrame) -> Option<Site> {
    (!f.function.is_empty()).then(|| user_site(f.function.clone(), python_location(f), None))
}

fn user_site(function: String, location: Option<String>, module: Option<String>) -> Site {
    let key = match &location {
        Some(loc) => format!("{function} ({loc})"),
        None => function.clone(),
    };
    Site {
        key,
        name: function.clone(),
        location,
        function: Some(function),
        module,
        kind: Some(SiteKind::User),
        context: None,
        origin: None,
        via: None,
    }
}

/// The frames of a stack in the mixed native and Python order, innermost first: the report's
/// `mixed` when it has one, else the order `cuguard_symbolize::mixed` gives from the Python
/// frames' entry marks; `None` when the stack has no Python frames or no way to place them.
pub fn mixed_order(stack: &Stack) -> Option<Vec<Slot>> {
    if stack.python.is_empty() {
        return None;
    }
    if !stack.mixed.is_empty() {
        let slots: Vec<Slot> = stack
            .mixed
            .iter()
            .filter_map(|m| match (m.native, m.python) {
                (Some(i), None) if i < stack.frames.len() => Some(Slot::Native(i)),
                (None, Some(j)) if j < stack.python.len() => Some(Slot::Python(j)),
                _ => None,
            })
            .collect();
        return (!slots.is_empty()).then_some(slots);
    }
    let native: Vec<SiteFrame<'_>> = stack.frames.iter().map(site_frame).collect();
    let entries: Vec<Option<bool>> = stack.python.iter().map(|p| p.entry).collect();
    mixed::mixed(&native, &entries)
}

/// What the rules look at in a native frame.
pub fn site_frame(f: &Frame) -> SiteFrame<'_> {
    SiteFrame {
        module: &f.module,
        function: f.function.as_deref(),
        file: f.file.as_deref(),
        line: f.line,
        offset: f.offset.0,
    }
}

/// What the rules look at in a Python frame.
pub fn python_site_frame(f: &cuguard_format::PyFrame) -> SiteFrame<'_> {
    SiteFrame {
        module: "",
        function: Some(&f.function),
        file: Some(&f.file),
        line: f.line,
        offset: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The remembered tier is the rules' own for every frame, whether remembered, new, or
    /// after the memo forgot (more distinct frames than it keeps); frames that differ only in
    /// a part's being absent or empty, or in where one part ends, are told apart.
    #[test]
    fn the_remembered_tier_is_the_rules_own() {
        let modules = [
            "/opt/cuguard/lib/libcuguard.so",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "/site-packages/torch/lib/libtorch_cuda.so",
            "/opt/app/bin/trainer",
            "",
        ];
        let functions = [
            None,
            Some(""),
            Some("cuMemAlloc_v2"),
            Some("at::native::empty_cuda(long)"),
            Some("c10::cuda::CUDACachingAllocator::malloc"),
            Some("torch::autograd::generated::AddmmBackward0::apply"),
            Some("main"),
            Some("step"),
        ];
        let files = [
            None,
            Some(""),
            Some("train.py"),
            Some("/usr/lib/python3.12/site-packages/torch/nn/modules/module.py"),
            Some("CUDACachingAllocator.cpp"),
        ];
        let rules = builtin_rules();
        let mut frames = Vec::new();
        for m in modules {
            for f in functions {
                for file in files {
                    frames.push((m.to_string(), f.map(String::from), file.map(String::from)));
                }
            }
        }
        // Enough user frames of their own to make the memo forget, twice.
        for k in 0..2 * TIER_MEMO + 7 {
            frames.push((
                "/opt/app/bin/trainer".into(),
                Some(format!("fn_{k}")),
                Some("app.cc".into()),
            ));
        }
        for round in 0..2 {
            for (m, f, file) in &frames {
                let frame = SiteFrame {
                    module: m,
                    function: f.as_deref(),
                    file: file.as_deref(),
                    line: Some(round),
                    offset: 0,
                };
                assert_eq!(tier(&frame), rules.tier(&frame), "{frame:?}");
            }
        }
        // Parts whose texts run together are still two frames.
        let a = SiteFrame {
            module: "/usr/lib/libcuda.so.1",
            function: Some("x"),
            ..SiteFrame::default()
        };
        let b = SiteFrame {
            module: "/usr/lib/libcuda.so",
            function: Some(".1x"),
            ..SiteFrame::default()
        };
        for f in [a, b, a, b] {
            assert_eq!(tier(&f), rules.tier(&f), "{f:?}");
        }
    }
}
