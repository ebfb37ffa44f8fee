//! A terminating signal that comes while the final report is being written, held until the
//! report is in place, then sent again (see [`super::signals`]): the shim's handler may have
//! interrupted the very thread that writes the report, and taking the default action there
//! would end the process before the report's rename. Atomics only: the handler's side is
//! async-signal-safe.

use std::sync::atomic::{AtomicI32, Ordering, fence};

/// The signal held (0: none). Set by the handler ([`hold`]), taken by the writer ([`release`])
/// or, if the report was finished meanwhile, back by the handler: whoever swaps it out sends it.
static HELD: AtomicI32 = AtomicI32::new(0);

/// Holds `sig` for the writer of the final report, which [`release`] sends again once the
/// report is in place. Returns false when the report was finished meanwhile and the signal is
/// the handler's to act on after all, and when a signal is held already: one more (a third
/// Ctrl-C, a supervisor insisting) ends the process at once, so that a writer that never
/// finishes cannot keep it alive.
pub fn hold(sig: libc::c_int) -> bool {
    if HELD
        .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        return false;
    }
    // Paired with the fence in `release`: either the writer sees the held signal, or this
    // handler sees the report finished.
    fence(Ordering::SeqCst);
    if !crate::phase::final_done() {
        return true;
    }
    // Finished meanwhile: whoever takes the held signal sends it (0: the writer took it).
    HELD.swap(0, Ordering::SeqCst) == 0
}

/// After the final report is written (`Writing → Final`): a signal held while it was written
/// ends the process now, of that signal, as it would have without the shim: sent again to the
/// process, the shim's handler finds the report written and takes the default action.
/// `by_signal`: the report was a signal's, whose handler ends the process itself.
pub fn release(by_signal: bool) {
    fence(Ordering::SeqCst);
    let sig = HELD.swap(0, Ordering::SeqCst);
    if sig == 0 || by_signal {
        return;
    }
    // SAFETY: kill has no memory-safety preconditions. Sent to the process, not this thread: the
    // writer may be the cuguard thread, which blocks every signal.
    unsafe { libc::kill(libc::getpid(), sig) };
}

/// In a forked child: nothing is held.
pub fn after_fork_child() {
    HELD.store(0, Ordering::Release);
}
