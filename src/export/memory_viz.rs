//! A history as a PyTorch memory snapshot: the pickle that <https://pytorch.org/memory_viz> and
//! `torch.cuda._memory_viz` read (what `torch.cuda.memory._snapshot()` gives, pickled).
//!
//! # What the snapshot holds
//!
//! A dict with two keys, in PyTorch's order (`torch/csrc/cuda/memory_snapshot.cpp`,
//! `_memory_snapshot_pickled`):
//!
//! - `segments`: the memory held at one moment, a list of dicts with PyTorch's keys: `device`
//!   (the ordinal), `address`, `total_size`, `allocated_size`, `active_size`, `requested_size`,
//!   `stream` (the stream its allocation was made on, as the history keeps it: the program's
//!   `CUstream` handle, 0 for the legacy default stream, for a pool's chunk and for a call that
//!   takes none, `CU_STREAM_PER_THREAD` (2) for a thread's per-thread default stream),
//!   `segment_type` (`"large"`), `segment_pool_id` (`(0, 0)`, the default pool),
//!   `is_expandable` (false), `frames` and `blocks`. The blocks tile the segment in address
//!   order, with no gap or overlap, each a dict of `address`, `size`, `requested_size`, `state`
//!   and `frames`: `state` is `"active_allocated"` for a live allocation (its `requested_size`
//!   its size: the history knows no rounding) and `"inactive"` for the free space between them
//!   (`requested_size` 0, no frames).
//! - `device_traces`: one list per device, indexed by ordinal up to the highest one the history
//!   saw, of the events in time order, each a dict of `action`, `addr`, `size`, `stream` (the
//!   stream the allocation or segment it is about was made on, a free's included, as PyTorch
//!   writes the block's; 0 for `oom`), `time_us` (microseconds since the Unix epoch, as PyTorch
//!   writes them) and `frames`.
//!   `action` is `segment_alloc` and `segment_free` (a driver allocation made and given back),
//!   `alloc`, `free_requested` then `free_completed` at once (a free: the viewer folds the pair
//!   into one `free`, and its Allocator State History needs the pair to do so), or `oom` (a
//!   refusal: `size` asked for, and `device_free` in place of `addr`, written 0: the history does
//!   not know it).
//!
//! An event about an allocation the program tagged (`cuguard.tag`, `cuguard_tag_push`,
//! `cuguard.annotate`; a segment of its own's events too) also has `user_metadata`, the tag
//! (a string), after `stream`: where PyTorch writes the metadata the program set with
//! `torch.cuda.memory._set_memory_metadata` (`torch/csrc/cuda/memory_snapshot.cpp`,
//! `_memory_snapshot_pickled`: `trace_entry.insert(user_metadata_s, te.user_metadata_)`, from
//! `TraceEntry::user_metadata_` in `c10/cuda/CUDACachingAllocator.h`; pytorch/pytorch at
//! 127b7ad1e585). PyTorch writes it on every trace entry, empty when none was set, and not on
//! segments or blocks; cuguard writes it only where there is a tag, so that an untagged
//! history's snapshot is the one it was. The tag is the allocation's as the history ends the
//! read: one given after the fact (`annotate`) is on its `alloc` too.
//!
//! A frame is a dict of exactly `name`, `filename` and `line`, innermost first. A free's frames
//! are its allocation's (the history keeps no stack for a free). The same stack's list is written
//! once and memoized, as PyTorch's writer shares it too.
//!
//! No `allocator_settings` (PyTorch's allocator configuration: there is none to tell; the
//! viewer says "No allocator settings found") nor `external_annotations`.
//!
//! # What is a segment, what is a block
//!
//! Every driver allocation that a pool or a cache carves blocks from ([`Replay::segments`]) is a
//! segment. A program allocation ([`Replay::blocks`]) is a block of the segment that holds its
//! address, was live when it was made and is not given back before it; a program allocation in no segment (a
//! plain `cudaMalloc`, whoever made it: the program, a library, a framework's cache) is a
//! segment of its own with one block, itself, and its trace has `segment_alloc` and `alloc`
//! where it was made, `free_requested`, `free_completed` and `segment_free` where it went. So
//! the viewer's Active Memory Timeline shows every allocation, and its Active Cached Segment
//! Timeline every driver allocation. Pinned host memory is left out: it is not device memory.
//! Memory of an unknown device is shown as one more device after the highest known ordinal (as
//! `_profile_to_snapshot` in `torch/cuda/_memory_viz.py` places memory that is not on a GPU).
//!
//! PyTorch's expandable segments (`expandable_segments:True`) are pages mapped into one
//! reserved range; the history knows each page where it is mapped (before that at its handle:
//! a segment of its own from its making to its mapping), so each page is a segment here
//! (`is_expandable` false), and a tensor across pages is a block of its first page, cut at that
//! page's end (as [`tiles`] cuts any block past its segment). PyTorch's own snapshot draws the
//! range as one segment, growing by `segment_map` entries: not written here.
//!
//! # A window
//!
//! With `window = Some((from_ns, to_ns))` (nanoseconds since the process started), the
//! snapshot is taken at `to_ns`: `segments` holds what was live at that moment, and the traces
//! the events of `[from_ns, to_ns]`. That is what PyTorch's own snapshot is (the state when it
//! was taken, and the trace its ring buffer still held), and the two agree: the viewer's
//! Allocator State History walks the trace backwards from the state, and its timelines show
//! what the state holds with no `alloc` in the trace, and what is freed in the trace with no
//! `alloc` before, as live from the window's start. Without a window, the state at the history's end
//! and every event.
//!
//! # Integers
//!
//! Addresses, sizes and streams are written as PyTorch writes them, `static_cast<int64_t>`, so
//! every integer fits in 64 signed bits. The viewer reads an integer of up to 8 bytes as a JavaScript
//! number: exact below 2^53, far above any device address or stream handle (a host pointer).
//!
//! # Checking a snapshot
//!
//! `scripts/memory_viz_check.py` checks a snapshot as its readers will read it (the opcodes the
//! viewer's unpickler knows, PyTorch's keys, the tiling, the viewer's walk back from the state
//! through the trace); `scripts/memory_viz_torch.py` runs `torch/cuda/_memory_viz.py`'s own
//! readers on it, and `scripts/memory_viz_node.mjs` the viewer's JavaScript, each given the
//! file(s) from a PyTorch checkout or install (torch itself is not needed).
//!
//! # Events at one moment
//!
//! The trace orders events of one nanosecond as the viewer can replay them: frees of what was
//! made before, then segments given back, segments made, allocations made, and last the frees
//! of what was made and freed within that nanosecond.

