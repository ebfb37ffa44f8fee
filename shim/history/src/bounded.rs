//! Reading a history in memory that does not grow with its length: [`History::open`] walks the
//! files' chunks once, keeping only what names the stacks, the clocks, the losses and where
//! each checkpoint ([`crate::Chunk::Checkpoint`]) is; a moment or a window is then read from the
//! checkpoint before it ([`History::window`]), and the whole run is walked event by event
//! without keeping what ended ([`History::walk`]).
//!
//! Events come out in time order: the writer sorts each drain's events, and a drain's events
//! are all older than the clock at its head. An event whose thread was held between taking its
//! moment and recording it can land in a later drain; it is applied where it lands (a free
//! older than the block now at its address ends nothing: that block's predecessor already
//! ended when the address was made again).
//!
//! ```
//! use cuguard_history::{Action, Chunk, Header, MemoryKind, Raw, kind, write_chunk};
//! use cuguard_history::bounded::History;
//! let mut file = Header { version: cuguard_history::VERSION, pid: 7, start_unix_ns: 0, segment: 0, run: 0 }.encode().to_vec();
//! write_chunk(&mut file, &Chunk::Clock { tsc: 0, since_start_ns: 0, unix_ns: 0 });
//! write_chunk(&mut file, &Chunk::Clock { tsc: 1_000, since_start_ns: 1_000, unix_ns: 1_000 });
//! let ev = |tsc, action, size| Raw { tsc, addr: 0x7000, size, stack: 0, context: 0, kind: kind(action, MemoryKind::Device), device: 1, stream: 0 };
//! write_chunk(&mut file, &Chunk::Events { thread: 5, events: vec![ev(100, Action::Alloc, 64), ev(600, Action::Free, 0)] });
//! write_chunk(&mut file, &Chunk::End { tsc: 1_000 });
//! let h = History::open(vec![&file[..]]).unwrap();
//! assert_eq!(h.window(300, 300).unwrap().blocks.len(), 1);
//! assert_eq!(h.window(700, 700).unwrap().live_at(700).count(), 0);
//! assert_eq!(h.peak(), (100, 64));
//! ```

use std::collections::{HashMap, HashSet};

use cuguard_format::MemoryKind;

use crate::replay::{Block, Clock, Oom, Replay};
use crate::{
    Action, CHECKPOINT_HEAD, Checkpoint, Chunk, Error, HEADER_LEN, Raw, checksum, decode_chunk,
};

impl Replay {
    /// Reads a history's segment files, oldest first, whole ([`History`] reads them, then
    /// every block): an error when the first file is not a history this version reads, or when
    /// the files are of different processes; a file cut short or damaged after its header is
    /// read up to there ([`Replay::cut`]).
    pub fn read(files: &[&[u8]]) -> Result<Replay, Error> {
        History::open(files.to_vec())?.replay()
    }
}

/// Bytes a history's file is read by at once.
const READ_BYTES: usize = 4 << 20;
/// The most clock pairs kept: past it every other one goes (the time-stamp counter runs
/// evenly, so the pairs left convert as well).
const MAX_CLOCKS: usize = 1 << 16;
/// Clocks past a window's end read before stopping: a drain's events are older than the clock
/// at its head, and an event that missed its drain lands in the next one.
const CLOCKS_PAST: u32 = 3;

/// Where a history's bytes come from: a file, read at offsets, or bytes in memory.
pub trait Source {
    /// The bytes there are.
    fn size(&self) -> u64;
    /// Reads into `buf` from `offset`: how many bytes were read (fewer only at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize>;
}

impl Source for &[u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let from = (offset as usize).min(self.len());
        let n = buf.len().min(self.len() - from);
        buf[..n].copy_from_slice(&self[from..from + n]);
        Ok(n)
    }
}

impl Source for Vec<u8> {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        (&self[..]).read_at(buf, offset)
    }
}

impl Source for std::fs::File {
    fn size(&self) -> u64 {
        self.metadata().map_or(0, |m| m.len())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match FileExt::read_at(self, &mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }
}

use std::os::unix::fs::FileExt;

/// One chunk's frame.
#[derive(Clone, Copy, Debug)]
struct Frame {
    at: u64,
    kind: u8,
    len: u32,
    sum: u32,
}

/// A file's chunks in order, read through one bounded buffer.
struct Chunks<'a, S: Source> {
    src: &'a S,
    size: u64,
    next: u64,
    buf: Vec<u8>,
    buf_at: u64,
}

