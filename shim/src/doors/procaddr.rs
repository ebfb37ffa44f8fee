//! `cuGetProcAddress` (the CUDA 11.3 four-argument form) and `cuGetProcAddress_v2`: the handlers
//! of the table's `door` rows.
//!
//! The real lookup runs first; its return code, `symbolStatus` and NULL results are kept. Only
//! a returned pointer that is the real address of an entry the shim stands in for is replaced —
//! including the driver's own `cuGetProcAddress_v2`, which the CUDA runtime fetches through
//! itself and then uses for everything else.
//!
//! The replacement is asked of the `substitute` the caller passes in: the functions
//! [`super::exports`] makes for these rows pass [`super::exports::substitute`], which can hand
//! out those very functions, so this file does not import it (the two would import each other).

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

use crate::driver::{Entry, sig};
use crate::ffi::*;
use crate::tracker::doors::Door;

/// What routes a real address: the function standing in for it, if any, counted for the door
/// ([`super::exports::substitute`]).
pub type Substitute = fn(*mut c_void, Door) -> Option<*mut c_void>;

fn route(result: CUresult, pfn: *mut *mut c_void, substitute: Substitute) {
    if result != CUDA_SUCCESS || pfn.is_null() {
        return;
    }
    // SAFETY: the call succeeded, so pfn is a valid out-parameter the driver wrote.
    let found = unsafe { *pfn };
    if found.is_null() {
        return;
    }
    if let Some(hook) = crate::guard::shield(None, || substitute(found, Door::GetProcAddress)) {
        // SAFETY: as above.
        unsafe { *pfn = hook };
    }
}

/// `cuGetProcAddress`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuGetProcAddress(
    _e: Entry,
    real: sig::cuGetProcAddress,
    substitute: Substitute,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(symbol, pfn, cuda_version, flags) };
    route(r, pfn, substitute);
    r
}

/// `cuGetProcAddress_v2`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
#[allow(clippy::too_many_arguments)] // the entry, its real one, substitute, and its five
pub unsafe fn cuGetProcAddress_v2(
    _e: Entry,
    real: sig::cuGetProcAddress_v2,
    substitute: Substitute,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut c_int,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(symbol, pfn, cuda_version, flags, symbol_status) };
    route(r, pfn, substitute);
    r
}