use std::collections::HashMap;

use cuguard_format::MemoryKind;
use cuguard_format::wire::UNKNOWN_DEVICE;
use cuguard_history::replay::{Block, Replay};

use super::pickle::{Memo, Pickler};

/// One frame of a stack, as the viewer prints it (`filename:line:name`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VizFrame {
    /// The function.
    pub name: String,
    /// Its file (or module).
    pub filename: String,
    /// The line; 0 when unknown.
    pub line: u32,
}

/// The history `replay` as a pickled PyTorch memory snapshot (see the module's documentation),
/// restricted to `window` (`[from_ns, to_ns]`, nanoseconds since the process started) when
/// given. `frames` names a stack id's frames, innermost first; it is asked once per stack, never
/// for [`cuguard_history::NONE`] (no stack: no frames).
pub fn memory_viz(
    replay: &Replay,
    frames: &dyn Fn(u32) -> Vec<VizFrame>,
    window: Option<(u64, u64)>,
) -> Vec<u8> {
    memory_viz_with_free(replay, frames, window, &|_, _| None)
}

/// [`memory_viz`], with each `oom` entry's `device_free` from `device_free(time_ns, size)` (the
/// report's out-of-memory record of that refusal: the device's free memory then; 0 where it
/// has none, as PyTorch writes when it does not know).
pub fn memory_viz_with_free(
    replay: &Replay,
    frames: &dyn Fn(u32) -> Vec<VizFrame>,
    window: Option<(u64, u64)>,
    device_free: &dyn Fn(u64, u64) -> Option<u64>,
) -> Vec<u8> {
    let (from, to) = window.unwrap_or((0, u64::MAX));
    let model = Model::new(replay);
    let mut w = Writer {
        p: Pickler::new(),
        frames,
        stacks: HashMap::new(),
        start_unix_ns: replay.start_unix_ns,
        replay,
    };
    w.p.begin_dict();

    w.p.key("segments");
    w.p.begin_list();
    let mut live: Vec<&Seg> = model.segs.iter().filter(|s| s.block.live_at(to)).collect();
    live.sort_by_key(|s| (s.device, s.block.addr));
    for seg in live {
        w.segment(seg, to);
    }
    w.p.end();

    w.p.key("device_traces");
    let mut traces: Vec<Vec<Event>> = (0..model.devices).map(|_| Vec::new()).collect();
    let mut seq = 0;
    let mut push = |device: usize, t: u64, action: Action, b: &Block| {
        if from <= t && t <= to {
            traces[device].push(Event {
                t,
                rank: action.rank(b, t),
                seq,
                action,
                addr: b.addr,
                size: b.size,
                stack: b.stack,
                stream: b.stream,
                tag: b.tag,
            });
            seq += 1;
        }
    };
    for seg in &model.segs {
        let d = seg.device;
        let s = seg.block;
        push(d, s.start_ns, Action::SegmentAlloc, s);
        if seg.own {
            push(d, s.start_ns, Action::Alloc, s);
        }
        for &b in &seg.blocks {
            push(d, b.start_ns, Action::Alloc, b);
            if let Some(end) = b.end_ns {
                push(d, end, Action::Free, b);
            }
        }
        if let Some(end) = s.end_ns {
            if seg.own {
                push(d, end, Action::Free, s);
            }
            push(d, end, Action::SegmentFree, s);
        }
    }
    for o in &replay.ooms {
        let b = Block {
            start_ns: o.time_ns,
            end_ns: None,
            // An oom's event has no address: it carries the device's free memory instead.
            addr: device_free(o.time_ns, o.size).unwrap_or(0),
            size: o.size,
            stack: o.stack,
            thread: o.thread,
            memory: MemoryKind::Device,
            device: o.device,
            context: u16::MAX,
            released: false,
            stream: 0,
            tag: cuguard_history::NONE,
            carved: false,
        };
        push(model.index(o.device), o.time_ns, Action::Oom, &b);
    }
    w.p.begin_list();
    for mut trace in traces {
        trace.sort_unstable_by_key(|e| (e.t, e.rank, e.seq));
        w.p.begin_list();
        for e in &trace {
            w.event(e);
        }
        w.p.end();
    }
    w.p.end();

    w.p.end();
    w.p.finish()
}

