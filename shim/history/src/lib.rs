//! The history file: every allocation and free the shim saw, recorded raw and compact, and read
//! back by the command. One crate for both sides, so the layout is written down once.
//!
//! The shim's allocation path appends one fixed-size [`Raw`] record (32 bytes) to its thread's
//! buffer and does nothing else. Its own thread drains the buffers into the file as
//! [`Chunk::Events`], encoded here at 8 to 16 bytes an event. Stacks are interned once
//! ([`Chunk::Stack`]), as heaptrack and memray do: record raw, interpret later.
//!
//! ```
//! use cuguard_history::{Action, Chunk, Header, Raw, Reader, write_chunk};
//! let mut file = Header { version: cuguard_history::VERSION, pid: 7, start_unix_ns: 1, segment: 0, run: 0 }.encode().to_vec();
//! let events = [
//!     Raw { tsc: 100, addr: 0x7f00_0000_0000, size: 1 << 20, stack: 3, context: 0, kind: Action::Alloc as u8, device: 1, stream: 0 },
//!     Raw { tsc: 250, addr: 0x7f00_0000_0000, size: 0, stack: u32::MAX, context: 0, kind: Action::Free as u8, device: 1, stream: 0x5000 },
//! ];
//! write_chunk(&mut file, &Chunk::Events { thread: 42, events: events.to_vec() });
//! let mut r = Reader::new(&file).unwrap();
//! assert_eq!(r.header().pid, 7);
//! match r.next().unwrap().unwrap() {
//!     Chunk::Events { thread, events: got } => assert_eq!((thread, got), (42, events.to_vec())),
//!     other => panic!("{other:?}"),
//! }
//! assert!(r.next().is_none());
//! ```
//!
//! # Layout (version 2), little-endian
//!
//! A 32-byte header ([`Header`]): magic `CUGHIST1`, version (u32), pid (u32), the process's start
//! (u64 nanoseconds since the Unix epoch), the segment's number (u32), the run's tag (u32). Then chunks to the end of the file,
//! each `kind (u8) · length (u32) · checksum (u32, FNV-1a 32 of the kind and the payload) ·
//! payload`. A reader rejects a
//! checksum that does not match ([`Error::Corrupt`]) and a chunk cut short ([`Error::Truncated`]);
//! a file that ends at a chunk boundary without [`Chunk::End`] is whole up to there (its process
//! was killed, or is still running). Kinds it does not know (from a newer writer of the same
//! version) are skipped.
//!
//! An events chunk is `thread (varint) · count (varint) · events`, each event
//! `tag (u8) · Δtsc (zigzag varint) · Δaddress (zigzag varint) · [size (varint)] · stack+1
//! (varint) · [context (varint) · device (u8)]`: the deltas run from the previous event of the
//! chunk (0 for the first); the size is there for the actions that have one ([`Action::sized`]);
//! the context, device and stream when the tag's bit 7 says they changed. (Version 1, read still,
//! had no stream: its events are on stream 0.)
//!
//! A checkpoint chunk ([`Chunk::Checkpoint`]) restates everything live after the events before
//! it, with what the span since the checkpoint before it held (its peak, its refusals), so that
//! a reader reaches any moment from the checkpoint before it rather than from the beginning.
//!
//! The program's phases (NVTX ranges, `cuguard.phase`) are events too ([`Action::PhaseBegin`],
//! [`Action::PhaseEnd`]), written apart in [`Chunk::Phases`] chunks (encoded as events chunks
//! are) with their names in [`Chunk::Name`] chunks (`id (varint) · text`): a reader finds them
//! when it opens the file, without decoding the allocations' events, and a reader older than
//! them skips both kinds ([`phases`] pairs them).

use std::fmt;

pub use cuguard_format::MemoryKind;

/// The first bytes of every history file.
pub const MAGIC: &[u8; 8] = b"CUGHIST1";
/// The layout this crate writes, and the newest it reads.
pub const VERSION: u32 = 2;
/// The oldest layout it reads (version 1: no streams, no checkpoints).
pub const OLDEST_VERSION: u32 = 1;
/// The header's size in bytes.
pub const HEADER_LEN: usize = 32;
/// "No stack" and "no context" in [`Raw`].
pub const NONE: u32 = u32::MAX;
/// The largest chunk a reader accepts (a writer stays far below it).
pub const MAX_CHUNK: u32 = 64 << 20;

