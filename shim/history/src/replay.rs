//! What a history says happened, for the command: every allocation's life as a [`Block`] (when
//! it was made, when it went, where, how big, from which stack), the out-of-memory refusals,
//! the events lost, and what is needed to name the stacks.
//!
//! A bounded history is one or more segment files ([`crate::Header::segment`]), oldest first.
//! The oldest kept segment begins with a [`Chunk::Live`] chunk: what was live when it began,
//! made before the kept part of the history (those blocks start before [`Replay::begins_ns`]).
//!
//! ```
//! use cuguard_history::{Action, Chunk, Header, MemoryKind, Raw, kind, write_chunk};
//! use cuguard_history::replay::Replay;
//! let mut file = Header { version: cuguard_history::VERSION, pid: 7, start_unix_ns: 0, segment: 0, run: 0 }.encode().to_vec();
//! // 1 tsc tick = 1 ns here.
//! write_chunk(&mut file, &Chunk::Clock { tsc: 1_000, since_start_ns: 0, unix_ns: 0 });
//! write_chunk(&mut file, &Chunk::Clock { tsc: 2_000_001_000, since_start_ns: 2_000_000_000, unix_ns: 2_000_000_000 });
//! let ev = |tsc, action, size| Raw { tsc, addr: 0x7000_0000, size, stack: 0, context: 0, kind: kind(action, MemoryKind::Device), device: 1, stream: 0 };
//! write_chunk(&mut file, &Chunk::Events { thread: 5, events: vec![
//!     ev(500_001_000, Action::Alloc, 512 << 20),
//!     ev(1_500_001_000, Action::Free, 0),
//! ]});
//! write_chunk(&mut file, &Chunk::End { tsc: 2_000_001_000 });
//! let r = Replay::read(&[&file]).unwrap();
//! assert_eq!(r.blocks.len(), 1);
//! assert_eq!((r.blocks[0].start_ns, r.blocks[0].end_ns), (500_000_000, Some(1_500_000_000)));
//! assert_eq!(r.live_at(1_000_000_000).count(), 1);
//! assert_eq!(r.live_at(1_600_000_000).count(), 0);
//! assert!(r.whole);
//! ```

use std::collections::HashMap;

use crate::{Error, NONE};
use cuguard_format::MemoryKind;
use cuguard_format::wire::UNKNOWN_DEVICE;

/// One allocation's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// When it was made, nanoseconds since the process started.
    pub start_ns: u64,
    /// When it was freed (or lost with its context); `None` while it was still live when the
    /// history ends.
    pub end_ns: Option<u64>,
    pub addr: u64,
    pub size: u64,
    /// Its stack's id, or [`NONE`].
    pub stack: u32,
    /// The thread that made it.
    pub thread: u32,
    pub memory: MemoryKind,
    /// Device ordinal ([`UNKNOWN_DEVICE`] when unknown: the one spelling, the report's).
    pub device: u32,
    /// The context's id, `u16::MAX` for none.
    pub context: u16,
    /// Whether its end was its context's release rather than a free.
    pub released: bool,
    /// The stream it was made on (the `CUstream` handle; 0: the legacy default stream, or none).
    pub stream: u64,
    /// The program's tag for it: a name id ([`Replay::name`]), or [`NONE`].
    pub tag: u32,
    /// Whether a framework's cache carves blocks from it (a segment of PyTorch's caching
    /// allocator: its blocks are in [`Replay::cache_blocks`]), as known by the read's end.
    pub carved: bool,
}

impl Block {
    /// Whether it was live at `t_ns`: made at or before it, not yet gone.
    pub fn live_at(&self, t_ns: u64) -> bool {
        self.start_ns <= t_ns && self.end_ns.is_none_or(|e| e > t_ns)
    }

    /// The device's ordinal, if known.
    pub fn device(&self) -> Option<u32> {
        (self.device != UNKNOWN_DEVICE).then_some(self.device)
    }
}

/// An allocation refused for lack of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oom {
    pub time_ns: u64,
    /// Bytes asked for.
    pub size: u64,
    pub stack: u32,
    pub thread: u32,
    /// Device ordinal ([`UNKNOWN_DEVICE`] when unknown).
    pub device: u32,
}

/// Events lost between two moments (nanoseconds since the start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost {
    pub count: u64,
    pub from_ns: u64,
    pub to_ns: u64,
}

/// A module the stacks' addresses fall in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    pub start: u64,
    pub end: u64,
    pub bias: u64,
    pub path: String,
    pub build_id: Option<String>,
}

