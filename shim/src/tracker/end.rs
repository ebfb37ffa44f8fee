//! The tracker's mark of the end of a Python program's code: the moment cuguard's Python bootstrap marks (after
//! `__main__` and the program's own `atexit` handlers, before the interpreter tears modules
//! down), the allocations live then, and the classes the bootstrap found for them.
//!
//! Three facts, each set through the in-process ABI (`crate::api::end`):
//! - *expected*: the bootstrap runs in this process and will mark the end;
//! - the *mark*: when the code ended, how, and a copy of every live allocation's record then
//!   (so that the report still lists what teardown freed afterwards);
//! - the *classification*: for each of those allocations, held, lost, a cache's blocks…
//!   (`cuguard_format::Classification`, as the Python side sent it).
//!
//! The report (`crate::writer::python`) reads them. A forked child starts with none of them:
//! its end is its own.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use cuguard_format::Classification;

use super::record::Record;
use crate::process::global;

/// Whether the bootstrap said it will mark the end.
static EXPECTED: AtomicBool = AtomicBool::new(false);

/// The mark and the classification, created when the end is marked.
static STATE: AtomicPtr<Mutex<Option<Mark>>> = AtomicPtr::new(std::ptr::null_mut());

/// The end of the program's code, as marked.
#[derive(Clone, Debug)]
pub struct Mark {
    /// How the code ended (`finished`, `raised`, `interrupted`, `kernel_shutdown`).
    pub how: String,
    /// The uncaught exception's type name, for `raised`.
    pub exception: Option<String>,
    /// Milliseconds since the process started.
    pub time_ms: u64,
    /// Every allocation live then: address and record (raw order keys, as the tracker holds
    /// them).
    pub live: Vec<(u64, Record)>,
    /// What the Python side found holds them, once it said.
    pub classification: Option<Classification>,
}

/// Why the end cannot be marked in this process, as the floor that hands the bootstrap to the
/// interpreter tells it (`lifecycle::python_bootstrap::why_not`, registered at the shim's first
/// use): the report writer asks here, below both, so that no floor imports one above it.
static WHY_NOT: std::sync::OnceLock<fn() -> Option<String>> = std::sync::OnceLock::new();

/// Registers who says why the end cannot be marked (once; later calls change nothing).
pub fn tell_why_not(why: fn() -> Option<String>) {
    let _ = WHY_NOT.set(why);
}

/// Why the end cannot be marked here, in one line; `None` when nothing registered says so.
pub fn why_not() -> Option<String> {
    WHY_NOT.get().and_then(|why| why())
}

/// The bootstrap will mark the end.
pub fn expect() {
    EXPECTED.store(true, Ordering::Relaxed);
}

/// Whether the bootstrap said it will mark the end.
pub fn expected() -> bool {
    EXPECTED.load(Ordering::Relaxed)
}

fn state() -> &'static Mutex<Option<Mark>> {
    global::get_or_create(&STATE, || Mutex::new(None))
}

/// Records the end: replaces an earlier mark (a second call is a later end, e.g. a kernel's
/// shutdown after its cells).
pub fn mark(m: Mark) {
    *global::lock(state()) = Some(m);
}

/// Attaches the classification to the mark; false when there is no mark.
pub fn classify(c: Classification) -> bool {
    let mut s = global::lock(state());
    match s.as_mut() {
        Some(m) => {
            m.classification = Some(c);
            true
        }
        None => false,
    }
}

/// The frameworks' files the Python side declared with its classification
/// (`Classification::framework_files`), for the report's `versions`; none before it said.
pub fn framework_files() -> Vec<String> {
    global::get(&STATE)
        .and_then(|s| {
            let s = global::lock(s);
            s.as_ref()?
                .classification
                .as_ref()
                .map(|c| c.framework_files.clone())
        })
        .unwrap_or_default()
}

/// The mark, if the end was marked.
pub fn get() -> Option<Mark> {
    global::get(&STATE).and_then(|s| global::lock(s).clone())
}

/// In the child of a fork: no end yet (the child's code ends on its own). The promise stays:
/// the child inherits the bootstrap's `atexit` handler and its `os._exit` wrapper with the
/// parent's memory, so it marks its own end (multiprocessing's forked children leave through
/// `os._exit`); one that leaves through libc's `_exit` has its report say so.
pub fn reset_after_fork() {
    if global::get(&STATE).is_some() {
        global::replace(&STATE, Mutex::new(None));
    }
}
