//! A fake device for the pool's tests. Chunks are address ranges out of a fixed capacity; GPU
//! work is a list of items on streams that complete only when the test says so; events follow
//! the driver's stream rules (an event on the legacy stream waits for all earlier work on every
//! blocking stream, one on a non-blocking stream only for that stream's). It also plays the
//! shim's part of the fence rule: it counts submissions, registers non-blocking streams and
//! records a last event on one when it is destroyed.
//!
//! It writes down whatever the pool must never do (record an event or synchronize during a
//! capture, take a chunk or fence while its context is not current, free a chunk it does not
//! hold, query a destroyed event) in `violations`, which the tests check after every step.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::device::{Device, DeviceError, LEGACY_STREAM};

/// Where fake chunks start.
const BASE: u64 = 1 << 40;

/// One item of GPU work.
#[derive(Clone, Copy, Debug)]
pub struct Work {
    pub stream: u64,
    pub done: bool,
}

/// A stream the program created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream {
    pub non_blocking: bool,
    pub destroyed: bool,
}

/// A chunk the pool holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub size: u64,
    /// (pool address, arena), once the pool said so.
    pub owner: Option<(usize, usize)>,
}

/// Everything the fake knows.
#[derive(Debug, Default)]
pub struct State {
    /// Device bytes in all.
    pub capacity: u64,
    /// Bytes held by chunks.
    pub used: u64,
    next_base: u64,
    pub chunks: BTreeMap<u64, Chunk>,
    /// The next this many chunk requests are refused.
    pub fail_chunks: u32,
    /// Chunk requests refused so far.
    pub refused_chunks: u64,
    /// Submission `i + 1` is `work[i]`.
    pub work: Vec<Work>,
    /// Streams by handle (the legacy stream, 0, is not in it).
    pub streams: BTreeMap<u64, Stream>,
    next_stream: u64,
    /// Events by id: the submissions each waits for.
    events: BTreeMap<u64, Vec<usize>>,
    next_event: u64,
    /// Last events of destroyed non-blocking streams, not yet known complete, oldest first.
    orphans: VecDeque<u64>,
    /// Last events recorded on destroyed streams, and how many of them completed (and were
    /// destroyed), oldest first.
    orphans_recorded: u64,
    orphans_retired: u64,
    /// Captures in progress.
    pub captures: u32,
    /// Whether the pool's context is the current one.
    pub current: bool,
    /// Whether `synchronize` (and waiting for an event) fails.
    pub sync_fails: bool,
    /// Whether waiting for an event fails (the pool must then synchronize).
    pub wait_fails: bool,
    pub syncs: u64,
    /// Waits for an event (`wait_event`).
    pub event_waits: u64,
    /// What the pool must never do, if it did.
    pub violations: Vec<String>,
    /// The answer to `reuse_on_stream` (the shim's stream rule, played by the test).
    pub stream_reuse: bool,
    /// The `completed` of every `reuse_on_stream` asked.
    pub stream_asks: Vec<u64>,
    /// How many times the pool said an arena's frees began to wait (`frees_waiting`).
    pub waiting_notes: u64,
    /// How many times the pool asked for chunks given back to be settled (`settle_returns`).
    pub settles: u64,
}

/// The fake device: a [`State`] behind a `RefCell` (the pool calls it with `&self`).
#[derive(Debug)]
pub struct FakeDevice {
    pub s: RefCell<State>,
}

impl FakeDevice {
    /// A device with `capacity` bytes, current, idle.
    pub fn new(capacity: u64) -> FakeDevice {
        FakeDevice {
            s: RefCell::new(State {
                capacity,
                next_base: BASE,
                next_stream: 16,
                current: true,
                ..State::default()
            }),
        }
    }
}

impl State {
    /// Creates a stream; a non-blocking one is registered for fences, as the shim's
    /// `stream_created` does.
    pub fn create_stream(&mut self, non_blocking: bool) -> u64 {
        let s = self.next_stream;
        self.next_stream += 1;
        self.streams.insert(
            s,
            Stream {
                non_blocking,
                destroyed: false,
            },
        );
        s
    }

