//! Stream-ordered allocation: cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync, each in
//! its legacy-stream and per-thread-stream (`_ptsz`) form.
//!
//! The driver lets cuMemFreeAsync free any device allocation (measured: it frees a cuMemAlloc
//! pointer), so frees go through [`crate::serving::serve::pool_free`] first, which hands pooled pointers back
//! to the pool.

#![allow(non_snake_case)]

use super::{
    admit_untracked, current_tracked_context, free_tracked, record_alloc, record_alloc_failed,
};
use crate::driver::{Entry, sig};
use crate::ffi::*;
use crate::guard::shield;
use crate::serving::serve;
use crate::tracker::Memory;

fn after_alloc(api: Entry, result: CUresult, dptr: *mut CUdeviceptr, size: usize) {
    let Some((_guard, t)) = super::active() else {
        return;
    };
    shield((), || {
        if result == CUDA_SUCCESS {
            // SAFETY: the call succeeded, so dptr was valid and written.
            let addr = if dptr.is_null() { 0 } else { unsafe { *dptr } };
            if addr != 0 {
                record_alloc(
                    t,
                    crate::driver::current_context(),
                    api,
                    Memory::Async,
                    addr,
                    size as u64,
                    size as u64,
                );
            }
        } else {
            record_alloc_failed(t, api, size as u64, result, None);
        }
    });
}

/// `cuMemAllocAsync` and `_ptsz`: forwarded, then tracked.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemAllocAsync(
    e: Entry,
    real: sig::cuMemAllocAsync,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    stream: CUstream,
) -> CUresult {
    let grant = match admit_untracked(e, bytesize as u64, |t| current_tracked_context(t).1) {
        Ok(g) => g,
        Err(r) => return r,
    };
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(dptr, bytesize, stream) };
    after_alloc(e, r, dptr, bytesize);
    if let Some(g) = grant {
        g.done();
    }
    r
}

/// `cuMemAllocFromPoolAsync` and `_ptsz`: forwarded, then tracked.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemAllocFromPoolAsync(
    e: Entry,
    real: sig::cuMemAllocFromPoolAsync,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CUresult {
    let grant = match admit_untracked(e, bytesize as u64, |t| current_tracked_context(t).1) {
        Ok(g) => g,
        Err(r) => return r,
    };
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(dptr, bytesize, pool, stream) };
    after_alloc(e, r, dptr, bytesize);
    if let Some(g) = grant {
        g.done();
    }
    r
}

/// `cuMemFreeAsync` and `_ptsz`: a pooled block back to the pool, anything else to the driver.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemFreeAsync(
    e: Entry,
    real: sig::cuMemFreeAsync,
    dptr: CUdeviceptr,
    stream: CUstream,
) -> CUresult {
    let cur = crate::driver::current_context();
    free_tracked(
        e,
        dptr,
        cur,
        || serve::pool_free(cur, dptr),
        // SAFETY: the program's own arguments, forwarded unchanged.
        || unsafe { real(dptr, stream) },
    )
}
