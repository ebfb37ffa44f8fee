//! The steps every handler shares: the entry to tracking ([`active`]), the current context, an
//! allocation recorded ([`record_alloc`]) or refused ([`record_alloc_failed`]), the limit's
//! admission ([`admit`]), an event, and a free accounted for ([`free_tracked`]).

use crate::driver::{Entry, real};
use crate::ffi::*;
use crate::guard::Guard;
use crate::process::local::Local;
use crate::process::{clock, cost};
use crate::serving::serve::PoolLookup;
use crate::tracker::events::{Event, Kind};
use crate::tracker::limit::{self, Grant};
use crate::tracker::{NONE, Record, Tracker};
use cuguard_format::MemoryKind;

/// Entry to tracking for a handler: the re-entry guard and the tracker, or `None` when the handler
/// should only forward (the phase does not track, or this thread is already inside the shim).
/// Creating the tracker is the shim's first use in the process ([`crate::lifecycle::first_use`]).
#[inline]
pub fn active() -> Option<(Guard, &'static Tracker)> {
    if crate::config::get().no_tracking || !crate::phase::tracking() {
        return None;
    }
    let g = Guard::enter()?;
    Some((
        g,
        crate::tracker::get_or_create(crate::lifecycle::first_use),
    ))
}

/// The current context's (id, device) as the tracker knows it, registering a context the shim
/// has not seen yet.
pub fn current_tracked_context(t: &Tracker) -> (u32, i32) {
    context_of(t, crate::driver::current_context())
}

/// The (id, device) of context `cur` (the current one, already asked of the driver).
#[inline]
pub fn context_of(t: &Tracker, cur: Option<u64>) -> (u32, i32) {
    context_of_in(t, crate::process::local::get(), cur)
}

/// [`context_of`] on the thread whose words `l` are (already looked up: `process::local`).
#[inline(always)]
pub fn context_of_in(t: &Tracker, l: Option<&Local>, cur: Option<u64>) -> (u32, i32) {
    let Some(handle) = cur else {
        return (NONE, -1);
    };
    if let Some(found) = t.contexts.lookup_in(l, handle) {
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
#[inline]
pub fn make_record(
    t: &Tracker,
    cur: Option<u64>,
    api: Entry,
    memory: MemoryKind,
    size: u64,
    requested: u64,
) -> Record {
    make_record_in(
        t,
        crate::process::local::get(),
        cur,
        api,
        memory,
        size,
        requested,
    )
}

/// [`make_record`] on the thread whose words `l` are (already looked up, by the hook's guard:
/// `process::local`), so that making it looks up no thread-local of its own.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn make_record_in(
    t: &Tracker,
    l: Option<&'static Local>,
    cur: Option<u64>,
    api: Entry,
    memory: MemoryKind,
    size: u64,
    requested: u64,
) -> Record {
    // Timed for the report's `cost`; the accounting once served resumes it (`cost::resume`).
    let span = cost::begin_in(l, cost::Metric::Hooks);
    let (context, device) = context_of_in(t, l, cur);
    let record = Record {
        size,
        requested,
        api,
        memory,
        device,
        context,
        thread: clock::thread_id_in(l),
        seq: t.next_seq(),
        time_ms: clock::since_start_ms(),
        stack: crate::tracker::capture_stack(),
        tag: crate::tracker::tags::current_in(l),
    };
    span.pause();
    record
}

/// Records an allocation the driver just made at `addr` in context `cur`, by a call that takes
/// no stream.
pub fn record_alloc(
    t: &Tracker,
    cur: Option<u64>,
    api: Entry,
    memory: MemoryKind,
    addr: u64,
    size: u64,
    requested: u64,
) {
    record_alloc_on(t, cur, api, memory, addr, size, requested, 0);
}

/// [`record_alloc`] of a stream-ordered allocation, made on `stream` (the history's key of it:
/// see [`crate::recorder::allocated_at`]).
#[allow(clippy::too_many_arguments)]
pub fn record_alloc_on(
    t: &Tracker,
    cur: Option<u64>,
    api: Entry,
    memory: MemoryKind,
    addr: u64,
    size: u64,
    requested: u64,
    stream: u64,
) {
    let record = make_record(t, cur, api, memory, size, requested);
    let _span = cost::resume();
    t.add(addr, record, stream);
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
    let (context, device) = current_tracked_context(t);
    let stack = crate::tracker::capture_stack();
    let seq = t.next_seq();
    if result == CUDA_ERROR_OUT_OF_MEMORY {
        super::oom::refused(t, api, size, device, stack, seq, why.as_deref());
    }
    t.events.push(Event {
        kind: Kind::AllocFailed,
        address: 0,
        api: Some(api),
        seq,
        thread: clock::thread_id(),
        stack,
        result: Some(result),
        size: Some(size),
        context,
        time_ms: clock::moment_ms(),
        message: why,
        device: None,
    });
}

/// Asks the process's limit ([`crate::tracker::limit`]) to let an allocation of `size` bytes on
/// `device` through. Refused, the allocation is recorded as refused for lack of memory (an OOM
/// record whose reason names `CUGUARD_LIMIT`) and `Err` carries what the program gets,
/// `CUDA_ERROR_OUT_OF_MEMORY`, as the driver would answer.
pub fn admit(t: &Tracker, api: Entry, device: i32, size: u64) -> Result<Grant, CUresult> {
    match crate::guard::shield(Ok(Grant::none()), || limit::admit(device, size)) {
        Ok(grant) => Ok(grant),
        Err(refused) => {
            crate::guard::shield((), || {
                record_alloc_failed(
                    t,
                    api,
                    size,
                    CUDA_ERROR_OUT_OF_MEMORY,
                    Some(refused.reason()),
                );
            });
            Err(CUDA_ERROR_OUT_OF_MEMORY)
        }
    }
}

/// [`admit`] for an entry that forwards before it tracks (async, managed, VMM): nothing, with
/// no limit set or when this call is not tracked; else the grant, the device found by `device`
/// under the handler's guard (dropped again before the forward).
pub fn admit_untracked(
    api: Entry,
    size: u64,
    device: impl FnOnce(&Tracker) -> i32,
) -> Result<Option<Grant>, CUresult> {
    if !limit::on() {
        return Ok(None);
    }
    let Some((_guard, t)) = active() else {
        return Ok(None);
    };
    let device = crate::guard::shield(-1, || device(t));
    admit(t, api, device, size).map(Some)
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
        api: Some(api),
        seq: t.next_seq(),
        thread: clock::thread_id(),
        stack: crate::tracker::capture_stack(),
        result: Some(result),
        size,
        context,
        time_ms: clock::moment_ms(),
        message,
        device: None,
    });
}

