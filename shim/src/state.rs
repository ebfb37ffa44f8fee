//! The process-wide state and its phases: off, tracking, reported.
//!
//! The tracker is created on first use (never at load). A forked child replaces it with a fresh
//! one without touching the parent's locks, which another thread may have held at the fork.

use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

use crate::guard::Guard;
use crate::tracker::Tracker;

static TRACKER: AtomicPtr<Tracker> = AtomicPtr::new(std::ptr::null_mut());

const TRACKING: u8 = 0;
const REPORTED: u8 = 1;
static PHASE: AtomicU8 = AtomicU8::new(TRACKING);

/// The tracker, created on first use.
pub fn tracker() -> &'static Tracker {
    crate::leaked::get_or_create(&TRACKER, || {
        crate::guard::install_panic_hook();
        register_fork_handler();
        Tracker::new()
    })
}

fn register_fork_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: after_fork_in_child is a plain extern "C" fn with no arguments.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

/// The child of a fork owns none of the parent's allocations and writes its own report.
extern "C" fn after_fork_in_child() {
    crate::clock::reset_thread_id();
    crate::stack::after_fork_child();
    crate::thread::reset_after_fork();
    crate::pool::registry::reset_after_fork();
    crate::timeline::reset_after_fork();
    reset_after_fork();
}

/// The tracker if one exists; never creates it.
pub fn tracker_if_any() -> Option<&'static Tracker> {
    crate::leaked::get(&TRACKER)
}

/// In the child of a fork: forget the parent's allocations and start afresh. The old tracker is
/// leaked, not dropped: its locks may be held by threads that do not exist in the child.
pub fn reset_after_fork() {
    crate::leaked::replace(&TRACKER, Tracker::new());
    PHASE.store(TRACKING, Ordering::Release);
}

/// Whether the final report has been written (tracking has stopped).
pub fn reported() -> bool {
    PHASE.load(Ordering::Acquire) == REPORTED
}

/// Marks the final report written; returns false if it already was.
pub fn mark_reported() -> bool {
    PHASE.swap(REPORTED, Ordering::AcqRel) != REPORTED
}

/// Entry to tracking for a hook: the guard and the tracker, or `None` when the hook should only
/// forward (shim disabled, broken, already reported, or re-entered on this thread).
#[inline]
pub fn active() -> Option<(Guard, &'static Tracker)> {
    let c = crate::config::get();
    if c.disabled || c.no_tracking || crate::guard::broken() || reported() {
        return None;
    }
    let g = Guard::enter()?;
    Some((g, tracker()))
}