/// What an event is: the low 4 bits of [`Raw::kind`]; the high 4 bits are the memory
/// ([`MemoryKind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Action {
    /// Memory handed to the program (or to a cache's block).
    Alloc = 1,
    /// Memory given back.
    Free = 2,
    /// An allocation refused for lack of memory (`size` asked for, no address).
    Oom = 3,
    /// A context destroyed or reset (`addr` is the context id); its live memory went with it.
    ContextRelease = 4,
    /// A driver allocation that a pool or a cache carves blocks from (a segment).
    SegmentAlloc = 5,
    /// A segment given back to the driver.
    SegmentFree = 6,
    /// A phase of the program began (an NVTX range pushed or started, `cuguard.phase`):
    /// `size` is its name's id ([`Chunk::Name`]), `addr` its range's key (0 for a range
    /// nested on its thread, else the id a start gave), `stream` its payload + 1 (0: none).
    /// Written in [`Chunk::Phases`], never among the allocations' events.
    PhaseBegin = 7,
    /// A phase ended: `addr` is its range's key (0: the thread's innermost nested range).
    PhaseEnd = 8,
    /// The program named the allocation at `addr` (`cuguard.tag`, `cuguard_tag_push`,
    /// `cuguard.annotate`): `size` is the tag's name id ([`Chunk::Name`]). Written among the
    /// allocations' events, right after the [`Action::Alloc`] it names (same moment) when the
    /// tag was set as it was made, later for a tag given after the fact.
    Tag = 9,
    /// The allocation at `addr` is a segment of a framework's cache: blocks of
    /// [`MemoryKind::CacheBlock`] (PyTorch's tensors) are carved from it. Readers find this from
    /// the blocks themselves; a writer restates it (right after the allocation, at its moment)
    /// where it restates what is live, so that a read from there knows a segment whose blocks
    /// were all freed is still the cache's.
    Carve = 10,
    /// A value of the allocation made at `addr` beyond what its [`Action::Alloc`] holds: a field
    /// of the allocation's core (`cuguard_format::allocation`) by name. `stack` is the field's
    /// name id ([`Chunk::Name`]), `size` its value (a text field's: its text's name id).
    /// Written right after the allocation it completes (same thread and moment), as a tag given
    /// as the memory is made, and restated with it; the reader gives it as [`bounded::Step::Field`]
    /// and keeps it by block ([`replay::Replay::field`]), so that a field added to the core
    /// reaches the history's readers when the shim writes it here.
    Field = 11,
}

impl Action {
    /// The action of a kind byte.
    pub fn of(kind: u8) -> Option<Action> {
        Some(match kind & 0x0f {
            1 => Action::Alloc,
            2 => Action::Free,
            3 => Action::Oom,
            4 => Action::ContextRelease,
            5 => Action::SegmentAlloc,
            6 => Action::SegmentFree,
            7 => Action::PhaseBegin,
            8 => Action::PhaseEnd,
            9 => Action::Tag,
            10 => Action::Carve,
            11 => Action::Field,
            _ => return None,
        })
    }

    /// Whether events of this action carry a size.
    pub fn sized(self) -> bool {
        matches!(
            self,
            Action::Alloc
                | Action::Oom
                | Action::SegmentAlloc
                | Action::PhaseBegin
                | Action::Tag
                | Action::Field
        )
    }

    /// Whether it is a phase's beginning or end ([`Chunk::Phases`]' events).
    pub fn is_phase(self) -> bool {
        matches!(self, Action::PhaseBegin | Action::PhaseEnd)
    }
}

/// The memory an event is about: the high 4 bits of [`Raw::kind`], numbered as
/// [`MemoryKind`] (the one enumeration of memory kinds, the report's crate's).
pub fn memory_of(kind: u8) -> Option<MemoryKind> {
    MemoryKind::of_number(kind >> 4)
}

/// The kind byte of `action` on `memory`.
pub const fn kind(action: Action, memory: MemoryKind) -> u8 {
    action as u8 | (memory as u8) << 4
}

