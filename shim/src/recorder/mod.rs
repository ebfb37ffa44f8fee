//! The history's recording, shim side: every allocation and free the shim sees, appended by the
//! allocation path to its thread's ring ([`ring`]) as one fixed-size record. The cuguard thread
//! drains the rings into the file (`lifecycle::drain`). The layout is the `cuguard-history`
//! crate's.
//!
//! On unless `CUGUARD_HISTORY=0`. What the allocation path does here: one relaxed load to see
//! whether the history is on, a time-stamp-counter read, and [`ring::push`]. The callers (the
//! tracker, the pool's glue) hand plain values: this floor knows no tracker type.

pub mod names;
pub mod ring;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering};

use cuguard_format::MemoryKind;
use cuguard_history::{Action, Raw, kind};

/// "No stack", "no context".
pub const NONE: u32 = u32::MAX;

/// 0: not decided yet; 1: on; 2: off.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Whether the history is recorded in this process.
#[inline]
pub fn on() -> bool {
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => decide(),
    }
}

#[cold]
fn decide() -> bool {
    let on = crate::config::get().history_bytes > 0;
    if on {
        first_clock();
    }
    STATE.store(if on { 1 } else { 2 }, Ordering::Relaxed);
    on
}

/// The moment of an event: the time-stamp counter where there is one (the tracker's order key
/// is the same reading), else a shared counter.
#[inline]
pub fn now_tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }
}

/// The clock pair taken when the history began: (tsc, ns since start, Unix ns).
static FIRST: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// Tries at a clock pair, of which the closest is kept.
const PAIR_TRIES: usize = 4;

/// A clock pair now: (tsc, ns since the start, Unix ns). The two clocks are read as close
/// together as can be: of [`PAIR_TRIES`] tries (a tsc read on each side of the monotonic
/// clock's), the one whose tsc reads are closest, the tsc taken midway. A thread preempted
/// between two reads (a loaded machine) would otherwise pair a tsc with a later time, and every
/// event near the pair would read that much later than the records the monotonic clock dates
/// (a peak's moment, which `--at` must find the peak at).
pub fn clock_now() -> (u64, u64, u64) {
    let (mut tsc, mut clock, mut spread) = (0, 0, u64::MAX);
    for _ in 0..PAIR_TRIES {
        let before = now_tsc();
        let c = crate::process::clock::monotonic_ns();
        let after = now_tsc();
        let s = after.wrapping_sub(before);
        if s < spread {
            (tsc, clock, spread) = (before + s / 2, c, s);
        }
    }
    let (start_unix, start_mono) = crate::process::clock::start_ns();
    let since = clock.saturating_sub(start_mono);
    (tsc, since, start_unix + since)
}

fn first_clock() {
    let (tsc, since, unix) = clock_now();
    if FIRST[0]
        .compare_exchange(0, tsc.max(1), Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        FIRST[1].store(since, Ordering::Release);
        FIRST[2].store(unix, Ordering::Release);
    }
}

/// The clock pair taken when the history began.
pub fn first() -> (u64, u64, u64) {
    (
        FIRST[0].load(Ordering::Acquire),
        FIRST[1].load(Ordering::Acquire),
        FIRST[2].load(Ordering::Acquire),
    )
}

#[inline]
fn context(id: u32) -> u16 {
    if id == NONE {
        u16::MAX
    } else {
        id.min(u32::from(u16::MAX - 1)) as u16
    }
}

#[inline]
fn device(ordinal: i32) -> u8 {
    if ordinal < 0 {
        0
    } else {
        (ordinal + 1).min(255) as u8
    }
}

/// A moment for [`freed`], taken before the memory is given back (0 when the history is off):
/// the free of an address is then always before the next allocation that receives it, whose
/// moment [`allocated_at`] takes after it was received (or, for a block of the thread's own
/// cache, before it was served: see there).
#[inline]
pub fn stamp() -> u64 {
    if on() { now_tsc() } else { 0 }
}

/// The program received `size` bytes of `memory` at `addr`, from stack `stack`, in context
/// `context` (or [`NONE`]) on device `ordinal` (-1: unknown), made on `stream` (the program's
/// `CUstream` handle, one value per stream: 0 for the legacy default stream and for a call that
/// takes none, `CU_STREAM_PER_THREAD` for a per-thread default stream; the stream-ordered hooks
/// work it out), at the moment `tsc` when one taken already follows every free of `addr` (a
/// block from the thread's own cache: the record's order key, taken before it was served), else
/// now.
///
/// Inlined into the hooks: with the history off it is one load, with it on its thread-local
/// look-up (the ring's) is shared with the hook's own (`crate::process::local`).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub fn allocated_at(
    tsc: Option<u64>,
    addr: u64,
    size: u64,
    memory: MemoryKind,
    stack: u32,
    context_id: u32,
    ordinal: i32,
    stream: u64,
    tag: u32,
) {
    if !on() {
        return;
    }
    let tsc = tsc.unwrap_or_else(now_tsc);
    ring::push(Raw {
        tsc,
        addr,
        size,
        stack,
        context: context(context_id),
        kind: kind(Action::Alloc, memory),
        device: device(ordinal),
        stream,
    });
    if tag != NONE {
        tag_event(tsc, addr, tag, memory);
    }
}

/// The program named the allocation at `addr` with tag `tag` (a name id, [`names`]): at the
/// moment `tsc` of its making when given as it was made (the event right after it), else now.
#[inline]
pub fn tagged(tsc: Option<u64>, addr: u64, tag: u32) {
    if !on() {
        return;
    }
    tag_event(tsc.unwrap_or_else(now_tsc), addr, tag, MemoryKind::Device);
}