/// Where each allocation goes in the snapshot.
struct Model<'a> {
    segs: Vec<Seg<'a>>,
    /// `device_traces`' length.
    devices: usize,
    /// The index of the device after the highest known ordinal: where memory of an unknown
    /// device goes.
    unknown: usize,
}

/// A segment: a driver allocation a pool or a cache carves blocks from, or a program allocation
/// of its own.
struct Seg<'a> {
    block: &'a Block,
    /// Whether it is a program allocation in no pool's segment: its own one block.
    own: bool,
    /// The viewer's device index.
    device: usize,
    /// The program allocations (or the cache's blocks) carved from it (none when `own`).
    blocks: Vec<&'a Block>,
}

impl<'a> Model<'a> {
    fn new(replay: &'a Replay) -> Model<'a> {
        let device_memory = |b: &&Block| b.memory != MemoryKind::HostPinned;
        let known = replay
            .blocks
            .iter()
            .chain(&replay.segments)
            .filter(device_memory)
            .map(|b| b.device)
            .chain(replay.ooms.iter().map(|o| o.device))
            .filter(|&d| d != UNKNOWN_DEVICE)
            .map(|d| d as usize + 1)
            .max()
            .unwrap_or(0);
        // One after the highest ordinal (`known` is it + 1).
        let unknown = known;
        let index = |device: u32| device_index(device, unknown);
        let mut devices = 0;
        let mut seen = |i: usize| {
            devices = devices.max(i + 1);
            i
        };

        // cuguard's pool's chunks, then a framework cache's segments (PyTorch's, whose blocks
        // are its tensors) that no chunk holds (one served by the pool is of the chunk: its
        // tensors are blocks of the chunk, the rest of which is free for them).
        let mut segs: Vec<Seg> = replay
            .segments
            .iter()
            .filter(device_memory)
            .map(|b| Seg {
                block: b,
                own: false,
                device: seen(index(b.device)),
                blocks: Vec::new(),
            })
            .collect();
        let chunks = Holders::new(&segs);
        let carved: Vec<&Block> = replay
            .blocks
            .iter()
            .filter(|b| b.carved && device_memory(b) && chunks.find(&segs, b).is_none())
            .collect();
        for b in carved {
            segs.push(Seg {
                block: b,
                own: false,
                device: seen(index(b.device)),
                blocks: Vec::new(),
            });
        }
        let pools = segs.len();
        let holders = Holders::new(&segs);
        let placed = replay.blocks.iter().filter(|b| !b.carved);
        for b in placed.chain(&replay.cache_blocks).filter(device_memory) {
            match holders.find(&segs, b) {
                Some(i) => segs[i].blocks.push(b),
                None => {
                    let device = seen(index(b.device));
                    segs.push(Seg {
                        block: b,
                        own: true,
                        device,
                        blocks: Vec::new(),
                    })
                }
            }
        }
        debug_assert!(segs[..pools].iter().all(|s| !s.own));
        for o in &replay.ooms {
            seen(index(o.device));
        }
        Model {
            segs,
            devices,
            unknown,
        }
    }

    /// The viewer's index of a device (an ordinal, or [`UNKNOWN_DEVICE`]).
    fn index(&self, device: u32) -> usize {
        device_index(device, self.unknown)
    }
}

/// Segments by address, with the highest end among each one and those before it: the
/// segments that may hold an address are those before its place whose reach passes it.
struct Holders {
    by_addr: Vec<usize>,
    reach: Vec<u64>,
}

impl Holders {
    fn new(segs: &[Seg]) -> Holders {
        let mut by_addr: Vec<usize> = (0..segs.len()).collect();
        by_addr.sort_by_key(|&i| segs[i].block.addr);
        let mut reach = Vec::with_capacity(by_addr.len());
        let mut most = 0u64;
        for &i in &by_addr {
            let s = segs[i].block;
            most = most.max(s.addr.saturating_add(s.size));
            reach.push(most);
        }
        Holders { by_addr, reach }
    }