/// One event as the allocation path records it (the shim's ring keeps it in 32 bytes, and its
/// stream, when not the default, in a second slot). The thread
/// is the buffer's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Raw {
    /// When: the shim's order key (the time-stamp counter on x86-64), converted to time by the
    /// [`Chunk::Clock`] pairs.
    pub tsc: u64,
    /// The address (the context id for [`Action::ContextRelease`]; 0 for [`Action::Oom`]).
    pub addr: u64,
    /// Bytes, for [`Action::sized`] actions; 0 otherwise.
    pub size: u64,
    /// The stack's id ([`Chunk::Stack`]), or [`NONE`].
    pub stack: u32,
    /// The context's id, `u16::MAX` for none.
    pub context: u16,
    /// [`kind`]: the action and the memory.
    pub kind: u8,
    /// The device's ordinal + 1; 0 when unknown: the file's compact encoding ([`Raw::ordinal`] reads it).
    pub device: u8,
    /// The stream it was made or freed on, as the program's `CUstream` handle (0: the legacy
    /// default stream, or a call that takes none).
    pub stream: u64,
}

impl Raw {
    /// The device's ordinal in the one spelling, the report's:
    /// [`UNKNOWN_DEVICE`](cuguard_format::wire::UNKNOWN_DEVICE) when the file says none.
    pub fn ordinal(&self) -> u32 {
        self.device
            .checked_sub(1)
            .map_or(cuguard_format::wire::UNKNOWN_DEVICE, u32::from)
    }
}

/// The file's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub pid: u32,
    /// When the process started, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// Which segment of a bounded history this file is: 0 for the first, counting up each time
    /// the writer starts a new one (see [`Chunk::Live`]).
    pub segment: u32,
    /// The run the process belongs to ([`run_tag`] of `CUGUARD_RUN_ID`), 0 outside a run: a
    /// writer replaces an earlier run's file of its name, never one of its own run.
    pub run: u32,
}

/// The header's tag of a run id: FNV-1a 32 of its bytes, never 0.
pub fn run_tag(id: &str) -> u32 {
    checksum(0, id.as_bytes()).max(1)
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.pid.to_le_bytes());
        b[16..24].copy_from_slice(&self.start_unix_ns.to_le_bytes());
        b[24..28].copy_from_slice(&self.segment.to_le_bytes());
        b[28..32].copy_from_slice(&self.run.to_le_bytes());
        b
    }

    /// Reads a header, or says why the bytes are not one this crate reads.
    pub fn decode(b: &[u8]) -> Result<Header, Error> {
        if b.len() < 8 || &b[..8] != MAGIC {
            return Err(Error::NotHistory);
        }
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated { at: b.len() as u64 });
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let version = u32_at(8);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(Error::NewerVersion(version));
        }
        Ok(Header {
            version,
            pid: u32_at(12),
            start_unix_ns: u64::from_le_bytes(b[16..24].try_into().unwrap()),
            segment: u32_at(24),
            run: u32_at(28),
        })
    }
}

/// One chunk of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chunk {
    /// Events of one thread, in the order it made them.
    Events { thread: u32, events: Vec<Raw> },
    /// A stack first seen: its id and its frames' instruction pointers, innermost first.
    Stack { id: u32, frames: Vec<u64> },
    /// A time-stamp-counter reading and the clocks at the same moment: nanoseconds since the
    /// process's start on the monotonic clock (the report's times count from the same start),
    /// and since the Unix epoch. The reader converts [`Raw::tsc`] to time between such pairs;
    /// each segment begins with the pair taken when the history began, so that it has two.
    Clock {
        tsc: u64,
        since_start_ns: u64,
        unix_ns: u64,
    },
    /// Events the buffers could not hold (a thread made them faster than they were drained),
    /// between two moments: counted, never silent.
    Dropped {
        count: u64,
        first_tsc: u64,
        last_tsc: u64,
    },
    /// What was live when this file (a segment of a bounded history) began: an older segment
    /// that was let go held their allocations.
    Live { events: Vec<(u32, Raw)> },
    /// A module mapped in the process (frames are named from these): the addresses
    /// `[start, end)` its segments cover, its load bias (`ip - bias` is the offset symbol tables
    /// use), its path and its GNU build-id in hex (empty when it has none).
    Module {
        start: u64,
        end: u64,
        bias: u64,
        path: String,
        build_id: String,
    },
    /// A Python code object first seen: the id its frames' words carry (see the shim's
    /// `stack::python`), its file and its function.
    Code {
        id: u32,
        file: String,
        function: String,
    },
    /// The history ended here, whole, at this moment.
    End { tsc: u64 },
    /// A phase's name first seen: the id its [`Action::PhaseBegin`] events carry.
    Name { id: u32, text: String },
    /// Phase events ([`Action::PhaseBegin`], [`Action::PhaseEnd`]) of one thread, in the
    /// order it made them, encoded as [`Chunk::Events`]' are. Apart from the allocations'
    /// events, so that a reader finds the phases without decoding every event, and a reader
    /// that predates them skips them whole.
    Phases { thread: u32, events: Vec<Raw> },
    /// Everything live after the events before it in the file (allocations and segments, as
    /// [`Chunk::Live`] lists them), and what the span since the checkpoint before it (or the
    /// segment's beginning) held.
    Checkpoint(Checkpoint),
}

