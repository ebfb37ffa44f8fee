//! Virtual memory management: cuMemCreate, cuMemRelease, cuMemMap, cuMemUnmap,
//! cuMemAddressReserve and cuMemAddressFree (JAX/XLA allocates this way).

#![allow(non_snake_case)]

use super::{current_context, event, real_or, record_alloc_failed};
use crate::callsite;
use crate::clock;
use crate::driver::Entry;
use crate::ffi::*;
use crate::guard::shield;
use crate::state;
use crate::tracker::events::Kind;
use crate::tracker::{Memory, Record};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const MemAllocationPropHead,
    flags: u64,
) -> CUresult {
    let real = real_or!(cuMemCreate, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(handle, size, prop, flags) };
    let Some((_guard, t)) = state::active() else {
        return r;
    };
    shield((), || {
        if r != CUDA_SUCCESS {
            record_alloc_failed(t, Entry::cuMemCreate, size as u64, r, None);
            return;
        }
        let (context, current_device) = current_context(t);
        // SAFETY: the call succeeded, so prop pointed to a valid property struct.
        let device = match unsafe { prop.as_ref() } {
            Some(p) if p.location_type == CU_MEM_LOCATION_TYPE_DEVICE => p.location_id,
            _ => current_device,
        };
        if device >= 0 {
            t.contexts.note_device(device);
        }
        let record = Record {
            size: size as u64,
            requested: size as u64,
            api: Entry::cuMemCreate,
            memory: Memory::Vmm,
            device,
            context,
            thread: clock::thread_id(),
            seq: t.next_seq(),
            time_ms: clock::since_start_ms(),
            stack: callsite::capture(),
        };
        t.stats.allocated(device, Memory::Vmm, size as u64);
        // SAFETY: the call succeeded, so handle was valid and written.
        t.vmm.created(unsafe { *handle }, record);
        crate::lifecycle::note_allocation();
    });
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    let real = real_or!(cuMemRelease, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own argument, forwarded unchanged.
    let r = unsafe { real(handle) };
    let Some((_guard, t)) = state::active() else {
        return r;
    };
    shield((), || {
        if r == CUDA_SUCCESS {
            let (gone, known) = t.vmm.released(handle);
            if let Some(rec) = gone {
                t.stats.freed(rec.device, rec.memory, rec.size);
            }
            t.freed.note(handle);
            if !known {
                let (ctx, _) = current_context(t);
                event(
                    t,
                    Kind::UntrackedFree,
                    handle,
                    Entry::cuMemRelease,
                    r,
                    None,
                    ctx,
                    None,
                );
            }
        } else {
            let kind = if t.freed.contains(handle) {
                Kind::DoubleFree
            } else {
                Kind::InvalidFree
            };
            let (ctx, _) = current_context(t);
            event(t, kind, handle, Entry::cuMemRelease, r, None, ctx, None);
        }
    });
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    let real = real_or!(cuMemMap, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ptr, size, offset, handle, flags) };
    if r == CUDA_SUCCESS {
        if let Some((_guard, t)) = state::active() {
            shield((), || t.vmm.mapped(ptr, size as u64, handle));
        }
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    let real = real_or!(cuMemUnmap, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ptr, size) };
    if r == CUDA_SUCCESS {
        if let Some((_guard, t)) = state::active() {
            shield((), || {
                for rec in t.vmm.unmapped(ptr, size as u64) {
                    t.stats.freed(rec.device, rec.memory, rec.size);
                }
            });
        }
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    let real = real_or!(cuMemAddressReserve, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ptr, size, alignment, addr, flags) };
    if r == CUDA_SUCCESS && !ptr.is_null() {
        if let Some((_guard, t)) = state::active() {
            // SAFETY: the call succeeded, so ptr was valid and written.
            let at = unsafe { *ptr };
            shield((), || t.vmm.reserved(at, size as u64));
        }
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    let real = real_or!(cuMemAddressFree, CUDA_ERROR_NOT_INITIALIZED);
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(ptr, size) };
    if r == CUDA_SUCCESS {
        if let Some((_guard, t)) = state::active() {
            shield((), || t.vmm.unreserved(ptr));
        }
    }
    r
}