/// What a history says happened.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    pub pid: u32,
    /// The run's tag ([`crate::run_tag`] of `CUGUARD_RUN_ID`), 0 outside a run.
    pub run: u32,
    /// When the process started, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// Allocations handed to the program (and blocks of a cache, where the shim reads them),
    /// by start time.
    pub blocks: Vec<Block>,
    /// Driver allocations that cuguard's pool carves blocks from, by start time.
    pub segments: Vec<Block>,
    /// Blocks inside a framework's cache (PyTorch's tensors, [`MemoryKind::CacheBlock`]), by
    /// start time; the allocations they are carved from are [`Block::carved`] blocks.
    pub cache_blocks: Vec<Block>,
    pub ooms: Vec<Oom>,
    /// Events the shim could not record, and when.
    pub lost: Vec<Lost>,
    /// Each stack's words (innermost first: native ips, then tagged Python frames), by id.
    pub stacks: HashMap<u32, Vec<u64>>,
    pub modules: Vec<Module>,
    /// Python code objects by id: (file, function).
    pub codes: HashMap<u32, (String, String)>,
    /// From when the history knows every event: the start of the process, or of the oldest
    /// segment kept (what came before it was let go to stay within the bound).
    pub begins_ns: u64,
    /// The last moment the history knows of.
    pub ends_ns: u64,
    /// The first segment kept (0: nothing was let go).
    pub first_segment: u32,
    /// Whether the history ended whole (the process reached its end, or the shim's last drain
    /// at a fatal signal); false when it was killed, or is still running.
    pub whole: bool,
    /// Why the rest of a file could not be read: what came before is answered.
    pub cut: Option<Error>,
    /// Frees of addresses the history never saw made (made before it began, or lost).
    pub unmatched_frees: u64,
    /// The program's phases (NVTX ranges, `cuguard.phase`).
    pub phases: crate::phases::Phases,
    /// Values of allocations beyond their blocks' fields ([`crate::Action::Field`]), by block
    /// (address and start): name id and value.
    pub fields: HashMap<(u64, u64), Vec<(u32, u64)>>,
}

impl Replay {
    /// The text of name `id` (a phase's or a tag's: [`crate::Chunk::Name`]), if the history
    /// holds it.
    pub fn name(&self, id: u32) -> Option<&str> {
        self.phases.names.get(&id).map(String::as_str)
    }

    /// Keeps a value of block `b` ([`crate::bounded::Step::Field`]): a later one of the same
    /// name replaces it.
    pub(crate) fn keep_field(&mut self, b: &Block, name: u32, value: u64) {
        let list = self.fields.entry((b.addr, b.start_ns)).or_default();
        match list.iter_mut().find(|(n, _)| *n == name) {
            Some(kept) => kept.1 = value,
            None => list.push((name, value)),
        }
    }

    /// Block `b`'s value of the field `name` ([`crate::Action::Field`]), if the history gives
    /// one.
    pub fn field(&self, b: &Block, name: &str) -> Option<u64> {
        self.fields
            .get(&(b.addr, b.start_ns))?
            .iter()
            .find(|(n, _)| self.name(*n) == Some(name))
            .map(|(_, v)| *v)
    }

    /// What the history knows of block `b`, for building an allocation's core from it
    /// (`cuguard_format::Allocation::from_history`, and any core the `allocation_core!` macro
    /// declares).
    pub fn facts<'a>(&'a self, b: &'a Block) -> Facts<'a> {
        Facts {
            replay: self,
            block: b,
        }
    }

    /// The text of a block's tag, if it has one.
    pub fn tag_of(&self, b: &Block) -> Option<&str> {
        (b.tag != NONE).then(|| self.name(b.tag).unwrap_or("?"))
    }

    /// The cache blocks live at `t_ns`.
    pub fn cache_live_at(&self, t_ns: u64) -> impl Iterator<Item = &Block> {
        self.cache_blocks.iter().filter(move |b| b.live_at(t_ns))
    }

    /// The blocks live at `t_ns`.
    pub fn live_at(&self, t_ns: u64) -> impl Iterator<Item = &Block> {
        self.blocks.iter().filter(move |b| b.live_at(t_ns))
    }

    /// The blocks made in `[from_ns, to_ns]` and still live at `to_ns`: what that window kept.
    pub fn kept_between(&self, from_ns: u64, to_ns: u64) -> impl Iterator<Item = &Block> {
        self.blocks
            .iter()
            .filter(move |b| b.start_ns >= from_ns && b.live_at(to_ns))
    }

    /// The moment of the most live device memory on `device` (an ordinal, or
    /// [`UNKNOWN_DEVICE`]; `None` for every device together), and how much: the first such
    /// moment, and of those, the first with the most cache-block bytes (a cache's tensors: the
    /// segment a tensor grew the cache by is idle until the tensor is carved from it).
    pub fn peak(&self, device: Option<u32>) -> (u64, u64) {
        let mut steps: Vec<(u64, i64, i64)> = Vec::with_capacity(self.blocks.len() * 2);
        let on = |b: &Block| device.is_none_or(|d| d == b.device);
        for b in &self.blocks {
            if b.memory == MemoryKind::HostPinned || !on(b) {
                continue;
            }
            steps.push((b.start_ns, b.size as i64, 0));
            if let Some(e) = b.end_ns {
                steps.push((e, -(b.size as i64), 0));
            }
        }
        for b in self.cache_blocks.iter().filter(|b| on(b)) {
            steps.push((b.start_ns, 0, b.size as i64));
            if let Some(e) = b.end_ns {
                steps.push((e, 0, -(b.size as i64)));
            }
        }
        // Frees first at one moment: a block given back and another made at once do not add.
        steps.sort_unstable();
        let (mut live, mut tensors, mut best) = (0i64, 0i64, (0u64, 0u64, 0i64));
        for (t, d, dt) in steps {
            live += d;
            tensors += dt;
            if live > 0 && (live, tensors) > (best.1 as i64, best.2) {
                best = (t, live as u64, tensors);
            }
        }
        (best.0, best.1)
    }

