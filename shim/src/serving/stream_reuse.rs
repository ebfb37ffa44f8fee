//! Stream-aware reuse: a freed pool block whose pending work was all issued on one stream S is
//! reusable at once, and until that work is known complete, every submission on any *other*
//! stream first waits for it (an event recorded on S, waited for with `cuStreamWaitEvent`).
//! The rule and why it is safe are `cuguard_pool`'s `reuse.rs` ("Stream-aware reuse"); this is
//! the shim's half: the *guard* the pool arms at such a free ([`arm`]), and what the hooks do
//! while one is armed ([`before`], [`drain`]).
//!
//! # The guard
//!
//! At most one guard exists at a time, for one context C and one stream key S (keys are
//! [`super::submissions`]'s). Each free that arms it gets a new *epoch* (process-wide, never reused),
//! and raises the guard's mark (the count its pending work is under). While a guard exists:
//!
//! - A submission on a stream T ≠ S (any context, any thread) first makes T wait for an event
//!   recorded on S after the latest arming free ([`before`]): once per epoch per stream (the
//!   guard remembers, per stream key, the epoch T last waited for; the thread remembers its
//!   last `(key, epoch)`, so a repeat costs no lock). The event is recorded lazily, on the first
//!   such submission after an arming, with C made current for it; an event recorded later on S
//!   covers more of S's work, never less. A per-thread default stream can be named only from
//!   its own thread, so for such an S the event is recorded at the arming free instead (and a
//!   free on another thread's per-thread stream does not arm).
//! - When that event has completed, S's work up to every arming free is done: the guard ends.
//! - Where a wait cannot be inserted, the guard is *drained* instead: the host waits for S's
//!   event (or, failing that, for the context), and the guard ends. That happens before a
//!   submission whose stream cannot be told, before a stream capture begins (a capturing stream
//!   cannot wait for an event recorded outside it), before S is destroyed (its handle may be
//!   given to a new stream), when a new peer relation appears (another context's work could
//!   then reach C's memory: `super::peers`), and before a chunk goes back to the driver with
//!   `cuMemFree` under pressure (a chunk given back with `cuMemFreeAsync` on the legacy
//!   stream makes that stream wait, like any submission on it).
//! - Its context destroyed: the guard ends (the memory went with it). A forked child starts
//!   with none.
//!
//! A free arms only when: `CUGUARD_POOL_STREAM_REUSE` is on, no capture is in progress, no
//! other context can reach C's memory (`relations::reaching` is empty), C is current, every
//! submission counted after the pool's completed mark was on one known stream S (and S is not
//! another thread's per-thread stream), and an existing guard is of the same context and
//! either on S or already covered by a completed fence of C (it always is when the new free's
//! work is all on another stream: see `reuse.rs`).
//!
//! The hooks call the driver through its real entries ([`crate::driver::real`]); nothing here
//! is counted as a submission, and nothing recurses into the hooks.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use super::submissions::{self, LEGACY_KEY, NO_KEY, PER_THREAD_BIT, UNKNOWN_KEY};
use super::{events, relations};
use crate::driver::{current_context, real};
use crate::ffi::*;
use crate::process::global::{self, lock};

