//! Giving memory back promptly, off the program's threads: the give-back thread
//! (`cuguard-free`) frees the chunks a pool trims with `cuMemFree`, and tends the pools whose
//! frees wait for a fence (`CtxPool::tend`) until none do, so that memory the program frees
//! reaches the device without the program calling again, synchronizing, or waiting for its GPU
//! work.
//!
//! # Why a thread, and why `cuMemFree`
//!
//! The driver holds a `cuMemAlloc` range freed with `cuMemFreeAsync` until a synchronizing call
//! (measured on the H200: 3 GiB stayed taken for a second, and came back at `cuCtxSynchronize`),
//! so a chunk given back that way stays taken while the program runs. `cuMemFree` gives it back
//! at once, but waits for all work in flight on the context (even on unrelated non-blocking
//! streams), which would stall the program's thread behind its own kernels. So the thread that
//! trims only queues the chunk ([`push`], a lock and a condition variable), and this thread makes
//! the `cuMemFree`. A trimmed chunk holds no live block and no block waiting for a fence, so no
//! work issued before its frees can touch it; the stream rule's early reuse (`stream_reuse.rs`)
//! needs no drain either, since `cuMemFree` waits for the context's work, that stream's
//! included.
//!
//! Frees that wait for a fence make a chunk idle only once a fence covers them. A pool tells
//! this module when an arena's frees begin to wait ([`watch`]); the thread then tends that pool
//! every [`TEND_EVERY`], with its context pushed current: it polls the fences in flight, releases
//! what they cover, queues the chunks that became idle beyond the keep, and, from a pool's second
//! round on, records a fence for frees that wait without one (the first round leaves small frees
//! time to batch). It stops tending a pool when nothing waits.
//!
//! It is not the cuguard thread (`lifecycle/reporter.rs`): that one writes reports, which can
//! take seconds, and answers fatal signals, which must not wait behind a `cuMemFree` that waits
//! for the GPU. Like it, this thread starts lazily (the first chunk queued or pool watched, never
//! at load), with every signal blocked, inside the shim's guard for good; a forked child starts
//! its own when it needs one ([`reset_after_fork`]).
//!
//! # Captures
//!
//! The thread sets its own capture interaction mode to relaxed
//! (`cuThreadExchangeStreamCaptureMode`), so its `cuMemFree` is allowed, and invalidates
//! nothing, while another thread captures. It records and queries no event while a capture is in
//! progress: tending waits, and a capture about to begin waits for a tending round in progress
//! ([`capture_beginning`], called after the capture is counted, so no round starts after it).
//! Without the relaxed mode (an older driver), it frees nothing during a capture either.
//!
//! # Contexts, exit, fork
//!
//! - A context about to be destroyed (`cuCtxDestroy`, `cuDevicePrimaryCtxRelease`,
//!   `cuDevicePrimaryCtxReset`): [`closing`] waits for the thread's work on it to end and holds
//!   its chunks back until [`closed`] says whether it went (then the driver freed them, and the
//!   addresses may already belong to new allocations: they are forgotten) or stayed (they are
//!   queued again).
//! - Under pressure, the pool's slow path [`settle`]s a context's queue: its chunks are freed on
//!   the calling thread, after the thread's current free of that context.
//! - Exit ([`stop_for_exit`], at the start of the final report): the thread stops after the call
//!   it is in (the exit waits up to [`EXIT_WAIT`] for it, a fatal signal's report does not), so
//!   that it makes no driver call while the CUDA runtime and the driver tear down; chunks still
//!   queued go with the process. A chunk trimmed
//!   later is given back with `cuMemFreeAsync`, as when no thread can be started.
//! - Fork: the child forgets the parent's queue and pools (they belong to a context the child
//!   cannot use); the state is replaced, the old one leaked (its lock may be held by a thread
//!   that does not exist in the child).

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{events, registry, submissions};
use crate::driver::real;
use crate::ffi::*;
use crate::process::global;

/// How often the pools whose frees wait for a fence are tended.
pub const TEND_EVERY: Duration = Duration::from_millis(5);
/// How long an exit waits for the thread's driver call in progress.
pub const EXIT_WAIT: Duration = Duration::from_secs(5);
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const CAPTURE_MODE_RELAXED: u32 = 2;

