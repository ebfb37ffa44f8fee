//! Contexts: creation, destruction, and the primary context's retain, release and reset.
//!
//! Memory disappears with its context: cuCtxDestroy, cuDevicePrimaryCtxReset, and the last
//! cuDevicePrimaryCtxRelease free everything in it. The program never freed that memory, so its
//! allocations move to the report as `released_by_context_destroy`.

#![allow(non_snake_case)]

use std::ffi::c_int;

use super::track::event;
use crate::driver::{Entry, real, sig};
use crate::ffi::*;
use crate::guard::shield;
use crate::tracker::events::Kind;

/// Device memory in use on `device` before a context is made there, to measure what making it
/// took (NVML; `None` without it, or when nothing is tracked).
fn in_use_before(device: CUdevice) -> Option<u64> {
    if !crate::phase::tracking() {
        return None;
    }
    shield(None, || crate::driver::nvml::device_used(device))
}

fn created(
    result: CUresult,
    pctx: *mut CUcontext,
    device: CUdevice,
    primary: bool,
    before: Option<u64>,
) {
    if result != CUDA_SUCCESS || pctx.is_null() {
        return;
    }
    let Some((_guard, t)) = super::track::active() else {
        return;
    };
    // SAFETY: the call succeeded, so pctx was valid and written.
    let handle = unsafe { *pctx } as u64;
    shield((), || {
        let known = t.contexts.lookup(handle).is_some();
        t.contexts
            .register(handle, device, primary, crate::tracker::capture_stack());
        if !known
            && let Some(before) = before
            && let Some(after) = crate::driver::nvml::device_used(device)
        {
            t.contexts
                .set_overhead(handle, after.saturating_sub(before));
            // NVML's first listing of a device's processes is slow (0.27 ms on an H100, then
            // 15-21 µs): paid here, not in the refused call whose card lists them.
            crate::driver::nvml::list_once(device);
        }
    });
}

/// The context `handle` is gone (destroyed by `by`): its allocations were released with it.
fn gone(handle: u64, by: Entry) {
    let pooled = crate::serving::serve::context_destroyed(handle);
    let Some((_guard, t)) = super::track::active() else {
        return;
    };
    shield((), || {
        let Some(id) = t.contexts.destroy(handle, by) else {
            return;
        };
        let (count, bytes) = t.release_context(id, pooled);
        if count > 0 {
            event(
                t,
                Kind::ContextDestroyedWithLiveAllocations,
                handle,
                by,
                CUDA_SUCCESS,
                Some(bytes),
                id,
                Some(format!(
                    "{count} allocations ({bytes} bytes) released with the context"
                )),
            );
        }
    });
}

/// The live primary context of `device`, as the tracker knows it.
fn primary_handle(device: CUdevice) -> Option<u64> {
    let t = crate::tracker::if_any()?;
    shield(None, || t.contexts.live_primary(device).map(|(_, h)| h))
}

/// Whether the driver says `device`'s primary context is active.
fn primary_active(device: CUdevice) -> bool {
    let Some(f) = real::cuDevicePrimaryCtxGetState() else {
        return true;
    };
    let mut flags = 0u32;
    let mut active: c_int = 0;
    // SAFETY: valid out-parameters.
    let r = unsafe { f(device, &mut flags, &mut active) };
    r != CUDA_SUCCESS || active != 0
}

/// `cuCtxCreate` and `cuCtxCreate_v2`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuCtxCreate(
    _e: Entry,
    real: sig::cuCtxCreate,
    pctx: *mut CUcontext,
    flags: u32,
    dev: CUdevice,
) -> CUresult {
    let before = in_use_before(dev);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(pctx, flags, dev) };
    created(r, pctx, dev, false, before);
    r
}

/// `cuCtxCreate_v3`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuCtxCreate_v3(
    _e: Entry,
    real: sig::cuCtxCreate_v3,
    pctx: *mut CUcontext,
    params: Opaque,
    num_params: c_int,
    flags: u32,
    dev: CUdevice,
) -> CUresult {
    let before = in_use_before(dev);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(pctx, params, num_params, flags, dev) };
    created(r, pctx, dev, false, before);
    r
}

/// `cuCtxCreate_v4`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuCtxCreate_v4(
    _e: Entry,
    real: sig::cuCtxCreate_v4,
    pctx: *mut CUcontext,
    params: Opaque,
    flags: u32,
    dev: CUdevice,
) -> CUresult {
    let before = in_use_before(dev);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(pctx, params, flags, dev) };
    created(r, pctx, dev, false, before);
    r
}

/// `cuCtxDestroy` and `cuCtxDestroy_v2`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuCtxDestroy(e: Entry, real: sig::cuCtxDestroy, ctx: CUcontext) -> CUresult {
    let closing = Closing::new(Some(ctx as u64));
    crate::serving::serve::context_closing(ctx as u64);
    // SAFETY: the program's own argument, forwarded unchanged.
    let r = unsafe { real(ctx) };
    if r == CUDA_SUCCESS {
        gone(ctx as u64, e);
    }
    closing.end(r == CUDA_SUCCESS);
    r
}

/// A context that may go with the call in progress: the give-back thread leaves its chunks
/// alone until the call has ended and the pool knows whether it went ([`end`](Closing::end)),
/// since its addresses may belong to new allocations once it has.
struct Closing(Option<u64>);

impl Closing {
    fn new(ctx: Option<u64>) -> Closing {
        if let Some(c) = ctx {
            shield((), || crate::serving::giveback::closing(c));
        }
        Closing(ctx)
    }

    fn end(self, gone: bool) {
        if let Some(c) = self.0 {
            shield((), || crate::serving::giveback::closed(c, gone));
        }
    }
}

/// `cuDevicePrimaryCtxRetain`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuDevicePrimaryCtxRetain(
    _e: Entry,
    real: sig::cuDevicePrimaryCtxRetain,
    pctx: *mut CUcontext,
    dev: CUdevice,
) -> CUresult {
    // Only the first retain makes the primary context.
    let before = if primary_handle(dev).is_none() {
        in_use_before(dev)
    } else {
        None
    };
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(pctx, dev) };
    created(r, pctx, dev, true, before);
    r
}

/// `cuDevicePrimaryCtxRelease` and `_v2`: the last release destroys the primary context.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuDevicePrimaryCtxRelease(
    e: Entry,
    real: sig::cuDevicePrimaryCtxRelease,
    dev: CUdevice,
) -> CUresult {
    let handle = primary_handle(dev);
    let closing = Closing::new(handle);
    // SAFETY: the program's own argument, forwarded unchanged.
    let r = unsafe { real(dev) };
    let went = r == CUDA_SUCCESS && handle.is_some() && !primary_active(dev);
    if went && let Some(h) = handle {
        gone(h, e);
    }
    closing.end(went);
    r
}

/// `cuDevicePrimaryCtxReset` and `_v2`: destroys the primary context.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuDevicePrimaryCtxReset(
    e: Entry,
    real: sig::cuDevicePrimaryCtxReset,
    dev: CUdevice,
) -> CUresult {
    let handle = primary_handle(dev);
    let closing = Closing::new(handle);
    if let Some(h) = handle {
        crate::serving::serve::context_closing(h);
    }
    // SAFETY: the program's own argument, forwarded unchanged.
    let r = unsafe { real(dev) };
    if r == CUDA_SUCCESS
        && let Some(h) = handle
    {
        gone(h, e);
    }
    closing.end(r == CUDA_SUCCESS);
    r
}
