//! `cuguard_phase_begin` and `cuguard_phase_end`: a phase of the program named by the program
//! itself (Python's `with cuguard.phase("backward"):`), recorded in the history as an NVTX
//! range is ([`crate::nvtx::tool`]), for code that marks no NVTX ranges. Phases nest on their
//! thread; they are apart from NVTX's (their own domain), so neither ends the other's.

use std::ffi::c_char;

use crate::recorder::{self, PUSHED, names};

use super::{E_INVALID, E_NO_HISTORY, OK, call, text};

/// The longest name taken, in bytes (longer ones are refused, not cut).
pub const MAX_NAME_BYTES: usize = names::MAX_NAME_BYTES;

/// The key of the ABI's phases: a domain of their own, no NVTX domain's handle.
const KEY: u64 = PUSHED | 0x7fff_ffff_0000_0000;

/// Begins a phase named `name` on the calling thread.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_phase_begin(name: *const c_char) -> i32 {
    // SAFETY: the caller promises a NUL-terminated string (NULL is refused).
    let Ok(name) = (unsafe { text(name, MAX_NAME_BYTES) }) else {
        return E_INVALID;
    };
    call(|| {
        if !recorder::on() {
            return E_NO_HISTORY;
        }
        recorder::phase_began(names::intern(name.as_bytes()), KEY, None);
        OK
    })
}

/// Ends the calling thread's innermost phase begun by [`cuguard_phase_begin`].
#[unsafe(no_mangle)]
pub extern "C" fn cuguard_phase_end() -> i32 {
    call(|| {
        if !recorder::on() {
            return E_NO_HISTORY;
        }
        recorder::phase_ended(KEY);
        OK
    })
}