/// A chunk to give back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Job {
    ctx: u64,
    base: u64,
}

/// What the thread is doing now, for one context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Busy {
    Free(Job),
    Tend { ctx: u64 },
}

impl Busy {
    fn ctx(self) -> u64 {
        match self {
            Busy::Free(j) => j.ctx,
            Busy::Tend { ctx } => ctx,
        }
    }
}

/// Everything behind the lock.
#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Chunks of contexts being destroyed, until the call ends.
    held: Vec<Job>,
    /// Contexts being destroyed now.
    closing: Vec<u64>,
    busy: Option<Busy>,
    /// Pools (addresses) whose frees wait for a fence, for the next round.
    watched: Vec<usize>,
    /// Pools still to be tended in the round in progress.
    round: Vec<usize>,
    /// Pools tended in the last round that still waited (the next round may fence them).
    waited_last: Vec<usize>,
    next_round: Option<Instant>,
    started: bool,
    /// The thread could not be started, or stopped for the exit: chunks are not queued.
    unavailable: bool,
    stop: bool,
    /// The thread runs in relaxed capture mode.
    relaxed: bool,
}

struct Giveback {
    state: Mutex<State>,
    /// Wakes the thread.
    wake: Condvar,
    /// Tells waiters that the thread finished a piece of work.
    done: Condvar,
}

static GIVEBACK: AtomicPtr<Giveback> = AtomicPtr::new(std::ptr::null_mut());
/// Set once anything was queued or watched: until then a settle need not lock.
static USED: AtomicBool = AtomicBool::new(false);

fn giveback() -> &'static Giveback {
    global::get_or_create(&GIVEBACK, new_giveback)
}

fn new_giveback() -> Giveback {
    Giveback {
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
        done: Condvar::new(),
    }
}

fn lock(g: &Giveback) -> MutexGuard<'_, State> {
    global::lock(&g.state)
}

/// Starts the thread if it is not running; false when it cannot run (then nothing is queued).
fn ensure_started(g: &'static Giveback, st: &mut State) -> bool {
    if st.unavailable {
        return false;
    }
    if st.started {
        return true;
    }
    st.started = true;
    let spawned = crate::process::thread::spawn_masked("cuguard-free", move || run(g));
    if let Err(e) = spawned {
        crate::process::diag::log(|| format!("could not start the give-back thread: {e}"));
        st.unavailable = true;
        return false;
    }
    true
}

/// Queues the chunk at `base` of context `ctx`, which no block uses any more, to be freed with
/// `cuMemFree` by the thread. False when the thread cannot take it (it could not start, or
/// stopped for the exit): the caller gives it back itself.
pub fn push(ctx: u64, base: u64) -> bool {
    let g = giveback();
    let mut st = lock(g);
    let job = Job { ctx, base };
    if st.closing.contains(&ctx) {
        st.held.push(job);
        return true;
    }
    if !ensure_started(g, &mut st) {
        return false;
    }
    USED.store(true, Ordering::Release);
    st.queue.push_back(job);
    g.wake.notify_all();
    true
}

/// The pool at address `pool` has frees waiting for a fence: tend it until none wait. Called
/// with one of its arenas locked; takes only this module's lock.
pub fn watch(pool: usize) {
    let g = giveback();
    let mut st = lock(g);
    if !ensure_started(g, &mut st) {
        return;
    }
    USED.store(true, Ordering::Release);
    if !st.watched.contains(&pool) {
        st.watched.push(pool);
        g.wake.notify_all();
    }
}

/// Context `ctx` is about to be destroyed (or released, or reset): waits for the thread's work
/// on it, and holds its chunks back until [`closed`].
pub fn closing(ctx: u64) {
    // Always under the lock (rare calls): a chunk queued or a pool watched concurrently is
    // then seen, or sees this.
    let g = giveback();
    let mut st = lock(g);
    st.closing.push(ctx);
    let (mine, rest): (Vec<Job>, Vec<Job>) = st.queue.drain(..).partition(|j| j.ctx == ctx);
    st.queue = rest.into();
    st.held.extend(mine);
    while st.busy.is_some_and(|b| b.ctx() == ctx) {
        st = g.done.wait(st).unwrap_or_else(|e| e.into_inner());
    }
}

