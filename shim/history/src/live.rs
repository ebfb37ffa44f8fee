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

use crate::bounded::Mix;
use crate::{Action, Checkpoint, Chunk, Raw};
use cuguard_format::MemoryKind;

/// The maps here are touched at every event the shim's writer drains: keyed by addresses and
/// context ids, they hash with [`Mix`], as the readers' do. With the standard library's SipHash
/// and the index by context kept from the start, the writer took 2,840-2,900 instructions a
/// tensor pair (alloc and free, `scripts/tensor_pair_bench.py` under callgrind), nearly half
/// of them hashing; 1,390-1,470 since.
type Fast = std::hash::BuildHasherDefault<Mix>;

/// The fewest events between two checkpoints; more while much is live (a checkpoint restates
/// it all), so that checkpoints take at most a quarter of a history's bytes.
pub const CHECKPOINT_EVENTS: u64 = 1 << 18;

/// What is live, by address and, from the first context released on, by context: a context's
/// release removes its own entries, in time proportional to them, however many other contexts
/// hold.
#[derive(Default)]
pub struct LiveSet {
    pub by_addr: HashMap<u64, (u32, Raw), Fast>,
    /// The addresses of each context's entries: built at the first release of a context from
    /// what is live then, and kept up to date afterwards. Until then (most programs release
    /// their contexts at their end, and a cache's blocks are never released by context: they
    /// go with their segment) an event costs no look-up here.
    by_context: Option<ByContext>,
    /// By address in order, once a cache block was looked up in them.
    holders: crate::holders::Holders,
}

