//! The shim's side of the pool's fences: what the hooks see of the program's work, kept for the
//! pool to read through [`super::pool::DriverContext`]. The rule itself, and why it is safe,
//! is `cuguard_pool`'s `reuse.rs`.
//!
//! - The submission count: `hooks::submit` counts one submission for every entry that submits
//!   device work, *after* the driver enqueued it ([`submitted_on`]); a free's mark is the count
//!   when it is made ([`mark`]).
//! - The stream of each submission, in *runs*: a run is a stretch of consecutive submissions
//!   (by count) issued on one stream, so that a free can ask whether every submission counted
//!   since the last completed fence was issued on one stream ([`single_stream_since`], for
//!   [`super::stream_reuse`]).
//! - Stream captures in progress (`hooks::streams`): no fence is recorded during one.
//! - Each context's non-blocking streams (`hooks::streams`), which a fence must record an event
//!   on, and the last events of those destroyed, which every later fence waits for too (of
//!   whichever arena: they are kept here, and destroyed once complete).
//!
//! # Runs
//!
//! The count and the current run share one word, [`SUBMITTED`]: the count in the low
//! [`COUNT_BITS`] bits, the run's number (mod [`RUNS`]) above. A run's stream key and the count
//! of its first submission are in [`RUN_KEYS`] and [`RUN_STARTS`]. A submission on the current
//! run's stream counts itself with one compare-and-swap of the word, which succeeds only if
//! neither the count nor the run changed since it read the run's key; a submission on another
//! stream opens a new run under [`RUN_LOCK`] (writing the new run's start, then its key, then
//! the word with the count). So each submission's index and its run are decided at once, runs
//! are contiguous ranges of indices, and every index in a run was issued on the run's stream.
//! A run's slot is rewritten only when the run RUNS numbers later opens; its start is then
//! above every count read before, which is how a reader that raced such a rewrite rejects it.
//!
//! Stream keys ([`crate::hooks::submit`] makes them): a stream's handle; [`LEGACY_KEY`] for the
//! legacy default stream (handle 0 in a plain entry, `CU_STREAM_LEGACY`); the calling thread's
//! own key for its per-thread default stream (handle 0 in a `_ptsz`/`_ptds` entry,
//! `CU_STREAM_PER_THREAD`); [`UNKNOWN_KEY`] when the stream cannot be told (a multi-device
//! launch), which opens a run that matches no stream. A destroyed stream's run is closed the
//! same way ([`stream_destroyed`]), since the driver may give its handle to a new stream.
//!
//! With `CUGUARD_POOL_STREAM_REUSE=0` nothing of this runs: a submission adds one to the word,
//! as before.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU64, Ordering};

use super::events;
use crate::process::global::{self, lock};

/// The submission count (low [`COUNT_BITS`] bits) and the current run (above), process-wide.
static SUBMITTED: AtomicU64 = AtomicU64::new(0);
/// Bits of [`SUBMITTED`] that hold the count.
pub const COUNT_BITS: u32 = 48;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Run numbers are kept mod this.
const RUNS: usize = 256;
/// Each run's stream key ([`NO_KEY`]: matches no stream).
static RUN_KEYS: [AtomicU64; RUNS] = [const { AtomicU64::new(NO_KEY) }; RUNS];
/// Each run's first submission (its count).
static RUN_STARTS: [AtomicU64; RUNS] = [const { AtomicU64::new(0) }; RUNS];
/// Held while a run is opened or closed.
static RUN_LOCK: AtomicBool = AtomicBool::new(false);
/// Whether runs are tracked (`CUGUARD_POOL_STREAM_REUSE`), read once.
static TRACK: AtomicU64 = AtomicU64::new(0);

/// A run's key that matches no stream.
pub const NO_KEY: u64 = 0;
/// The key of the legacy default stream (`CU_STREAM_LEGACY`).
pub const LEGACY_KEY: u64 = 1;
/// The key of a submission whose stream cannot be told.
pub const UNKNOWN_KEY: u64 = u64::MAX;
/// Set in the keys of per-thread default streams (never in a handle).
pub const PER_THREAD_BIT: u64 = 1 << 63;

/// Stream captures in progress, process-wide.
static CAPTURES: AtomicI64 = AtomicI64::new(0);

