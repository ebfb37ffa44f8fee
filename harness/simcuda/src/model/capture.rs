//! The capture family's model: a stream capture in progress, each thread's capture interaction
//! mode, and which calls a capture forbids.
//!
//! A created stream begins and ends a capture (`cuStreamBeginCapture_v2`,
//! `cuStreamEndCapture`, their `_ptsz` forms), `cuStreamIsCapturing` tells its state, the graph
//! it gives back is destroyed (`cuGraphDestroy`), and each thread has a capture interaction
//! mode (`cuThreadExchangeStreamCaptureMode`).
//!
//! Only the state is kept: work issued to a capturing stream still runs (it is not recorded into
//! a graph, which is an empty placeholder), so a test issues no work to the stream it captures.
//!
//! # Which calls a capture forbids (CUDA's `CUstreamCaptureMode`)
//!
//! A thread whose interaction mode is (default) global may make no *potentially unsafe* call
//! while it has a capture of its own that was not begun in relaxed mode, or while any other
//! thread has a capture begun in global mode. A thread in thread-local mode is held back only by
//! its own non-relaxed captures; a thread in relaxed mode never. Such a call fails with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` (900) and invalidates the captures that forbade it:
//! their `cuStreamEndCapture` then fails with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` (901) and
//! gives no graph (measured on the H200 for `cuMemAlloc` in a global-mode capture: 900, then
//! 901). The potentially unsafe calls simulated are the synchronous device allocations,
//! the callers of `refuse_unsafe` (`state/capture.rs`): `cuMemAlloc_v2`, `cuMemAllocPitch_v2`,
//! `cuMemAllocManaged`.
//! Frees and the host allocations are not refused here (not measured).
//!
//! A capture begun in global or thread-local mode must be ended by the thread that began it
//! (`CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`, 908, otherwise).

use std::cell::Cell;
use std::ffi::c_uint;
use std::sync::atomic::{AtomicU64, Ordering};

/// `CU_STREAM_CAPTURE_MODE_GLOBAL`, `_THREAD_LOCAL`, `_RELAXED`.
pub const MODE_GLOBAL: c_uint = 0;
pub const MODE_THREAD_LOCAL: c_uint = 1;
pub const MODE_RELAXED: c_uint = 2;

/// `CU_STREAM_CAPTURE_STATUS_NONE`, `_ACTIVE`, `_INVALIDATED`.
pub const STATUS_NONE: c_uint = 0;
pub const STATUS_ACTIVE: c_uint = 1;
pub const STATUS_INVALIDATED: c_uint = 2;

/// A capture in progress.
#[derive(Clone, Copy, Debug)]
pub struct Capture {
    /// The captured stream (its `Arc`'s address: unique while the stream lives).
    pub stream: usize,
    pub mode: c_uint,
    /// The thread that began it ([`thread_id`]).
    pub thread: u64,
    /// A forbidden call invalidated it.
    pub invalidated: bool,
}

static THREADS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's number (0 until first asked).
    static THREAD: Cell<u64> = const { Cell::new(0) };
    /// This thread's capture interaction mode.
    static MODE: Cell<c_uint> = const { Cell::new(MODE_GLOBAL) };
}

/// A number for the calling thread, unique in the process.
pub fn thread_id() -> u64 {
    THREAD
        .try_with(|t| {
            if t.get() == 0 {
                t.set(THREADS.fetch_add(1, Ordering::Relaxed) + 1);
            }
            t.get()
        })
        .unwrap_or(u64::MAX)
}

/// The calling thread's capture interaction mode.
pub fn thread_mode() -> c_uint {
    MODE.try_with(Cell::get).unwrap_or(MODE_GLOBAL)
}

/// Whether capture `c` forbids potentially unsafe calls of thread `me` in mode `mode`.
pub fn forbids(c: &Capture, me: u64, mode: c_uint) -> bool {
    let own = c.thread == me && c.mode != MODE_RELAXED;
    match mode {
        MODE_RELAXED => false,
        MODE_THREAD_LOCAL => own,
        _ => own || (c.thread != me && c.mode == MODE_GLOBAL),
    }
}

/// Sets the calling thread's interaction mode to `wanted`; returns the previous one.
pub fn exchange_mode(wanted: c_uint) -> c_uint {
    MODE.try_with(|m| m.replace(wanted)).unwrap_or(MODE_GLOBAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(thread: u64, mode: c_uint) -> Capture {
        Capture {
            stream: 1,
            mode,
            thread,
            invalidated: false,
        }
    }

    #[test]
    fn the_modes_forbid_as_cuda_documents() {
        let (me, other) = (1, 2);
        // A capture of this thread's own.
        assert!(forbids(&cap(me, MODE_GLOBAL), me, MODE_GLOBAL));
        assert!(forbids(&cap(me, MODE_THREAD_LOCAL), me, MODE_GLOBAL));
        assert!(!forbids(&cap(me, MODE_RELAXED), me, MODE_GLOBAL));
        assert!(forbids(&cap(me, MODE_GLOBAL), me, MODE_THREAD_LOCAL));
        assert!(!forbids(&cap(me, MODE_GLOBAL), me, MODE_RELAXED));
        // Another thread's.
        assert!(forbids(&cap(other, MODE_GLOBAL), me, MODE_GLOBAL));
        assert!(!forbids(&cap(other, MODE_THREAD_LOCAL), me, MODE_GLOBAL));
        assert!(!forbids(&cap(other, MODE_RELAXED), me, MODE_GLOBAL));
        assert!(!forbids(&cap(other, MODE_GLOBAL), me, MODE_THREAD_LOCAL));
        assert!(!forbids(&cap(other, MODE_GLOBAL), me, MODE_RELAXED));
    }
}