impl<'a, S: Source> Chunks<'a, S> {
    fn new(src: &'a S, from: u64, size: u64) -> Self {
        Chunks {
            src,
            size,
            next: from,
            buf: Vec::new(),
            buf_at: 0,
        }
    }

    /// `n` bytes from `at`, through the buffer.
    fn bytes(&mut self, at: u64, n: usize) -> Result<&[u8], Error> {
        let end = at + n as u64;
        if end > self.size {
            return Err(Error::Truncated { at: self.size });
        }
        if at < self.buf_at || end > self.buf_at + self.buf.len() as u64 {
            let want = n.max(READ_BYTES).min((self.size - at) as usize);
            self.buf.resize(want, 0);
            let got = self
                .src
                .read_at(&mut self.buf, at)
                .map_err(|_| Error::Truncated { at })?;
            self.buf.truncate(got);
            self.buf_at = at;
            if got < n {
                return Err(Error::Truncated {
                    at: at + got as u64,
                });
            }
        }
        let from = (at - self.buf_at) as usize;
        Ok(&self.buf[from..from + n])
    }

    /// The next chunk's frame; `None` at the end of the file.
    fn frame(&mut self) -> Result<Option<Frame>, Error> {
        let at = self.next;
        if at >= self.size {
            return Ok(None);
        }
        let (kind, len, sum) = crate::frame_head(self.bytes(at, 9)?, at)?;
        if at + 9 + u64::from(len) > self.size {
            return Err(Error::Truncated { at: self.size });
        }
        self.next = at + 9 + u64::from(len);
        Ok(Some(Frame { at, kind, len, sum }))
    }

    /// A chunk's payload, its checksum checked.
    fn payload(&mut self, f: Frame) -> Result<&[u8], Error> {
        let p = self.bytes(f.at + 9, f.len as usize)?;
        if checksum(f.kind, p) != f.sum {
            return Err(Error::Corrupt {
                at: f.at,
                why: "a chunk's checksum does not match",
            });
        }
        Ok(p)
    }

    /// A chunk decoded, its checksum checked.
    fn chunk(&mut self, f: Frame, version: u32) -> Result<Option<Chunk>, Error> {
        let p = self.payload(f)?;
        decode_chunk(f.kind, p, version, f.at)
    }
}

/// Where a read can begin: a checkpoint, or a segment file's beginning (whose `Live` chunks, if
/// any, are what was live then).
#[derive(Clone, Copy, Debug)]
struct Start {
    file: usize,
    /// The checkpoint's frame; `None`: the file's beginning.
    checkpoint: Option<Frame>,
    /// Every event before it is at or before this moment (ns since the start).
    ready_ns: u64,
}

/// A span of the history between two starts, as its checkpoint at the end summed it up (or as
/// read, for a file's last span).
#[derive(Clone, Copy, Debug)]
struct Span {
    /// Where reading it begins ([`History::starts`]).
    start: usize,
    /// Where it ends: the checkpoint that sums it up, or `None` for the end of its file.
    end: Option<usize>,
    peak_bytes: u64,
    /// The peak's moment, where it was read (a file's last span).
    peak_ns: Option<u64>,
    ooms: u64,
}

/// One step of the history, in time order.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// A block live where the read began (made before it: its `start_ns` says when).
    Restated(Block),
    /// A block made.
    Made(Block),
    /// A block ended: its `end_ns` says when.
    Ended(Block),
    /// A segment (memory a pool or cache carves from) taken, and given back.
    SegmentMade(Block),
    SegmentEnded(Block),
    Oom(Oom),
    /// A live block named after it was made ([`Action::Tag`] after the fact): the block as it
    /// is now, its tag set. A tag given as the block was made is in its [`Step::Made`].
    Tagged(Block),
    /// A block found to be a segment of a framework's cache (the first cache block inside it,
    /// or a writer's [`Action::Carve`]): the block as it is now, [`Block::carved`] set.
    Carved(Block),
    /// A block inside a framework's cache ([`MemoryKind::CacheBlock`]: a PyTorch tensor) made,
    /// or live where the read began, and one ended.
    CacheMade(Block),
    CacheEnded(Block),
    /// A value of the allocation just made or restated beyond its block's own fields
    /// ([`Action::Field`]): the block, the field's name id and the value. It follows the
    /// block's [`Step::Made`] or [`Step::Restated`].
    Field(Block, u32, u64),
}

