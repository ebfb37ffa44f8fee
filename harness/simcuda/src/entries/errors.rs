//! The errors family's C entry points: `cuGetErrorName` and `cuGetErrorString`, answered from
//! the table of names and descriptions in `errors.rs`.

use std::ffi::{CStr, c_char};

use super::{guard, put};
use crate::errors::{Fault, describe};
use crate::ffi::CUresult;

/// `cuGetErrorName`: the enumerator's name, or `CUDA_ERROR_INVALID_VALUE` and `*pStr = NULL` for
/// a code the driver does not know. Works before `cuInit`.
///
/// # Safety
/// `pStr` is NULL or points to writable storage for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, pStr: *mut *const c_char) -> CUresult {
    guard("cuGetErrorName", || {
        // SAFETY: the caller passes NULL or a writable pointer slot.
        unsafe { lookup_into(error, pStr, |(name, _)| name) }
    })
}

/// `cuGetErrorString`: the description, or `CUDA_ERROR_INVALID_VALUE` and `*pStr = NULL` for a
/// code the driver does not know. Works before `cuInit`.
///
/// # Safety
/// `pStr` is NULL or points to writable storage for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, pStr: *mut *const c_char) -> CUresult {
    guard("cuGetErrorString", || {
        // SAFETY: the caller passes NULL or a writable pointer slot.
        unsafe { lookup_into(error, pStr, |(_, text)| text) }
    })
}

/// Writes the chosen string of `error` to `out`, or NULL and an error for an unknown code.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn lookup_into(
    error: CUresult,
    out: *mut *const c_char,
    pick: impl Fn((&'static CStr, &'static CStr)) -> &'static CStr,
) -> Result<(), Fault> {
    if out.is_null() {
        return Err(Fault::NullPointer);
    }
    match describe(error) {
        Some(pair) => {
            // SAFETY: `out` is non-null and writable by the caller's contract.
            unsafe { put(out, pick(pair).as_ptr()) }
        }
        None => {
            // SAFETY: as above.
            unsafe { put(out, std::ptr::null())? };
            Err(Fault::BadArgument)
        }
    }
}
