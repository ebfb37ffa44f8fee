//! The site rule: which place in the program a leak is charged to.
//!
//! A leak's *site* is the frame the shim chose when it wrote the report (`stacks[].site`: the
//! first frame that is the user's own rather than plumbing, Python frames included), named
//! `function (file:line)` — two allocations on two lines of one function are two sites, as they
//! are two places to fix. For reports without it (older shims, or names that were not resolved),
//! the site is the first frame (innermost first) outside cuguard's shim, the CUDA driver and the
//! CUDA runtime, named by its function when known, else by `module+0xoffset`. Everything that
//! groups leaks (summary, check, suppressions, diff, view) asks this module.

use std::collections::HashMap;

use crate::report::{Frame, Report, Stack};

/// The site of a leak or event.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Site {
    /// What groups leaks: the function name, or `module+0xoffset` (module file name only),
    /// or one of `<no stack>`, `<unknown stack N>`, `<empty stack>`.
    pub key: String,
    /// The site's source location, `file:line`, when known.
    pub location: Option<String>,
    /// The function of the site's frame, when known.
    pub function: Option<String>,
    /// The module holding the site's frame (full path), when there is one.
    pub module: Option<String>,
}

impl Site {
    fn placeholder(key: String) -> Site {
        Site {
            key,
            location: None,
            function: None,
            module: None,
        }
    }

    /// `key (location)`, or the key alone.
    pub fn label(&self) -> String {
        match &self.location {
            Some(loc) => format!("{} ({loc})", self.key),
            None => self.key.clone(),
        }
    }
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
    let location = file.map(|file| match line {
        Some(line) => format!("{}:{line}", file_name(&file)),
        None => file_name(&file).to_string(),
    });
    let key = match &location {
        Some(loc) => format!("{function} ({loc})"),
        None => function.clone(),
    };
    Some(Site {
        key,
        location,
        function: Some(function),
        module,
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
    let location = f.file.as_ref().map(|file| match f.line {
        Some(line) => format!("{}:{line}", file_name(file)),
        None => file_name(file).to_string(),
    });
    Site {
        key,
        location,
        function: f
            .function
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(str::to_string),
        module: Some(f.module.to_string()),
    }
}

/// The sites of one report's stacks, computed once per stack.
#[derive(Debug)]
pub struct SiteIndex {
    by_stack: HashMap<u64, Site>,
    no_stack: Site,
}

impl SiteIndex {
    /// Indexes `report`'s stacks. When two stacks share an id the first wins.
    pub fn new(report: &Report) -> SiteIndex {
        let mut by_stack = HashMap::with_capacity(report.stacks.len());
        for stack in &report.stacks {
            by_stack
                .entry(stack.id)
                .or_insert_with(|| site_of_stack(stack));
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
                Some(site) => Cow::Borrowed(site),
                None => Cow::Owned(Site::placeholder(format!("<unknown stack {id}>"))),
            },
        }
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
}