/// A history opened for reading in bounded memory.
pub struct History<S: Source> {
    files: Vec<S>,
    versions: Vec<u32>,
    /// Each file's sound part: where its first chunk that could not be read begins (its size
    /// when every chunk could).
    sound: Vec<u64>,
    /// Everything but the blocks: the process, the span, the losses, and what names the
    /// stacks. [`Self::window`] returns a copy with the window's blocks.
    meta: Replay,
    clock: Clock,
    /// Where reads can begin, in file order.
    starts: Vec<Start>,
    spans: Vec<Span>,
    allocations: u64,
    /// What the reader had to work around (a damaged checkpoint), one line each, each once.
    notes: std::cell::RefCell<Vec<String>>,
}

/// Where a stream begins: after `at` in `file`, with `state` live; from [`History::starts`]'s
/// `start`.
struct Begin {
    start: usize,
    file: usize,
    at: u64,
    state: Vec<(u32, Raw)>,
}

/// Where a stream stops.
#[derive(Clone, Copy)]
enum Stop {
    /// At the end of the history.
    End,
    /// At the end of this file.
    FileEnd(usize),
    /// Before this chunk (a checkpoint) of this file.
    Before(usize, u64),
    /// [`CLOCKS_PAST`] clocks after this moment (ns since the start).
    After(u64),
}

/// What a stream left: the blocks and segments still open where it stopped, the frees it could
/// not match, and its last event's moment.
struct Left {
    open: OpenSet,
    segments: OpenSet,
    /// Blocks inside a framework's cache, apart: they share addresses with the segments they
    /// are carved from.
    cache: OpenSet,
    unmatched: u64,
    last_ns: u64,
    /// Tags given after the fact later than this are not applied (a window read past its end
    /// names its blocks as they were at its end).
    tags_until: u64,
}

impl Left {
    /// The cache block `b` made (or restated): the block that holds it is the cache's
    /// segment from now on, if it was not yet.
    fn made_in_cache(&mut self, b: Block, visit: &mut dyn FnMut(Step)) {
        if let Some(old) = self.cache.made(b) {
            visit(Step::CacheEnded(old));
        }
        for h in self.open.overlapping(b.addr, b.size) {
            if let Some(segment) = self.open.carve(h, b.start_ns) {
                visit(Step::Carved(segment));
            }
        }
        visit(Step::CacheMade(b));
    }

    /// The block `b` ended: a cache's segment takes the blocks still inside it along.
    fn ended(&mut self, b: Block, visit: &mut dyn FnMut(Step)) {
        if b.carved {
            let t = b.end_ns.unwrap_or(b.start_ns);
            for inner in self.cache.within(b.addr, b.size) {
                if let Some(c) = self.cache.freed(inner, t) {
                    visit(Step::CacheEnded(c));
                }
            }
        }
        visit(Step::Ended(b));
    }
}

impl<S: Source> History<S> {
    /// The process, the span, the losses, and what names the stacks (no blocks).
    pub fn meta(&self) -> &Replay {
        &self.meta
    }

    /// Allocations the history holds (those it restates at its beginning included).
    pub fn allocations(&self) -> u64 {
        self.allocations
    }

    /// Checkpoints found (none in a history of layout 1).
    pub fn checkpoints(&self) -> usize {
        self.starts
            .iter()
            .filter(|s| s.checkpoint.is_some())
            .count()
    }

    /// What the reader had to work around, one line each (a damaged checkpoint read past).
    pub fn notes(&self) -> Vec<String> {
        self.notes.borrow().clone()
    }

