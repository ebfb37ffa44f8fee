//! cuMemAlloc, cuMemAllocPitch, cuMemFree and cuMemAllocManaged.
//!
//! cuMemAlloc_v2, cuMemAllocPitch_v2 and cuMemFree_v2 go through [`crate::serve`], which is
//! where the pool stands behind them; the hooks themselves only track.

#![allow(non_snake_case)]

use super::{free_tracked, real_or, record_alloc, record_alloc_failed};
use crate::driver::Entry;
use crate::ffi::*;
use crate::guard::shield;
use crate::serve;
use crate::state;
use crate::tracker::Memory;

/// Tracks the outcome of an allocation call that wrote its address to `dptr`.
fn after_alloc(
    cur: Option<u64>,
    api: Entry,
    memory: Memory,
    result: CUresult,
    dptr: *mut CUdeviceptr,
    size: u64,
    requested: u64,
) {
    let Some((_guard, t)) = state::active() else {
        return;
    };
    shield((), || {
        if result == CUDA_SUCCESS {
            // SAFETY: the call succeeded, so dptr was valid and written.
            let addr = if dptr.is_null() { 0 } else { unsafe { *dptr } };
            if addr != 0 {
                record_alloc(t, cur, api, memory, addr, size, requested);
            }
        } else {
            record_alloc_failed(t, api, requested, result, serve::take_failure_reason());
        }
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    let real = real_or!(cuMemAlloc_v2, CUDA_ERROR_NOT_INITIALIZED);
    let cur = crate::driver::current_context();
    let r = serve::device_alloc(cur, dptr, bytesize, real);
    after_alloc(
        cur,
        Entry::cuMemAlloc_v2,
        Memory::Device,
        r,
        dptr,
        bytesize as u64,
        bytesize as u64,
    );
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element_size: u32,
) -> CUresult {
    let real = real_or!(cuMemAllocPitch_v2, CUDA_ERROR_NOT_INITIALIZED);
    let cur = crate::driver::current_context();
    let r = serve::pitch_alloc(cur, dptr, pitch, width, height, element_size, real);
    // SAFETY: on success the driver wrote the pitch through a valid pointer.
    let p = if r == CUDA_SUCCESS && !pitch.is_null() {
        unsafe { *pitch }
    } else {
        width
    };
    let requested = (width as u64).saturating_mul(height as u64);
    let size = (p as u64).saturating_mul(height as u64);
    after_alloc(
        cur,
        Entry::cuMemAllocPitch_v2,
        Memory::Pitched,
        r,
        dptr,
        size,
        requested,
    );
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: u32,
) -> CUresult {
    let real = real_or!(cuMemAllocManaged, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(dptr, bytesize, flags) };
    after_alloc(
        crate::driver::current_context(),
        Entry::cuMemAllocManaged,
        Memory::Managed,
        r,
        dptr,
        bytesize as u64,
        bytesize as u64,
    );
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    let real = real_or!(cuMemFree_v2, CUDA_ERROR_NOT_INITIALIZED);
    let cur = crate::driver::current_context();
    free_tracked(Entry::cuMemFree_v2, dptr, cur, || serve::device_free(cur, dptr, real))
}