#[inline]
fn run_of(word: u64) -> usize {
    (word >> COUNT_BITS) as usize % RUNS
}

/// Whether runs are tracked.
#[inline]
fn tracking() -> bool {
    match TRACK.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let on = crate::config::get().stream_reuse;
            TRACK.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
    }
}

/// Counts one submission of device work on the stream of key `key`; called after the driver
/// enqueued it.
#[inline]
pub fn submitted_on(key: u64) {
    if !tracking() {
        SUBMITTED.fetch_add(1, Ordering::Release);
        return;
    }
    let mut w = SUBMITTED.load(Ordering::Acquire);
    loop {
        if RUN_KEYS[run_of(w)].load(Ordering::Acquire) != key || key == UNKNOWN_KEY {
            return open_run(key);
        }
        match SUBMITTED.compare_exchange_weak(w, w + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(now) => w = now,
        }
    }
}

/// Counts one submission whose stream is not known (conservative: it opens a run that matches
/// no stream).
#[cfg(test)]
pub fn submitted() {
    submitted_on(UNKNOWN_KEY);
}

/// Takes [`RUN_LOCK`].
fn run_lock() -> RunLock {
    while RUN_LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
    RunLock
}

/// Releases [`RUN_LOCK`] when dropped.
struct RunLock;

impl Drop for RunLock {
    fn drop(&mut self) {
        RUN_LOCK.store(false, Ordering::Release);
    }
}

/// Counts a submission on `key` as the first of a new run (or of the current one, if another
/// thread opened it for the same stream meanwhile).
#[cold]
fn open_run(key: u64) {
    let _held = run_lock();
    let stored = if key == UNKNOWN_KEY { NO_KEY } else { key };
    let mut w = SUBMITTED.load(Ordering::Acquire);
    loop {
        let r = run_of(w);
        let count = w & COUNT_MASK;
        let next = if key != UNKNOWN_KEY && RUN_KEYS[r].load(Ordering::Acquire) == key {
            w + 1
        } else {
            // Runs change only under the lock, so the next slot is nobody's current run.
            let n = (r + 1) % RUNS;
            RUN_STARTS[n].store(count + 1, Ordering::Release);
            RUN_KEYS[n].store(stored, Ordering::Release);
            ((n as u64) << COUNT_BITS) | (count + 1)
        };
        match SUBMITTED.compare_exchange(w, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(now) => w = now,
        }
    }
}

/// Stream `key` is about to be destroyed: if the current run is on it, it ends (its handle
/// may name a new stream next).
pub fn stream_destroyed(key: u64) {
    if !tracking() {
        return;
    }
    let _held = run_lock();
    let r = run_of(SUBMITTED.load(Ordering::Acquire));
    if RUN_KEYS[r].load(Ordering::Acquire) == key {
        RUN_KEYS[r].store(NO_KEY, Ordering::Release);
    }
}

/// If every submission counted after `completed` was issued on one stream: its key, and the
/// count now (which covers them). `None` when they were not, or that stream is not known.
pub fn single_stream_since(completed: u64) -> Option<(u64, u64)> {
    if !tracking() {
        return None;
    }
    let w = SUBMITTED.load(Ordering::Acquire);
    let r = run_of(w);
    // The key first, then the start: a slot rewritten since `w` has a start above `w`'s count.
    let key = RUN_KEYS[r].load(Ordering::Acquire);
    let start = RUN_STARTS[r].load(Ordering::Acquire);
    let count = w & COUNT_MASK;
    (key != NO_KEY && key != UNKNOWN_KEY && start <= completed.saturating_add(1) && start <= count)
        .then_some((key, count))
}

/// In a forked child: no thread holds the run lock, no run continues, no capture is in progress,
/// and the streams table is a new, empty one (the parent's contexts and streams cannot be used
/// here).
pub fn reset_after_fork() {
    global::replace(&STREAMS, Mutex::new(None));
    CAPTURES.store(0, Ordering::Release);
    RUN_LOCK.store(false, Ordering::Release);
    let r = run_of(SUBMITTED.load(Ordering::Acquire));
    RUN_KEYS[r].store(NO_KEY, Ordering::Release);
}

