//! `cuGetProcAddress` (CUDA 11.3, four arguments) and `cuGetProcAddress_v2` (CUDA 12.0, with the
//! `symbolStatus` out-argument), answered from the table in `entries.rs`.
//!
//! A program passes a base name ("cuMemAlloc") and the CUDA version it was built for, and gets
//! the newest entry whose ABI that version knows (`cuMemAlloc_v2`). With
//! `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` it gets the `_ptds`/`_ptsz` variant where one
//! exists. An unknown name (a versioned name such as "cuMemAlloc_v2" included) gives
//! `*pfn = NULL` and status `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`; a name that exists only in
//! newer versions gives `*pfn = NULL` and `CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT`. As
//! measured on the real driver, `cuGetProcAddress_v2` returns `CUDA_SUCCESS` in both cases (the
//! status says what happened) while the four-argument `cuGetProcAddress` returns
//! `CUDA_ERROR_NOT_FOUND`; the codes themselves live in `errors.rs`. Both work before `cuInit`
//! (that is how the runtime finds `cuInit`).

use std::ffi::{CStr, c_char, c_int, c_void};

use crate::entries::{self, Lookup};
use crate::errors::Fault;
use crate::ffi::consts::{
    CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, CU_GET_PROC_ADDRESS_SUCCESS,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
};
use crate::ffi::{CUresult, guard, put};

/// Which of the two entries is answering.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Abi {
    /// `cuGetProcAddress`: no status argument.
    V1,
    /// `cuGetProcAddress_v2`: `symbolStatus` (which may be NULL).
    V2,
}

/// Looks `symbol` up and writes the answer.
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string; `pfn` and `status` are NULL or writable.
unsafe fn get(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    abi: Abi,
    status: *mut c_int,
) -> Result<(), Fault> {
    if symbol.is_null() || pfn.is_null() {
        return Err(Fault::NullPointer);
    }
    let per_thread = match flags {
        CU_GET_PROC_ADDRESS_DEFAULT | CU_GET_PROC_ADDRESS_LEGACY_STREAM => false,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM => true,
        _ => return Err(Fault::BadFlags),
    };
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let name = unsafe { CStr::from_ptr(symbol) }.to_str().unwrap_or("");
    let (addr, code, fault) = match entries::lookup(name, version, per_thread) {
        Lookup::Found(_, addr) => (addr.cast_mut(), CU_GET_PROC_ADDRESS_SUCCESS, None),
        Lookup::NotFound => (
            std::ptr::null_mut(),
            CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
            Some(if abi == Abi::V1 {
                Fault::SymbolNotFound
            } else {
                Fault::SymbolNotFoundV2
            }),
        ),
        Lookup::VersionTooLow => (
            std::ptr::null_mut(),
            CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
            Some(if abi == Abi::V1 {
                Fault::VersionNotSufficient
            } else {
                Fault::VersionNotSufficientV2
            }),
        ),
    };
    // SAFETY: `pfn` is non-null and writable; `status` is NULL or writable.
    unsafe {
        put(pfn, addr)?;
        if !status.is_null() {
            put(status, code)?;
        }
    }
    fault.map_or(Ok(()), Err)
}

/// `cuGetProcAddress` (the CUDA 11.3 ABI, four arguments).
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string; `pfn` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    guard("cuGetProcAddress", || unsafe {
        get(
            symbol,
            pfn,
            cudaVersion,
            flags,
            Abi::V1,
            std::ptr::null_mut(),
        )
    })
}

/// `cuGetProcAddress_v2` (CUDA 12.0, with `symbolStatus`, which may be NULL).
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string; `pfn` and `symbolStatus` are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cudaVersion: c_int,
    flags: u64,
    symbolStatus: *mut c_int,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    guard("cuGetProcAddress_v2", || unsafe {
        get(symbol, pfn, cudaVersion, flags, Abi::V2, symbolStatus)
    })
}