/// Frees `addr` and accounts for it, for a free that takes no stream. A pooled block is freed
/// by `pool` (which hands back its record, taken out under the pool's lock together with the
/// block); anything else by `free` (the driver), with the record taken out before the free, so
/// that an address the driver hands out again at once is never confused with the old one, and
/// put back if the free is refused.
#[inline]
pub fn free_tracked(
    api: Entry,
    addr: u64,
    cur: Option<u64>,
    pool: impl FnOnce() -> Option<(CUresult, Option<Record>)>,
    free: impl FnOnce() -> CUresult,
) -> CUresult {
    free_tracked_on(api, addr, cur, 0, pool, free)
}

/// [`free_tracked`] of a stream-ordered free, on `stream` (the history's key of it: see
/// [`crate::recorder::freed`]).
#[inline]
pub fn free_tracked_on(
    api: Entry,
    addr: u64,
    cur: Option<u64>,
    stream: u64,
    pool: impl FnOnce() -> Option<(CUresult, Option<Record>)>,
    free: impl FnOnce() -> CUresult,
) -> CUresult {
    let Some((_guard, t)) = active() else {
        // Untracked: a branch of its own, so that every thread-local look-up of the tracked one
        // below is made after the guard's, and shares it (`crate::process::local`).
        return match pool() {
            Some((result, _)) => result,
            None => free(),
        };
    };
    // The history's moment of the free, before the memory can go to another allocation.
    let tsc = crate::recorder::stamp();
    if let Some((result, record)) = pool() {
        if addr != 0 {
            crate::guard::shield((), || {
                account_free(t, api, addr, cur, record, result, true, tsc, stream)
            });
        }
        return result;
    }
    if addr == 0 {
        return free();
    }
    let taken = crate::guard::shield(None, || t.take(addr));
    let result = free();
    crate::guard::shield((), || {
        account_free(t, api, addr, cur, taken, result, false, tsc, stream)
    });
    result
}

/// Accounts for a free: the common case (a live allocation freed, in its own context) inline,
/// in the hook (whose thread-local look-up it shares), everything else out of line.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn account_free(
    t: &Tracker,
    api: Entry,
    addr: u64,
    cur: Option<u64>,
    taken: Option<Record>,
    result: CUresult,
    pooled: bool,
    tsc: u64,
    stream: u64,
) {
    if let (Some(record), CUDA_SUCCESS) = (taken, result) {
        t.freed(addr, &record, tsc, stream, pooled);
        let (now, _) = context_of(t, cur);
        if record.context != NONE && now != NONE && now != record.context {
            freed_elsewhere(t, api, addr, &record, now);
        }
        return;
    }
    account_other_free(t, api, addr, cur, taken, result, pooled);
}

/// A live allocation freed in another context than its own: the event that says so.
#[cold]
#[inline(never)]
fn freed_elsewhere(t: &Tracker, api: Entry, addr: u64, record: &Record, now: u32) {
    event(
        t,
        Kind::FreeInWrongContext,
        addr,
        api,
        CUDA_SUCCESS,
        Some(record.size),
        now,
        Some(format!(
            "allocated in context {}, freed in context {now}",
            record.context
        )),
    );
}

/// [`account_free`] of every free but a live allocation's that succeeded: refusals, frees of
/// what the shim does not know.
#[cold]
#[inline(never)]
fn account_other_free(
    t: &Tracker,
    api: Entry,
    addr: u64,
    cur: Option<u64>,
    taken: Option<Record>,
    result: CUresult,
    pooled: bool,
) {
    match (taken, result) {
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
                && matches!(crate::serving::serve::lookup(addr), PoolLookup::Block { start, .. } if start == addr) =>
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
