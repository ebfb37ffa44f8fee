//! What is live as a writer follows its events in time order, and the checkpoints it writes
//! from it ([`crate::Chunk::Checkpoint`]): one implementation for the shim's writer and for
//! anything else that writes a history (the benchmark's generator), so that every history's
//! checkpoints mean the same.
//!
//! ```
//! use cuguard_history::{Action, Chunk, MemoryKind, Raw, kind};
//! use cuguard_history::live::Follow;
//! let mut f = Follow::default();
//! let ev = |tsc, action, size| Raw { tsc, addr: 0x7000, size, stack: 0, context: 0, kind: kind(action, MemoryKind::Device), device: 1, stream: 0 };
//! f.follow(1, &ev(10, Action::Alloc, 100));
//! f.follow(1, &ev(20, Action::Free, 0));
//! f.follow(1, &ev(30, Action::Alloc, 50));
//! assert!(!f.due());
//! let Chunk::Checkpoint(c) = f.checkpoint() else { unreachable!() };
//! f.checkpointed();
//! assert_eq!((c.tsc, c.events, c.allocations, c.peak_bytes, c.peak_tsc), (30, 3, 2, 100, 10));
//! assert_eq!(c.live.len(), 1);
//! ```

use std::collections::{HashMap, HashSet};

use crate::{Action, Checkpoint, Chunk, Raw};
use cuguard_format::MemoryKind;

/// The fewest events between two checkpoints; more while much is live (a checkpoint restates
/// it all), so that checkpoints take at most a quarter of a history's bytes.
pub const CHECKPOINT_EVENTS: u64 = 1 << 18;

/// What is live, by address and by context: a context's release removes its own entries, in
/// time proportional to them, however many other contexts hold.
#[derive(Default)]
pub struct LiveSet {
    pub by_addr: HashMap<u64, (u32, Raw)>,
    by_context: HashMap<u16, HashSet<u64>>,
}

impl LiveSet {
    /// `e` made by `thread`; what it replaces at its address (its free was never seen).
    pub fn insert(&mut self, thread: u32, e: &Raw) -> Option<Raw> {
        let old = self
            .by_addr
            .insert(e.addr, (thread, *e))
            .map(|(_, old)| old);
        if let Some(old) = old {
            self.forget(old.context, e.addr);
        }
        self.by_context.entry(e.context).or_default().insert(e.addr);
        old
    }

    /// A free: ends what is live at its address if it was made before it, and returns it.
    pub fn freed(&mut self, e: &Raw) -> Option<Raw> {
        let &(_, made) = self.by_addr.get(&e.addr)?;
        if made.tsc > e.tsc {
            return None;
        }
        self.by_addr.remove(&e.addr);
        self.forget(made.context, e.addr);
        Some(made)
    }

    /// Everything live in `context` went with it; returns what that was.
    pub fn released(&mut self, context: u16) -> Vec<Raw> {
        let mut gone = Vec::new();
        for addr in self.by_context.remove(&context).unwrap_or_default() {
            if let Some((_, r)) = self.by_addr.remove(&addr) {
                gone.push(r);
            }
        }
        gone
    }

    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }

    fn forget(&mut self, context: u16, addr: u64) {
        if let Some(set) = self.by_context.get_mut(&context) {
            set.remove(&addr);
            if set.is_empty() {
                self.by_context.remove(&context);
            }
        }
    }
}

/// A writer's view of its history: what is live (allocations and segments), and what the span
/// since the last checkpoint held.
#[derive(Default)]
pub struct Follow {
    pub live: LiveSet,
    pub segments: LiveSet,
    /// Live allocation bytes, host-pinned memory excepted.
    bytes: u64,
    /// The span since the last checkpoint (or the segment's beginning): its counts are the
    /// segment's, its peak the span's.
    span: Checkpoint,
    since: u64,
    /// The fewest events between checkpoints (0: [`CHECKPOINT_EVENTS`]).
    every: u64,
    /// The tags of live allocations, by address (a name id: [`Action::Tag`]).
    tags: HashMap<u64, u32>,
}

/// Whether an allocation's bytes count toward the peak (device memory: not host-pinned).
fn counted(r: &Raw) -> bool {
    crate::memory_of(r.kind) != Some(MemoryKind::HostPinned)
}