    /// What was live at `from_ns` and everything made up to `to_ns` (with when it ended, where
    /// that is before the read stopped, a little past `to_ns`; still live is `end_ns: None`),
    /// with the refusals in the window: read from the checkpoint before `from_ns`.
    pub fn window(&self, from_ns: u64, to_ns: u64) -> Result<Replay, Error> {
        let to_ns = to_ns.max(from_ns);
        let k = self
            .starts
            .iter()
            .rposition(|s| s.ready_ns <= from_ns)
            .unwrap_or(0);
        let begin = self.begin_at(k)?;
        let mut out = self.meta.clone();
        let keep = |b: &Block| {
            b.start_ns <= to_ns && (b.start_ns >= from_ns || b.end_ns.is_none_or(|e| e > from_ns))
        };
        let left = self.stream(begin, Stop::After(to_ns), &mut |step| match step {
            Step::Ended(b) if keep(&b) => out.blocks.push(b),
            Step::SegmentEnded(b) if keep(&b) => out.segments.push(b),
            Step::CacheEnded(b) if keep(&b) => out.cache_blocks.push(b),
            Step::Oom(o) if o.time_ns >= from_ns && o.time_ns <= to_ns => out.ooms.push(o),
            Step::Field(b, name, value) if keep(&b) => out.keep_field(&b, name, value),
            _ => {}
        })?;
        out.blocks
            .extend(left.open.blocks.into_values().filter(|b| keep(b)));
        out.segments
            .extend(left.segments.blocks.into_values().filter(|b| keep(b)));
        out.cache_blocks
            .extend(left.cache.blocks.into_values().filter(|b| keep(b)));
        out.blocks.sort_by_key(|b| (b.start_ns, b.addr));
        out.segments.sort_by_key(|b| (b.start_ns, b.addr));
        out.cache_blocks.sort_by_key(|b| (b.start_ns, b.addr));
        out.unmatched_frees = left.unmatched;
        Ok(out)
    }

    /// The whole history's blocks (memory grows with it: for a history known to be small).
    pub fn replay(&self) -> Result<Replay, Error> {
        self.window(0, u64::MAX)
    }

    /// The moment of the most live memory (host-pinned memory excepted, every device together)
    /// and how much: the first such moment. Read from the span that holds it.
    pub fn peak(&self) -> (u64, u64) {
        let mut best: Option<&Span> = None;
        for s in &self.spans {
            if best.is_none_or(|b| s.peak_bytes > b.peak_bytes) {
                best = Some(s);
            }
        }
        let Some(span) = best else {
            return (0, 0);
        };
        if let Some(ns) = span.peak_ns {
            return (ns, span.peak_bytes);
        }
        let stop = match span.end {
            Some(e) => match self.starts[e].checkpoint {
                Some(f) => Stop::Before(self.starts[e].file, f.at),
                None => Stop::FileEnd(self.starts[e].file),
            },
            None => Stop::FileEnd(self.starts[span.start].file),
        };
        let mut peak = Peak::default();
        match self
            .begin_at(span.start)
            .and_then(|b| self.stream(b, stop, &mut |step| peak.note(step)))
        {
            Ok(_) => peak.done(),
            Err(_) => (0, 0),
        }
    }

    /// The first refusal's moment, read from the first span that holds one.
    pub fn first_oom_ns(&self) -> Option<u64> {
        self.oom_ns(0)
    }

    /// The moment of refusal number `n` (0 the first) of those the history holds, read from
    /// the first span that holds one.
    pub fn oom_ns(&self, n: usize) -> Option<u64> {
        let span = self.spans.iter().find(|s| s.ooms > 0)?;
        let (mut seen, mut found) = (0usize, None);
        let begin = self.begin_at(span.start).ok()?;
        self.stream(begin, Stop::End, &mut |step| {
            if let Step::Oom(o) = step {
                if seen == n && found.is_none() {
                    found = Some(o.time_ns);
                }
                seen += 1;
            }
        })
        .ok()?;
        found
    }

    /// Every step of the history, in time order, from its beginning (what it restates first).
    pub fn walk(&self, visit: &mut dyn FnMut(Step)) -> Result<(), Error> {
        let begin = self.begin_at(0)?;
        self.stream(begin, Stop::End, visit).map(drop)
    }

    /// A start's fixed fields, for a checkpoint.
    fn checkpoint_head(&self, file: usize, f: Frame) -> Option<Checkpoint> {
        let mut head = vec![0u8; CHECKPOINT_HEAD.min(f.len as usize)];
        let got = self.files[file].read_at(&mut head, f.at + 9).ok()?;
        crate::decode_checkpoint_head(&head[..got])
    }

