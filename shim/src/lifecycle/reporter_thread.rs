//! Which thread is the cuguard thread ([`super::reporter`]), and which signal it answers for
//! snapshots: what the stats page, the alerts and the signal handlers ask of it, kept apart
//! from the thread's own work so that they need not import it.

use std::cell::Cell;
use std::sync::atomic::{AtomicI32, Ordering};

thread_local! {
    static IS_REPORTER: Cell<bool> = const { Cell::new(false) };
}

/// The signal the thread's name announces: 0 not decided yet, -1 none.
static NAME_SIG: AtomicI32 = AtomicI32::new(0);

/// Marks the calling thread as the cuguard thread (it calls this first).
pub(super) fn mark_current() {
    let _ = IS_REPORTER.try_with(|r| r.set(true));
}

/// Whether the calling thread is the cuguard thread.
pub fn on_reporter_thread() -> bool {
    IS_REPORTER.try_with(|r| r.get()).unwrap_or(false)
}

/// Settles the signal the thread answers, `sig` (`None`: none), once; later calls change
/// nothing.
pub(super) fn settle_snapshot_signal(sig: Option<i32>) {
    let _ = NAME_SIG.compare_exchange(
        0,
        sig.filter(|s| *s > 0).unwrap_or(-1),
        Ordering::AcqRel,
        Ordering::Acquire,
    );
}

/// The signal settled: 0 not yet, -1 none, else the signal.
pub(super) fn settled_signal() -> i32 {
    NAME_SIG.load(Ordering::Acquire)
}

/// The signal that asks this process for a snapshot, once the thread answers one.
pub fn snapshot_signal() -> Option<i32> {
    Some(settled_signal()).filter(|s| *s > 0)
}

/// In a forked child: no signal is settled (the child's thread settles its own).
pub(super) fn after_fork_child() {
    NAME_SIG.store(0, Ordering::Release);
}
