//! The driver's events and contexts as the pool's fences and the stream rule use them: a context
//! made current for a while ([`with_current`]), its work waited for, and events recorded, queried
//! and destroyed. Below the rest of the serving: these are the real driver's calls alone.

use std::ffi::c_void;

use crate::driver::real;
use crate::ffi::*;

/// Runs `f` with context `ctx` current on this thread, then makes the previous one current
/// again. `None` when `ctx` could not be made current (it is gone: its work went with it).
pub(crate) fn with_current<T>(ctx: u64, f: impl FnOnce() -> T) -> Option<T> {
    let (push, pop) = (real::cuCtxPushCurrent_v2()?, real::cuCtxPopCurrent_v2()?);
    // SAFETY: ctx is a context handle the program used; the driver checks it.
    if unsafe { push(ctx as *mut c_void as CUcontext) } != CUDA_SUCCESS {
        return None;
    }
    let out = f();
    let mut popped: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-parameter; pops what was pushed just above.
    unsafe { pop(&mut popped) };
    Some(out)
}

/// Waits for the current context's work; false when that failed.
pub(crate) fn synchronize_current() -> bool {
    real::cuCtxSynchronize().is_some_and(|sync| {
        // SAFETY: no arguments.
        (unsafe { sync() }) == CUDA_SUCCESS
    })
}

/// Records an event on `stream` (0: the legacy default stream) of the current context.
pub fn record_event(stream: u64) -> Option<u64> {
    let (create, record) = (real::cuEventCreate()?, real::cuEventRecord()?);
    let mut ev: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-parameter; CU_EVENT_DISABLE_TIMING = 2.
    if unsafe { create(&mut ev, 2) } != CUDA_SUCCESS {
        return None;
    }
    // SAFETY: ev was just created; stream is a live stream of the current context.
    if unsafe { record(ev, stream as *mut c_void) } != CUDA_SUCCESS {
        destroy_event(ev as u64);
        return None;
    }
    Some(ev as u64)
}

/// Whether the event has completed (an error counts as completed: the event, or its context, is
/// gone and can hold nothing back).
pub fn event_done(ev: u64) -> bool {
    let Some(q) = real::cuEventQuery() else {
        return true;
    };
    // SAFETY: ev is a live event this module created.
    (unsafe { q(ev as *mut c_void) }) != CUDA_ERROR_NOT_READY
}

/// Destroys an event this module created and nobody uses any more.
pub fn destroy_event(ev: u64) {
    if let Some(f) = real::cuEventDestroy_v2() {
        // SAFETY: ev is an event this module created and no longer uses.
        unsafe { f(ev as *mut c_void) };
    }
}
