//! Pinned host memory: cuMemAllocHost, cuMemHostAlloc and cuMemFreeHost.

#![allow(non_snake_case)]

use cuguard_format::MemoryKind;
use std::ffi::c_void;

use super::track::{free_tracked, record_alloc, record_alloc_failed};
use crate::driver::{Entry, sig};
use crate::ffi::*;
use crate::guard::shield;

fn after_alloc(api: Entry, result: CUresult, pp: *mut *mut c_void, size: usize) {
    let Some((_guard, t)) = super::track::active() else {
        return;
    };
    shield((), || {
        if result == CUDA_SUCCESS {
            let addr = if pp.is_null() {
                0
            } else {
                // SAFETY: the call succeeded, so pp was valid and written.
                unsafe { *pp as u64 }
            };
            if addr != 0 {
                record_alloc(
                    t,
                    crate::driver::current_context(),
                    api,
                    MemoryKind::HostPinned,
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

/// `cuMemAllocHost_v2`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemAllocHost_v2(
    e: Entry,
    real: sig::cuMemAllocHost_v2,
    pp: *mut *mut c_void,
    bytesize: usize,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(pp, bytesize) };
    after_alloc(e, r, pp, bytesize);
    r
}

/// `cuMemHostAlloc`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemHostAlloc(
    e: Entry,
    real: sig::cuMemHostAlloc,
    pp: *mut *mut c_void,
    bytesize: usize,
    flags: u32,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(pp, bytesize, flags) };
    after_alloc(e, r, pp, bytesize);
    r
}

/// `cuMemFreeHost`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemFreeHost(e: Entry, real: sig::cuMemFreeHost, p: *mut c_void) -> CUresult {
    // SAFETY: the program's own argument, forwarded unchanged.
    free_tracked(
        e,
        p as u64,
        crate::driver::current_context(),
        || None,
        // SAFETY: the program's own argument, forwarded unchanged.
        || unsafe { real(p) },
    )
}
