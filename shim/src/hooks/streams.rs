//! Streams and stream captures, watched for the pool's fences: non-blocking streams each need
//! their own fence event, a destroyed one leaves a last event behind, and no fence may be
//! recorded while a capture is in progress (see [`crate::serving::submissions`]). With stream-aware
//! reuse, a stream's destruction and a capture's beginning also drain the guard of blocks
//! reused early ([`crate::serving::stream_reuse`]).

#![allow(non_snake_case, clippy::too_many_arguments)]

use std::ffi::c_int;

use crate::driver::{Entry, current_context, sig};
use crate::ffi::*;
use crate::guard::shield;
use crate::serving::{stream_reuse, submissions};

/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`: the capture ended anyway.
const CAPTURE_INVALIDATED: CUresult = 901;

fn created(result: CUresult, ph: *mut CUstream, flags: u32) {
    if result != CUDA_SUCCESS || ph.is_null() {
        return;
    }
    // SAFETY: the call succeeded, so ph was valid and written.
    let stream = unsafe { *ph } as u64;
    shield((), || {
        if let Some(ctx) = current_context() {
            submissions::stream_created(ctx, stream, flags);
        }
    });
}

/// `cuStreamCreate`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuStreamCreate(
    _e: Entry,
    real: sig::cuStreamCreate,
    ph: *mut CUstream,
    flags: u32,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ph, flags) };
    created(r, ph, flags);
    r
}

/// `cuStreamCreateWithPriority`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuStreamCreateWithPriority(
    _e: Entry,
    real: sig::cuStreamCreateWithPriority,
    ph: *mut CUstream,
    flags: u32,
    priority: c_int,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ph, flags, priority) };
    created(r, ph, flags);
    r
}

/// `cuGreenCtxStreamCreate`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuGreenCtxStreamCreate(
    _e: Entry,
    real: sig::cuGreenCtxStreamCreate,
    ph: *mut CUstream,
    green: Opaque,
    flags: u32,
    priority: c_int,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ph, green, flags, priority) };
    // Green-context streams are always non-blocking.
    created(r, ph, flags | submissions::CU_STREAM_NON_BLOCKING);
    r
}

/// Begins a capture with `begin` (the real entry's call), counting it first (so the pool serves
/// no allocation and records no fence from then on, and the give-back thread waits), then
/// letting a round of the give-back thread end; with stream-aware reuse, an early reuse's guard
/// is drained, so that none is armed while the capture runs (a capturing stream cannot wait for
/// an event recorded outside it). The count is taken back if the capture did not begin.
fn capturing(begin: impl FnOnce() -> CUresult) -> CUresult {
    submissions::capture_changed(1);
    // The give-back thread records and queries no event from now on: a round in progress ends
    // first.
    shield((), crate::serving::giveback::capture_beginning);
    if stream_reuse::enabled() {
        shield((), stream_reuse::capture_beginning);
    }
    let r = begin();
    if r != CUDA_SUCCESS {
        submissions::capture_changed(-1);
    }
    r
}

/// `cuStreamDestroy` and `_v2`: a non-blocking stream leaves a last event for the fences.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuStreamDestroy(_e: Entry, real: sig::cuStreamDestroy, stream: CUstream) -> CUresult {
    shield((), || {
        stream_reuse::stream_destroying(stream as u64);
        submissions::stream_destroying(stream as u64);
    });
    // SAFETY: the program's own argument, forwarded unchanged.
    unsafe { real(stream) }
}

/// `cuStreamBeginCapture`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuStreamBeginCapture(
    _e: Entry,
    real: sig::cuStreamBeginCapture,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the program's own argument, forwarded unchanged.
    capturing(|| unsafe { real(stream) })
}

/// `cuStreamBeginCapture_v2` and `_ptsz`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuStreamBeginCapture_v2(
    _e: Entry,
    real: sig::cuStreamBeginCapture_v2,
    stream: CUstream,
    mode: u32,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    capturing(|| unsafe { real(stream, mode) })
}

/// `cuStreamBeginCaptureToGraph` and `_ptsz`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuStreamBeginCaptureToGraph(
    _e: Entry,
    real: sig::cuStreamBeginCaptureToGraph,
    stream: CUstream,
    graph: Opaque,
    deps: Opaque,
    data: Opaque,
    n: usize,
    mode: u32,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    capturing(|| unsafe { real(stream, graph, deps, data, n, mode) })
}

/// `cuStreamEndCapture` and `_ptsz`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuStreamEndCapture(
    _e: Entry,
    real: sig::cuStreamEndCapture,
    stream: CUstream,
    graph: *mut Opaque,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(stream, graph) };
    if r == CUDA_SUCCESS || r == CAPTURE_INVALIDATED {
        submissions::capture_changed(-1);
    }
    r
}
