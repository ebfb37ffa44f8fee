//! Stream-ordered allocation: cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync, each in
//! its legacy-stream and per-thread-stream (`_ptsz`) form.
//!
//! The driver lets cuMemFreeAsync free any device allocation (measured: it frees a cuMemAlloc
//! pointer), so frees go through [`crate::serving::serve::pool_free`] first, which hands pooled pointers back
//! to the pool.
//!
//! The history records each allocation's and each free's stream ([`history_stream`]); the pool
//! never serves these allocations (they go to the driver), but a pooled block freed here is
//! freed on this free's stream.

#![allow(non_snake_case)]

use super::submit;
use super::track::{
    admit_untracked, current_tracked_context, free_tracked_on, record_alloc_failed, record_alloc_on,
};
use crate::driver::{Entry, sig};
use crate::ffi::*;
use crate::guard::shield;
use crate::serving::serve;
use cuguard_format::MemoryKind;

/// The history's key of the stream `stream` passed to `api`: one value per stream, whichever
/// handle named it. The program's handle, except that the legacy default stream is 0 (handle 0
/// in a plain entry, `CU_STREAM_LEGACY` in any) and the calling thread's per-thread default
/// stream is `CU_STREAM_PER_THREAD` (handle 0 in a `_ptsz` entry, or that handle in any).
#[inline]
fn history_stream(api: Entry, stream: CUstream) -> u64 {
    match stream as u64 {
        0 if submit::is_per_thread(api) => 2,
        1 => 0,
        h => h,
    }
}

/// Tracks the outcome of an allocation made on `stream` (its history key).
fn after_alloc(api: Entry, result: CUresult, dptr: *mut CUdeviceptr, size: usize, stream: u64) {
    let Some((_guard, t)) = super::track::active() else {
        return;
    };
    shield((), || {
        if result == CUDA_SUCCESS {
            // SAFETY: the call succeeded, so dptr was valid and written.
            let addr = if dptr.is_null() { 0 } else { unsafe { *dptr } };
            if addr != 0 {
                record_alloc_on(
                    t,
                    crate::driver::current_context(),
                    api,
                    MemoryKind::Async,
                    addr,
                    size as u64,
                    size as u64,
                    stream,
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
    after_alloc(e, r, dptr, bytesize, history_stream(e, stream));
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
    if r == CUDA_SUCCESS
        && !crate::driver::mem_pools::known(pool)
        && let Some((_guard, t)) = super::track::active()
    {
        let device = shield(-1, || current_tracked_context(t).1);
        crate::driver::mem_pools::seen(pool, device);
    }
    after_alloc(e, r, dptr, bytesize, history_stream(e, stream));
    if let Some(g) = grant {
        g.done();
    }
    r
}

/// `cuMemFreeAsync` and `_ptsz`: a pooled block back to the pool, anything else to the driver;
/// the free is on `stream`.
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
    free_tracked_on(
        e,
        dptr,
        cur,
        history_stream(e, stream),
        || serve::pool_free(cur, dptr),
        // SAFETY: the program's own arguments, forwarded unchanged.
        || unsafe { real(dptr, stream) },
    )
}

/// `cuMemPoolDestroy`: forwarded; the pool is forgotten first, so it is never asked about
/// once gone.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemPoolDestroy(
    _e: Entry,
    real: sig::cuMemPoolDestroy,
    pool: CUmemoryPool,
) -> CUresult {
    crate::driver::mem_pools::destroyed(pool);
    // SAFETY: the program's own argument, forwarded unchanged.
    unsafe { real(pool) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_default_stream_has_one_history_key_whichever_handle_names_it() {
        let h = |e, v: usize| history_stream(e, v as CUstream);
        let (plain, ptsz) = (Entry::cuMemAllocAsync, Entry::cuMemAllocAsync_ptsz);
        assert_eq!((h(plain, 0), h(plain, 1), h(ptsz, 1)), (0, 0, 0));
        assert_eq!((h(ptsz, 0), h(ptsz, 2), h(plain, 2)), (2, 2, 2));
        assert_eq!(h(Entry::cuMemFreeAsync_ptsz, 0), 2);
        assert_eq!((h(plain, 0x5a00), h(ptsz, 0x5a00)), (0x5a00, 0x5a00));
    }
}