    /// The index of the start `begin` was made from.
    fn begin_at(&self, k: usize) -> Result<Begin, Error> {
        let mut k = k.min(self.starts.len().saturating_sub(1));
        loop {
            let s = self.starts.get(k).copied().ok_or(Error::NotHistory)?;
            let Some(f) = s.checkpoint else {
                return Ok(Begin {
                    start: k,
                    file: s.file,
                    at: HEADER_LEN as u64,
                    state: self.live_chunks(s.file)?,
                });
            };
            let src = &self.files[s.file];
            let mut chunks = Chunks::new(src, f.at, self.sound[s.file]);
            match chunks.chunk(f, self.versions[s.file]) {
                Ok(Some(Chunk::Checkpoint(c))) => {
                    return Ok(Begin {
                        start: k,
                        file: s.file,
                        at: f.at + 9 + u64::from(f.len),
                        state: c.live,
                    });
                }
                other => {
                    let why = match other {
                        Err(Error::Corrupt { why, .. }) => why.to_string(),
                        Err(e) => e.to_string(),
                        _ => "not a checkpoint".into(),
                    };
                    let note = format!(
                        "a checkpoint at byte {} is damaged ({why}): read from the one before it, more slowly",
                        f.at
                    );
                    let mut notes = self.notes.borrow_mut();
                    if !notes.contains(&note) {
                        notes.push(note);
                    }
                    k = k.saturating_sub(1);
                }
            }
        }
    }

    /// The `Live` chunks at the beginning of `file`: what was live when it began.
    fn live_chunks(&self, file: usize) -> Result<Vec<(u32, Raw)>, Error> {
        let src = &self.files[file];
        let mut chunks = Chunks::new(src, HEADER_LEN as u64, self.sound[file]);
        let mut out = Vec::new();
        while let Some(f) = chunks.frame()? {
            match f.kind {
                crate::LIVE => {
                    if let Some(Chunk::Live { events }) = chunks.chunk(f, self.versions[file])? {
                        out.extend(events);
                    }
                }
                crate::EVENTS | crate::CHECKPOINT => break,
                _ => {}
            }
        }
        Ok(out)
    }

    /// Reads events from `begin` until `stop`, in time order, calling `visit` for each step.
    fn stream(&self, begin: Begin, stop: Stop, visit: &mut dyn FnMut(Step)) -> Result<Left, Error> {
        let mut left = Left {
            open: OpenSet::default(),
            segments: OpenSet::default(),
            cache: OpenSet::default(),
            unmatched: 0,
            last_ns: 0,
            tags_until: match stop {
                Stop::After(ns) => ns,
                _ => u64::MAX,
            },
        };
        let mut state = begin.state;
        state.sort_by_key(|(_, r)| r.tsc);
        let mut state = state.into_iter().peekable();
        while let Some((thread, r)) = state.next() {
            let mut b = self.block(thread, &r, self.clock.ns(r.tsc));
            match Action::of(r.kind) {
                Some(Action::Alloc) if b.memory == MemoryKind::CacheBlock => {
                    b.tag = marks_after(thread, &r, &mut state).tag;
                    left.made_in_cache(b, visit);
                }
                Some(Action::Alloc) => {
                    let marks = marks_after(thread, &r, &mut state);
                    (b.tag, b.carved) = (marks.tag, marks.carved);
                    left.open.made(b);
                    visit(Step::Restated(b));
                    marks.visit_fields(b, visit);
                }
                Some(Action::SegmentAlloc) => {
                    left.segments.made(b);
                    visit(Step::SegmentMade(b));
                }
                _ => {}
            }
        }
        let mut group: Vec<(u32, Raw)> = Vec::new();
        let mut past = 0u32;
        for file in begin.file..self.files.len() {
            let src = &self.files[file];
            let from = if file == begin.file {
                begin.at
            } else {
                HEADER_LEN as u64
            };
            let mut chunks = Chunks::new(src, from, self.sound[file]);
            while let Some(f) = chunks.frame()? {
                if let Stop::Before(sf, at) = stop
                    && sf == file
                    && f.at >= at
                {
                    self.apply(&mut group, &mut left, visit);
                    return Ok(left);
                }
                match f.kind {
                    crate::EVENTS => {
                        if let Some(Chunk::Events { thread, events }) =
                            chunks.chunk(f, self.versions[file])?
                        {
                            group.extend(events.into_iter().map(|e| (thread, e)));
                        }
                    }
                    crate::CLOCK => {
                        self.apply(&mut group, &mut left, visit);
                        if let Stop::After(ns) = stop
                            && let Some(Chunk::Clock { since_start_ns, .. }) =
                                chunks.chunk(f, self.versions[file])?
                            && since_start_ns > ns
                        {
                            past += 1;
                            if past >= CLOCKS_PAST {
                                return Ok(left);
                            }
                        }
                    }
                    _ => {}
                }
            }
            if let Stop::FileEnd(sf) = stop
                && sf == file
            {
                break;
            }
        }
        self.apply(&mut group, &mut left, visit);
        Ok(left)
    }

