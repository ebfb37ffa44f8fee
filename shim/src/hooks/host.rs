//! Pinned host memory: cuMemAllocHost, cuMemHostAlloc and cuMemFreeHost.

#![allow(non_snake_case)]

use std::ffi::c_void;

use super::{free_tracked, real_or, record_alloc, record_alloc_failed};
use crate::driver::Entry;
use crate::ffi::*;
use crate::guard::shield;
use crate::state;
use crate::tracker::Memory;

fn after_alloc(api: Entry, result: CUresult, pp: *mut *mut c_void, size: usize) {
    let Some((_guard, t)) = state::active() else {
        return;
    };
    shield((), || {
        if result == CUDA_SUCCESS {
            // SAFETY: the call succeeded, so pp was valid and written.
            let addr = if pp.is_null() {
                0
            } else {
                unsafe { *pp as u64 }
            };
            if addr != 0 {
                record_alloc(
                    t,
                    crate::driver::current_context(),
                    api,
                    Memory::HostPinned,
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

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    let real = real_or!(cuMemAllocHost_v2, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(pp, bytesize) };
    after_alloc(Entry::cuMemAllocHost_v2, r, pp, bytesize);
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytesize: usize,
    flags: u32,
) -> CUresult {
    let real = real_or!(cuMemHostAlloc, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(pp, bytesize, flags) };
    after_alloc(Entry::cuMemHostAlloc, r, pp, bytesize);
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    let real = real_or!(cuMemFreeHost, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own argument, forwarded unchanged.
    free_tracked(
        Entry::cuMemFreeHost,
        p as u64,
        crate::driver::current_context(),
        || None,
        // SAFETY: the program's own argument, forwarded unchanged.
        || unsafe { real(p) },
    )
}