    /// Destroys a stream; a non-blocking one first gets a last event, left for the next fence,
    /// as the shim's `stream_destroying` does. Its work still runs.
    pub fn destroy_stream(&mut self, stream: u64) {
        let Some(st) = self.streams.get(&stream).copied() else {
            return;
        };
        if st.destroyed {
            return;
        }
        if st.non_blocking {
            let ev = self.new_event(stream);
            self.orphans.push_back(ev);
            self.orphans_recorded += 1;
        }
        self.streams.get_mut(&stream).expect("exists").destroyed = true;
    }

    /// Streams work can be submitted to: the legacy one and the live ones.
    pub fn live_streams(&self) -> Vec<u64> {
        let mut v = vec![LEGACY_STREAM];
        v.extend(
            self.streams
                .iter()
                .filter(|(_, s)| !s.destroyed)
                .map(|(h, _)| *h),
        );
        v
    }

    /// Enqueues one item of work on `stream`, then counts it.
    pub fn submit(&mut self, stream: u64) {
        self.work.push(Work {
            stream,
            done: false,
        });
    }

    /// Completes up to `n` items of `stream`'s work, oldest first.
    pub fn progress(&mut self, stream: u64, n: usize) {
        for w in self
            .work
            .iter_mut()
            .filter(|w| w.stream == stream && !w.done)
            .take(n)
        {
            w.done = true;
        }
    }

    /// Whether every submission up to `mark` (1-based) has completed.
    pub fn done_up_to(&self, mark: u64) -> bool {
        self.work.iter().take(mark as usize).all(|w| w.done)
    }

    /// Whether a stream is non-blocking (the legacy stream is not).
    fn non_blocking(&self, stream: u64) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.non_blocking)
    }

    /// An event on `stream` now: the work it waits for, by the driver's rules.
    fn new_event(&mut self, stream: u64) -> u64 {
        let waits: Vec<usize> = if stream == LEGACY_STREAM {
            (0..self.work.len())
                .filter(|&i| !self.work[i].done && !self.non_blocking(self.work[i].stream))
                .collect()
        } else {
            (0..self.work.len())
                .filter(|&i| !self.work[i].done && self.work[i].stream == stream)
                .collect()
        };
        let id = self.next_event;
        self.next_event += 1;
        self.events.insert(id, waits);
        id
    }

    /// Events not yet destroyed.
    pub fn live_events(&self) -> usize {
        self.events.len()
    }

    /// The context was destroyed: its chunks and events go with it.
    pub fn context_destroyed(&mut self) {
        self.chunks.clear();
        self.used = 0;
        self.events.clear();
        self.orphans.clear();
    }

    fn violation(&mut self, what: String) {
        self.violations.push(what);
    }
}

impl Device for FakeDevice {
    type Event = u64;

    fn alloc_chunk(&self, bytes: u64) -> Result<u64, DeviceError> {
        let mut s = self.s.borrow_mut();
        if !s.current {
            s.violation(format!("chunk of {bytes} asked for outside the context"));
        }
        if s.fail_chunks > 0 || s.used + bytes > s.capacity {
            s.fail_chunks = s.fail_chunks.saturating_sub(1);
            s.refused_chunks += 1;
            return Err(DeviceError::Refused(2));
        }
        // Leave a gap so that neighbouring chunks are never contiguous.
        let base = s.next_base;
        s.next_base += bytes.next_multiple_of(1 << 21) + (1 << 21);
        s.used += bytes;
        s.chunks.insert(
            base,
            Chunk {
                size: bytes,
                owner: None,
            },
        );
        Ok(base)
    }

    fn free_chunk(&self, base: u64, _wait: bool) {
        let mut s = self.s.borrow_mut();
        match s.chunks.remove(&base) {
            Some(c) => {
                if c.owner.is_some() {
                    s.violation(format!("chunk {base:#x} freed while still mapped"));
                }
                s.used -= c.size;
            }
            None => s.violation(format!("free of unknown chunk {base:#x}")),
        }
    }

    fn settle_returns(&self) {
        self.s.borrow_mut().settles += 1;
    }

    fn frees_waiting(&self, _pool: usize) {
        self.s.borrow_mut().waiting_notes += 1;
    }

