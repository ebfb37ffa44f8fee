//! How this process is leaving, when it leaves through `_exit` (set by the shim's `_exit`,
//! `crate::lifecycle::immediate_exit`; read by the report, which says so).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static LEAVING: AtomicBool = AtomicBool::new(false);
static STATUS: AtomicI32 = AtomicI32::new(0);

/// The process is leaving through `_exit(status)`. Async-signal-safe.
pub fn through_exit(status: i32) {
    STATUS.store(status, Ordering::Release);
    LEAVING.store(true, Ordering::Release);
}

/// The status given to `_exit`, when the process is leaving through it.
pub fn exit_status() -> Option<i32> {
    LEAVING
        .load(Ordering::Acquire)
        .then(|| STATUS.load(Ordering::Acquire))
}

/// In a forked child: not leaving (the parent may have been).
pub fn after_fork_child() {
    LEAVING.store(false, Ordering::Release);
}
