//! The site rule: which place in the program a leak is charged to, and how it is named.
//!
//! A leak's *site* is the frame the shim chose when it wrote the report (`stacks[].site`: the
//! user's own frame, Python frames included; failing that, the framework operation that asked,
//! such as an autograd node on PyTorch's engine thread; failing that, a framework frame), keyed
//! `function (file:line)` — two allocations on two lines of one function are two sites, as they
//! are two places to fix. For reports without it (older shims, or names that were not resolved),
//! the site is the first frame (innermost first) outside cuguard's shim, the CUDA driver and the
//! CUDA runtime, keyed by its function when known, else by `module+0xoffset`. Everything that
//! groups leaks (summary, check, suppressions, diff, view) asks this module.
//!
//! A site is *printed* by [`Site::label`]: its name and its location once
//! (`cudarc_leaks::main (cudarc_leaks.rs:25)`), after a word saying what it is when it is not
//! the user's own frame: `on the autograd thread: AddmmBackward0::apply (…)` or
//! `operation: cudf::merge (…)` for an operation, `framework: at::native::empty_cuda (…)` for a
//! fallback. [`SiteIndex::chain`] gives a stack's frames in the mixed native and Python order,
//! the way `py-spy --native` reads (`at::native::empty_cuda ← step (train.py:7) ← <module>
//! (train.py:12)`), for the stacks that have Python frames.

use std::collections::HashMap;
use std::sync::OnceLock;

use cuguard_symbolize::mixed::{self, Slot};
use cuguard_symbolize::rules::{Rules, Tier};
use cuguard_symbolize::site::{SiteFrame, qualified_path};
use serde::Serialize;

use crate::report::{Frame, Report, Stack};

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
}

impl Site {
    fn placeholder(key: String) -> Site {
        Site {
            name: key.clone(),
            key,
            location: None,
            function: None,
            module: None,
            kind: None,
            context: None,
        }
    }

    /// The site for people, its location once: `name (location)`, or the name alone; an
    /// operation as `operation: name (location)` (or `on the autograd thread: …`), a fallback as
    /// `framework: name (location)`.
    pub fn label(&self) -> String {
        let prefix = match self.kind {
            Some(SiteKind::Operation) => {
                format!("{}: ", self.context.as_deref().unwrap_or("operation"))
            }
            Some(SiteKind::Fallback) => "framework: ".to_string(),
            _ => String::new(),
        };
        match &self.location {
            Some(loc) => format!("{prefix}{} ({loc})", self.name),
            None => format!("{prefix}{}", self.name),
        }
    }
}

/// A site as outputs carry it: its key, its label, its location and its kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteRef {
    /// The site's key (what groups leaks; see [`Site::key`]).
    pub site: String,
    /// The site for people, its location once (see [`Site::label`]).
    pub label: String,
    /// `file:line`, when known.
    pub location: Option<String>,
    /// What kind of frame it is, when the report says.
    pub kind: Option<SiteKind>,
}

impl From<&Site> for SiteRef {
    fn from(site: &Site) -> SiteRef {
        SiteRef {
            site: site.key.clone(),
            label: site.label(),
            location: site.location.clone(),
            kind: site.kind,
        }
    }
}

/// The built-in site and owner rules (`cuguard_symbolize::rules`), built once.
pub fn builtin_rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(Rules::builtin)
}

/// Whether a module belongs to cuguard or CUDA itself, so frames in it are not sites.
pub fn is_runtime_module(path: &str) -> bool {
    let name = file_name(path);
    name.starts_with("libcuguard")
        || name.starts_with("libcuda.so")
        || name.starts_with("libcudart")
}

/// The last component of a path.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The site of a stack (see the module doc for the rule).
pub fn site_of_stack(stack: &Stack) -> Site {
    if let Some(site) = shim_site(stack) {
        return site;
    }
    let frame = stack
        .frames
        .iter()
        .find(|f| !is_runtime_module(&f.module))
        .or_else(|| stack.frames.first());
    match frame {
        Some(f) => site_of_frame(f),
        None => Site::placeholder("<empty stack>".into()),
    }
}

/// `file:line` (file name only), or the file alone.
fn location(file: Option<&str>, line: Option<u32>) -> Option<String> {
    file.map(|file| match line {
        Some(line) => format!("{}:{line}", file_name(file)),
        None => file_name(file).to_string(),
    })
}