    /// The first out-of-memory refusal's moment.
    pub fn first_oom_ns(&self) -> Option<u64> {
        self.ooms.iter().map(|o| o.time_ns).min()
    }

    /// Events lost in all.
    pub fn lost_events(&self) -> u64 {
        self.lost.iter().map(|l| l.count).sum()
    }
}

/// Turns time-stamp-counter readings into nanoseconds since the start, between the history's
/// clock pairs (and beyond them, along the nearest two).
pub(crate) struct Clock {
    pairs: Vec<(u64, u64)>,
    /// The pair last converted between (readings come mostly in time order).
    hint: std::cell::Cell<usize>,
}

impl Clock {
    pub(crate) fn new(mut pairs: Vec<(u64, u64)>) -> Clock {
        pairs.sort_unstable();
        pairs.dedup_by_key(|p| p.0);
        Clock {
            pairs,
            hint: std::cell::Cell::new(1),
        }
    }

    pub(crate) fn last_ns(&self) -> u64 {
        self.pairs.last().map_or(0, |p| p.1)
    }

    pub(crate) fn ns(&self, tsc: u64) -> u64 {
        let p = &self.pairs;
        match p.len() {
            0 => 0,
            1 => p[0].1,
            n => {
                // The pairs around `tsc` (the first pair after it, the nearest two at the ends):
                // the last ones again, else found.
                let mut i = self.hint.get();
                let fits = (1..n).contains(&i)
                    && (i == 1 || p[i - 1].0 <= tsc)
                    && (i == n - 1 || tsc < p[i].0);
                if !fits {
                    i = p.partition_point(|q| q.0 <= tsc).clamp(1, n - 1);
                    self.hint.set(i);
                }
                let ((t0, n0), (t1, n1)) = (p[i - 1], p[i]);
                let slope = (n1 as f64 - n0 as f64) / (t1 as f64 - t0 as f64);
                let v = n0 as f64 + (tsc as f64 - t0 as f64) * slope;
                v.max(0.0).round() as u64
            }
        }
    }
}

/// "No stack".
pub const NO_STACK: u32 = NONE;

/// One word of a stack ([`Replay::stacks`]), as the shim's capture writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    /// A native frame's return address.
    Native(u64),
    /// A Python frame: its code's id ([`Replay::codes`]), its line, and whether it is the first
    /// frame one call of the evaluation loop ran.
    Python {
        code: u32,
        line: Option<u32>,
        entry: bool,
    },
    /// The stack ends under an origin: the id of the origin's stack (work done for another
    /// thread).
    Origin(u32),
}

impl Word {
    /// Reads one word (the layout of the shim's `stack` module: a Python frame is tagged
    /// `0xc0de` in its top 16 bits, with its entry bit at 47, code id at 24..47 and line at
    /// 0..24; an origin `0xc0df` with the stack id below).
    pub fn of(w: u64) -> Word {
        match w >> 48 {
            0xc0de => {
                let line = w & 0xff_ffff;
                Word::Python {
                    code: (w >> 24 & 0x7f_ffff) as u32,
                    line: (line != 0xff_ffff).then_some(line as u32),
                    entry: w & 1 << 47 != 0,
                }
            }
            0xc0df => Word::Origin(w as u32),
            _ => Word::Native(w),
        }
    }
}

/// What a history knows of one block ([`Replay::facts`]): its event's fields, its tag and the
/// values written beside it ([`crate::Action::Field`]), as an allocation's core reads them.
pub struct Facts<'a> {
    replay: &'a Replay,
    block: &'a Block,
}

impl<'a> cuguard_format::allocation::HistoryFacts<'a> for Facts<'a> {
    fn address(&self) -> u64 {
        self.block.addr
    }
    fn size(&self) -> u64 {
        self.block.size
    }
    fn memory(&self) -> MemoryKind {
        self.block.memory
    }
    fn device(&self) -> u32 {
        self.block.device
    }
    fn context(&self) -> Option<u32> {
        (self.block.context != u16::MAX).then_some(u32::from(self.block.context))
    }
    fn thread(&self) -> u64 {
        u64::from(self.block.thread)
    }
    fn start_ns(&self) -> u64 {
        self.block.start_ns
    }
    fn stack(&self) -> Option<u64> {
        (self.block.stack != NONE).then_some(u64::from(self.block.stack))
    }
    fn tag(&self) -> Option<&'a str> {
        self.replay.tag_of(self.block)
    }
    fn field(&self, name: &str) -> Option<u64> {
        self.replay.field(self.block, name)
    }
    fn text(&self, id: u64) -> Option<&'a str> {
        self.replay.name(u32::try_from(id).ok()?)
    }
}
