//! cuMemAlloc, cuMemAllocPitch, cuMemFree and cuMemAllocManaged.
//!
//! cuMemAlloc_v2, cuMemAllocPitch_v2 and cuMemFree_v2 go through [`crate::serving::serve`], which is
//! where the pool stands behind them; the hooks themselves only track. The record of a new
//! allocation is made before it is served, so that a pooled block gets its record under the
//! same lock as the block itself. Each asks the process's limit first
//! ([`super::admit`]): a refused allocation reaches neither the pool nor the driver.

#![allow(non_snake_case)]

use super::track::{
    admit_untracked, current_tracked_context, free_tracked, make_record_in, record_alloc,
    record_alloc_failed,
};
use crate::driver::{Entry, sig};
use crate::ffi::*;
use crate::guard::shield;
use crate::process::local::Local;
use crate::serving::serve;
use crate::tracker::limit::{self, Grant};
use crate::tracker::{Record, Tracker};
use cuguard_format::MemoryKind;

/// Makes the record of an allocation about to be served, when tracking is on. Inline, with
/// [`served`], in the hooks: the thread-local look-ups of the guard, the record and the
/// accounting are then one: `l`, the thread's words, as the guard looked them up.
#[inline(always)]
fn prepare(
    t: Option<&Tracker>,
    l: Option<&'static Local>,
    cur: Option<u64>,
    api: Entry,
    memory: MemoryKind,
    size: u64,
    requested: u64,
) -> Option<Record> {
    let t = t?;
    shield(None, || {
        Some(make_record_in(t, l, cur, api, memory, size, requested))
    })
}

/// Accounts for the outcome of a served allocation: a pooled block already holds its record;
/// a driver allocation is recorded now. `l`: the thread's words, as the guard looked them up.
#[inline(always)]
fn served(
    t: Option<&Tracker>,
    l: Option<&'static Local>,
    s: &serve::Served,
    dptr: *mut CUdeviceptr,
    record: Option<Record>,
    api: Entry,
) {
    let Some(t) = t else { return };
    let _span = l.map_or_else(
        crate::process::cost::resume,
        crate::process::cost::resume_in,
    );
    shield((), || {
        if s.result != CUDA_SUCCESS {
            let size = record.map_or(0, |r| r.requested);
            record_alloc_failed(t, api, size, s.result, serve::take_failure_reason());
            return;
        }
        // SAFETY: the call succeeded, so dptr was valid and written.
        let addr = if dptr.is_null() { 0 } else { unsafe { *dptr } };
        let Some(record) = record.filter(|_| addr != 0) else {
            return;
        };
        if s.pooled {
            // A block from the thread's own cache was freed before this call began: the
            // record's order key (taken then) is its moment, and no second clock read is due.
            // (Both are the time-stamp counter on x86_64; elsewhere they are two counters.)
            // The history's moment before a new peak's record (see `Tracker::add`).
            let tsc = (s.cached && cfg!(target_arch = "x86_64")).then_some(record.seq);
            record.history_allocated_at(tsc, addr, true, 0);
            t.stats.allocated_from_in(l, &record, true);
        } else {
            t.add(addr, record, 0);
        }
        crate::lifecycle::note_allocation();
    });
}

/// The limit's grant for an allocation about to be served on `record`'s device: nothing to hold
/// when untracked or when cuguard's pool serves it (the pool asks the limit for the chunks it
/// takes: see [`crate::tracker::limit`]), `Err` with what the program gets when the limit
/// refuses.
fn limited(
    t: Option<&Tracker>,
    record: Option<&Record>,
    api: Entry,
    size: u64,
    cur: Option<u64>,
) -> Result<Grant, CUresult> {
    match (t, record) {
        // One load of a flag when no limit is set.
        (Some(t), Some(r)) if limit::on() && !serve::pool_serves(cur) => {
            super::track::admit(t, api, r.device, size)
        }
        _ => Ok(Grant::none()),
    }
}

