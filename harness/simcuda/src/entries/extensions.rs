//! The extensions family's C entry points: the simulator's own entries, for tests (not part of
//! the real driver, and not offered by `cuGetProcAddress`):
//!
//! - `CUresult cusimEnqueueFill(CUstream s, CUdeviceptr dst, size_t bytes, unsigned char value,
//!   unsigned int delay_us)`: simulated device work. Queued on stream `s` (0 and
//!   `CU_STREAM_LEGACY` are the legacy default stream, `CU_STREAM_PER_THREAD` the calling
//!   thread's per-thread stream); when its turn comes it sleeps `delay_us` microseconds, then
//!   writes `value` into `[dst, dst + bytes)`. Returns at once. Like a kernel, it may write
//!   another device's memory only once the stream's context enabled peer access to the context
//!   that owns it; without, it is refused with `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED`.
//! - `CUresult cusimGetUsage(int device, size_t *live_bytes, size_t *live_allocations)`: the
//!   driver's own count of device memory the program holds (see `model/memory.rs`: synchronous,
//!   pitched, managed and not-yet-freed async allocations, and VMM physical allocations until
//!   released and unmapped). Either pointer may be NULL.

use std::ffi::{c_int, c_uchar, c_uint};

use super::copy;
use super::{guard, put};
use crate::ffi::{CUdeviceptr, CUresult, CUstream};
use crate::state;

/// `cusimEnqueueFill`.
#[unsafe(no_mangle)]
pub extern "C" fn cusimEnqueueFill(
    s: CUstream,
    dst: CUdeviceptr,
    bytes: usize,
    value: c_uchar,
    delay_us: c_uint,
) -> CUresult {
    guard("cusimEnqueueFill", || {
        copy::fill(s, dst, bytes, value, delay_us)
    })
}

/// `cusimGetUsage`.
///
/// # Safety
/// Each pointer is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cusimGetUsage(
    device: c_int,
    live_bytes: *mut usize,
    live_allocations: *mut usize,
) -> CUresult {
    guard("cusimGetUsage", || {
        let drv = state::driver()?;
        let mem = drv.lock().device(device)?.mem.clone();
        // SAFETY: each pointer is NULL or writable by the caller's contract.
        unsafe {
            if !live_bytes.is_null() {
                put(live_bytes, mem.live_bytes as usize)?;
            }
            if !live_allocations.is_null() {
                put(live_allocations, mem.live_allocs as usize)?;
            }
        }
        Ok(())
    })
}
