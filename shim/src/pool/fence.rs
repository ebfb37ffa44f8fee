//! The shim's side of the pool's fences: what the hooks see of the program's work, kept for the
//! pool to read through [`super::device::DriverContext`]. The rule itself, and why it is safe,
//! is `cuguard_pool`'s `fence.rs`.
//!
//! - The submission count: `hooks::submit` counts one submission for every entry that submits
//!   device work, *after* the driver enqueued it ([`submitted`]); a free's mark is the count
//!   when it is made ([`mark`]).
//! - Stream captures in progress (`hooks::streams`): no fence is recorded during one.
//! - Each context's non-blocking streams (`hooks::streams`), which a fence must record an event
//!   on, and the last events of those destroyed, which every later fence waits for too (of
//!   whichever arena: they are kept here, and destroyed once complete).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use super::device;
use crate::process::global::lock;

/// Completed work submissions, process-wide.
static SUBMITTED: AtomicU64 = AtomicU64::new(0);
/// Stream captures in progress, process-wide.
static CAPTURES: AtomicI64 = AtomicI64::new(0);

/// Counts one submission of device work; called after the driver enqueued it.
#[inline]
pub fn submitted() {
    SUBMITTED.fetch_add(1, Ordering::Release);
}

/// The current submission count: the mark of a free made now.
#[inline]
pub fn mark() -> u64 {
    SUBMITTED.load(Ordering::Acquire)
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

static STREAMS: Mutex<Option<Streams>> = Mutex::new(None);

/// `CU_STREAM_NON_BLOCKING`.
pub const CU_STREAM_NON_BLOCKING: u32 = 1;

/// A stream was created in context `ctx` with `flags`.
pub fn stream_created(ctx: u64, stream: u64, flags: u32) {
    if flags & CU_STREAM_NON_BLOCKING == 0 {
        return;
    }
    let mut s = lock(&STREAMS);
    s.get_or_insert_with(Default::default)
        .non_blocking
        .entry(ctx)
        .or_default()
        .push(stream);
}

/// A stream is about to be destroyed: if it is a known non-blocking stream, record a last event
/// on it so that fences still wait for its work.
pub fn stream_destroying(stream: u64) {
    let mut guard = lock(&STREAMS);
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
    if let Some(ev) = device::record_event(stream) {
        let o = s.orphans.entry(ctx).or_default();
        o.events.push_back(ev);
        o.recorded += 1;
    }
}

/// Forgets everything about a destroyed context's streams.
pub fn context_gone(ctx: u64) {
    if let Some(s) = lock(&STREAMS).as_mut() {
        s.non_blocking.remove(&ctx);
        s.orphans.remove(&ctx);
    }
}

/// Calls `f` with context `ctx`'s non-blocking streams and the number of last events recorded
/// on its destroyed ones, while no stream is registered or forgotten.
pub fn with_side_streams<T>(ctx: u64, f: impl FnOnce(&[u64], u64) -> T) -> T {
    let guard = lock(&STREAMS);
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
    let mut guard = lock(&STREAMS);
    let Some(o) = guard.as_mut().and_then(|s| s.orphans.get_mut(&ctx)) else {
        return true;
    };
    while o.retired < count {
        let Some(&ev) = o.events.front() else { break };
        if !device::event_done(ev) {
            return false;
        }
        device::destroy_event(ev);
        o.events.pop_front();
        o.retired += 1;
    }
    true
}