/// The tag event of [`tagged`], of memory `memory` (a cache block's tag is one of its own: the
/// cache block may share its address with the segment it is carved from).
#[inline]
fn tag_event(tsc: u64, addr: u64, tag: u32, memory: MemoryKind) {
    ring::push(Raw {
        tsc,
        addr,
        size: u64::from(tag),
        stack: NONE,
        context: u16::MAX,
        kind: kind(Action::Tag, memory),
        device: 0,
        stream: 0,
    });
}

/// The program freed the allocation at `addr` on `stream` (as for [`allocated_at`]: 0 for a
/// free that takes none), from the moment `tsc` ([`stamp`]). Inlined, as [`allocated_at`] is.
#[inline(always)]
pub fn freed(addr: u64, memory: MemoryKind, context_id: u32, ordinal: i32, tsc: u64, stream: u64) {
    if !on() {
        return;
    }
    ring::push(Raw {
        tsc,
        addr,
        size: 0,
        stack: NONE,
        context: context(context_id),
        kind: kind(Action::Free, memory),
        device: device(ordinal),
        stream,
    });
}

/// An allocation of `size` bytes was refused for lack of memory, at the moment `tsc`.
pub fn refused(size: u64, stack: u32, ordinal: i32, tsc: u64) {
    if !on() {
        return;
    }
    ring::push(Raw {
        tsc,
        addr: 0,
        size,
        stack,
        context: u16::MAX,
        kind: kind(Action::Oom, MemoryKind::Device),
        device: device(ordinal),
        stream: 0,
    });
}

/// The context `id` was destroyed or reset: its live memory went with it.
pub fn context_released(id: u32) {
    if !on() {
        return;
    }
    ring::push(Raw {
        tsc: now_tsc(),
        addr: u64::from(id),
        size: 0,
        stack: NONE,
        context: context(id),
        kind: kind(Action::ContextRelease, MemoryKind::Device),
        device: 0,
        stream: 0,
    });
}

/// The pool took a chunk of `size` bytes at `base` from the driver (`taken`), or gave it back,
/// for context `context_id` on device `ordinal`.
pub fn chunk(taken: bool, base: u64, size: u64, context_id: u32, ordinal: i32) {
    if !on() {
        return;
    }
    let action = if taken {
        Action::SegmentAlloc
    } else {
        Action::SegmentFree
    };
    ring::push(Raw {
        tsc: now_tsc(),
        addr: base,
        size: if taken { size } else { 0 },
        stack: NONE,
        context: context(context_id),
        kind: kind(action, MemoryKind::Device),
        device: device(ordinal),
        stream: 0,
    });
}

pub use cuguard_history::phases::PUSHED;

/// Set once a phase was recorded in this process: until then the writer does not look for
/// phases among the events it drains.
static PHASES_SEEN: AtomicBool = AtomicBool::new(false);

/// Whether a phase was recorded in this process (one relaxed load).
#[inline]
pub fn phases_seen() -> bool {
    PHASES_SEEN.load(Ordering::Relaxed)
}

/// A phase named `name` ([`names::intern`]) began: a range pushed (`key` [`PUSHED`] with its
/// domain) or started (`key` its id), with the range's own number `payload`, if any.
#[inline]
pub fn phase_began(name: u32, key: u64, payload: Option<u64>) {
    if !on() || !crate::phase::tracking() {
        return;
    }
    if !PHASES_SEEN.load(Ordering::Relaxed) {
        PHASES_SEEN.store(true, Ordering::Relaxed);
    }
    ring::push(Raw {
        tsc: now_tsc(),
        addr: key,
        size: u64::from(name),
        stack: NONE,
        context: u16::MAX,
        kind: kind(Action::PhaseBegin, MemoryKind::Device),
        device: 0,
        stream: payload.map_or(0, |p| p.saturating_add(1)),
    });
}

/// The phase of `key` ended (for a pushed one, the thread's innermost in its domain).
#[inline]
pub fn phase_ended(key: u64) {
    if !on() || !crate::phase::tracking() {
        return;
    }
    ring::push(Raw {
        tsc: now_tsc(),
        addr: key,
        size: 0,
        stack: NONE,
        context: u16::MAX,
        kind: kind(Action::PhaseEnd, MemoryKind::Device),
        device: 0,
        stream: 0,
    });
}

/// Where the history is and what it holds, as the writer (`lifecycle::drain`) left it after
/// its last drain: for the report.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// The segment files, oldest first.
    pub files: Vec<std::path::PathBuf>,
    pub events: u64,
    pub bytes: u64,
    pub bound: u64,
    pub let_go: u32,
    /// From when the kept history holds every event, ms since the start.
    pub begins_ms: u64,
    /// Events lost: (count, from ms, to ms).
    pub lost: Vec<(u64, u64, u64)>,
    pub stopped: Option<String>,
}

static STATUS: AtomicPtr<Mutex<Option<Status>>> = AtomicPtr::new(std::ptr::null_mut());

fn status_cell() -> &'static Mutex<Option<Status>> {
    crate::process::global::get_or_create(&STATUS, || Mutex::new(None))
}

/// The writer's latest status; `None` while nothing was written (or the history is off).
pub fn status() -> Option<Status> {
    crate::process::global::lock(status_cell()).clone()
}

/// The writer's new status.
pub fn set_status(s: Status) {
    *crate::process::global::lock(status_cell()) = Some(s);
}

/// In the child of a fork: the other threads' rings are gone with them, and the parent's file
/// is not the child's.
pub fn reset_after_fork() {
    ring::reset_after_fork();
    names::reset_after_fork();
    crate::process::global::replace(&STATUS, Mutex::new(None));
}