    /// The block `r` makes, at `start_ns` (its moment converted).
    fn block(&self, thread: u32, r: &Raw, start_ns: u64) -> Block {
        Block {
            start_ns,
            end_ns: None,
            addr: r.addr,
            size: r.size,
            stack: r.stack,
            thread,
            memory: crate::memory_of(r.kind).unwrap_or(MemoryKind::Device),
            device: r.ordinal(),
            context: r.context,
            released: false,
            stream: r.stream,
            tag: crate::NONE,
            carved: false,
        }
    }

    /// Applies a drain's events, in time order.
    fn apply(&self, group: &mut Vec<(u32, Raw)>, left: &mut Left, visit: &mut dyn FnMut(Step)) {
        group.sort_by_key(|(_, r)| r.tsc);
        let mut events = group.drain(..).peekable();
        while let Some((thread, r)) = events.next() {
            let (Some(action), Some(_)) = (Action::of(r.kind), crate::memory_of(r.kind)) else {
                continue;
            };
            let t = self.clock.ns(r.tsc);
            left.last_ns = left.last_ns.max(t);
            match action {
                Action::Alloc => {
                    let mut b = self.block(thread, &r, t);
                    let marks = marks_after(thread, &r, &mut events);
                    (b.tag, b.carved) = (marks.tag, marks.carved);
                    if b.memory == MemoryKind::CacheBlock {
                        left.made_in_cache(b, visit);
                        continue;
                    }
                    if let Some(old) = left.open.made(b) {
                        left.ended(old, visit);
                    }
                    visit(Step::Made(b));
                    marks.visit_fields(b, visit);
                }
                Action::SegmentAlloc => {
                    let b = self.block(thread, &r, t);
                    if let Some(old) = left.segments.made(b) {
                        visit(Step::SegmentEnded(old));
                    }
                    visit(Step::SegmentMade(b));
                }
                Action::Free if crate::memory_of(r.kind) == Some(MemoryKind::CacheBlock) => {
                    match left.cache.freed(r.addr, t) {
                        Some(b) => visit(Step::CacheEnded(b)),
                        None => left.unmatched += 1,
                    }
                }
                Action::Free => match left.open.freed(r.addr, t) {
                    Some(b) => left.ended(b, visit),
                    None => left.unmatched += 1,
                },
                Action::SegmentFree => match left.segments.freed(r.addr, t) {
                    Some(b) => visit(Step::SegmentEnded(b)),
                    None => left.unmatched += 1,
                },
                Action::Oom => visit(Step::Oom(Oom {
                    time_ns: t,
                    size: r.size,
                    stack: r.stack,
                    thread,
                    device: r.ordinal(),
                })),
                Action::ContextRelease => {
                    let ctx = r.addr as u16;
                    for b in left.open.released(ctx, t) {
                        left.ended(b, visit);
                    }
                    for b in left.segments.released(ctx, t) {
                        visit(Step::SegmentEnded(b));
                    }
                }
                Action::Tag if t <= left.tags_until => {
                    let set = if crate::memory_of(r.kind) == Some(MemoryKind::CacheBlock) {
                        &mut left.cache
                    } else {
                        &mut left.open
                    };
                    if let Some(b) = set.tagged(r.addr, t, r.size as u32) {
                        visit(Step::Tagged(b));
                    }
                }
                Action::Carve => {
                    if let Some(b) = left.open.carve(r.addr, t) {
                        visit(Step::Carved(b));
                    }
                }
                // In their own chunks ([`crate::Chunk::Phases`]), read when the history opens;
                // a field apart from the allocation it completes has nothing to complete.
                Action::Tag | Action::PhaseBegin | Action::PhaseEnd | Action::Field => {}
            }
        }
    }
}

