//! The exported driver entries the shim stands in for, one module per API family, and the
//! shared steps every hook takes: find the current context, record an allocation, account for
//! a free.
//!
//! Each hook is thin: forward to the real driver (or to the pool, for cuMemAlloc/cuMemFree),
//! then tell the tracker under a [`crate::guard::Guard`] and [`crate::guard::shield`]. The
//! driver's result is always what the program gets.

pub mod context;
pub mod host;
pub mod memory;
pub mod query;
pub mod stream_ordered;
pub mod streams;
pub mod submit;
pub mod vmm;

use std::ffi::c_void;

use crate::callsite;
use crate::clock;
use crate::driver::{Entry, real};
use crate::ffi::*;
use crate::tracker::events::{Event, Kind};
use crate::tracker::{Memory, NONE, Record, Tracker};

/// Our stand-in for a real driver entry, if the shim hooks it.
pub fn hook_for(entry: Entry) -> Option<*mut c_void> {
    use Entry::*;
    let p: *const () = match entry {
        cuMemAlloc_v2 => memory::cuMemAlloc_v2 as *const (),
        cuMemAllocPitch_v2 => memory::cuMemAllocPitch_v2 as *const (),
        cuMemFree_v2 => memory::cuMemFree_v2 as *const (),
        cuMemAllocManaged => memory::cuMemAllocManaged as *const (),
        cuMemAllocHost_v2 => host::cuMemAllocHost_v2 as *const (),
        cuMemHostAlloc => host::cuMemHostAlloc as *const (),
        cuMemFreeHost => host::cuMemFreeHost as *const (),
        cuMemAllocAsync => stream_ordered::cuMemAllocAsync as *const (),
        cuMemAllocAsync_ptsz => stream_ordered::cuMemAllocAsync_ptsz as *const (),
        cuMemAllocFromPoolAsync => stream_ordered::cuMemAllocFromPoolAsync as *const (),
        cuMemAllocFromPoolAsync_ptsz => stream_ordered::cuMemAllocFromPoolAsync_ptsz as *const (),
        cuMemFreeAsync => stream_ordered::cuMemFreeAsync as *const (),
        cuMemFreeAsync_ptsz => stream_ordered::cuMemFreeAsync_ptsz as *const (),
        cuMemCreate => vmm::cuMemCreate as *const (),
        cuMemRelease => vmm::cuMemRelease as *const (),
        cuMemMap => vmm::cuMemMap as *const (),
        cuMemUnmap => vmm::cuMemUnmap as *const (),
        cuMemAddressReserve => vmm::cuMemAddressReserve as *const (),
        cuMemAddressFree => vmm::cuMemAddressFree as *const (),
        cuCtxCreate => context::cuCtxCreate as *const (),
        cuCtxCreate_v2 => context::cuCtxCreate_v2 as *const (),
        cuCtxCreate_v3 => context::cuCtxCreate_v3 as *const (),
        cuCtxCreate_v4 => context::cuCtxCreate_v4 as *const (),
        cuCtxDestroy => context::cuCtxDestroy as *const (),
        cuCtxDestroy_v2 => context::cuCtxDestroy_v2 as *const (),
        cuDevicePrimaryCtxRetain => context::cuDevicePrimaryCtxRetain as *const (),
        cuDevicePrimaryCtxRelease => context::cuDevicePrimaryCtxRelease as *const (),
        cuDevicePrimaryCtxRelease_v2 => context::cuDevicePrimaryCtxRelease_v2 as *const (),
        cuDevicePrimaryCtxReset => context::cuDevicePrimaryCtxReset as *const (),
        cuDevicePrimaryCtxReset_v2 => context::cuDevicePrimaryCtxReset_v2 as *const (),
        cuStreamCreate => streams::cuStreamCreate as *const (),
        cuStreamCreateWithPriority => streams::cuStreamCreateWithPriority as *const (),
        cuGreenCtxStreamCreate => streams::cuGreenCtxStreamCreate as *const (),
        cuStreamDestroy => streams::cuStreamDestroy as *const (),
        cuStreamDestroy_v2 => streams::cuStreamDestroy_v2 as *const (),
        cuStreamBeginCapture => streams::cuStreamBeginCapture as *const (),
        cuStreamBeginCapture_v2 => streams::cuStreamBeginCapture_v2 as *const (),
        cuStreamBeginCapture_v2_ptsz => streams::cuStreamBeginCapture_v2_ptsz as *const (),
        cuStreamBeginCaptureToGraph => streams::cuStreamBeginCaptureToGraph as *const (),
        cuStreamBeginCaptureToGraph_ptsz => streams::cuStreamBeginCaptureToGraph_ptsz as *const (),
        cuStreamEndCapture => streams::cuStreamEndCapture as *const (),
        cuStreamEndCapture_ptsz => streams::cuStreamEndCapture_ptsz as *const (),
        cuMemGetAddressRange_v2 => query::cuMemGetAddressRange_v2 as *const (),
        cuPointerGetAttribute => query::cuPointerGetAttribute as *const (),
        cuPointerGetAttributes => query::cuPointerGetAttributes as *const (),
        cuMemGetInfo_v2 => query::cuMemGetInfo_v2 as *const (),
        cuIpcGetMemHandle => query::cuIpcGetMemHandle as *const (),
        cuGetProcAddress => crate::doors::procaddr::cuGetProcAddress as *const (),
        cuGetProcAddress_v2 => crate::doors::procaddr::cuGetProcAddress_v2 as *const (),
        _ => return None,
    };
    Some(p as *mut c_void)
}

