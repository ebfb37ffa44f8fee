//! The pointer family's C entry points: `cuPointerGetAttribute` and `cuPointerGetAttributes`.

use std::ffi::{c_int, c_uint, c_void};

use super::{guard, need};
use crate::errors::Fault;
use crate::ffi::{CUdeviceptr, CUresult};
use crate::model::pointer::{Value, default_value, value};
use crate::state;

/// Writes `v` at `data` with its C width.
///
/// # Safety
/// `data` is non-null and writable for the attribute's width.
unsafe fn write(data: *mut c_void, v: Value) {
    // SAFETY: by the caller's contract.
    unsafe {
        match v {
            Value::U32(x) => data.cast::<u32>().write_unaligned(x),
            Value::I32(x) => data.cast::<i32>().write_unaligned(x),
            Value::U64(x) => data.cast::<u64>().write_unaligned(x),
        }
    }
}

/// `cuPointerGetAttribute`: `CUDA_ERROR_INVALID_VALUE` for an address the driver does not know.
///
/// # Safety
/// `data` is NULL or writable for the attribute's width.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: CUdeviceptr,
) -> CUresult {
    guard("cuPointerGetAttribute", || {
        let drv = state::driver()?;
        need(data)?;
        let st = drv.lock();
        let i = st.pointer_info(ptr).ok_or(Fault::PointerNotFound)?;
        let v = value(attribute, ptr, &i)?.ok_or(Fault::BadArgument)?;
        // SAFETY: checked non-null; writable for the width by the caller's contract.
        unsafe { write(data, v) };
        Ok(())
    })
}

/// `cuPointerGetAttributes`: for an address the driver does not know, every attribute gets its
/// default (0, NULL, device -2) and the call succeeds. A NULL slot in `data` is skipped.
///
/// # Safety
/// `attributes` and `data` are NULL or readable for `numAttributes` entries, and each non-null
/// `data[i]` is writable for the width of `attributes[i]`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttributes(
    numAttributes: c_uint,
    attributes: *mut c_int,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    guard("cuPointerGetAttributes", || {
        let drv = state::driver()?;
        need(attributes)?;
        need(data)?;
        let n = numAttributes as usize;
        // SAFETY: both non-null and readable for `n` entries by the caller's contract.
        let (attrs, slots) = unsafe {
            (
                std::slice::from_raw_parts(attributes, n),
                std::slice::from_raw_parts(data, n),
            )
        };
        let st = drv.lock();
        let i = st.pointer_info(ptr);
        let mut values = Vec::with_capacity(n);
        for &a in attrs {
            let v = match &i {
                Some(i) => value(a, ptr, i)?.unwrap_or(Value::U64(0)),
                None => default_value(a)?,
            };
            values.push(v);
        }
        for (slot, v) in slots.iter().zip(values) {
            if !slot.is_null() {
                // SAFETY: non-null and writable for the width by the caller's contract.
                unsafe { write(*slot, v) };
            }
        }
        Ok(())
    })
}
