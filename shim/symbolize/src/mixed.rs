//! One stack in call order, native and Python frames together, the way `py-spy --native` shows
//! it: each native frame of CPython's evaluation loop (`_PyEval_EvalFrameDefault` and the inline
//! wrappers around it) is replaced by the Python frames that call of the loop was running, and
//! the interpreter's own machinery between them is left out.
//!
//! ```text
//! at::native::empty_cuda            (native)
//! step (train.py:7)                 (Python, run by the innermost evaluation frame)
//! <module> (train.py:12)            (Python, run by the next one)
//! main                              (native)
//! ```
//!
//! Which Python frames one evaluation frame ran comes from the capture: the Python frames
//! (innermost first) are split after each *entry* frame, the first frame a call of the loop
//! ran (on CPython 3.11 and later one call runs a chain of frames; on 3.9 and 3.10 every frame is
//! its own call). Groups go to the evaluation frames in order; Python frames left over (the
//! native stack was cut short before it reached their evaluation frames) come after the native
//! frames. Without entry marks (reports from before they were recorded) there is no mixed
//! order: [`mixed`] returns `None`.

use crate::site_frame::SiteFrame;

/// One frame of a mixed stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Index into the native frames.
    Native(usize),
    /// Index into the Python frames.
    Python(usize),
}

/// Whether `function` is (a part of) CPython's evaluation loop: the native frame that runs
/// Python frames.
pub fn is_eval_frame(function: &str) -> bool {
    let f = function.split('(').next().unwrap_or(function).trim();
    matches!(
        f.trim_end_matches(".cold"),
        "_PyEval_EvalFrameDefault"
            | "_PyEval_EvalFrame"
            | "PyEval_EvalFrameEx"
            | "PyEval_EvalFrame"
    )
}

/// Whether `module` (a path) is the Python interpreter itself: the `python3.X` executable or
/// `libpython3.X.so`.
pub fn is_interpreter_module(module: &str) -> bool {
    let name = module.rsplit('/').next().unwrap_or(module);
    let rest = name
        .strip_prefix("libpython")
        .or_else(|| name.strip_prefix("python"));
    rest.is_some_and(|r| r.starts_with('3') || r.is_empty())
}

/// The mixed order of a stack: `native` innermost first (inlined frames included, each with its
/// module and offset), `python_entries[i]` whether Python frame `i` (innermost first) is an entry
/// frame, or `None` when the capture did not record it. `None` when there are no Python frames
/// or no entry marks.
pub fn mixed(native: &[SiteFrame<'_>], python_entries: &[Option<bool>]) -> Option<Vec<Slot>> {
    if python_entries.is_empty() || python_entries.iter().any(Option::is_none) {
        return None;
    }
    // The Python frames, split into the chains each call of the loop ran.
    let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
    let mut start = 0;
    for (i, e) in python_entries.iter().enumerate() {
        if *e == Some(true) {
            groups.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < python_entries.len() {
        groups.push(start..python_entries.len());
    }
    let mut groups = groups.into_iter();
    let mut out = Vec::with_capacity(native.len() + python_entries.len());
    // Inlined frames share their physical frame's module and offset: one evaluation frame may
    // show as several (`_PyEval_EvalFrame` inlined into its caller, say); it runs one chain.
    let mut last_eval: Option<(&str, u64)> = None;
    for (i, f) in native.iter().enumerate() {
        if f.function.is_some_and(is_eval_frame) {
            let here = (f.module, f.offset);
            if last_eval != Some(here) {
                last_eval = Some(here);
                if let Some(g) = groups.next() {
                    out.extend(g.map(Slot::Python));
                }
            }
            continue;
        }
        if is_interpreter_module(f.module) {
            continue;
        }
        out.push(Slot::Native(i));
    }
    for g in groups {
        out.extend(g.map(Slot::Python));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f<'a>(module: &'a str, function: &'a str, offset: u64) -> SiteFrame<'a> {
        SiteFrame {
            module,
            function: Some(function),
            offset,
            ..Default::default()
        }
    }

    #[test]
    fn eval_frames_are_replaced_by_their_python_chains() {
        let py = "/usr/bin/python3.12";
        let native = [
            f("/venv/torch/lib/libcudart.so.13", "cudaMalloc", 0x10),
            f(
                "/venv/torch/lib/libtorch_cuda.so",
                "at::native::empty_cuda",
                0x20,
            ),
            f(
                "/venv/torch/lib/libtorch_python.so",
                "THPVariable_ones",
                0x30,
            ),
            f(py, "cfunction_call", 0x40),
            f(py, "_PyEval_EvalFrame", 0x50),
            f(py, "_PyEval_EvalFrameDefault", 0x50),
            f(py, "PyEval_EvalCode", 0x60),
            f("/opt/ext.so", "run_callback", 0x70),
            f(py, "_PyEval_EvalFrameDefault", 0x80),
            f(py, "Py_RunMain", 0x90),
            f("/lib/libc.so.6", "__libc_start_main", 0xa0),
        ];
        // Python frames innermost first: step, train (entry of the inner call), <module> (entry
        // of the outer call).
        let entries = [Some(false), Some(true), Some(true)];
        let m = mixed(&native, &entries).unwrap();
        assert_eq!(
            m,
            vec![
                Slot::Native(0),
                Slot::Native(1),
                Slot::Native(2),
                Slot::Python(0),
                Slot::Python(1),
                Slot::Native(7),
                Slot::Python(2),
                Slot::Native(10),
            ]
        );
    }

    #[test]
    fn leftover_chains_follow_a_cut_native_stack() {
        let native = [
            f("/usr/lib/libcuda.so.1", "cuMemAlloc_v2", 1),
            f("/usr/bin/python3.11", "_PyEval_EvalFrameDefault", 2),
        ];
        let entries = [Some(true), Some(true), Some(false)];
        assert_eq!(
            mixed(&native, &entries).unwrap(),
            vec![
                Slot::Native(0),
                Slot::Python(0),
                Slot::Python(1),
                Slot::Python(2)
            ]
        );
    }

    #[test]
    fn no_python_or_no_marks_is_no_mixed_order() {
        let native = [f("/a", "main", 1)];
        assert_eq!(mixed(&native, &[]), None);
        assert_eq!(mixed(&native, &[Some(true), None]), None);
    }

    #[test]
    fn names() {
        assert!(is_eval_frame("_PyEval_EvalFrameDefault"));
        assert!(is_eval_frame("_PyEval_EvalFrameDefault.cold"));
        assert!(is_eval_frame("PyEval_EvalFrameEx(_frame*, int)"));
        assert!(!is_eval_frame("PyEval_EvalCode"));
        assert!(is_interpreter_module("/usr/bin/python3.12"));
        assert!(is_interpreter_module("/usr/lib/libpython3.11.so.1.0"));
        assert!(is_interpreter_module("python3"));
        assert!(!is_interpreter_module(
            "/venv/lib/python3.12/site-packages/torch/lib/libtorch.so"
        ));
        assert!(!is_interpreter_module("/usr/bin/python-config"));
    }
}