/// A checkpoint's content ([`Chunk::Checkpoint`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// The latest moment of the events before it (its tsc).
    pub tsc: u64,
    /// Events before it, since its segment began (after what the segment restates).
    pub events: u64,
    /// Allocations ([`Action::Alloc`]) among them.
    pub allocations: u64,
    /// The most live memory (allocations, host-pinned memory excepted, every device together)
    /// in the span since the checkpoint before it, and the moment it was first reached.
    pub peak_bytes: u64,
    pub peak_tsc: u64,
    /// Refusals ([`Action::Oom`]) in that span.
    pub ooms: u64,
    /// What is live.
    pub live: Vec<(u32, Raw)>,
}

/// The bytes of a checkpoint's fixed fields, before its live set: a reader that looks for
/// checkpoints reads only these.
pub const CHECKPOINT_HEAD: usize = 48;

pub(crate) const EVENTS: u8 = 1;
const STACK: u8 = 2;
pub(crate) const CLOCK: u8 = 3;
const DROPPED: u8 = 4;
pub(crate) const LIVE: u8 = 5;
const MODULE: u8 = 6;
const END: u8 = 7;
const CODE: u8 = 8;
pub(crate) const CHECKPOINT: u8 = 9;
pub(crate) const NAME: u8 = 10;
pub(crate) const PHASES: u8 = 11;

/// Appends `chunk` to `out`, framed.
pub fn write_chunk(out: &mut Vec<u8>, chunk: &Chunk) {
    write_chunk_of(out, chunk, VERSION)
}

