//! The C-entry layer: every `extern "C"` function the library exports, one file per family, and
//! [`guard`], the wrapper each runs its body in.
//!
//! An entry converts its C arguments (pointers, handles, flags), locks the driver's state
//! (`state/`), calls the state's operations and the families' models (`model/`), and turns the
//! outcome into a `CUresult` through [`guard`]. Nothing below this layer knows about C pointers
//! or `CUresult`s.
//!
//! To add an entry: write it in its family's file here, and add its row to the table of exports
//! in `symbols.rs` (which `cuGetProcAddress` answers from and failure injection checks names
//! against).

use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::config;
use crate::errors::{Fault, code};
use crate::ffi::CUresult;

pub mod capture;
pub mod context;
pub mod copy;
pub mod device;
pub mod errors;
pub mod event;
pub mod extensions;
pub mod ipc;
pub mod memory;
pub mod nvml;
pub mod peer;
pub mod pointer;
pub mod pool;
pub mod procaddr;
pub mod stream;
pub mod vmm;

/// Runs the body of the exported entry `entry` and turns its outcome into a `CUresult`.
///
/// In order: a failure injected by `CUGUARD_SIM_FAIL` returns its code without running the body;
/// the configured latency is spent; the body runs, and a panic inside it becomes
/// `CUDA_ERROR_UNKNOWN` instead of unwinding into C.
pub fn guard(entry: &'static str, body: impl FnOnce() -> Result<(), Fault>) -> CUresult {
    if let Some(code) = config::injected_failure(entry) {
        return code;
    }
    config::spend_latency(entry);
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => code::CUDA_SUCCESS,
        Ok(Err(fault)) => fault.code(),
        Err(_) => code::CUDA_ERROR_UNKNOWN,
    }
}

/// Writes `value` through the out-pointer `p`, or fails with [`Fault::NullPointer`].
///
/// # Safety
/// `p` is NULL or valid for a write of `T` (alignment included).
pub unsafe fn put<T>(p: *mut T, value: T) -> Result<(), Fault> {
    if p.is_null() {
        return Err(Fault::NullPointer);
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { p.write(value) };
    Ok(())
}

/// Fails with [`Fault::NullPointer`] if `p` is NULL. Entries check their out-pointers with this
/// before they change anything, so a NULL out-pointer never leaves a half-done operation.
pub fn need<T>(p: *const T) -> Result<(), Fault> {
    if p.is_null() {
        Err(Fault::NullPointer)
    } else {
        Ok(())
    }
}