type ByContext = HashMap<u16, HashSet<u64, Fast>, Fast>;

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
        if let Some(by_context) = &mut self.by_context {
            by_context.entry(e.context).or_default().insert(e.addr);
        }
        self.holders.made(e.addr, e.size);
        old
    }

    /// The live allocations that hold any byte of `[addr, addr + size)`.
    pub fn overlapping(&mut self, addr: u64, size: u64) -> Vec<u64> {
        let by_addr = &self.by_addr;
        self.holders.overlapping(addr, size, || {
            by_addr.values().map(|(_, r)| (r.addr, r.size))
        })
    }

    /// The live allocations that begin in `[base, base + size)`.
    pub fn within(&mut self, base: u64, size: u64) -> Vec<u64> {
        let by_addr = &self.by_addr;
        self.holders.within(base, size, || {
            by_addr.values().map(|(_, r)| (r.addr, r.size))
        })
    }

    /// A free: ends what is live at its address if it was made before it, and returns it.
    pub fn freed(&mut self, e: &Raw) -> Option<Raw> {
        // One look-up: taken out, and put back in the rare case it was made after the free.
        let (thread, made) = self.by_addr.remove(&e.addr)?;
        if made.tsc > e.tsc {
            self.by_addr.insert(e.addr, (thread, made));
            return None;
        }
        self.forget(made.context, e.addr);
        Some(made)
    }

    /// Everything live in `context` went with it; returns what that was.
    pub fn released(&mut self, context: u16) -> Vec<Raw> {
        let by_addr = &self.by_addr;
        let by_context = self.by_context.get_or_insert_with(|| {
            let mut index = ByContext::default();
            for (&addr, (_, r)) in by_addr {
                index.entry(r.context).or_default().insert(addr);
            }
            index
        });
        let mut gone = Vec::new();
        for addr in by_context.remove(&context).unwrap_or_default() {
            if let Some((_, r)) = self.by_addr.remove(&addr) {
                self.holders.gone(addr);
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
        self.holders.gone(addr);
        let Some(by_context) = &mut self.by_context else {
            return;
        };
        if let Some(set) = by_context.get_mut(&context) {
            set.remove(&addr);
            if set.is_empty() {
                by_context.remove(&context);
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
    tags: HashMap<u64, u32, Fast>,
    /// The values written beside live allocations ([`Action::Field`]), by address: name id and
    /// value.
    fields: HashMap<u64, Vec<(u32, u64)>, Fast>,
    /// Blocks inside a framework's cache ([`MemoryKind::CacheBlock`]), apart: they share
    /// addresses with the allocations they are carved from. Not counted in the peak: their
    /// segments are.
    pub cache: LiveSet,
    /// The tags of live cache blocks, by address.
    cache_tags: HashMap<u64, u32, Fast>,
    /// The live allocations that are a cache's segments (a cache block was found inside).
    carved: HashSet<u64, Fast>,
    /// Live cache-block bytes (a cache's tensors), and those at the span's peak: of the moments
    /// with the most live memory, the peak is the first with the most tensors (a moment where
    /// the cache grew by a segment, before the tensor that asked for it was carved, shows the
    /// segment idle).
    tensors: u64,
    peak_tensors: u64,
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
        let cached = crate::memory_of(e.kind) == Some(MemoryKind::CacheBlock);
        match Action::of(e.kind) {
            Some(Action::Alloc) if cached => self.made_in_cache(thread, e),
            Some(Action::Free) if cached => {
                if let Some(made) = self.cache.freed(e) {
                    self.cache_tags.remove(&e.addr);
                    self.tensors = self.tensors.saturating_sub(made.size);
                }
            }
            Some(Action::Tag) if cached => {
                if self.cache.by_addr.contains_key(&e.addr) {
                    self.cache_tags.insert(e.addr, e.size as u32);
                }
            }
            Some(Action::Alloc) => {
                self.span.allocations += 1;
                self.tags.remove(&e.addr);
                self.forget_fields(e.addr);
                if let Some(old) = self.live.insert(thread, e) {
                    self.less(&old);
                }
                if counted(e) {
                    self.bytes += e.size;
                    if self.bytes > self.span.peak_bytes {
                        self.span.peak_bytes = self.bytes;
                        self.span.peak_tsc = e.tsc;
                        self.peak_tensors = self.tensors;
                    }
                }
            }
            Some(Action::Free) => {
                if let Some(made) = self.live.freed(e) {
                    self.tags.remove(&e.addr);
                    self.forget_fields(e.addr);
                    self.less(&made);
                    self.uncarve(&made);
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
            Some(Action::Field) if !cached => self.field(e),
            Some(Action::SegmentAlloc) => {
                self.segments.insert(thread, e);
            }
            Some(Action::SegmentFree) => {
                self.segments.freed(e);
            }
            Some(Action::ContextRelease) => {
                for r in self.live.released(e.context) {
                    self.tags.remove(&r.addr);
                    self.forget_fields(r.addr);
                    self.less(&r);
                    self.uncarve(&r);
                }
                self.segments.released(e.context);
            }
            Some(Action::Oom) => self.span.ooms += 1,
            Some(Action::Carve) => {
                if self.live.by_addr.contains_key(&e.addr) {
                    self.carved.insert(e.addr);
                }
            }
            Some(Action::PhaseBegin | Action::PhaseEnd | Action::Field) | None => {}
        }
    }

    /// A cache block made: the live allocation that holds it is the cache's segment.
    fn made_in_cache(&mut self, thread: u32, e: &Raw) {
        if let Some(old) = self.cache.insert(thread, e) {
            self.cache_tags.remove(&e.addr);
            self.tensors = self.tensors.saturating_sub(old.size);
        }
        self.tensors += e.size;
        if self.bytes == self.span.peak_bytes && self.tensors > self.peak_tensors {
            self.peak_tensors = self.tensors;
            self.span.peak_tsc = e.tsc;
        }
        for h in self.live.overlapping(e.addr, e.size) {
            self.carved.insert(h);
        }
    }

    /// The allocation `r` is gone: if it was a cache's segment, the blocks still inside it
    /// went with it.
    fn uncarve(&mut self, r: &Raw) {
        if self.carved.remove(&r.addr) {
            for inner in self.cache.within(r.addr, r.size) {
                let free = Raw {
                    tsc: u64::MAX,
                    ..self.cache.by_addr[&inner].1
                };
                self.cache.freed(&free);
                self.cache_tags.remove(&inner);
            }
        }
    }

    /// A value written beside the allocation at `e.addr` as it was made ([`Action::Field`]).
    /// Out of the line of every other event's (none of the shim's events is one yet).
    #[cold]
    fn field(&mut self, e: &Raw) {
        if self
            .live
            .by_addr
            .get(&e.addr)
            .is_some_and(|(_, m)| m.tsc == e.tsc)
        {
            let list = self.fields.entry(e.addr).or_default();
            list.retain(|(name, _)| *name != e.stack);
            list.push((e.stack, e.size));
        }
    }

    /// The allocation at `addr` is gone or replaced: its values go (a look-up only when some
    /// allocation has any: the drain follows every event).
    fn forget_fields(&mut self, addr: u64) {
        if !self.fields.is_empty() {
            self.fields.remove(&addr);
        }
    }

    fn less(&mut self, r: &Raw) {
        if counted(r) {
            self.bytes = self.bytes.saturating_sub(r.size);
        }
    }

    /// Everything live (segments, allocations, cache blocks), by time; what the writer said of
    /// an allocation right after it, at its moment: that it is a cache's segment
    /// ([`Action::Carve`]), its tag (as the shim records a tag given as memory is made), its
    /// values beside it ([`Action::Field`]).
    pub fn live(&self) -> Vec<(u32, Raw)> {
        let mark = |(thread, made): (u32, Raw), action: Action, size: u64, stack: u32| {
            let memory = crate::memory_of(made.kind).unwrap_or_default();
            let raw = Raw {
                kind: crate::kind(action, memory),
                size,
                stack,
                ..made
            };
            (thread, raw)
        };
        let none: &[(u32, u64)] = &[];
        let with_marks = |m: &(u32, Raw), tags: &HashMap<u64, u32, Fast>, carved: bool| {
            let made = *m;
            let fields = self.fields.get(&made.1.addr).map_or(none, Vec::as_slice);
            std::iter::once(made)
                .chain(carved.then(|| mark(made, Action::Carve, 0, crate::NONE)))
                .chain(
                    tags.get(&made.1.addr)
                        .map(|&id| mark(made, Action::Tag, u64::from(id), crate::NONE)),
                )
                .chain(
                    fields
                        .iter()
                        .map(move |&(name, value)| mark(made, Action::Field, value, name)),
                )
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
                    .flat_map(|m| with_marks(m, &self.tags, self.carved.contains(&m.1.addr))),
            )
            .chain(
                self.cache
                    .by_addr
                    .values()
                    .flat_map(|m| with_marks(m, &self.cache_tags, false)),
            )
            .collect();
        // An allocation, then its marks; a cache block after the segment it was carved from.
        let rank = |r: &Raw| match (Action::of(r.kind), crate::memory_of(r.kind)) {
            (Some(Action::Carve), _) => 1,
            (Some(Action::Tag), Some(MemoryKind::CacheBlock)) => 3,
            (Some(Action::Tag | Action::Field), _) => 1,
            (_, Some(MemoryKind::CacheBlock)) => 2,
            _ => 0,
        };
        all.sort_by_key(|(_, r)| (r.tsc, r.addr, rank(r)));
        all
    }

    /// Whether a checkpoint is due: [`CHECKPOINT_EVENTS`] since the last, and at least four
    /// times what it would restate.
    pub fn due(&self) -> bool {
        let restated = (self.live.len() + self.segments.len() + self.cache.len()) as u64;
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
        self.peak_tensors = self.tensors;
    }
}

#[cfg(test)]
mod tests {
    use super::LiveSet;
    use crate::{Action, MemoryKind, Raw, kind};

    fn made(tsc: u64, addr: u64, context: u16) -> Raw {
        Raw {
            tsc,
            addr,
            size: 16,
            stack: 0,
            context,
            kind: kind(Action::Alloc, MemoryKind::Device),
            device: 1,
            stream: 0,
        }
    }

    fn addrs(mut gone: Vec<Raw>) -> Vec<u64> {
        gone.sort_by_key(|r| r.addr);
        gone.iter().map(|r| r.addr).collect()
    }

    /// The index by context is built at the first release from what is live then (frees and
    /// replacements before it included), and followed from then on.
    #[test]
    fn a_release_ends_its_contexts_entries_before_and_after_the_index_is_built() {
        let mut s = LiveSet::default();
        s.insert(1, &made(1, 0x10, 0));
        s.insert(1, &made(2, 0x20, 1));
        s.insert(1, &made(3, 0x30, 0));
        s.insert(1, &made(4, 0x40, 0));
        assert!(s.freed(&made(5, 0x30, 0)).is_some());
        // A free drained before the allocation it follows ends nothing.
        assert!(s.freed(&made(0, 0x40, 0)).is_none());
        // 0x10 made again in context 1, its free never seen.
        assert_eq!(s.insert(1, &made(6, 0x10, 1)).map(|r| r.context), Some(0));
        assert_eq!(addrs(s.released(0)), [0x40]);
        assert_eq!(s.len(), 2);
        s.insert(2, &made(7, 0x50, 1));
        s.insert(2, &made(8, 0x60, 2));
        assert!(s.freed(&made(9, 0x20, 1)).is_some());
        assert_eq!(addrs(s.released(1)), [0x10, 0x50]);
        assert_eq!(addrs(s.released(0)), Vec::<u64>::new());
        assert_eq!(addrs(s.released(2)), [0x60]);
        assert!(s.is_empty());
    }
}