/// Appends `chunk` to `out` as layout `version` writes it (1: no streams, and no
/// checkpoints: one is not written); for benchmarks beside an older cuguard and tests of the
/// older layout.
pub fn write_chunk_of(out: &mut Vec<u8>, chunk: &Chunk, version: u32) {
    if version < 2 && matches!(chunk, Chunk::Checkpoint(_)) {
        return;
    }
    let start = out.len();
    out.extend_from_slice(&[0; 9]);
    let kind = match chunk {
        Chunk::Events { thread, events } => {
            varint(out, u64::from(*thread));
            varint(out, events.len() as u64);
            encode_events(out, events.iter().map(|e| (*thread, *e)), false, version);
            EVENTS
        }
        Chunk::Stack { id, frames } => {
            varint(out, u64::from(*id));
            varint(out, frames.len() as u64);
            let mut prev = 0u64;
            for &ip in frames {
                varint(out, zigzag(ip.wrapping_sub(prev) as i64));
                prev = ip;
            }
            STACK
        }
        Chunk::Clock {
            tsc,
            since_start_ns,
            unix_ns,
        } => {
            for v in [tsc, since_start_ns, unix_ns] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            CLOCK
        }
        Chunk::Dropped {
            count,
            first_tsc,
            last_tsc,
        } => {
            for v in [count, first_tsc, last_tsc] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            DROPPED
        }
        Chunk::Live { events } => {
            varint(out, events.len() as u64);
            encode_events(out, events.iter().copied(), true, version);
            LIVE
        }
        Chunk::Module {
            start,
            end,
            bias,
            path,
            build_id,
        } => {
            varint(out, *start);
            varint(out, end.wrapping_sub(*start));
            varint(out, start.wrapping_sub(*bias));
            string(out, path);
            string(out, build_id);
            MODULE
        }
        Chunk::Code { id, file, function } => {
            varint(out, u64::from(*id));
            string(out, file);
            string(out, function);
            CODE
        }
        Chunk::End { tsc } => {
            out.extend_from_slice(&tsc.to_le_bytes());
            END
        }
        Chunk::Name { id, text } => {
            varint(out, u64::from(*id));
            string(out, text);
            NAME
        }
        Chunk::Phases { thread, events } => {
            varint(out, u64::from(*thread));
            varint(out, events.len() as u64);
            encode_events(out, events.iter().map(|e| (*thread, *e)), false, version);
            PHASES
        }
        Chunk::Checkpoint(c) => {
            for v in [
                c.tsc,
                c.events,
                c.allocations,
                c.peak_bytes,
                c.peak_tsc,
                c.ooms,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            varint(out, c.live.len() as u64);
            encode_events(out, c.live.iter().copied(), true, version);
            CHECKPOINT
        }
    };
    let len = (out.len() - start - 9) as u32;
    let sum = checksum(kind, &out[start + 9..]);
    out[start] = kind;
    out[start + 1..start + 5].copy_from_slice(&len.to_le_bytes());
    out[start + 5..start + 9].copy_from_slice(&sum.to_le_bytes());
}

/// The tag bit that says the context, device and stream follow.
const PLACE_CHANGED: u8 = 0x80;

fn encode_events(
    out: &mut Vec<u8>,
    events: impl Iterator<Item = (u32, Raw)>,
    threads: bool,
    version: u32,
) {
    let (mut tsc, mut addr, mut place) = (0u64, 0u64, None::<(u16, u8, u64)>);
    for (thread, e) in events {
        let changed = place != Some((e.context, e.device, e.stream));
        // The memory nibble keeps 3 bits: bit 7 of the tag is ours.
        out.push((e.kind & 0x7f) | if changed { PLACE_CHANGED } else { 0 });
        if threads {
            varint(out, u64::from(thread));
        }
        varint(out, zigzag(e.tsc.wrapping_sub(tsc) as i64));
        varint(out, zigzag(e.addr.wrapping_sub(addr) as i64));
        if Action::of(e.kind).is_some_and(Action::sized) {
            varint(out, e.size);
        }
        varint(out, u64::from(e.stack.wrapping_add(1)));
        if changed {
            varint(out, u64::from(e.context));
            out.push(e.device);
            if version >= 2 {
                varint(out, e.stream);
            }
            place = Some((e.context, e.device, e.stream));
        }
        (tsc, addr) = (e.tsc, e.addr);
    }
}

/// Why a history file could not be read (from some byte on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The file does not begin as a history file.
    NotHistory,
    /// Written by a newer cuguard, in a layout this one does not know.
    NewerVersion(u32),
    /// The file ends inside a chunk (copied while being written, or cut).
    Truncated { at: u64 },
    /// A chunk's bytes are not what was written.
    Corrupt { at: u64, why: &'static str },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotHistory => write!(f, "not a cuguard history file"),
            Error::NewerVersion(v) => write!(
                f,
                "a history of layout version {v}, written by a newer cuguard (this one reads version {VERSION})"
            ),
            Error::Truncated { at } => write!(f, "the history is cut short at byte {at}"),
            Error::Corrupt { at, why } => write!(f, "the history is damaged at byte {at}: {why}"),
        }
    }
}

impl std::error::Error for Error {}

/// Reads a history's chunks in file order.
pub struct Reader<'a> {
    bytes: &'a [u8],
    header: Header,
    at: usize,
    failed: bool,
}

