//! The handler of every `submit` row of the driver-entry table: entries that submit device work
//! (kernels, copies, sets, graph launches, stream memory operations, external semaphores, host
//! functions). Each is forwarded and then counted, which is how the pool knows whether any work
//! issued before a free could still touch the freed block ([`crate::serving::submissions`]); the count
//! also notes the submission's stream, and before the work is forwarded a stream other than the
//! one an early-reused block's work is on waits for that work
//! ([`crate::serving::stream_reuse`]).
//!
//! A submission's stream, as a key ([`crate::serving::submissions`]): the row's `hStream` or `stream`
//! argument; `cuLaunchKernelEx`'s `config->hStream`; the default stream for entries without
//! one (the synchronous copies and sets, `cuLaunch`, `cuLaunchGrid`); unknown for
//! `cuLaunchCooperativeKernelMultiDevice` (one stream per device, in its list). Handle 0 is the
//! legacy stream in a plain entry and the calling thread's per-thread stream in a `_ptsz` or
//! `_ptds` entry; `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` name them in any entry.

use std::ffi::c_void;

use crate::driver::Entry;
use crate::ffi::CUresult;
use crate::serving::{stream_reuse, submissions};

pub use crate::serving::submissions::UNKNOWN_KEY;

/// Whether an entry's exported name is a `_ptsz` or `_ptds` form (handle 0 is then the calling
/// thread's per-thread default stream).
pub const fn is_per_thread_name(name: &str) -> bool {
    let b = name.as_bytes();
    let n = b.len();
    n > 5
        && b[n - 5] == b'_'
        && b[n - 4] == b'p'
        && b[n - 3] == b't'
        && ((b[n - 2] == b's' && b[n - 1] == b'z') || (b[n - 2] == b'd' && b[n - 1] == b's'))
}

/// Whether `e` is a `_ptsz` or `_ptds` form.
pub fn is_per_thread(e: Entry) -> bool {
    is_per_thread_name(e.name())
}

/// The key of stream `handle` passed to an entry (`per_thread_form`: a `_ptsz`/`_ptds` one).
#[inline]
pub fn key_of(handle: u64, per_thread_form: bool) -> u64 {
    match handle {
        0 if per_thread_form => stream_reuse::per_thread_key(),
        0 | 1 => submissions::LEGACY_KEY,
        2 => stream_reuse::per_thread_key(),
        h => h,
    }
}

/// The key of the default stream, for an entry without a stream argument.
#[inline]
pub fn default_key(per_thread_form: bool) -> u64 {
    key_of(0, per_thread_form)
}

/// The key of the stream a `CUlaunchConfig` names.
///
/// # Safety
/// `config` is NULL or points to the program's `CUlaunchConfig` (the entry's contract).
#[inline]
pub unsafe fn config_key(config: *const c_void, per_thread_form: bool) -> u64 {
    if config.is_null() {
        return UNKNOWN_KEY;
    }
    // SAFETY: config points to the program's CUlaunchConfig; only read.
    let c = unsafe { &*(config as *const cudarc::driver::sys::CUlaunchConfig_st) };
    key_of(c.hStream as u64, per_thread_form)
}

/// Before a submission on stream `key` is forwarded.
#[inline(always)]
pub fn before(key: u64) {
    stream_reuse::before(key);
}

/// Counts one submission on stream `key` after the driver enqueued it; returns the driver's
/// answer.
#[inline(always)]
pub fn counted_on(result: CUresult, key: u64) -> CUresult {
    submissions::submitted_on(key);
    result
}
