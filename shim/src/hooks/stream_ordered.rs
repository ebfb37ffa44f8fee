//! Stream-ordered allocation: cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync, each in
//! its legacy-stream and per-thread-stream (`_ptsz`) form.
//!
//! The driver lets cuMemFreeAsync free any device allocation (measured: it frees a cuMemAlloc
//! pointer), so frees go through [`crate::serve::async_free`], which hands pooled pointers back
//! to the pool.

#![allow(non_snake_case)]

use super::{free_tracked, real_or, record_alloc, record_alloc_failed};
use crate::driver::Entry;
use crate::ffi::*;
use crate::guard::shield;
use crate::serve;
use crate::state;
use crate::tracker::Memory;

fn after_alloc(api: Entry, result: CUresult, dptr: *mut CUdeviceptr, size: usize) {
    let Some((_guard, t)) = state::active() else {
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

macro_rules! alloc_async {
    ($name:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dptr: *mut CUdeviceptr,
            bytesize: usize,
            stream: CUstream,
        ) -> CUresult {
            let real = real_or!($name, CUDA_ERROR_NOT_INITIALIZED);
            // SAFETY: the program's own arguments, forwarded unchanged.
            let r = unsafe { real(dptr, bytesize, stream) };
            after_alloc(Entry::$name, r, dptr, bytesize);
            r
        }
    };
}

macro_rules! alloc_from_pool {
    ($name:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dptr: *mut CUdeviceptr,
            bytesize: usize,
            pool: CUmemoryPool,
            stream: CUstream,
        ) -> CUresult {
            let real = real_or!($name, CUDA_ERROR_NOT_INITIALIZED);
            // SAFETY: the program's own arguments, forwarded unchanged.
            let r = unsafe { real(dptr, bytesize, pool, stream) };
            after_alloc(Entry::$name, r, dptr, bytesize);
            r
        }
    };
}

macro_rules! free_async {
    ($name:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
            let real = real_or!($name, CUDA_ERROR_NOT_INITIALIZED);
            let cur = crate::driver::current_context();
            free_tracked(
                Entry::$name,
                dptr,
                cur,
                || serve::pool_free(cur, dptr),
                // SAFETY: the program's own arguments, forwarded unchanged.
                || unsafe { real(dptr, stream) },
            )
        }
    };
}

alloc_async!(cuMemAllocAsync);
alloc_async!(cuMemAllocAsync_ptsz);
alloc_from_pool!(cuMemAllocFromPoolAsync);
alloc_from_pool!(cuMemAllocFromPoolAsync_ptsz);
free_async!(cuMemFreeAsync);
free_async!(cuMemFreeAsync_ptsz);