    fn chunk_added(&self, base: u64, size: u64, pool: usize, arena: usize) {
        let mut s = self.s.borrow_mut();
        match s.chunks.get_mut(&base) {
            Some(c) if c.size == size && c.owner.is_none() => c.owner = Some((pool, arena)),
            _ => s.violation(format!("chunk_added for {base:#x} that was not handed out")),
        }
    }

    fn chunk_removed(&self, base: u64) {
        let mut s = self.s.borrow_mut();
        match s.chunks.get_mut(&base) {
            Some(c) if c.owner.is_some() => c.owner = None,
            _ => s.violation(format!("chunk_removed for {base:#x} that was not mapped")),
        }
    }

    fn is_current(&self) -> bool {
        self.s.borrow().current
    }

    fn submissions(&self) -> u64 {
        self.s.borrow().work.len() as u64
    }

    fn capturing(&self) -> bool {
        self.s.borrow().captures > 0
    }

    fn reuse_on_stream(&self, completed: u64) -> bool {
        let mut s = self.s.borrow_mut();
        s.stream_asks.push(completed);
        s.stream_reuse
    }

    fn record_event(&self, stream: u64) -> Option<u64> {
        let mut s = self.s.borrow_mut();
        if !s.current {
            s.violation("event recorded outside the context".into());
        }
        if stream == LEGACY_STREAM && s.captures > 0 {
            s.violation("event recorded on the legacy stream during a capture".into());
        }
        if stream != LEGACY_STREAM && s.streams.get(&stream).is_none_or(|st| st.destroyed) {
            return None;
        }
        Some(s.new_event(stream))
    }

    fn with_side_streams<T>(&self, f: impl FnOnce(&[u64], u64) -> T) -> T {
        let (streams, recorded) = {
            let s = self.s.borrow();
            let streams: Vec<u64> = s
                .streams
                .iter()
                .filter(|(_, st)| st.non_blocking && !st.destroyed)
                .map(|(h, _)| *h)
                .collect();
            (streams, s.orphans_recorded)
        };
        f(&streams, recorded)
    }

    fn destroyed_streams_done(&self, count: u64) -> bool {
        let mut s = self.s.borrow_mut();
        while s.orphans_retired < count {
            let Some(&ev) = s.orphans.front() else {
                break;
            };
            if !s.events[&ev].iter().all(|&i| s.work[i].done) {
                return false;
            }
            s.events.remove(&ev);
            s.orphans.pop_front();
            s.orphans_retired += 1;
        }
        true
    }

    fn event_done(&self, event: &u64) -> bool {
        let mut s = self.s.borrow_mut();
        match s.events.get(event) {
            Some(waits) => waits.iter().all(|&i| s.work[i].done),
            None => {
                s.violation(format!("query of destroyed event {event}"));
                true
            }
        }
    }

    fn destroy_event(&self, event: u64) {
        let mut s = self.s.borrow_mut();
        if s.events.remove(&event).is_none() {
            s.violation(format!("destroy of unknown event {event}"));
        }
    }

    fn wait_event(&self, event: &u64) -> bool {
        let mut s = self.s.borrow_mut();
        if s.sync_fails || s.wait_fails {
            return false;
        }
        let Some(waits) = s.events.get(event).cloned() else {
            s.violation(format!("wait for destroyed event {event}"));
            return false;
        };
        // The event's work completes (each stream's oldest first, as the driver runs it).
        s.event_waits += 1;
        for i in waits {
            s.work[i].done = true;
        }
        true
    }

    fn synchronize(&self) -> bool {
        let mut s = self.s.borrow_mut();
        if !s.current {
            s.violation("synchronize outside the context".into());
        }
        if s.captures > 0 {
            s.violation("synchronize during a capture".into());
        }
        if s.sync_fails {
            return false;
        }
        s.syncs += 1;
        for w in s.work.iter_mut() {
            w.done = true;
        }
        true
    }
}

/// Chunk ranges the fake has handed out and not taken back.
pub fn chunk_set(s: &State) -> BTreeSet<(u64, u64)> {
    s.chunks.iter().map(|(b, c)| (*b, b + c.size)).collect()
}
