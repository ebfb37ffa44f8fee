//! `cuguard_label`: a label the program sets about itself (test id, worker, rank, epoch), kept
//! by [`crate::process::labels`] and written as `process.labels` in every report from then on
//! (snapshots, checkpoints, the final report; not the emergency report, rendered in advance).

use std::ffi::c_char;

use crate::process::labels::{self, MAX_KEY_BYTES, MAX_VALUE_BYTES, Refused};

use super::{E_FULL, E_INVALID, OK, call, text};

/// Sets label `key` to `value`.
///
/// # Safety
///
/// `key` and `value` are NULL or NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_label(key: *const c_char, value: *const c_char) -> i32 {
    // SAFETY: the caller promises NUL-terminated strings (NULL is refused).
    let (key, value) = match unsafe { (text(key, MAX_KEY_BYTES), text(value, MAX_VALUE_BYTES)) } {
        (Ok(k), Ok(v)) => (k, v),
        _ => return E_INVALID,
    };
    call(|| match labels::set(key, value) {
        Ok(()) => OK,
        Err(Refused::Full) => E_FULL,
        Err(Refused::Key | Refused::Value) => E_INVALID,
    })
}
