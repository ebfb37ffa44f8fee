//! Stream capture: a created stream begins and ends a capture (`cuStreamBeginCapture_v2`,
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
//! [`refuse_unsafe`]'s callers: `cuMemAlloc_v2`, `cuMemAllocPitch_v2`, `cuMemAllocManaged`.
//! Frees and the host allocations are not refused here (not measured).
//!
//! A capture begun in global or thread-local mode must be ended by the thread that began it
//! (`CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD`, 908, otherwise).

use std::cell::Cell;
use std::ffi::c_uint;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::errors::Fault;
use crate::ffi::{CUresult, CUstream, guard, need, put};
use crate::state::{self, State};
use crate::stream;

/// `CUgraph`.
pub type CUgraph = *mut std::ffi::c_void;

/// `CU_STREAM_CAPTURE_MODE_GLOBAL`, `_THREAD_LOCAL`, `_RELAXED`.
pub const MODE_GLOBAL: c_uint = 0;
pub const MODE_THREAD_LOCAL: c_uint = 1;
pub const MODE_RELAXED: c_uint = 2;

/// `CU_STREAM_CAPTURE_STATUS_NONE`, `_ACTIVE`, `_INVALIDATED`.
const STATUS_NONE: c_uint = 0;
const STATUS_ACTIVE: c_uint = 1;
const STATUS_INVALIDATED: c_uint = 2;

/// A capture in progress.
#[derive(Clone, Copy, Debug)]
pub struct Capture {
    /// The captured stream (its `Arc`'s address: unique while the stream lives).
    stream: usize,
    mode: c_uint,
    /// The thread that began it ([`thread_id`]).
    thread: u64,
    /// A forbidden call invalidated it.
    invalidated: bool,
}

static THREADS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's number (0 until first asked).
    static THREAD: Cell<u64> = const { Cell::new(0) };
    /// This thread's capture interaction mode.
    static MODE: Cell<c_uint> = const { Cell::new(MODE_GLOBAL) };
}

/// A number for the calling thread, unique in the process.
fn thread_id() -> u64 {
    THREAD
        .try_with(|t| {
            if t.get() == 0 {
                t.set(THREADS.fetch_add(1, Ordering::Relaxed) + 1);
            }
            t.get()
        })
        .unwrap_or(u64::MAX)
}

fn thread_mode() -> c_uint {
    MODE.try_with(Cell::get).unwrap_or(MODE_GLOBAL)
}

/// Whether capture `c` forbids potentially unsafe calls of thread `me` in mode `mode`.
fn forbids(c: &Capture, me: u64, mode: c_uint) -> bool {
    let own = c.thread == me && c.mode != MODE_RELAXED;
    match mode {
        MODE_RELAXED => false,
        MODE_THREAD_LOCAL => own,
        _ => own || (c.thread != me && c.mode == MODE_GLOBAL),
    }
}

/// Called by a potentially unsafe entry before it does anything: fails with
/// [`Fault::CaptureUnsupported`], invalidating the captures that forbid the call, when any does.
pub fn refuse_unsafe(st: &mut State) -> Result<(), Fault> {
    if st.captures.is_empty() {
        return Ok(());
    }
    let (me, mode) = (thread_id(), thread_mode());
    let mut refused = false;
    for c in st.captures.iter_mut().filter(|c| forbids(c, me, mode)) {
        c.invalidated = true;
        refused = true;
    }
    if refused {
        Err(Fault::CaptureUnsupported)
    } else {
        Ok(())
    }
}

fn begin(h: CUstream, mode: c_uint, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let s = stream::resolve(&mut st, h, per_thread_default)?;
    if mode > MODE_RELAXED {
        return Err(Fault::BadArgument);
    }
    // The legacy stream cannot be captured; a created stream is named by its own handle.
    if s.kind == stream::StreamKind::Legacy {
        return Err(Fault::BadStream);
    }
    let key = std::sync::Arc::as_ptr(&s) as usize;
    if st.captures.iter().any(|c| c.stream == key) {
        return Err(Fault::CaptureState);
    }
    st.captures.push(Capture {
        stream: key,
        mode,
        thread: thread_id(),
        invalidated: false,
    });
    Ok(())
}