/// Whether `p` is one of the shim's own hooks.
pub fn is_own_export(p: *mut c_void) -> bool {
    crate::driver::Entry::ALL
        .iter()
        .any(|e| hook_for(*e) == Some(p))
}

/// Returns `$fallback` from the enclosing hook when the real entry is missing (the driver is
/// not loaded or lacks it), else the typed real function.
macro_rules! real_or {
    ($entry:ident, $fallback:expr) => {
        match $crate::driver::real::$entry() {
            Some(f) => f,
            None => {
                $crate::hooks::missing(stringify!($entry));
                return $fallback;
            }
        }
    };
}
pub(crate) use real_or;

/// Says once that a hooked entry could not be forwarded.
pub fn missing(name: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    crate::diag::warn_once(
        &SAID,
        &format!(
            "the real driver's {name} could not be found; calls to it fail with CUDA_ERROR_NOT_INITIALIZED"
        ),
    );
}

/// The current context's (id, device), registering a context the shim has not seen yet.
pub fn current_context(t: &Tracker) -> (u32, i32) {
    context_of(t, crate::driver::current_context())
}

/// The (id, device) of context `cur` (the current one, already asked of the driver).
pub fn context_of(t: &Tracker, cur: Option<u64>) -> (u32, i32) {
    let Some(handle) = cur else {
        return (NONE, -1);
    };
    if let Some(found) = t.contexts.lookup(handle) {
        return found;
    }
    // A context made through no door the shim watches (or before tracking began). A handle the
    // driver no longer knows (current after a reset) is not a context.
    let mut device: CUdevice = -1;
    let known = real::cuCtxGetDevice().is_some_and(|f| {
        // SAFETY: device is a valid out-parameter.
        unsafe { f(&mut device) == CUDA_SUCCESS }
    });
    if !known || device < 0 {
        return (NONE, -1);
    }
    (t.contexts.register(handle, device, false, NONE), device)
}

/// The record of an allocation being made now in context `cur`; the address is the caller's.
pub fn make_record(
    t: &Tracker,
    cur: Option<u64>,
    api: Entry,
    memory: Memory,
    size: u64,
    requested: u64,
) -> Record {
    let (context, device) = context_of(t, cur);
    Record {
        size,
        requested,
        api,
        memory,
        device,
        context,
        thread: clock::thread_id(),
        seq: t.next_seq(),
        time_ms: clock::since_start_ms(),
        stack: callsite::capture(),
    }
}

/// Records an allocation the driver just made at `addr` in context `cur`.
pub fn record_alloc(
    t: &Tracker,
    cur: Option<u64>,
    api: Entry,
    memory: Memory,
    addr: u64,
    size: u64,
    requested: u64,
) {
    let record = make_record(t, cur, api, memory, size, requested);
    t.add(addr, record);
    crate::lifecycle::note_allocation();
}

