//! `cuGetProcAddress` (the CUDA 11.3 four-argument form) and `cuGetProcAddress_v2`.
//!
//! The real lookup runs first; its return code, `symbolStatus` and NULL results are kept. Only
//! a returned pointer that is the real address of a hooked entry is replaced — including the
//! driver's own `cuGetProcAddress_v2`, which the CUDA runtime fetches through itself and then
//! uses for everything else.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

use crate::ffi::*;
use crate::hooks::real_or;

fn route(result: CUresult, pfn: *mut *mut c_void) {
    if result != CUDA_SUCCESS || pfn.is_null() {
        return;
    }
    // SAFETY: the call succeeded, so pfn is a valid out-parameter the driver wrote.
    let found = unsafe { *pfn };
    if found.is_null() {
        return;
    }
    if let Some(hook) =
        crate::guard::shield(None, || super::substitute(found, super::GET_PROC_ADDRESS))
    {
        // SAFETY: as above.
        unsafe { *pfn = hook };
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult {
    let real = real_or!(cuGetProcAddress, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(symbol, pfn, cuda_version, flags) };
    route(r, pfn);
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut c_int,
) -> CUresult {
    let real = real_or!(cuGetProcAddress_v2, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(symbol, pfn, cuda_version, flags, symbol_status) };
    route(r, pfn);
    r
}