impl Follow {
    /// Follows one event (events come in time order).
    pub fn follow(&mut self, thread: u32, e: &Raw) {
        self.span.events += 1;
        self.span.tsc = self.span.tsc.max(e.tsc);
        self.since += 1;
        match Action::of(e.kind) {
            Some(Action::Alloc) => {
                self.span.allocations += 1;
                self.tags.remove(&e.addr);
                if let Some(old) = self.live.insert(thread, e) {
                    self.less(&old);
                }
                if counted(e) {
                    self.bytes += e.size;
                    if self.bytes > self.span.peak_bytes {
                        self.span.peak_bytes = self.bytes;
                        self.span.peak_tsc = e.tsc;
                    }
                }
            }
            Some(Action::Free) => {
                if let Some(made) = self.live.freed(e) {
                    self.tags.remove(&e.addr);
                    self.less(&made);
                }
            }
            Some(Action::Tag) => {
                if self
                    .live
                    .by_addr
                    .get(&e.addr)
                    .is_some_and(|(_, m)| m.tsc <= e.tsc)
                {
                    self.tags.insert(e.addr, e.size as u32);
                }
            }
            Some(Action::SegmentAlloc) => {
                self.segments.insert(thread, e);
            }
            Some(Action::SegmentFree) => {
                self.segments.freed(e);
            }
            Some(Action::ContextRelease) => {
                for r in self.live.released(e.context) {
                    self.tags.remove(&r.addr);
                    self.less(&r);
                }
                self.segments.released(e.context);
            }
            Some(Action::Oom) => self.span.ooms += 1,
            Some(Action::PhaseBegin | Action::PhaseEnd) | None => {}
        }
    }

    fn less(&mut self, r: &Raw) {
        if counted(r) {
            self.bytes = self.bytes.saturating_sub(r.size);
        }
    }

    /// Everything live (segments, then allocations), by time; a tagged allocation's tag right
    /// after it, at its moment (as the shim records a tag given as memory is made).
    pub fn live(&self) -> Vec<(u32, Raw)> {
        let tag = |&(thread, made): &(u32, Raw)| {
            let &id = self.tags.get(&made.addr)?;
            let kind = crate::kind(Action::Tag, MemoryKind::Device);
            Some((
                thread,
                Raw {
                    kind,
                    size: u64::from(id),
                    stack: crate::NONE,
                    ..made
                },
            ))
        };
        let mut all: Vec<(u32, Raw)> = self
            .segments
            .by_addr
            .values()
            .copied()
            .chain(
                self.live
                    .by_addr
                    .values()
                    .flat_map(|m| std::iter::once(*m).chain(tag(m))),
            )
            .collect();
        let is_tag = |r: &Raw| Action::of(r.kind) == Some(Action::Tag);
        all.sort_by_key(|(_, r)| (r.tsc, r.addr, is_tag(r)));
        all
    }

    /// Whether a checkpoint is due: [`CHECKPOINT_EVENTS`] since the last, and at least four
    /// times what it would restate.
    pub fn due(&self) -> bool {
        let restated = (self.live.len() + self.segments.len()) as u64;
        let every = if self.every == 0 {
            CHECKPOINT_EVENTS
        } else {
            self.every
        };
        self.since >= every.max(restated.saturating_mul(4))
    }

    /// A follower whose checkpoints come every `events` events at least (tests and benchmarks
    /// of small histories).
    pub fn every(events: u64) -> Follow {
        Follow {
            every: events.max(1),
            ..Follow::default()
        }
    }

    /// A checkpoint of now; once it is written, [`Self::checkpointed`] begins the next span.
    pub fn checkpoint(&self) -> Chunk {
        let mut c = self.span.clone();
        c.live = self.live();
        Chunk::Checkpoint(c)
    }

    /// The checkpoint was written: the next span begins.
    pub fn checkpointed(&mut self) {
        self.next_span();
    }

    /// A checkpoint was due but could not be written (no room): the span goes on, and the next
    /// is tried as far on again.
    pub fn postpone(&mut self) {
        self.since = 0;
    }

    /// A new segment begins (it restates what is live): its counts start over.
    pub fn begin_segment(&mut self) {
        self.span.events = 0;
        self.span.allocations = 0;
        self.next_span();
    }

    fn next_span(&mut self) {
        self.since = 0;
        self.span.ooms = 0;
        self.span.peak_bytes = self.bytes;
        self.span.peak_tsc = self.span.tsc;
    }
}
