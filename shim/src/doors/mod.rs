//! The three doors by which programs reach the driver, and how the shim stands in each:
//!
//! - exported symbols (`-lcuda` programs bind to the hooks in [`crate::hooks`] directly);
//! - [`dlsym`]: lookups of driver names on the driver's handle (cudarc, numba, XLA, and the CUDA
//!   runtime's first lookup of `cuGetProcAddress_v2`);
//! - [`procaddr`]: `cuGetProcAddress`/`_v2`, the runtime's path to everything else, including the
//!   driver's own `cuGetProcAddress` looked up through itself.
//!
//! Every door asks the real driver first and then routes by the pointer it returned: if that is
//! the real address of an entry the shim hooks, the program gets the hook instead. Versioned and
//! `_ptsz` entries are therefore told apart by what the driver chose, never by guessing from the
//! name.

pub mod dlsym;
pub mod procaddr;

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many hooks each door handed out (the report's `doors`).
pub static HANDED_OUT: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
/// Index into [`HANDED_OUT`].
pub const EXPORTED: usize = 0;
pub const DLSYM: usize = 1;
pub const GET_PROC_ADDRESS: usize = 2;

/// The hook standing in for the real driver entry at `addr`, if any; counts it for `door`.
pub fn substitute(addr: *mut c_void, door: usize) -> Option<*mut c_void> {
    if crate::config::get().disabled {
        return None;
    }
    let hook = match crate::driver::entry_at(addr as usize).and_then(crate::hooks::hook_for) {
        Some(h) => h,
        None => crate::hooks::submit::hook_for_real(addr as usize)?,
    };
    HANDED_OUT[door].fetch_add(1, Ordering::Relaxed);
    Some(hook)
}

/// Counts of hooks handed out: (exported, dlsym, get_proc_address).
pub fn counts() -> (u64, u64, u64) {
    (
        HANDED_OUT[EXPORTED].load(Ordering::Relaxed),
        HANDED_OUT[DLSYM].load(Ordering::Relaxed),
        HANDED_OUT[GET_PROC_ADDRESS].load(Ordering::Relaxed),
    )
}
