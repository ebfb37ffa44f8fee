//! When a freed pool block may be handed out again.
//!
//! # The rule
//!
//! A block freed by the program is not reused while GPU work issued before its free may still
//! touch it. Every driver entry that submits work (kernels, copies, sets, graph launches, stream
//! memory operations, external semaphores, host functions; see `hooks::submit`) counts one
//! submission *after* the driver has enqueued it. A free remembers the count at that moment, its
//! *mark*: all work that could touch the block was enqueued before the mark.
//!
//! A *fence* reads the count `v`, then records an event on the legacy default stream and on every
//! known non-blocking stream of the context. The legacy stream's event completes only after all
//! work enqueued before it on every blocking stream, the per-thread default streams included
//! (they synchronize with the legacy stream); non-blocking streams do not, so each gets its own
//! event. When all of a fence's events have completed, every submission counted in `v` has
//! finished, and blocks whose mark is ≤ `v` are safe to reuse. `cuCtxSynchronize` is the same
//! fence, taken at once.
//!
//! Two consequences keep the pool fast without weakening this:
//! - While nothing has been submitted since the last completed fence, a freed block is reusable
//!   at once (its mark is already covered).
//! - Otherwise frees wait in batches; one fence per batch amortizes the events.
//!
//! Streams that were non-blocking and are destroyed with work in flight get a last event at
//! destruction, which the next fence waits for too. While any stream capture is active, no fence
//! is recorded (an event on the legacy stream would invalidate a global-mode capture): frees wait.
//!
//! Not covered: work of *another context* reading this pool's memory through peer access. A pool
//! fences its own context's streams only; multi-GPU programs that free memory another device is
//! still reading should run with `CUGUARD_POOL=0`.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::driver::real;
use crate::ffi::*;
use crate::tracker::lock;

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
    orphans: HashMap<u64, Vec<u64>>,
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
    if let Some(ev) = record_event(stream) {
        s.orphans.entry(ctx).or_default().push(ev);
    }
}

/// Forgets everything about a destroyed context's streams.
pub fn context_gone(ctx: u64) {
    if let Some(s) = lock(&STREAMS).as_mut() {
        s.non_blocking.remove(&ctx);
        s.orphans.remove(&ctx);
    }
}

fn record_event(stream: u64) -> Option<u64> {
    let (create, record) = (real::cuEventCreate()?, real::cuEventRecord()?);
    let mut ev: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-parameter; CU_EVENT_DISABLE_TIMING = 2.
    if unsafe { create(&mut ev, 2) } != CUDA_SUCCESS {
        return None;
    }
    // SAFETY: ev was just created; stream is a live stream of the current context.
    if unsafe { record(ev, stream as *mut c_void) } != CUDA_SUCCESS {
        destroy_event(ev as u64);
        return None;
    }
    Some(ev as u64)
}

fn destroy_event(ev: u64) {
    if let Some(f) = real::cuEventDestroy_v2() {
        // SAFETY: ev is an event this module created and no longer uses.
        unsafe { f(ev as *mut c_void) };
    }
}

/// Whether the event has completed (an error counts as completed: the event, or its context, is
/// gone and can hold nothing back).
fn event_done(ev: u64) -> bool {
    let Some(q) = real::cuEventQuery() else {
        return true;
    };
    // SAFETY: ev is a live event this module created.
    (unsafe { q(ev as *mut c_void) }) != CUDA_ERROR_NOT_READY
}

/// One recorded fence.
struct Fence {
    /// Submissions covered.
    mark: u64,
    events: Vec<u64>,
}

/// A context's fences (kept inside its pool, under the pool's lock).
#[derive(Default)]
pub struct Fences {
    /// All work counted up to this mark is known complete.
    completed: u64,
    in_flight: VecDeque<Fence>,
    /// Fences recorded (for the report).
    pub recorded: u64,
    /// Synchronizations under pressure (for the report).
    pub syncs: u64,
}

impl Fences {
    /// All submissions up to this mark are complete.
    #[inline]
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// Whether a fence covering `mark` is already in flight.
    pub fn covers(&self, mark: u64) -> bool {
        self.in_flight.back().is_some_and(|f| f.mark >= mark)
    }

    /// Records a fence now, in context `ctx` (which must be current). Returns false when none
    /// could be recorded (a capture is in progress, or the driver refused).
    pub fn record(&mut self, ctx: u64) -> bool {
        if capturing() {
            return false;
        }
        let mark = mark();
        if mark <= self.completed || self.covers(mark) {
            return true;
        }
        let mut events = Vec::new();
        let Some(ev) = record_event(0) else {
            return false;
        };
        events.push(ev);
        {
            let mut guard = lock(&STREAMS);
            if let Some(s) = guard.as_mut() {
                for stream in s.non_blocking.get(&ctx).cloned().unwrap_or_default() {
                    if let Some(ev) = record_event(stream) {
                        events.push(ev);
                    }
                }
                // Orphans from destroyed streams ride with this fence.
                events.extend(s.orphans.remove(&ctx).unwrap_or_default());
            }
        }
        self.recorded += 1;
        self.in_flight.push_back(Fence { mark, events });
        true
    }

    /// Retires completed fences (oldest first); returns the new completed mark.
    pub fn poll(&mut self) -> u64 {
        while let Some(f) = self.in_flight.front() {
            if !f.events.iter().all(|e| event_done(*e)) {
                break;
            }
            let f = self.in_flight.pop_front().expect("front exists");
            for e in f.events {
                destroy_event(e);
            }
            self.completed = self.completed.max(f.mark);
        }
        self.completed
    }

    /// Waits for all work of context `ctx` (current) to finish; returns the new completed mark,
    /// or `None` when that is not allowed now (a capture is in progress) or failed.
    pub fn synchronize(&mut self, ctx: u64) -> Option<u64> {
        if capturing() {
            return None;
        }
        let mark = mark();
        let sync = real::cuCtxSynchronize()?;
        // SAFETY: no arguments; the pool's context is current.
        if unsafe { sync() } != CUDA_SUCCESS {
            return None;
        }
        self.syncs += 1;
        // Every fence in flight is complete now, and so is every destroyed stream's last work.
        for f in self.in_flight.drain(..) {
            for e in f.events {
                destroy_event(e);
            }
        }
        if let Some(s) = lock(&STREAMS).as_mut() {
            for e in s.orphans.remove(&ctx).unwrap_or_default() {
                destroy_event(e);
            }
        }
        self.completed = self.completed.max(mark);
        Some(self.completed)
    }
}