    /// The index of the segment of `segs` (those it was made from) that holds `b`.
    fn find(&self, segs: &[Seg], b: &Block) -> Option<usize> {
        let end = self
            .by_addr
            .partition_point(|&i| segs[i].block.addr <= b.addr);
        (0..end)
            .rev()
            .take_while(|&k| self.reach[k] > b.addr)
            .map(|k| self.by_addr[k])
            .find(|&i| holds(segs[i].block, b))
    }
}

/// The viewer's index of `device`: its ordinal, or `unknown` (after every known one).
fn device_index(device: u32, unknown: usize) -> usize {
    if device == UNKNOWN_DEVICE {
        unknown
    } else {
        device as usize
    }
}

/// Whether `seg` holds `block`: its address, live when the block was made, and not gone before
/// it.
fn holds(seg: &Block, block: &Block) -> bool {
    block.addr >= seg.addr
        && block.addr - seg.addr < seg.size
        && seg.live_at(block.start_ns)
        && match (seg.end_ns, block.end_ns) {
            (None, _) => true,
            (Some(s), Some(b)) => b <= s,
            (Some(_), None) => false,
        }
}

/// What a trace entry says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    SegmentAlloc,
    Alloc,
    /// `free_requested` and `free_completed`, one after the other.
    Free,
    SegmentFree,
    Oom,
}

impl Action {
    /// Its place among the events of one nanosecond `t`, for the allocation `b` it is about (see
    /// the module's documentation).
    fn rank(self, b: &Block, t: u64) -> u8 {
        let made_before = b.start_ns < t;
        match self {
            Action::Free if made_before => 0,
            Action::SegmentFree if made_before => 1,
            Action::SegmentAlloc => 2,
            Action::Alloc => 3,
            Action::Free => 4,
            Action::SegmentFree => 5,
            Action::Oom => 6,
        }
    }
}

/// One entry of a device's trace (two for a free).
struct Event {
    t: u64,
    rank: u8,
    /// The order it was made in: the last key, so that the output is the same each time.
    seq: usize,
    action: Action,
    addr: u64,
    size: u64,
    stack: u32,
    /// The stream its allocation was made on.
    stream: u64,
    /// Its allocation's tag (a name id), or [`cuguard_history::NONE`].
    tag: u32,
}

/// One block of a segment's tiling.
struct Tile<'a> {
    addr: u64,
    size: u64,
    /// The allocation, or `None` for free space.
    block: Option<&'a Block>,
}

/// The blocks of `seg` at `t`: its allocations live then in address order, and the space between
/// them. An allocation that overlaps the one before it is left out, one that runs past the
/// segment's end is cut there (either happens only when events were lost).
fn tiles<'a>(seg: &'a Seg, t: u64) -> Vec<Tile<'a>> {
    let s = seg.block;
    if seg.own {
        return vec![Tile {
            addr: s.addr,
            size: s.size,
            block: Some(s),
        }];
    }
    let end = s.addr.saturating_add(s.size);
    let mut live: Vec<&Block> = seg
        .blocks
        .iter()
        .copied()
        .filter(|b| b.live_at(t))
        .collect();
    live.sort_by_key(|b| (b.addr, b.start_ns));
    let mut out = Vec::with_capacity(live.len() * 2 + 1);
    let mut at = s.addr;
    for b in live {
        if b.addr < at {
            continue;
        }
        if b.addr > at {
            out.push(Tile {
                addr: at,
                size: b.addr - at,
                block: None,
            });
        }
        let size = b.size.min(end - b.addr);
        out.push(Tile {
            addr: b.addr,
            size,
            block: Some(b),
        });
        at = b.addr + size;
    }
    if at < end {
        out.push(Tile {
            addr: at,
            size: end - at,
            block: None,
        });
    }
    out
}

