//! The hooks of virtual memory management: cuMemCreate, cuMemRelease, cuMemMap, cuMemUnmap,
//! cuMemAddressReserve and cuMemAddressFree (JAX/XLA allocates this way).

#![allow(non_snake_case)]

use super::track::{admit_untracked, current_tracked_context, event, record_alloc_failed};
use crate::driver::{Entry, sig};
use crate::ffi::*;
use crate::guard::shield;
use crate::process::clock;
use crate::tracker::events::Kind;
use crate::tracker::{Record, Tracker};
use cuguard_format::MemoryKind;

/// `cuMemCreate`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemCreate(
    e: Entry,
    real: sig::cuMemCreate,
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const MemAllocationPropHead,
    flags: u64,
) -> CUresult {
    let grant = match admit_untracked(e, size as u64, |t| prop_device(t, prop)) {
        Ok(g) => g,
        Err(r) => return r,
    };
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(handle, size, prop, flags) };
    let Some((_guard, t)) = super::track::active() else {
        if let Some(g) = grant {
            g.done();
        }
        return r;
    };
    shield((), || {
        if r != CUDA_SUCCESS {
            record_alloc_failed(t, e, size as u64, r, None);
            return;
        }
        let (context, _) = current_tracked_context(t);
        let device = prop_device(t, prop);
        if device >= 0 {
            t.contexts.note_device(device);
        }
        let record = Record {
            size: size as u64,
            requested: size as u64,
            api: e,
            memory: MemoryKind::Vmm,
            device,
            context,
            thread: clock::thread_id(),
            seq: t.next_seq(),
            time_ms: clock::since_start_ms(),
            stack: crate::tracker::capture_stack(),
            tag: crate::tracker::tags::current(),
        };
        // SAFETY: the call succeeded, so handle was valid and written.
        let handle = unsafe { *handle };
        // The history's moment before a new peak's record (see `Tracker::add`): at its handle
        // until it is mapped (`cuMemMap` moves it).
        record.history_allocated(handle, false);
        t.stats.allocated(&record);
        t.vmm.created(handle, record);
        crate::lifecycle::note_allocation();
    });
    if let Some(g) = grant {
        g.done();
    }
    r
}

/// The device a cuMemCreate's physical memory is on: its property's location when that is a
/// device, else the current context's.
fn prop_device(t: &Tracker, prop: *const MemAllocationPropHead) -> i32 {
    // SAFETY: prop is null or points to the program's property struct, which the driver's
    // contract requires to be valid for the call (before it and after it alike).
    match unsafe { prop.as_ref() } {
        Some(p) if p.location_type == CU_MEM_LOCATION_TYPE_DEVICE => p.location_id,
        _ => current_tracked_context(t).1,
    }
}

/// `cuMemRelease`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemRelease(
    e: Entry,
    real: sig::cuMemRelease,
    handle: CUmemGenericAllocationHandle,
) -> CUresult {
    // SAFETY: the program's own argument, forwarded unchanged.
    let r = unsafe { real(handle) };
    let Some((_guard, t)) = super::track::active() else {
        return r;
    };
    shield((), || {
        if r == CUDA_SUCCESS {
            let (gone, known) = t.vmm.released(handle);
            if let Some((at, rec)) = gone {
                t.stats.freed(&rec);
                rec.history_freed(at, crate::recorder::stamp());
            }
            t.freed.note(handle);
            if !known {
                let (ctx, _) = current_tracked_context(t);
                event(t, Kind::UntrackedFree, handle, e, r, None, ctx, None);
            }
        } else {
            let kind = if t.freed.contains(handle) {
                Kind::DoubleFree
            } else {
                Kind::InvalidFree
            };
            let (ctx, _) = current_tracked_context(t);
            event(t, kind, handle, e, r, None, ctx, None);
        }
    });
    r
}

/// `cuMemMap`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemMap(
    _e: Entry,
    real: sig::cuMemMap,
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ptr, size, offset, handle, flags) };
    if r == CUDA_SUCCESS
        && let Some((_guard, t)) = super::track::active()
    {
        shield((), || {
            // Its first mapping: the history knows it at this address from now on.
            if let Some(rec) = t.vmm.mapped(ptr, size as u64, handle) {
                rec.history_freed(handle, crate::recorder::stamp());
                rec.history_allocated(ptr, false);
            }
        });
    }
    r
}

/// `cuMemUnmap`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemUnmap(
    _e: Entry,
    real: sig::cuMemUnmap,
    ptr: CUdeviceptr,
    size: usize,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ptr, size) };
    if r == CUDA_SUCCESS
        && let Some((_guard, t)) = super::track::active()
    {
        shield((), || {
            for (at, rec) in t.vmm.unmapped(ptr, size as u64) {
                t.stats.freed(&rec);
                rec.history_freed(at, crate::recorder::stamp());
            }
        });
    }
    r
}

/// `cuMemAddressReserve`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemAddressReserve(
    _e: Entry,
    real: sig::cuMemAddressReserve,
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ptr, size, alignment, addr, flags) };
    if r == CUDA_SUCCESS
        && !ptr.is_null()
        && let Some((_guard, t)) = super::track::active()
    {
        // SAFETY: the call succeeded, so ptr was valid and written.
        let at = unsafe { *ptr };
        shield((), || t.vmm.reserved(at, size as u64));
    }
    r
}

/// `cuMemAddressFree`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemAddressFree(
    _e: Entry,
    real: sig::cuMemAddressFree,
    ptr: CUdeviceptr,
    size: usize,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ptr, size) };
    if r == CUDA_SUCCESS
        && let Some((_guard, t)) = super::track::active()
    {
        shield((), || t.vmm.unreserved(ptr));
    }
    r
}