/// The armed guard's epoch; 0 while there is none.
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// The armed guard's stream key (valid while [`EPOCH`] is not 0).
static GUARD_STREAM: AtomicU64 = AtomicU64::new(NO_KEY);
/// Epochs handed out so far (never reset, so a thread's memory of one never matches another).
static EPOCHS: AtomicU64 = AtomicU64::new(0);
/// Per-thread stream keys handed out so far.
static THREADS: AtomicU64 = AtomicU64::new(0);

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`, as handles.
const CU_STREAM_LEGACY: u64 = 1;
const CU_STREAM_PER_THREAD: u64 = 2;
/// `CU_EVENT_DISABLE_TIMING`.
const DISABLE_TIMING: u32 = 2;

/// The guard, and the waits inserted so far by device (for the report).
#[derive(Default)]
struct State {
    guard: Option<Guard>,
    waits: HashMap<i32, u64>,
}

/// See the module documentation.
struct Guard {
    ctx: u64,
    ordinal: i32,
    stream: u64,
    /// The highest count an arming free's pending work was under.
    mark: u64,
    /// The event recorded on the stream (created in `ctx`); 0 before the first.
    event: u64,
    /// The epoch its last record covers (0: none yet).
    recorded: u64,
    /// By stream key: the epoch that stream last waited for.
    waited: HashMap<u64, u64>,
}

static STATE: AtomicPtr<Mutex<State>> = AtomicPtr::new(std::ptr::null_mut());

fn state() -> &'static Mutex<State> {
    global::get_or_create(&STATE, Default::default)
}

thread_local! {
    /// This thread's per-thread stream key (0 until first asked).
    static OWN_KEY: Cell<u64> = const { Cell::new(0) };
    /// The last (stream key, epoch) this thread saw a wait for.
    static WAITED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Whether stream-aware reuse is on (`CUGUARD_POOL_STREAM_REUSE`).
pub fn enabled() -> bool {
    crate::config::get().stream_reuse
}

/// The calling thread's per-thread default stream's key: unique to the thread for the life of
/// the process ([`UNKNOWN_KEY`] while the thread is exiting).
pub fn per_thread_key() -> u64 {
    OWN_KEY
        .try_with(|k| {
            if k.get() == 0 {
                k.set(PER_THREAD_BIT | (THREADS.fetch_add(1, Ordering::Relaxed) + 1));
            }
            k.get()
        })
        .unwrap_or(UNKNOWN_KEY)
}

/// The handle that names stream `key` from the calling thread (a per-thread key is only ever
/// passed here by its own thread).
fn handle_of(key: u64) -> u64 {
    if key == LEGACY_KEY {
        CU_STREAM_LEGACY
    } else if key & PER_THREAD_BIT != 0 {
        CU_STREAM_PER_THREAD
    } else {
        key
    }
}

/// A free in context `ctx` (device `ordinal`) whose mark is above `completed` (what a completed
/// fence of `ctx` covers): arms the guard and returns true when the freed block may be reused
/// at once (see the module documentation for when).
pub fn arm(ctx: u64, ordinal: i32, completed: u64) -> bool {
    // Cheap refusals first (atomic reads), so that frees that cannot qualify take no lock.
    if !enabled()
        || submissions::capturing()
        || submissions::single_stream_since(completed).is_none()
    {
        return false;
    }
    if current_context() != Some(ctx) {
        return false;
    }
    let mut st = lock(state());
    // Under the lock: a capture that began, or a relation that appeared, since has drained
    // (or drains after this) and is seen here.
    if submissions::capturing() || !relations::reaching(ctx, completed).is_empty() {
        return false;
    }
    let Some((key, upto)) = submissions::single_stream_since(completed) else {
        return false;
    };
    let per_thread = key & PER_THREAD_BIT != 0;
    if per_thread && key != per_thread_key() {
        return false;
    }
    match st.guard.as_ref() {
        Some(g) if g.ctx != ctx => {
            let e = EPOCH.load(Ordering::Acquire);
            if !(g.event != 0 && g.recorded >= e && events::event_done(g.event)) {
                return false;
            }
            retire(&mut st);
        }
        Some(g) if g.stream != key && g.mark > completed => return false,
        _ => {}
    }
    let g = st.guard.get_or_insert_with(|| Guard {
        ctx,
        ordinal,
        stream: key,
        mark: 0,
        event: 0,
        recorded: 0,
        waited: HashMap::new(),
    });
    if g.stream != key {
        // The old guard's work is covered by a completed fence: this one replaces it.
        g.stream = key;
        g.mark = 0;
        g.recorded = 0;
        g.waited.clear();
    }
    if per_thread && !record(&mut g.event, CU_STREAM_PER_THREAD) {
        if g.recorded == 0 && g.waited.is_empty() && g.mark == 0 {
            // Nothing armed it yet.
            retire(&mut st);
        }
        return false;
    }
    let e = EPOCHS.fetch_add(1, Ordering::Relaxed) + 1;
    g.mark = g.mark.max(upto);
    if per_thread {
        g.recorded = e;
    }
    GUARD_STREAM.store(key, Ordering::SeqCst);
    EPOCH.store(e, Ordering::SeqCst);
    true
}

/// Before a submission on stream `key`: makes it wait for the guard's stream if it must.
#[inline]
pub fn before(key: u64) {
    let e = EPOCH.load(Ordering::SeqCst);
    if e == 0 || GUARD_STREAM.load(Ordering::SeqCst) == key {
        return;
    }
    before_slow(key, e);
}

#[cold]
fn before_slow(key: u64, seen: u64) {
    if WAITED.try_with(Cell::get).ok() == Some((key, seen)) {
        return;
    }
    let mut st = lock(state());
    let e = EPOCH.load(Ordering::SeqCst);
    let Some(g) = st.guard.as_mut() else { return };
    if e == 0 || g.stream == key {
        return;
    }
    if key == UNKNOWN_KEY {
        drain_locked(&mut st);
        return;
    }
    if g.waited.get(&key).is_some_and(|w| *w >= e) {
        let _ = WAITED.try_with(|w| w.set((key, e)));
        return;
    }
    if g.recorded < e {
        let (ctx, stream) = (g.ctx, g.stream);
        let recorded = stream & PER_THREAD_BIT == 0
            && in_context(ctx, || record(&mut g.event, handle_of(stream))).unwrap_or(false);
        if !recorded {
            drain_locked(&mut st);
            return;
        }
        g.recorded = e;
    }
    if events::event_done(g.event) {
        // The stream's work up to every arming free is done.
        retire(&mut st);
        return;
    }
    let waited = real::cuStreamWaitEvent().is_some_and(|wait| {
        // SAFETY: a stream the program is submitting to from this thread (its handle as this
        // thread names it) and an event this module created and recorded.
        (unsafe { wait(handle_of(key) as *mut c_void, g.event as *mut c_void, 0) }) == CUDA_SUCCESS
    });
    if !waited {
        drain_locked(&mut st);
        return;
    }
    g.waited.insert(key, e);
    let ordinal = g.ordinal;
    *st.waits.entry(ordinal).or_default() += 1;
    let _ = WAITED.try_with(|w| w.set((key, e)));
}

/// Ends the guard, if any, once the host waited for its stream's work.
pub fn drain() {
    if EPOCH.load(Ordering::SeqCst) == 0 {
        return;
    }
    drain_locked(&mut lock(state()));
}

/// See [`drain`]; the state is locked.
fn drain_locked(st: &mut State) {
    let Some(g) = st.guard.as_mut() else { return };
    let e = EPOCH.load(Ordering::SeqCst);
    let mut ready = g.event != 0 && g.recorded >= e;
    if !ready && g.stream & PER_THREAD_BIT == 0 {
        let (ctx, stream) = (g.ctx, g.stream);
        ready = in_context(ctx, || record(&mut g.event, handle_of(stream))).unwrap_or(false);
    }
    let waited = ready
        && real::cuEventSynchronize().is_some_and(|sync| {
            // SAFETY: an event this module created and recorded.
            (unsafe { sync(g.event as *mut c_void) }) == CUDA_SUCCESS
        });
    if !waited {
        // All work that could touch the context's memory is the context's own.
        in_context(g.ctx, events::synchronize_current);
    }
    retire(st);
}

/// The guard ends.
fn retire(st: &mut State) {
    EPOCH.store(0, Ordering::SeqCst);
    GUARD_STREAM.store(NO_KEY, Ordering::SeqCst);
    if let Some(g) = st.guard.take()
        && g.event != 0
    {
        events::destroy_event(g.event);
    }
}

/// Records `*event` on stream `handle` of the current context, creating it first if it is 0.
fn record(event: &mut u64, handle: u64) -> bool {
    if *event == 0 {
        let Some(create) = real::cuEventCreate() else {
            return false;
        };
        let mut ev: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-parameter.
        if unsafe { create(&mut ev, DISABLE_TIMING) } != CUDA_SUCCESS {
            return false;
        }
        *event = ev as u64;
    }
    real::cuEventRecord().is_some_and(|rec| {
        // SAFETY: an event this module created; the handle names a stream of the current
        // context (the driver refuses it otherwise).
        (unsafe { rec(*event as *mut c_void, handle as *mut c_void) }) == CUDA_SUCCESS
    })
}

/// Runs `f` with context `ctx` current (`None` when it could not be made current).
fn in_context<T>(ctx: u64, f: impl FnOnce() -> T) -> Option<T> {
    if current_context() == Some(ctx) {
        Some(f())
    } else {
        events::with_current(ctx, f)
    }
}

/// Stream `handle` is about to be destroyed: its run ends, and a guard on it is drained.
pub fn stream_destroying(handle: u64) {
    if !enabled() {
        return;
    }
    let mut st = lock(state());
    submissions::stream_destroyed(handle);
    if st.guard.as_ref().is_some_and(|g| g.stream == handle) {
        drain_locked(&mut st);
    }
}

/// A stream capture is about to begin (already counted by [`submissions::capture_changed`]): a
/// guard is drained, and none is armed until it ends. The lock is taken even when no guard
/// seems armed: an arming in progress either saw the capture or is drained here after it.
pub fn capture_beginning() {
    if enabled() {
        drain_locked(&mut lock(state()));
    }
}

/// A new relation lets another context's work reach some context's memory (it is already
/// known to `super::peers`): as for a capture.
pub fn relation_added() {
    if enabled() {
        drain_locked(&mut lock(state()));
    }
}

/// A chunk is about to go back to the driver: with `cuMemFree` (`wait`), the guard is drained;
/// with `cuMemFreeAsync` on the legacy stream, that stream waits like any submission on it.
pub fn chunk_freeing(wait: bool) {
    if EPOCH.load(Ordering::SeqCst) == 0 {
        return;
    }
    if wait { drain() } else { before(LEGACY_KEY) }
}

/// Context `ctx` is gone: its guard ends (its memory and work went with it; the event too).
pub fn context_gone(ctx: u64) {
    if EPOCH.load(Ordering::SeqCst) == 0 {
        return;
    }
    let mut st = lock(state());
    if st.guard.as_ref().is_some_and(|g| g.ctx == ctx) {
        st.guard = None;
        EPOCH.store(0, Ordering::SeqCst);
        GUARD_STREAM.store(NO_KEY, Ordering::SeqCst);
    }
}

/// Stream waits inserted so far for guards of device `ordinal`'s contexts.
pub fn waits_for_device(ordinal: i32) -> u64 {
    global::get(&STATE).map_or(0, |s| lock(s).waits.get(&ordinal).copied().unwrap_or(0))
}

/// In a forked child: no guard (the parent's streams are not the child's), no run continues.
/// The old state is leaked: its lock may be held by a thread that does not exist here.
pub fn reset_after_fork() {
    global::replace(&STATE, Default::default());
    EPOCH.store(0, Ordering::SeqCst);
    GUARD_STREAM.store(NO_KEY, Ordering::SeqCst);
    submissions::reset_after_fork();
}