/// An address, size or stream as PyTorch writes it: `static_cast<int64_t>`.
fn i64_of(v: u64) -> i64 {
    v as i64
}

struct Writer<'f> {
    p: Pickler,
    frames: &'f dyn Fn(u32) -> Vec<VizFrame>,
    /// Each stack's frame list, written once.
    stacks: HashMap<u32, Memo>,
    start_unix_ns: u64,
    /// The history: the tags' names.
    replay: &'f Replay,
}

impl Writer<'_> {
    /// A stack's frames: the list of dicts the first time, the memo's after.
    fn frames(&mut self, stack: u32) {
        if let Some(&m) = self.stacks.get(&stack) {
            self.p.get(m);
            return;
        }
        let frames = if stack == cuguard_history::NONE {
            Vec::new()
        } else {
            (self.frames)(stack)
        };
        self.p.begin_list();
        for f in &frames {
            self.p.begin_dict();
            self.p.key("name");
            self.p.str(&f.name);
            self.p.key("filename");
            self.p.str(&f.filename);
            self.p.key("line");
            self.p.int(i64::from(f.line));
            self.p.end();
        }
        self.p.end();
        let m = self.p.memoize();
        self.stacks.insert(stack, m);
    }

    fn segment(&mut self, seg: &Seg, t: u64) {
        let tiles = tiles(seg, t);
        let allocated: u64 = tiles
            .iter()
            .filter(|x| x.block.is_some())
            .map(|x| x.size)
            .sum();
        let s = seg.block;
        let p = &mut self.p;
        p.begin_dict();
        p.key("device");
        p.int(seg.device as i64);
        p.key("address");
        p.int(i64_of(s.addr));
        p.key("total_size");
        p.int(i64_of(s.size));
        for k in ["allocated_size", "active_size", "requested_size"] {
            p.key(k);
            p.int(i64_of(allocated));
        }
        p.key("stream");
        p.int(i64_of(s.stream));
        p.key("segment_type");
        p.key("large");
        p.key("segment_pool_id");
        p.tuple2(0, 0);
        p.key("is_expandable");
        p.bool(false);
        p.key("frames");
        self.frames(s.stack);
        self.p.key("blocks");
        self.p.begin_list();
        for x in &tiles {
            let p = &mut self.p;
            p.begin_dict();
            p.key("address");
            p.int(i64_of(x.addr));
            p.key("size");
            p.int(i64_of(x.size));
            p.key("requested_size");
            p.int(if x.block.is_some() { i64_of(x.size) } else { 0 });
            p.key("state");
            p.key(if x.block.is_some() {
                "active_allocated"
            } else {
                "inactive"
            });
            p.key("frames");
            self.frames(x.block.map_or(cuguard_history::NONE, |b| b.stack));
            self.p.end();
        }
        self.p.end();
        self.p.end();
    }

    fn event(&mut self, e: &Event) {
        let names: &[&'static str] = match e.action {
            Action::SegmentAlloc => &["segment_alloc"],
            Action::Alloc => &["alloc"],
            Action::Free => &["free_requested", "free_completed"],
            Action::SegmentFree => &["segment_free"],
            Action::Oom => &["oom"],
        };
        let time_us = i64_of(self.start_unix_ns.saturating_add(e.t) / 1000);
        for &name in names {
            let p = &mut self.p;
            p.begin_dict();
            p.key("action");
            p.key(name);
            if e.action == Action::Oom {
                p.key("device_free");
                p.int(i64_of(e.addr));
            } else {
                p.key("addr");
                p.int(i64_of(e.addr));
            }
            p.key("size");
            p.int(i64_of(e.size));
            p.key("stream");
            p.int(i64_of(e.stream));
            if e.tag != cuguard_history::NONE {
                p.key("user_metadata");
                p.str(self.replay.name(e.tag).unwrap_or("?"));
            }
            let p = &mut self.p;
            p.key("time_us");
            p.int(time_us);
            p.key("frames");
            self.frames(e.stack);
            self.p.end();
        }
    }
}
