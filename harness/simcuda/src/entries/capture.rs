//! The capture family's C entry points: `cuStreamBeginCapture_v2`, `cuStreamEndCapture`,
//! `cuStreamIsCapturing` (and their `_ptsz` forms), `cuThreadExchangeStreamCaptureMode` and
//! `cuGraphDestroy`. Only the state is kept (`model/capture.rs`): work issued to a capturing
//! stream still runs, and the graph given back is an empty placeholder.

use std::ffi::c_uint;

use super::{guard, need, put};
use crate::errors::Fault;
use crate::ffi::{CUresult, CUstream};
use crate::model::capture::{
    Capture, MODE_RELAXED, STATUS_ACTIVE, STATUS_INVALIDATED, STATUS_NONE, exchange_mode, thread_id,
};
use crate::model::stream::StreamKind;
use crate::state;

/// `CUgraph`.
pub type CUgraph = *mut std::ffi::c_void;

fn begin(h: CUstream, mode: c_uint, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let s = st.resolve_stream(h as usize, per_thread_default)?;
    if mode > MODE_RELAXED {
        return Err(Fault::BadArgument);
    }
    // The legacy stream cannot be captured; a created stream is named by its own handle.
    if s.kind == StreamKind::Legacy {
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
    let s = st.resolve_stream(h as usize, per_thread_default)?;
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
    let s = st.resolve_stream(h as usize, per_thread_default)?;
    let key = std::sync::Arc::as_ptr(&s) as usize;
    let value = match st.captures.iter().find(|c| c.stream == key) {
        None => STATUS_NONE,
        Some(c) if c.invalidated => STATUS_INVALIDATED,
        Some(_) => STATUS_ACTIVE,
    };
    // SAFETY: checked non-null; the caller's out-parameter.
    unsafe { put(status, value) }
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
        let old = exchange_mode(wanted);
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