/// The current submission count: the mark of a free made now.
#[inline]
pub fn mark() -> u64 {
    SUBMITTED.load(Ordering::Acquire) & COUNT_MASK
}

/// A stream capture began (`delta` = 1) or ended (-1).
pub fn capture_changed(delta: i64) {
    let _ = CAPTURES.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
        Some((c + delta).max(0))
    });
}

/// Whether any stream capture is in progress.
pub fn capturing() -> bool {
    CAPTURES.load(Ordering::Acquire) > 0
}

/// Non-blocking streams by context, and events left by destroyed ones.
#[derive(Default)]
struct Streams {
    non_blocking: HashMap<u64, Vec<u64>>,
    /// Per context: events recorded on non-blocking streams as they were destroyed.
    orphans: HashMap<u64, Orphans>,
}

/// One context's last events of destroyed non-blocking streams.
#[derive(Default)]
struct Orphans {
    /// Recorded so far.
    recorded: u64,
    /// Of those, the first this many are complete (and destroyed).
    retired: u64,
    /// The others, oldest first.
    events: VecDeque<u64>,
}

/// The table, created on first use and replaced in a forked child (whose parent's threads may
/// have held its lock at the fork).
static STREAMS: AtomicPtr<Mutex<Option<Streams>>> = AtomicPtr::new(std::ptr::null_mut());

fn streams() -> &'static Mutex<Option<Streams>> {
    global::get_or_create(&STREAMS, || Mutex::new(None))
}

/// `CU_STREAM_NON_BLOCKING`.
pub const CU_STREAM_NON_BLOCKING: u32 = 1;

/// A stream was created in context `ctx` with `flags`.
pub fn stream_created(ctx: u64, stream: u64, flags: u32) {
    if flags & CU_STREAM_NON_BLOCKING == 0 {
        return;
    }
    let mut s = lock(streams());
    s.get_or_insert_with(Default::default)
        .non_blocking
        .entry(ctx)
        .or_default()
        .push(stream);
}

/// A stream is about to be destroyed: if it is a known non-blocking stream, record a last event
/// on it so that fences still wait for its work.
pub fn stream_destroying(stream: u64) {
    let mut guard = lock(streams());
    let Some(s) = guard.as_mut() else { return };
    let Some(ctx) = s
        .non_blocking
        .iter()
        .find(|(_, v)| v.contains(&stream))
        .map(|(c, _)| *c)
    else {
        return;
    };
    if let Some(v) = s.non_blocking.get_mut(&ctx) {
        v.retain(|x| *x != stream);
    }
    if let Some(ev) = events::record_event(stream) {
        let o = s.orphans.entry(ctx).or_default();
        o.events.push_back(ev);
        o.recorded += 1;
    }
}

/// Forgets everything about a destroyed context's streams.
pub fn context_gone(ctx: u64) {
    if let Some(s) = lock(streams()).as_mut() {
        s.non_blocking.remove(&ctx);
        s.orphans.remove(&ctx);
    }
}

/// Calls `f` with context `ctx`'s non-blocking streams and the number of last events recorded
/// on its destroyed ones, while no stream is registered or forgotten.
pub fn with_side_streams<T>(ctx: u64, f: impl FnOnce(&[u64], u64) -> T) -> T {
    let guard = lock(streams());
    match guard.as_ref() {
        Some(s) => {
            let streams = s.non_blocking.get(&ctx).map_or(&[][..], Vec::as_slice);
            f(streams, s.orphans.get(&ctx).map_or(0, |o| o.recorded))
        }
        None => f(&[], 0),
    }
}

/// Whether the first `count` last events of context `ctx`'s destroyed streams have completed;
/// those found complete are destroyed.
pub fn destroyed_streams_done(ctx: u64, count: u64) -> bool {
    if count == 0 {
        return true;
    }
    let mut guard = lock(streams());
    let Some(o) = guard.as_mut().and_then(|s| s.orphans.get_mut(&ctx)) else {
        return true;
    };
    while o.retired < count {
        let Some(&ev) = o.events.front() else { break };
        if !events::event_done(ev) {
            return false;
        }
        events::destroy_event(ev);
        o.events.pop_front();
        o.retired += 1;
    }
    true
}