/// The name an operation or a fallback site is shown by: the qualified path without
/// parameters, and an autograd node without its namespaces (`AddmmBackward0::apply`).
fn short_name(function: &str) -> String {
    let q = qualified_path(function);
    for prefix in ["torch::autograd::generated::", "torch::autograd::"] {
        if let Some(rest) = q.strip_prefix(prefix)
            && !rest.is_empty()
        {
            return rest.to_string();
        }
    }
    if q.is_empty() {
        function.to_string()
    } else {
        q
    }
}

/// Where an operation ran, when its stack tells: PyTorch's autograd engine's own threads.
fn operation_context(stack: &Stack) -> Option<String> {
    stack
        .frames
        .iter()
        .filter_map(|f| f.function.as_deref())
        .any(|f| qualified_path(f).starts_with("torch::autograd::Engine::thread_"))
        .then(|| "on the autograd thread".to_string())
}

/// The site the shim chose, when the report has one and its frame is named.
fn shim_site(stack: &Stack) -> Option<Site> {
    let chosen = stack.site.as_ref()?;
    let (function, file, line, module) = match chosen.in_.as_str() {
        "python" => {
            let f = stack.python.get(chosen.index)?;
            (Some(f.function.clone()), Some(f.file.clone()), f.line, None)
        }
        "frames" => {
            let f = stack.frames.get(chosen.index)?;
            (
                f.function
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .map(str::to_string),
                f.file.as_deref().map(str::to_string),
                f.line,
                Some(f.module.to_string()),
            )
        }
        _ => return None,
    };
    let function = function?;
    let location = location(file.as_deref(), line);
    let key = match &location {
        Some(loc) => format!("{function} ({loc})"),
        None => function.clone(),
    };
    // Reports older than kinds only ever chose the user's frame.
    let kind = match chosen.kind.as_deref() {
        None => Some(SiteKind::User),
        Some(k) => SiteKind::parse(k),
    };
    let (name, context) = match kind {
        Some(SiteKind::Operation) => (short_name(&function), operation_context(stack)),
        Some(SiteKind::Fallback) => (short_name(&function), None),
        _ => (function.clone(), None),
    };
    Some(Site {
        key,
        name,
        location,
        function: Some(function),
        module,
        kind,
        context,
    })
}

/// A frame's name: its function when known, else `module+0xoffset` (module file name only).
pub fn frame_name(f: &Frame) -> String {
    match &f.function {
        Some(name) if !name.is_empty() => name.to_string(),
        _ => format!("{}+{}", file_name(&f.module), f.offset),
    }
}

