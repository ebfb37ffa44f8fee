//! Where cuMemAlloc_v2, cuMemAllocPitch_v2 and the frees are served: the pool, when it is on
//! and owns the pointer, else the real driver. The hooks call only these functions, so the pool
//! stands behind them without the hooks changing.

use crate::ffi::*;

/// The real cuMemAlloc_v2.
pub type AllocFn = unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult;
/// The real cuMemAllocPitch_v2.
pub type PitchFn =
    unsafe extern "C" fn(*mut CUdeviceptr, *mut usize, usize, usize, u32) -> CUresult;
/// The real cuMemFree_v2.
pub type FreeFn = unsafe extern "C" fn(CUdeviceptr) -> CUresult;
/// The real cuMemFreeAsync (either stream form).
pub type FreeAsyncFn = unsafe extern "C" fn(CUdeviceptr, CUstream) -> CUresult;

/// Serves cuMemAlloc_v2.
pub fn device_alloc(dptr: *mut CUdeviceptr, size: usize, real: AllocFn) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real(dptr, size) }
}

/// Serves cuMemAllocPitch_v2.
pub fn pitch_alloc(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element_size: u32,
    real: PitchFn,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real(dptr, pitch, width, height, element_size) }
}

/// Serves cuMemFree_v2.
pub fn device_free(addr: CUdeviceptr, real: FreeFn) -> CUresult {
    // SAFETY: the program's own argument, forwarded unchanged.
    unsafe { real(addr) }
}

/// Serves cuMemFreeAsync (either stream form).
pub fn async_free(addr: CUdeviceptr, stream: CUstream, real: FreeAsyncFn) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real(addr, stream) }
}

/// A context is gone, and the driver freed everything in it.
pub fn context_destroyed(_handle: u64) {}

/// Writes the report's `stats.devices[].pool` for `device` (null when the pool is off).
pub fn write_pool_stats(j: &mut crate::report::json::Json, _device: i32) {
    j.null();
}