impl<'a> Reader<'a> {
    /// Reads the header; the chunks follow with [`Iterator::next`].
    pub fn new(bytes: &'a [u8]) -> Result<Reader<'a>, Error> {
        let header = Header::decode(bytes)?;
        Ok(Reader {
            bytes,
            header,
            at: HEADER_LEN,
            failed: false,
        })
    }

    /// The file's header.
    pub fn header(&self) -> Header {
        self.header
    }

    /// Where the next chunk begins.
    pub fn offset(&self) -> u64 {
        self.at as u64
    }

    fn chunk(&mut self) -> Result<Option<Chunk>, Error> {
        loop {
            let rest = &self.bytes[self.at..];
            if rest.is_empty() {
                return Ok(None);
            }
            let at = self.at as u64;
            if rest.len() < 9 {
                return Err(Error::Truncated {
                    at: self.bytes.len() as u64,
                });
            }
            let (kind, len, sum) = frame_head(rest, at)?;
            let Some(payload) = rest.get(9..9 + len as usize) else {
                return Err(Error::Truncated {
                    at: self.bytes.len() as u64,
                });
            };
            if checksum(kind, payload) != sum {
                return Err(Error::Corrupt {
                    at,
                    why: "a chunk's checksum does not match",
                });
            }
            self.at += 9 + len as usize;
            match decode_chunk(kind, payload, self.header.version, at)? {
                Some(chunk) => return Ok(Some(chunk)),
                // A kind from a newer writer: skipped.
                None => continue,
            }
        }
    }
}

/// A chunk's frame from its first 9 bytes (at byte `at`): its kind, its payload's length (at
/// most [`MAX_CHUNK`]) and its checksum.
pub(crate) fn frame_head(h: &[u8], at: u64) -> Result<(u8, u32, u32), Error> {
    let len = u32::from_le_bytes(h[1..5].try_into().unwrap());
    if len > MAX_CHUNK {
        return Err(Error::Corrupt {
            at,
            why: "a chunk's length is out of bounds",
        });
    }
    Ok((h[0], len, u32::from_le_bytes(h[5..9].try_into().unwrap())))
}

/// The chunk of `kind` whose payload (checksum already checked) is `payload`, in a file of
/// layout `v`, found at byte `at`; `None` for a kind this crate does not know.
pub(crate) fn decode_chunk(
    kind: u8,
    payload: &[u8],
    v: u32,
    at: u64,
) -> Result<Option<Chunk>, Error> {
    let corrupt = |why| Error::Corrupt { at, why };
    let mut p = Cursor { b: payload, at: 0 };
    let chunk = match kind {
        EVENTS => {
            let thread = p.u32().ok_or(corrupt("a thread id"))?;
            let n = p.count().ok_or(corrupt("an event count"))?;
            let events = decode_events(&mut p, n, false, v).ok_or(corrupt("an event"))?;
            Chunk::Events {
                thread,
                events: events.into_iter().map(|(_, e)| e).collect(),
            }
        }
        STACK => {
            let id = p.u32().ok_or(corrupt("a stack id"))?;
            let n = p.count().ok_or(corrupt("a frame count"))?;
            let mut frames = Vec::with_capacity(n);
            let mut prev = 0u64;
            for _ in 0..n {
                prev = prev.wrapping_add(p.signed().ok_or(corrupt("a frame"))? as u64);
                frames.push(prev);
            }
            Chunk::Stack { id, frames }
        }
        CLOCK => {
            let [tsc, since_start_ns, unix_ns] = p.fixed().ok_or(corrupt("a clock"))?;
            Chunk::Clock {
                tsc,
                since_start_ns,
                unix_ns,
            }
        }
        DROPPED => {
            let [count, first_tsc, last_tsc] = p.fixed().ok_or(corrupt("a drop count"))?;
            Chunk::Dropped {
                count,
                first_tsc,
                last_tsc,
            }
        }
        LIVE => {
            let n = p.count().ok_or(corrupt("a live count"))?;
            Chunk::Live {
                events: decode_events(&mut p, n, true, v).ok_or(corrupt("a live event"))?,
            }
        }
        MODULE => {
            let start = p.varint().ok_or(corrupt("a module"))?;
            let len = p.varint().ok_or(corrupt("a module"))?;
            let below = p.varint().ok_or(corrupt("a module"))?;
            let path = p.string().ok_or(corrupt("a module path"))?;
            let build_id = p.string().ok_or(corrupt("a module's build-id"))?;
            Chunk::Module {
                start,
                end: start.wrapping_add(len),
                bias: start.wrapping_sub(below),
                path,
                build_id,
            }
        }
        CODE => {
            let id = p.u32().ok_or(corrupt("a code id"))?;
            let file = p.string().ok_or(corrupt("a code's file"))?;
            let function = p.string().ok_or(corrupt("a code's function"))?;
            Chunk::Code { id, file, function }
        }
        NAME => {
            let id = p.u32().ok_or(corrupt("a name's id"))?;
            let text = p.string().ok_or(corrupt("a name"))?;
            Chunk::Name { id, text }
        }
        PHASES => {
            let thread = p.u32().ok_or(corrupt("a thread id"))?;
            let n = p.count().ok_or(corrupt("a phase event count"))?;
            let events = decode_events(&mut p, n, false, v).ok_or(corrupt("a phase event"))?;
            Chunk::Phases {
                thread,
                events: events.into_iter().map(|(_, e)| e).collect(),
            }
        }
        END => {
            let tsc = p.take(8).ok_or(corrupt("the end"))?;
            Chunk::End {
                tsc: u64::from_le_bytes(tsc.try_into().unwrap()),
            }
        }
        CHECKPOINT => {
            let mut c = checkpoint_head(&mut p).ok_or(corrupt("a checkpoint"))?;
            let n = p.count().ok_or(corrupt("a checkpoint's count"))?;
            c.live =
                decode_events(&mut p, n, true, v).ok_or(corrupt("a checkpoint's live event"))?;
            Chunk::Checkpoint(c)
        }
        // A kind from a newer writer: skipped.
        _ => return Ok(None),
    };
    if p.at != payload.len() && kind != END {
        return Err(corrupt("bytes left over in a chunk"));
    }
    Ok(Some(chunk))
}

impl Iterator for Reader<'_> {
    type Item = Result<Chunk, Error>;