fn site_of_frame(f: &Frame) -> Site {
    let key = frame_name(f);
    Site {
        name: key.clone(),
        key,
        location: location(f.file.as_deref(), f.line),
        function: f
            .function
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(str::to_string),
        module: Some(f.module.to_string()),
        kind: None,
        context: None,
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
pub fn python_site_frame(f: &crate::report::PyFrame) -> SiteFrame<'_> {
    SiteFrame {
        module: "",
        function: Some(&f.function),
        file: Some(&f.file),
        line: f.line,
        offset: 0,
    }
}

/// The most frames [`SiteIndex::chain`] shows.
pub const MAX_CHAIN: usize = 8;

/// A stack's frames for people, in the mixed order (see [`mixed_order`]), innermost first:
/// without the driver's, allocators' and interpreter's frames (the built-in rules' never-site
/// tier), each `name (file:line)` (C++ names without parameters), at most [`MAX_CHAIN`] and
/// then `…`. Empty when the stack has no mixed order, or when one frame is left (the site
/// alone says as much).
pub fn chain(stack: &Stack) -> Vec<String> {
    let (mut out, cut) = mixed_names_upto(stack, MAX_CHAIN);
    if cut {
        out.push("…".to_string());
    }
    if out.len() < 2 {
        out.clear();
    }
    out
}

/// A stack's frames for people as [`chain`] names and filters them, at full depth (no cut,
/// one frame kept), innermost first; `None` when the stack has no mixed order. The flame graph
/// of `cuguard view` draws these.
pub fn mixed_names(stack: &Stack) -> Option<Vec<String>> {
    mixed_order(stack)?;
    Some(mixed_names_upto(stack, usize::MAX).0)
}

/// At most `max` of a stack's frames for people (see [`chain`]), and whether more were left.
fn mixed_names_upto(stack: &Stack, max: usize) -> (Vec<String>, bool) {
    let Some(order) = mixed_order(stack) else {
        return (Vec::new(), false);
    };
    let rules = builtin_rules();
    let mut out = Vec::new();
    for slot in order {
        let (frame, name) = match slot {
            Slot::Native(i) => {
                let f = &stack.frames[i];
                let name = match f.function.as_deref() {
                    Some(n) if !n.is_empty() => {
                        let q = qualified_path(n);
                        if q.is_empty() { n.to_string() } else { q }
                    }
                    _ => frame_name(f),
                };
                (site_frame(f), name)
            }
            Slot::Python(j) => {
                let f = &stack.python[j];
                (python_site_frame(f), f.function.clone())
            }
        };
        if rules.tier(&frame) == Some(Tier::NeverSite) {
            continue;
        }
        if out.len() == max {
            return (out, true);
        }
        out.push(match location(frame.file, frame.line) {
            Some(loc) => format!("{name} ({loc})"),
            None => name,
        });
    }
    (out, false)
}

/// The sites of one report's stacks, computed once per stack.
#[derive(Debug)]
pub struct SiteIndex<'r> {
    by_stack: HashMap<u64, (Site, &'r Stack)>,
    no_stack: Site,
}

impl<'r> SiteIndex<'r> {
    /// Indexes `report`'s stacks. When two stacks share an id the first wins.
    pub fn new(report: &'r Report) -> SiteIndex<'r> {
        let mut by_stack = HashMap::with_capacity(report.stacks.len());
        for stack in &report.stacks {
            by_stack
                .entry(stack.id)
                .or_insert_with(|| (site_of_stack(stack), stack));
        }
        SiteIndex {
            by_stack,
            no_stack: Site::placeholder("<no stack>".into()),
        }
    }

    /// The site for a stack id, as leaks and events refer to stacks.
    pub fn site(&self, stack: Option<u64>) -> std::borrow::Cow<'_, Site> {
        use std::borrow::Cow;
        match stack {
            None => Cow::Borrowed(&self.no_stack),
            Some(id) => match self.by_stack.get(&id) {
                Some((site, _)) => Cow::Borrowed(site),
                None => Cow::Owned(Site::placeholder(format!("<unknown stack {id}>"))),
            },
        }
    }

    /// The stack with this id, when the report has it.
    pub fn stack(&self, stack: Option<u64>) -> Option<&'r Stack> {
        stack.and_then(|id| self.by_stack.get(&id)).map(|(_, s)| *s)
    }

    /// The stack's frames for people in the mixed order (see [`chain`]); empty without one.
    pub fn chain(&self, stack: Option<u64>) -> Vec<String> {
        self.stack(stack).map(chain).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Addr;

    fn frame(module: &str, function: Option<&str>) -> Frame {
        Frame {
            ip: Addr(0x1000),
            module: module.into(),
            offset: Addr(0x1a2b),
            function: function.map(Into::into),
            file: None,
            line: None,
            inlined: None,
        }
    }

    #[test]
    fn skips_shim_driver_and_runtime_frames() {
        let stack = Stack {
            id: 1,
            frames: vec![
                frame("/opt/cuguard/libcuguard.so", Some("cuMemAlloc_v2")),
                frame("/usr/lib/libcuda.so.1", None),
                frame("/usr/local/cuda/lib64/libcudart.so.13", Some("cudaMalloc")),
                frame("/opt/app/train", Some("make_buffers")),
                frame("/opt/app/train", Some("main")),
            ],
            python: vec![],
            site: None,
            owner: None,
            mixed: Vec::new(),
        };
        assert_eq!(site_of_stack(&stack).key, "make_buffers");
    }

    #[test]
    fn unnamed_frames_use_module_and_offset() {
        let stack = Stack {
            id: 1,
            frames: vec![frame("/opt/app/lib/libscratch.so", None)],
            python: vec![],
            site: None,
            owner: None,
            mixed: Vec::new(),
        };
        assert_eq!(site_of_stack(&stack).key, "libscratch.so+0x1a2b");
    }

    #[test]
    fn all_runtime_frames_fall_back_to_the_first() {
        let stack = Stack {
            id: 1,
            frames: vec![frame("/x/libcuguard.so", Some("cuMemAlloc_v2"))],
            python: vec![],
            site: None,
            owner: None,
            mixed: Vec::new(),
        };
        assert_eq!(site_of_stack(&stack).key, "cuMemAlloc_v2");
        let empty = Stack {
            id: 2,
            frames: vec![],
            python: vec![],
            site: None,
            owner: None,
            mixed: Vec::new(),
        };
        assert_eq!(site_of_stack(&empty).key, "<empty stack>");
    }

    #[test]
    fn the_shims_site_wins_and_keeps_lines_apart() {
        let py = |line| crate::report::PyFrame {
            file: "/work/train.py".into(),
            line: Some(line),
            function: "make".into(),
            entry: None,
        };
        let stack = |line| Stack {
            id: 1,
            frames: vec![frame("/usr/lib/libcudart.so.13", Some("cudaMalloc"))],
            python: vec![py(line)],
            site: Some(crate::report::StackSite {
                in_: "python".into(),
                index: 0,
                fingerprint: "f".into(),
                kind: None,
            }),
            owner: None,
            mixed: Vec::new(),
        };
        assert_eq!(site_of_stack(&stack(75)).key, "make (train.py:75)");
        assert_ne!(site_of_stack(&stack(75)).key, site_of_stack(&stack(76)).key);
        let native = Stack {
            id: 2,
            frames: vec![
                frame("/tmp/planted", Some("cudaMalloc")),
                Frame {
                    file: Some("/src/planted_leaks.cu".into()),
                    line: Some(29),
                    ..frame("/tmp/planted", Some("leak_in_static_function"))
                },
            ],
            python: vec![],
            site: Some(crate::report::StackSite {
                in_: "frames".into(),
                index: 1,
                fingerprint: "g".into(),
                kind: None,
            }),
            owner: None,
            mixed: Vec::new(),
        };
        assert_eq!(
            site_of_stack(&native).key,
            "leak_in_static_function (planted_leaks.cu:29)"
        );
    }

    fn named(module: &str, function: &str, file: Option<&str>, line: Option<u32>) -> Frame {
        Frame {
            file: file.map(Into::into),
            line,
            ..frame(module, Some(function))
        }
    }

    fn site(in_: &str, index: usize, kind: Option<&str>) -> Option<crate::report::StackSite> {
        Some(crate::report::StackSite {
            in_: in_.into(),
            index,
            fingerprint: "f".into(),
            kind: kind.map(Into::into),
        })
    }

    #[test]
    fn a_label_prints_the_location_once_and_says_what_the_site_is() {
        let user = Stack {
            id: 1,
            frames: vec![
                frame("/x/libcuguard.so", Some("cuMemAllocAsync")),
                named(
                    "/opt/app/cudarc_leaks",
                    "cudarc_leaks::main",
                    Some("/src/cudarc_leaks.rs"),
                    Some(25),
                ),
            ],
            python: vec![],
            site: site("frames", 1, None),
            owner: None,
            mixed: Vec::new(),
        };
        let s = site_of_stack(&user);
        assert_eq!(s.key, "cudarc_leaks::main (cudarc_leaks.rs:25)");
        assert_eq!(s.label(), "cudarc_leaks::main (cudarc_leaks.rs:25)");
        assert_eq!(
            s.kind,
            Some(SiteKind::User),
            "older reports: the user's frame"
        );

        let torch = "/venv/torch/lib/libtorch_cpu.so";
        let autograd = Stack {
            id: 2,
            frames: vec![
                frame("/x/libcuguard.so", Some("cuMemAlloc_v2")),
                named(
                    torch,
                    "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
                    Some("torch/csrc/autograd/generated/Functions.cpp"),
                    Some(1520),
                ),
                named(
                    torch,
                    "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
                    None,
                    None,
                ),
            ],
            python: vec![],
            site: site("frames", 1, Some("operation")),
            owner: None,
            mixed: Vec::new(),
        };
        let s = site_of_stack(&autograd);
        assert_eq!(
            s.label(),
            "on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520)"
        );
        assert!(
            s.key
                .starts_with("torch::autograd::generated::AddmmBackward0::apply(")
        );
        let elsewhere = Stack {
            frames: autograd.frames[..2].to_vec(),
            ..autograd.clone()
        };
        assert_eq!(
            site_of_stack(&elsewhere).label(),
            "operation: AddmmBackward0::apply (Functions.cpp:1520)"
        );
        let fallback = Stack {
            site: site("frames", 1, Some("fallback")),
            ..elsewhere
        };
        assert_eq!(
            site_of_stack(&fallback).label(),
            "framework: AddmmBackward0::apply (Functions.cpp:1520)"
        );
        // A kind from the future is shown plainly.
        let future = Stack {
            site: site("frames", 1, Some("psychic")),
            ..fallback
        };
        assert_eq!(site_of_stack(&future).kind, None);
        assert!(
            site_of_stack(&future)
                .label()
                .starts_with("torch::autograd::generated::")
        );
    }

    fn python_stack(mixed: Vec<crate::report::MixedRef>, entries: [Option<bool>; 2]) -> Stack {
        let py = "/usr/bin/python3.12";
        let pyframe = |function: &str, line, entry| crate::report::PyFrame {
            file: "/work/train.py".into(),
            line: Some(line),
            function: function.into(),
            entry,
        };
        Stack {
            id: 7,
            frames: vec![
                frame("/x/libcuguard.so", Some("cuMemAlloc_v2")),
                frame("/venv/torch/lib/libcudart.so.13", Some("cudaMalloc")),
                named(
                    "/venv/torch/lib/libtorch_cuda.so",
                    "at::native::empty_cuda(c10::ArrayRef<long>)",
                    None,
                    None,
                ),
                frame(py, Some("_PyEval_EvalFrameDefault")),
                frame(py, Some("Py_RunMain")),
                frame("/lib/libc.so.6", Some("__libc_start_call_main")),
            ],
            python: vec![
                pyframe("step", 7, entries[0]),
                pyframe("<module>", 12, entries[1]),
            ],
            site: site("python", 0, Some("user")),
            owner: None,
            mixed,
        }
    }

    #[test]
    fn chains_read_like_py_spy_native() {
        let want = [
            "at::native::empty_cuda",
            "step (train.py:7)",
            "<module> (train.py:12)",
        ];
        // From entry marks.
        let stack = python_stack(Vec::new(), [Some(false), Some(true)]);
        assert_eq!(chain(&stack), want);
        // From the report's own mixed order.
        let m = |native, python| crate::report::MixedRef { native, python };
        let stack = python_stack(
            vec![
                m(Some(0), None),
                m(Some(1), None),
                m(Some(2), None),
                m(None, Some(0)),
                m(None, Some(1)),
                m(Some(5), None),
                m(Some(99), None),
            ],
            [None, None],
        );
        assert_eq!(chain(&stack), want, "bad indices are skipped");
        // Neither: no mixed order, no chain.
        let stack = python_stack(Vec::new(), [None, None]);
        assert_eq!(mixed_order(&stack), None);
        assert!(chain(&stack).is_empty());
    }

    #[test]
    fn mixed_names_are_chains_at_full_depth() {
        let mut stack = python_stack(Vec::new(), [Some(false), Some(true)]);
        assert_eq!(mixed_names(&stack), Some(chain(&stack)));
        // Twelve Python frames: the chain stops at MAX_CHAIN, the names go on.
        stack.python = (0..12)
            .map(|i| crate::report::PyFrame {
                file: "/work/deep.py".into(),
                line: Some(i),
                function: format!("f{i}"),
                entry: Some(i == 11),
            })
            .collect();
        assert_eq!(chain(&stack).len(), MAX_CHAIN + 1);
        assert_eq!(chain(&stack).last().unwrap(), "…");
        let names = mixed_names(&stack).unwrap();
        assert_eq!(names.len(), 13);
        assert_eq!(names[0], "at::native::empty_cuda");
        assert_eq!(names[12], "f11 (deep.py:11)");
        // One frame left is still a name (the chain leaves it to the site).
        stack.python.truncate(1);
        stack.python[0].entry = Some(true);
        stack.frames.remove(2);
        assert_eq!(mixed_names(&stack).unwrap(), ["f0 (deep.py:0)"]);
        assert!(chain(&stack).is_empty());
        stack.python.clear();
        assert_eq!(mixed_names(&stack), None);
    }
}
