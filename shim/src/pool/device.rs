//! The pool's device: [`DriverContext`] implements `cuguard_pool::Device` over the real driver
//! for one context (chunks from cuMemAlloc_v2, given back with cuMemFreeAsync or cuMemFree,
//! events, cuCtxSynchronize), reading the submission count, captures and streams that
//! [`super::fence`] keeps, and telling the registry where chunks are.

use std::ffi::c_void;

use cuguard_pool::{Device, DeviceError, Reason};

use super::{fence, registry};
use crate::driver::{current_context, real};
use crate::ffi::*;

/// One context of the real driver, as its pool sees it.
pub struct DriverContext {
    /// The context's handle.
    pub handle: u64,
    /// Its device's ordinal.
    pub ordinal: i32,
}

impl Device for DriverContext {
    type Event = u64;

    fn alloc_chunk(&self, bytes: u64) -> Result<u64, DeviceError> {
        let Some(alloc) = real::cuMemAlloc_v2() else {
            return Err(DeviceError::Unavailable);
        };
        let mut base: CUdeviceptr = 0;
        // SAFETY: valid out-parameter; the pool's context is current.
        let r = unsafe { alloc(&mut base, bytes as usize) };
        if r != CUDA_SUCCESS {
            return Err(DeviceError::Refused(r));
        }
        Ok(base)
    }

    fn free_chunk(&self, base: u64, wait: bool) {
        if wait {
            free_chunk(base);
        } else {
            free_chunk_async(base);
        }
    }

    fn chunk_added(&self, base: u64, size: u64, pool: usize, arena: usize) {
        registry::chunk_added(base, size, pool, arena);
    }

    fn chunk_removed(&self, base: u64) {
        registry::chunk_removed(base);
    }

    fn is_current(&self) -> bool {
        current_context() == Some(self.handle)
    }

    #[inline]
    fn submissions(&self) -> u64 {
        fence::mark()
    }

    fn capturing(&self) -> bool {
        fence::capturing()
    }

    fn record_event(&self, stream: u64) -> Option<u64> {
        record_event(stream)
    }

    fn with_side_streams<T>(&self, f: impl FnOnce(&[u64], u64) -> T) -> T {
        fence::with_side_streams(self.handle, f)
    }

    fn destroyed_streams_done(&self, count: u64) -> bool {
        fence::destroyed_streams_done(self.handle, count)
    }

    fn event_done(&self, event: &u64) -> bool {
        event_done(*event)
    }

    fn destroy_event(&self, event: u64) {
        destroy_event(event);
    }

    fn synchronize(&self) -> bool {
        let Some(sync) = real::cuCtxSynchronize() else {
            return false;
        };
        // SAFETY: no arguments; the pool's context is current.
        (unsafe { sync() }) == CUDA_SUCCESS
    }
}

/// The driver's answer for a refused allocation.
pub fn result_of(reason: Reason) -> CUresult {
    match reason {
        Reason::ZeroSize => CUDA_ERROR_INVALID_VALUE,
        Reason::ContextDestroyed => CUDA_ERROR_CONTEXT_IS_DESTROYED,
        Reason::OutOfMemory => CUDA_ERROR_OUT_OF_MEMORY,
        Reason::Device(DeviceError::Unavailable) => CUDA_ERROR_NOT_INITIALIZED,
        Reason::Device(DeviceError::Refused(code)) => code,
    }
}

/// Records an event on `stream` (0: the legacy default stream) of the current context.
pub fn record_event(stream: u64) -> Option<u64> {
    let (create, record) = (real::cuEventCreate()?, real::cuEventRecord()?);
    let mut ev: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-parameter; CU_EVENT_DISABLE_TIMING = 2.
    if unsafe { create(&mut ev, 2) } != CUDA_SUCCESS {
        return None;
    }
    // SAFETY: ev was just created; stream is a live stream of the current context.
    if unsafe { record(ev, stream as *mut c_void) } != CUDA_SUCCESS {
        destroy_event(ev as u64);
        return None;
    }
    Some(ev as u64)
}

/// Whether the event has completed (an error counts as completed: the event, or its context, is
/// gone and can hold nothing back).
pub fn event_done(ev: u64) -> bool {
    let Some(q) = real::cuEventQuery() else {
        return true;
    };
    // SAFETY: ev is a live event this module created.
    (unsafe { q(ev as *mut c_void) }) != CUDA_ERROR_NOT_READY
}

/// Destroys an event this module created and nobody uses any more.
pub fn destroy_event(ev: u64) {
    if let Some(f) = real::cuEventDestroy_v2() {
        // SAFETY: ev is an event this module created and no longer uses.
        unsafe { f(ev as *mut c_void) };
    }
}

fn free_chunk(base: u64) {
    if let Some(f) = real::cuMemFree_v2() {
        // SAFETY: base is a chunk this pool allocated and no block of it is live.
        unsafe { f(base) };
    }
}

/// Gives a chunk back without waiting: cuMemFree would wait for all work on the device, which
/// stalls a program whose CPU runs ahead of its kernels. No block of the chunk is live or
/// pending, so no work can still touch it; the driver takes it back in legacy-stream order.
fn free_chunk_async(base: u64) {
    if let Some(f) = real::cuMemFreeAsync() {
        // SAFETY: base is a chunk this pool allocated with cuMemAlloc and no block of it is live
        // or waiting for a fence; a null stream is the legacy default stream.
        if unsafe { f(base, std::ptr::null_mut()) } == CUDA_SUCCESS {
            return;
        }
    }
    free_chunk(base);
}