/// The call that [`closing`] announced has ended: `gone` when the context went (its chunks went
/// with it), else its chunks are queued again.
pub fn closed(ctx: u64, gone: bool) {
    // Always under the lock (rare calls): a chunk queued or a pool watched concurrently is
    // then seen, or sees this.
    let g = giveback();
    let mut st = lock(g);
    if let Some(i) = st.closing.iter().position(|c| *c == ctx) {
        st.closing.swap_remove(i);
    }
    if st.closing.contains(&ctx) {
        return;
    }
    let (mine, rest): (Vec<Job>, Vec<Job>) = st.held.drain(..).partition(|j| j.ctx == ctx);
    st.held = rest;
    if gone || mine.is_empty() {
        return;
    }
    if ensure_started(g, &mut st) {
        st.queue.extend(mine);
        g.wake.notify_all();
        return;
    }
    drop(st);
    for j in mine {
        free_now(j.base);
    }
}

/// Under pressure in context `ctx` (current): frees its queued chunks on the calling thread, once
/// the thread's free in progress of that context is done, so that their memory is back when this
/// returns.
pub fn settle(ctx: u64) {
    if !USED.load(Ordering::Acquire) {
        return;
    }
    let g = giveback();
    let mine: Vec<Job> = {
        let mut st = lock(g);
        let (mine, rest): (Vec<Job>, Vec<Job>) = st.queue.drain(..).partition(|j| j.ctx == ctx);
        st.queue = rest.into();
        while st
            .busy
            .is_some_and(|b| matches!(b, Busy::Free(j) if j.ctx == ctx))
        {
            st = g.done.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        mine
    };
    for j in mine {
        free_now(j.base);
    }
}

/// A stream capture is about to begin (already counted in `fence`): waits for a tending round in
/// progress, and for a free in progress when the thread is not in relaxed capture mode, so that
/// the thread makes no call the capture forbids.
pub fn capture_beginning() {
    // Always under the lock (rare calls): a chunk queued or a pool watched concurrently is
    // then seen, or sees this.
    let g = giveback();
    let mut st = lock(g);
    loop {
        let blocking = match st.busy {
            Some(Busy::Tend { .. }) => true,
            Some(Busy::Free(_)) => !st.relaxed,
            None => false,
        };
        if !blocking {
            return;
        }
        st = g.done.wait(st).unwrap_or_else(|e| e.into_inner());
    }
}

/// The process is ending: the thread stops after the call it is in (with `wait`, this waits up
/// to [`EXIT_WAIT`] for that call); chunks trimmed from now on are not queued.
pub fn stop_for_exit(wait: bool) {
    let Some(g) = global::get(&GIVEBACK) else {
        return;
    };
    let mut st = lock(g);
    st.stop = true;
    st.unavailable = true;
    g.wake.notify_all();
    if !wait {
        return;
    }
    let start = Instant::now();
    while st.busy.is_some() {
        let left = EXIT_WAIT.saturating_sub(start.elapsed());
        if left.is_zero() {
            return;
        }
        st = g
            .done
            .wait_timeout(st, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// The chunks queued to be freed and not freed yet (the one being freed now included), as
/// (context, base): memory given back that the device still counts, for the report's
/// reconciliation. Takes the lock for the copy.
pub fn waiting() -> Vec<(u64, u64)> {
    let Some(g) = global::get(&GIVEBACK) else {
        return Vec::new();
    };
    let st = lock(g);
    let busy = match st.busy {
        Some(Busy::Free(j)) => Some(j),
        _ => None,
    };
    st.queue
        .iter()
        .copied()
        .chain(busy)
        .map(|j| (j.ctx, j.base))
        .collect()
}

/// In the child of a fork: nothing queued or watched, no thread (one starts when needed).
pub fn reset_after_fork() {
    if global::get(&GIVEBACK).is_some() {
        global::replace(&GIVEBACK, new_giveback());
    }
    USED.store(false, Ordering::Release);
}

/// What the thread does next.
enum Work {
    Free(Job),
    Tend { pool: usize, fence: bool },
}

/// The thread.
fn run(g: &'static Giveback) {
    // Inside the shim for good: nothing this thread does is tracked.
    std::mem::forget(crate::guard::Guard::enter());
    let relaxed = set_relaxed_capture_mode();
    lock(g).relaxed = relaxed;
    loop {
        let work = {
            let mut st = lock(g);
            loop {
                if st.stop {
                    g.done.notify_all();
                    return;
                }
                if let Some(w) = next_work(&mut st) {
                    break w;
                }
                // Until the next round; work there is but may not be done now (a capture, a
                // closing context) is looked at again after a round's time.
                let timeout = (!st.queue.is_empty()
                    || !st.watched.is_empty()
                    || !st.round.is_empty())
                .then(|| {
                    let until = st.next_round.map_or(Duration::ZERO, |t| {
                        t.saturating_duration_since(Instant::now())
                    });
                    if until.is_zero() { TEND_EVERY } else { until }
                });
                st = match timeout {
                    Some(t) => {
                        g.wake
                            .wait_timeout(st, t)
                            .unwrap_or_else(|e| e.into_inner())
                            .0
                    }
                    None => g.wake.wait(st).unwrap_or_else(|e| e.into_inner()),
                };
            }
        };
        let still_waiting = crate::guard::shield(None, || match work {
            Work::Free(job) => {
                free_now(job.base);
                None
            }
            Work::Tend { pool, fence } => Some((pool, tend(pool, fence))),
        });
        let mut st = lock(g);
        st.busy = None;
        if let Some((pool, true)) = still_waiting {
            if !st.watched.contains(&pool) {
                st.watched.push(pool);
            }
            st.waited_last.push(pool);
        }
        g.done.notify_all();
    }
}

/// Picks the next piece of work, marking the thread busy with it; `None` when there is none now.
fn next_work(st: &mut State) -> Option<Work> {
    let capturing = submissions::capturing();
    if (!capturing || st.relaxed)
        && let Some(i) = st.queue.iter().position(|j| !st.closing.contains(&j.ctx))
    {
        let job = st.queue.remove(i)?;
        st.busy = Some(Busy::Free(job));
        return Some(Work::Free(job));
    }
    if capturing {
        return None;
    }
    // Rounds: every pool that waited at the start of a round gets one turn in it, one pool per
    // turn (so that frees queued meanwhile go first); rounds start at most every TEND_EVERY.
    if st.round.is_empty() {
        let now = Instant::now();
        if st.watched.is_empty() || st.next_round.is_some_and(|t| now < t) {
            return None;
        }
        st.round = std::mem::take(&mut st.watched);
        st.next_round = Some(now + TEND_EVERY);
    }
    // A closing context's pool waits for the next round.
    while let Some(pool) = st.round.pop() {
        let ctx = registry::pool_at(pool).device().handle;
        if st.closing.contains(&ctx) {
            if !st.watched.contains(&pool) {
                st.watched.push(pool);
            }
            continue;
        }
        let fence = st.waited_last.contains(&pool);
        st.waited_last.retain(|p| *p != pool);
        st.busy = Some(Busy::Tend { ctx });
        return Some(Work::Tend { pool, fence });
    }
    None
}

/// Tends the pool at `pool` with its context pushed current; whether frees still wait. A context
/// that cannot be made current is gone, and its pool with it.
fn tend(pool: usize, fence: bool) -> bool {
    let p = registry::pool_at(pool);
    events::with_current(p.device().handle, || p.tend(fence)).unwrap_or(false)
}

/// Frees a chunk with `cuMemFree` (which needs no current context).
fn free_now(base: u64) {
    if let Some(f) = real::cuMemFree_v2() {
        // SAFETY: base is a chunk the pool allocated with cuMemAlloc and gave up: no block of it
        // is live or waiting for a fence, and no one else frees it.
        unsafe { f(base) };
    }
}

/// Sets this thread's capture interaction mode to relaxed; whether that worked.
fn set_relaxed_capture_mode() -> bool {
    let Some(exchange) = real::cuThreadExchangeStreamCaptureMode() else {
        return false;
    };
    let mut mode = CAPTURE_MODE_RELAXED;
    // SAFETY: valid in/out parameter.
    (unsafe { exchange(&mut mode as *mut u32 as *mut c_void) }) == CUDA_SUCCESS
}
