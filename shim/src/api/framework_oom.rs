//! `cuguard_framework_oom`: a framework's allocator refused a request (PyTorch's
//! `OutOfMemoryError`, told by its out-of-memory observer; CuPy's `OutOfMemoryError` and JAX's
//! `RESOURCE_EXHAUSTED`, told as they are made; the Python package tells them):
//! the shim records an out-of-memory card for it, as for the driver's refusals, with the
//! framework's cache's idle memory, pieces and the lines that pin them.

use std::ffi::c_char;

use cuguard_format::api::FrameworkOom;

use super::{E_INVALID, E_OFF, OK, call, text};

/// A framework's out-of-memory observer is registered (`framework`: `pytorch`, `cupy`): from now on the
/// one stderr line at a driver's refusal waits for the framework's card, which explains it when
/// the refusal was inside the framework's allocator (else it is said with the final report).
/// [`E_INVALID`] for a framework cuguard does not read.
///
/// # Safety
///
/// `framework` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_framework_watch(framework: *const c_char) -> i32 {
    // SAFETY: the caller promises a NUL-terminated string or NULL.
    if let Err(code) = unsafe { super::framework_arg(framework) } {
        return code;
    }
    call(|| {
        crate::tracker::ooms::watch_framework();
        OK
    })
}

/// The longest document taken, in bytes.
const MAX_DOCUMENT: usize = 64 << 10;

/// Records the refusal `json` describes (`cuguard_format::api::FrameworkOom`), asked from the
/// calling thread's stack. [`E_INVALID`] for a document that does not read or a framework
/// cuguard does not read; [`E_OFF`] when the tracker has not started.
///
/// # Safety
///
/// `json` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_framework_oom(json: *const c_char) -> i32 {
    // SAFETY: the caller promises a NUL-terminated string (NULL is refused by `text`).
    let json = match unsafe { text(json, MAX_DOCUMENT) } {
        Ok(j) => j,
        Err(code) => return code,
    };
    call(|| {
        let Ok(oom) = FrameworkOom::from_json(json) else {
            return E_INVALID;
        };
        let Some(t) = crate::tracker::if_any() else {
            return E_OFF;
        };
        let stack = crate::tracker::capture_stack();
        if crate::hooks::oom::framework_refused(t, oom, stack) {
            OK
        } else {
            E_INVALID
        }
    })
}