/// `cuMemAlloc_v2`, served by [`serve::device_alloc`]. Inlined into the two doors that call it
/// (the export and the function handed out): no frame of its own for the call, nor for a
/// capture to unwind through and skip.
///
/// # Safety
/// The program's arguments, under the driver's contract.
#[inline(always)]
pub unsafe fn cuMemAlloc_v2(
    e: Entry,
    real: sig::cuMemAlloc_v2,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
) -> CUresult {
    let cur = crate::driver::current_context();
    let Some((guard, t)) = super::track::active() else {
        // Untracked: no record, no limit to ask (see `limited`), nothing to account for. A
        // branch of its own, so that every thread-local look-up of the tracked one below is
        // made after the guard's, and shares it (`crate::process::local`).
        return serve::device_alloc(cur, dptr, bytesize, real, None).result;
    };
    let (t, l) = (Some(t), Some(guard.local()));
    let size = bytesize as u64;
    let record = prepare(t, l, cur, e, MemoryKind::Device, size, size);
    let grant = match limited(t, record.as_ref(), e, size, cur) {
        Ok(g) => g,
        Err(r) => return r,
    };
    let s = serve::device_alloc(cur, dptr, bytesize, real, record);
    served(t, l, &s, dptr, record, e);
    grant.done();
    s.result
}

/// `cuMemAllocPitch_v2`, served by [`serve::pitch_alloc`].
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemAllocPitch_v2(
    e: Entry,
    real: sig::cuMemAllocPitch_v2,
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element_size: u32,
) -> CUresult {
    let cur = crate::driver::current_context();
    let active = super::track::active();
    let t = active.as_ref().map(|(_, t)| *t);
    let l = active.as_ref().map(|(g, _)| g.local());
    let requested = (width as u64).saturating_mul(height as u64);
    let record = prepare(t, l, cur, e, MemoryKind::Pitched, requested, requested);
    // The limit is asked for the bytes requested; the pitch's padding is charged once known.
    let grant = match limited(t, record.as_ref(), e, requested, cur) {
        Ok(g) => g,
        Err(r) => return r,
    };
    let s = serve::pitch_alloc(cur, dptr, pitch, width, height, element_size, real, record);
    // The size the program received is pitch × height, known now.
    let record = record.map(|mut r| {
        if s.result == CUDA_SUCCESS && !pitch.is_null() {
            // SAFETY: on success the pitch was written through a valid pointer.
            r.size = (unsafe { *pitch } as u64).saturating_mul(height as u64);
        }
        r
    });
    served(t, l, &s, dptr, record, e);
    grant.done();
    s.result
}

/// `cuMemAllocManaged`: forwarded, then tracked.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemAllocManaged(
    e: Entry,
    real: sig::cuMemAllocManaged,
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: u32,
) -> CUresult {
    let grant = match admit_untracked(e, bytesize as u64, |t| current_tracked_context(t).1) {
        Ok(g) => g,
        Err(r) => return r,
    };
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(dptr, bytesize, flags) };
    let Some((_guard, t)) = super::track::active() else {
        if let Some(g) = grant {
            g.done();
        }
        return r;
    };
    shield((), || {
        let size = bytesize as u64;
        if r == CUDA_SUCCESS {
            // SAFETY: the call succeeded, so dptr was valid and written.
            let addr = if dptr.is_null() { 0 } else { unsafe { *dptr } };
            if addr != 0 {
                let cur = crate::driver::current_context();
                record_alloc(t, cur, e, MemoryKind::Managed, addr, size, size);
            }
        } else {
            record_alloc_failed(t, e, size, r, None);
        }
    });
    if let Some(g) = grant {
        g.done();
    }
    r
}

/// `cuMemFree_v2`: the pool's block back to the pool, anything else to the driver. Inlined into
/// its two doors, as [`cuMemAlloc_v2`] is.
///
/// # Safety
/// The program's arguments, under the driver's contract.
#[inline(always)]
pub unsafe fn cuMemFree_v2(e: Entry, real: sig::cuMemFree_v2, dptr: CUdeviceptr) -> CUresult {
    let cur = crate::driver::current_context();
    free_tracked(
        e,
        dptr,
        cur,
        || serve::pool_free(cur, dptr),
        // SAFETY: the program's own argument, forwarded unchanged.
        || unsafe { real(dptr) },
    )
}