/// What the writer said of the block an allocation makes, in the events right after it.
#[derive(Default)]
struct Marks {
    /// Its tag as it was made ([`Action::Tag`]), [`crate::NONE`] without.
    tag: u32,
    /// Whether it is a cache's segment ([`Action::Carve`], restated).
    carved: bool,
    /// Its values beyond its block's fields ([`Action::Field`]): name id and value.
    fields: Vec<(u32, u64)>,
}

impl Marks {
    /// Gives the block's fields, after its own step.
    fn visit_fields(&self, b: Block, visit: &mut dyn FnMut(Step)) {
        for &(name, value) in &self.fields {
            visit(Step::Field(b, name, value));
        }
    }
}

/// What the writer said of the block `alloc` makes, in the events right after it (same
/// thread, moment and address), taken from `events`.
fn marks_after<I: Iterator<Item = (u32, Raw)>>(
    thread: u32,
    alloc: &Raw,
    events: &mut std::iter::Peekable<I>,
) -> Marks {
    let mark = |(t, r): &(u32, Raw)| {
        *t == thread
            && matches!(
                Action::of(r.kind),
                Some(Action::Tag | Action::Carve | Action::Field)
            )
            && r.addr == alloc.addr
            && r.tsc == alloc.tsc
    };
    let mut marks = Marks {
        tag: crate::NONE,
        ..Marks::default()
    };
    while let Some((_, r)) = events.next_if(mark) {
        match Action::of(r.kind) {
            Some(Action::Tag) => marks.tag = r.size as u32,
            Some(Action::Field) => marks.fields.push((r.stack, r.size)),
            _ => marks.carved = true,
        }
    }
    marks
}

/// A hasher for addresses, ids and context ids: splitmix64's finalizer (the keys are the
/// program's own addresses or numbers counted up, not chosen to collide; aligned addresses have
/// every bit mixed into the low ones a table indexes by), for maps touched at every event. The
/// command's replay models use it too (`cuguard::replay`).
#[derive(Default)]
pub struct Mix(u64);

impl std::hash::Hasher for Mix {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        let mut z = v ^ self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.0 = z ^ (z >> 31);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }
}

type Fast = std::hash::BuildHasherDefault<Mix>;

/// Blocks not yet ended, by address and by context.
#[derive(Default)]
struct OpenSet {
    blocks: HashMap<u64, Block, Fast>,
    by_context: HashMap<u16, HashSet<u64, Fast>, Fast>,
    /// By address in order, once a cache block was looked up in them.
    holders: crate::holders::Holders,
}

impl OpenSet {
    /// `b` made; the block it replaces at its address (whose free was never seen), ended now.
    fn made(&mut self, b: Block) -> Option<Block> {
        let old = self.blocks.insert(b.addr, b).map(|mut old| {
            old.end_ns = Some(b.start_ns);
            old
        });
        if let Some(old) = &old {
            self.forget(old.context, old.addr);
        }
        self.by_context.entry(b.context).or_default().insert(b.addr);
        self.holders.made(b.addr, b.size);
        old
    }

    /// The open blocks that hold any byte of `[addr, addr + size)`.
    fn overlapping(&mut self, addr: u64, size: u64) -> Vec<u64> {
        let blocks = &self.blocks;
        self.holders
            .overlapping(addr, size, || blocks.values().map(|b| (b.addr, b.size)))
    }

    /// The open blocks that begin in `[base, base + size)`.
    fn within(&mut self, base: u64, size: u64) -> Vec<u64> {
        let blocks = &self.blocks;
        self.holders
            .within(base, size, || blocks.values().map(|b| (b.addr, b.size)))
    }

    /// The block at `addr`, made by `t`, is a cache's segment: the block, when that is news.
    fn carve(&mut self, addr: u64, t: u64) -> Option<Block> {
        let b = self.blocks.get_mut(&addr)?;
        if b.carved || b.start_ns > t {
            return None;
        }
        b.carved = true;
        Some(*b)
    }

