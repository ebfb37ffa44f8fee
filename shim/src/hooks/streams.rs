//! Streams and stream captures, watched for the pool's fences: non-blocking streams each need
//! their own fence event, a destroyed one leaves a last event behind, and no fence may be
//! recorded while a capture is in progress (see [`crate::pool::fence`]).

#![allow(non_snake_case)]

use std::ffi::c_int;

use super::real_or;
use crate::driver::current_context;
use crate::ffi::*;
use crate::guard::shield;
use crate::pool::fence;

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
            fence::stream_created(ctx, stream, flags);
        }
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut CUstream, flags: u32) -> CUresult {
    let real = real_or!(cuStreamCreate, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ph, flags) };
    created(r, ph, flags);
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    ph: *mut CUstream,
    flags: u32,
    priority: c_int,
) -> CUresult {
    let real = real_or!(cuStreamCreateWithPriority, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ph, flags, priority) };
    created(r, ph, flags);
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGreenCtxStreamCreate(
    ph: *mut CUstream,
    green: Opaque,
    flags: u32,
    priority: c_int,
) -> CUresult {
    let real = real_or!(cuGreenCtxStreamCreate, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ph, green, flags, priority) };
    // Green-context streams are always non-blocking.
    created(r, ph, flags | fence::CU_STREAM_NON_BLOCKING);
    r
}

macro_rules! stream_destroy {
    ($name:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(stream: CUstream) -> CUresult {
            let real = real_or!($name, CUDA_ERROR_NOT_INITIALIZED);
            shield((), || fence::stream_destroying(stream as u64));
            // SAFETY: the program's own argument, forwarded unchanged.
            unsafe { real(stream) }
        }
    };
}
stream_destroy!(cuStreamDestroy);
stream_destroy!(cuStreamDestroy_v2);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamBeginCapture(stream: CUstream) -> CUresult {
    let real = real_or!(cuStreamBeginCapture, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own argument, forwarded unchanged.
    let r = unsafe { real(stream) };
    if r == CUDA_SUCCESS {
        fence::capture_changed(1);
    }
    r
}

macro_rules! begin_capture {
    ($name:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(stream: CUstream, mode: u32) -> CUresult {
            let real = real_or!($name, CUDA_ERROR_NOT_INITIALIZED);
            // SAFETY: the program's own arguments, forwarded unchanged.
            let r = unsafe { real(stream, mode) };
            if r == CUDA_SUCCESS {
                fence::capture_changed(1);
            }
            r
        }
    };
}
begin_capture!(cuStreamBeginCapture_v2);
begin_capture!(cuStreamBeginCapture_v2_ptsz);

macro_rules! begin_capture_to_graph {
    ($name:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            stream: CUstream,
            graph: Opaque,
            deps: Opaque,
            data: Opaque,
            n: usize,
            mode: u32,
        ) -> CUresult {
            let real = real_or!($name, CUDA_ERROR_NOT_INITIALIZED);
            // SAFETY: the program's own arguments, forwarded unchanged.
            let r = unsafe { real(stream, graph, deps, data, n, mode) };
            if r == CUDA_SUCCESS {
                fence::capture_changed(1);
            }
            r
        }
    };
}
begin_capture_to_graph!(cuStreamBeginCaptureToGraph);
begin_capture_to_graph!(cuStreamBeginCaptureToGraph_ptsz);

macro_rules! end_capture {
    ($name:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(stream: CUstream, graph: *mut Opaque) -> CUresult {
            let real = real_or!($name, CUDA_ERROR_NOT_INITIALIZED);
            // SAFETY: the program's own arguments, forwarded unchanged.
            let r = unsafe { real(stream, graph) };
            if r == CUDA_SUCCESS || r == CAPTURE_INVALIDATED {
                fence::capture_changed(-1);
            }
            r
        }
    };
}
end_capture!(cuStreamEndCapture);
end_capture!(cuStreamEndCapture_ptsz);