/// Records a refused allocation.
pub fn record_alloc_failed(
    t: &Tracker,
    api: Entry,
    size: u64,
    result: CUresult,
    why: Option<String>,
) {
    let (context, _) = current_context(t);
    event(
        t,
        Kind::AllocFailed,
        0,
        api,
        result,
        Some(size),
        context,
        why,
    );
}

/// Records an event.
#[allow(clippy::too_many_arguments)]
pub fn event(
    t: &Tracker,
    kind: Kind,
    address: u64,
    api: Entry,
    result: CUresult,
    size: Option<u64>,
    context: u32,
    message: Option<String>,
) {
    t.events.push(Event {
        kind,
        address,
        api,
        seq: t.next_seq(),
        thread: clock::thread_id(),
        stack: callsite::capture(),
        result,
        size,
        context,
        time_ms: clock::since_start_ms(),
        message,
    });
}

/// Frees `addr` and accounts for it. A pooled block is freed by `pool` (which hands back its
/// record, taken out under the pool's lock together with the block); anything else by `free`
/// (the driver), with the record taken out before the free, so that an address the driver
/// hands out again at once is never confused with the old one, and put back if the free is
/// refused.
pub fn free_tracked(
    api: Entry,
    addr: u64,
    cur: Option<u64>,
    pool: impl FnOnce() -> Option<(CUresult, Option<Record>)>,
    free: impl FnOnce() -> CUresult,
) -> CUresult {
    let active = crate::state::active();
    if let Some((result, record)) = pool() {
        if let Some((_guard, t)) = active {
            if addr != 0 {
                crate::guard::shield((), || account_free(t, api, addr, cur, record, result, true));
            }
        }
        return result;
    }
    let Some((_guard, t)) = active else {
        return free();
    };
    if addr == 0 {
        return free();
    }
    let taken = crate::guard::shield(None, || t.take(addr));
    let result = free();
    crate::guard::shield((), || account_free(t, api, addr, cur, taken, result, false));
    result
}

fn account_free(
    t: &Tracker,
    api: Entry,
    addr: u64,
    cur: Option<u64>,
    taken: Option<Record>,
    result: CUresult,
    pooled: bool,
) {
    match (taken, result) {
        (Some(record), CUDA_SUCCESS) => {
            t.freed(addr, &record);
            let (now, _) = context_of(t, cur);
            if record.context != NONE && now != NONE && now != record.context {
                event(
                    t,
                    Kind::FreeInWrongContext,
                    addr,
                    api,
                    result,
                    Some(record.size),
                    now,
                    Some(format!(
                        "allocated in context {}, freed in context {now}",
                        record.context
                    )),
                );
            }
        }
        (Some(record), _) => {
            // A live allocation the driver would not free this way (pinned host memory passed to
            // cuMemFree, device memory to cuMemFreeHost, memory of a dead context): still live.
            if !pooled {
                t.restore(addr, record);
            }
            let (ctx, _) = context_of(t, cur);
            event(
                t,
                Kind::InvalidFree,
                addr,
                api,
                result,
                Some(record.size),
                ctx,
                Some(format!(
                    "{} refused to free a live {} allocation made by {}",
                    api.name(),
                    record.memory.as_str(),
                    record.api.name()
                )),
            );
        }
        (None, CUDA_SUCCESS) => {
            let (ctx, _) = context_of(t, cur);
            event(t, Kind::UntrackedFree, addr, api, result, None, ctx, None);
        }
        (None, _)
            if !pooled
                && matches!(crate::serve::pooled_range(addr), Some(Some((start, _))) if start == addr) =>
        {
            // A live pooled block passed to a free of another family (cuMemFreeHost, say).
            let (ctx, _) = context_of(t, cur);
            let message = format!(
                "{} refused to free a live pooled device allocation",
                api.name()
            );
            event(
                t,
                Kind::InvalidFree,
                addr,
                api,
                result,
                None,
                ctx,
                Some(message),
            );
        }
        (None, _) => {
            let kind = if t.was_released(addr) {
                Kind::FreeAfterContextDestroy
            } else if t.freed.contains(addr) {
                Kind::DoubleFree
            } else {
                Kind::InvalidFree
            };
            let (ctx, _) = context_of(t, cur);
            event(t, kind, addr, api, result, None, ctx, None);
        }
    }
}