    /// The block at `addr` freed at `t`; `None` when none was made there before `t`.
    fn freed(&mut self, addr: u64, t: u64) -> Option<Block> {
        let b = self.blocks.get(&addr)?;
        if b.start_ns > t {
            return None;
        }
        let mut b = self.blocks.remove(&addr)?;
        b.end_ns = Some(t);
        self.forget(b.context, addr);
        Some(b)
    }

    /// The block at `addr` named `tag` at `t`; `None` when none was made there before `t`.
    fn tagged(&mut self, addr: u64, t: u64, tag: u32) -> Option<Block> {
        let b = self.blocks.get_mut(&addr)?;
        if b.start_ns > t {
            return None;
        }
        b.tag = tag;
        Some(*b)
    }

    /// Every block of `context`, ended at `t` with it.
    fn released(&mut self, context: u16, t: u64) -> Vec<Block> {
        let mut gone = Vec::new();
        for addr in self.by_context.remove(&context).unwrap_or_default() {
            if let Some(mut b) = self.blocks.remove(&addr) {
                self.holders.gone(addr);
                b.end_ns = Some(t);
                b.released = true;
                gone.push(b);
            }
        }
        gone.sort_by_key(|b| (b.start_ns, b.addr));
        gone
    }

    fn forget(&mut self, context: u16, addr: u64) {
        self.holders.gone(addr);
        if let Some(set) = self.by_context.get_mut(&context) {
            set.remove(&addr);
            if set.is_empty() {
                self.by_context.remove(&context);
            }
        }
    }
}

/// The most live memory over steps in time order, frees first at one moment: the first moment
/// it was reached, and how much (as [`Replay::peak`] finds it). Of the moments with the most, the
/// first with the most cache-block bytes (a cache's tensors: the segment a tensor grew the cache
/// by is idle until the tensor is carved from it, a moment later).
#[derive(Default)]
struct Peak {
    live: i64,
    tensors: i64,
    at: Option<u64>,
    pending: (i64, i64),
    best: (u64, u64, i64),
}

impl Peak {
    fn note(&mut self, step: Step) {
        let (t, d) = match step {
            Step::Restated(b) | Step::Made(b) if b.memory != MemoryKind::HostPinned => {
                (b.start_ns, (b.size as i64, 0))
            }
            Step::Ended(b) if b.memory != MemoryKind::HostPinned => {
                (b.end_ns.unwrap_or(b.start_ns), (-(b.size as i64), 0))
            }
            Step::CacheMade(b) => (b.start_ns, (0, b.size as i64)),
            Step::CacheEnded(b) => (b.end_ns.unwrap_or(b.start_ns), (0, -(b.size as i64))),
            _ => return,
        };
        if self.at.is_some_and(|a| a != t) {
            self.settle();
        }
        self.at = Some(t);
        self.pending.0 += d.0;
        self.pending.1 += d.1;
    }

    fn settle(&mut self) {
        let (live, tensors) = std::mem::take(&mut self.pending);
        self.live += live;
        self.tensors += tensors;
        if let Some(t) = self.at
            && (self.live, self.tensors) > (self.best.1 as i64, self.best.2)
            && self.live > 0
        {
            self.best = (t, self.live as u64, self.tensors);
        }
    }

    fn done(mut self) -> (u64, u64) {
        self.settle();
        (self.best.0, self.best.1)
    }
}

/// A file's last span, as read: its allocations, what it restated, its refusals, its peak.
#[derive(Default)]
struct Tail {
    made: u64,
    restated: u64,
    ooms: u64,
    peak: Peak,
}

impl Tail {
    fn note(&mut self, step: Step) {
        match step {
            Step::Made(_) => self.made += 1,
            Step::Restated(_) => self.restated += 1,
            Step::Oom(_) => self.ooms += 1,
            _ => {}
        }
        self.peak.note(step);
    }
}

/// Halves a list of clock pairs, keeping the first and the last.
fn thin(clocks: &mut Vec<(u64, u64)>) {
    let last = clocks.last().copied();
    let mut i = 0;
    clocks.retain(|_| {
        i += 1;
        i % 2 == 1
    });
    if let Some(last) = last
        && clocks.last() != Some(&last)
    {
        clocks.push(last);
    }
}

mod open;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cache;