    /// The next chunk; after an error, nothing more.
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.chunk() {
            Ok(c) => c.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// A checkpoint's fixed fields ([`CHECKPOINT_HEAD`] bytes), its live set empty.
fn checkpoint_head(p: &mut Cursor) -> Option<Checkpoint> {
    let b = p.take(CHECKPOINT_HEAD)?;
    let f = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    Some(Checkpoint {
        tsc: f(0),
        events: f(1),
        allocations: f(2),
        peak_bytes: f(3),
        peak_tsc: f(4),
        ooms: f(5),
        live: Vec::new(),
    })
}

/// A checkpoint's fixed fields from the first [`CHECKPOINT_HEAD`] bytes of its payload.
pub fn decode_checkpoint_head(payload: &[u8]) -> Option<Checkpoint> {
    checkpoint_head(&mut Cursor { b: payload, at: 0 })
}

pub(crate) fn decode_events(
    p: &mut Cursor,
    n: usize,
    threads: bool,
    version: u32,
) -> Option<Vec<(u32, Raw)>> {
    let mut out = Vec::with_capacity(n.min(1 << 20));
    let (mut tsc, mut addr, mut context, mut device, mut stream) =
        (0u64, 0u64, u16::MAX, 0u8, 0u64);
    let mut first = true;
    for _ in 0..n {
        let tag = p.byte()?;
        let thread = if threads { p.u32()? } else { 0 };
        tsc = tsc.wrapping_add(p.signed()? as u64);
        addr = addr.wrapping_add(p.signed()? as u64);
        let kind = tag & 0x7f;
        let action = Action::of(kind)?;
        let size = if action.sized() { p.varint()? } else { 0 };
        let stack = u32::try_from(p.varint()?).ok()?.wrapping_sub(1);
        if tag & PLACE_CHANGED != 0 {
            context = u16::try_from(p.varint()?).ok()?;
            device = p.byte()?;
            if version >= 2 {
                stream = p.varint()?;
            }
        } else if first {
            return None;
        }
        first = false;
        out.push((
            thread,
            Raw {
                tsc,
                addr,
                size,
                stack,
                context,
                kind,
                device,
                stream,
            },
        ));
    }
    Some(out)
}

pub(crate) struct Cursor<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) at: usize,
}

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.at)?;
        self.at += 1;
        Some(v)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn signed(&mut self) -> Option<i64> {
        let z = self.varint()?;
        Some((z >> 1) as i64 ^ -((z & 1) as i64))
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.varint()?).ok()
    }

    /// A count of items that each take at least one byte: never more than the bytes left.
    fn count(&mut self) -> Option<usize> {
        let n = usize::try_from(self.varint()?).ok()?;
        (n <= self.b.len() - self.at).then_some(n)
    }

    fn string(&mut self) -> Option<String> {
        let n = self.count()?;
        Some(String::from_utf8_lossy(self.take(n)?).into_owned())
    }

    fn fixed(&mut self) -> Option<[u64; 3]> {
        let b = self.take(24)?;
        Some(std::array::from_fn(|i| {
            u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap())
        }))
    }
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn string(out: &mut Vec<u8>, s: &str) {
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// A chunk's checksum: FNV-1a 32 of its kind byte and its payload.
pub fn checksum(kind: u8, payload: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in std::iter::once(&kind).chain(payload) {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    h
}

pub mod bounded;
pub mod holders;
pub mod live;
pub mod phases;
pub mod replay;

#[cfg(test)]
mod tests;
