//! Re-entry guard and panic shield for code that runs inside the host's calls.
//!
//! Every hook does its own work under a [`Guard`]: if the thread is already inside the shim
//! (the shim's own work reached a hooked entry again) or the thread is being torn down, the hook
//! forwards to the driver and records nothing. [`shield`] keeps a panic in the shim's own code
//! from crossing the C ABI: it is caught, recorded as a fault, and the shim moves to the
//! `Broken` phase ([`crate::phase`]): tracking turns itself off.

use crate::process::local::Local;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};

/// Proof that the calling thread has entered the shim; leaving happens on drop.
pub struct Guard {
    /// This thread's words (its flag among them), kept so that leaving, and the hook's other
    /// steps ([`Guard::local`]), need no second thread-local look-up (a call into the loader in
    /// a shared library). A `&Local` is not `Send` (it holds `Cell`s): the guard stays on its
    /// thread.
    local: &'static Local,
}

impl Guard {
    /// Enters the shim, or returns `None` when this thread is already inside it or its
    /// thread-locals are gone.
    #[inline]
    pub fn enter() -> Option<Guard> {
        // The thread's flag lives with the allocation path's other words of the thread
        // (`process::local`, const-initialized, destructor-free: usable while it exits).
        let local = crate::process::local::get()?;
        if local.inside.get() {
            return None;
        }
        local.inside.set(true);
        Some(Guard { local })
    }

    /// The thread's words of the allocation path (`process::local`), looked up once, by
    /// [`Guard::enter`].
    #[inline(always)]
    pub fn local(&self) -> &'static Local {
        self.local
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        self.local.inside.set(false);
    }
}

/// Set once the shim's own code has panicked and said so.
static SAID: AtomicBool = AtomicBool::new(false);

/// Runs the shim's own work `f`. A panic in it is caught: the fault is recorded, tracking turns
/// off for the rest of the process (saying so once), and `fallback` is returned.
///
/// Inline wherever it is used, so that the work it shields is inlined with its caller's (and
/// shares its thread-local look-ups, `crate::process::local`); what a panic does is out of line.
#[inline(always)]
pub fn shield<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            caught(payload);
            fallback
        }
    }
}

/// A panic [`shield`] caught: recorded, said once, and tracking turned off.
#[cold]
#[inline(never)]
fn caught(payload: Box<dyn std::any::Any + Send>) {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    crate::phase::break_down();
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::process::diag::warn(&format!(
            "internal error ({what}); tracking is off for the rest of this process"
        ));
        crate::process::faults::record(format!("internal error: {what}; tracking turned off"));
    }
}

/// Makes panics in the shim quiet (the shield reports them once). The hook only applies to this
/// library's copy of the Rust runtime, never to a Rust host program's.
pub fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}