fn end(h: CUstream, graph: *mut CUgraph, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(graph)?;
    let mut st = drv.lock();
    let s = stream::resolve(&mut st, h, per_thread_default)?;
    let key = std::sync::Arc::as_ptr(&s) as usize;
    let Some(i) = st.captures.iter().position(|c| c.stream == key) else {
        return Err(Fault::CaptureState);
    };
    let c = st.captures[i];
    if c.mode != MODE_RELAXED && c.thread != thread_id() {
        return Err(Fault::CaptureWrongThread);
    }
    st.captures.swap_remove(i);
    if c.invalidated {
        // SAFETY: graph was checked non-null; the caller's out-parameter.
        unsafe { *graph = std::ptr::null_mut() };
        return Err(Fault::CaptureInvalidated);
    }
    // SAFETY: graph was checked non-null; the caller's out-parameter.
    unsafe { *graph = Box::into_raw(Box::new(0u64)) as CUgraph };
    Ok(())
}

fn is_capturing(h: CUstream, status: *mut c_uint, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(status)?;
    let mut st = drv.lock();
    let s = stream::resolve(&mut st, h, per_thread_default)?;
    let key = std::sync::Arc::as_ptr(&s) as usize;
    let value = match st.captures.iter().find(|c| c.stream == key) {
        None => STATUS_NONE,
        Some(c) if c.invalidated => STATUS_INVALIDATED,
        Some(_) => STATUS_ACTIVE,
    };
    // SAFETY: checked non-null; the caller's out-parameter.
    unsafe { put(status, value) }
}

/// A destroyed stream's capture ends with it.
pub fn stream_gone(st: &mut State, key: usize) {
    st.captures.retain(|c| c.stream != key);
}

/// `cuStreamBeginCapture_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamBeginCapture_v2(hStream: CUstream, mode: c_uint) -> CUresult {
    guard("cuStreamBeginCapture_v2", || begin(hStream, mode, false))
}

/// `cuStreamBeginCapture_v2_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamBeginCapture_v2_ptsz(hStream: CUstream, mode: c_uint) -> CUresult {
    guard("cuStreamBeginCapture_v2_ptsz", || {
        begin(hStream, mode, true)
    })
}

/// `cuStreamEndCapture`: an invalidated capture ends with `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`
/// and a NULL graph.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamEndCapture(hStream: CUstream, phGraph: *mut CUgraph) -> CUresult {
    guard("cuStreamEndCapture", || end(hStream, phGraph, false))
}

/// `cuStreamEndCapture_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamEndCapture_ptsz(hStream: CUstream, phGraph: *mut CUgraph) -> CUresult {
    guard("cuStreamEndCapture_ptsz", || end(hStream, phGraph, true))
}

/// `cuStreamIsCapturing`: `CU_STREAM_CAPTURE_STATUS_NONE`, `_ACTIVE` or `_INVALIDATED`.
///
/// # Safety
/// `captureStatus` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamIsCapturing(
    hStream: CUstream,
    captureStatus: *mut c_uint,
) -> CUresult {
    guard("cuStreamIsCapturing", || {
        is_capturing(hStream, captureStatus, false)
    })
}

/// `cuStreamIsCapturing_ptsz`.
///
/// # Safety
/// `captureStatus` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamIsCapturing_ptsz(
    hStream: CUstream,
    captureStatus: *mut c_uint,
) -> CUresult {
    guard("cuStreamIsCapturing_ptsz", || {
        is_capturing(hStream, captureStatus, true)
    })
}

/// `cuThreadExchangeStreamCaptureMode`: sets the calling thread's interaction mode to `*mode`
/// and writes the previous one there.
///
/// # Safety
/// `mode` is NULL or readable and writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> CUresult {
    guard("cuThreadExchangeStreamCaptureMode", || {
        state::driver()?;
        need(mode)?;
        // SAFETY: checked non-null; readable by the caller's contract.
        let wanted = unsafe { *mode };
        if wanted > MODE_RELAXED {
            return Err(Fault::BadArgument);
        }
        let old = MODE.try_with(|m| m.replace(wanted)).unwrap_or(MODE_GLOBAL);
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(mode, old) }
    })
}

/// `cuGraphDestroy`: a graph `cuStreamEndCapture` gave.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphDestroy(hGraph: CUgraph) -> CUresult {
    guard("cuGraphDestroy", || {
        need(hGraph)?;
        // SAFETY: a graph this module made with Box::into_raw, destroyed once (the driver's
        // contract).
        drop(unsafe { Box::from_raw(hGraph as *mut u64) });
        Ok(())
    })
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
