//! The shim's own bill: what cuguard cost the program it runs in (the report's `cost`).
//!
//! # Time, sampled, and a bill that adds up
//!
//! The hooks' work on each tracked allocation is the whole ([`Metric::Hooks`]: its record, call
//! stack included, and its accounting once served; not the driver's or the pool's serving). Its
//! parts are timed inside it, in the same calls: the native stack capture ([`Metric::Stacks`]:
//! unwinding, hashing, the stack table) and the reading of Python frames ([`Metric::Python`],
//! only the captures that read at least one). Stacks captured outside an allocation (a
//! context's, an event's) are a bill of their own ([`Metric::Captures`]), not a part of it; so
//! is a framework cache's block its hook records, capture included ([`Metric::Blocks`]). Work
//! done once (the module tables read for unwinding, a thread's unwinder set-up, the Python
//! interpreter's lookup, arming the process at its first allocation) is timed every time it
//! happens, whole, and taken out of every span it falls in ([`Metric::OneTime`],
//! [`one_time`]): scaled up by the sample rate it would swamp the steady cost.
//!
//! Every call is counted (exactly). Time is read with `clock_gettime(CLOCK_MONOTONIC)` (a vDSO
//! read: no syscall) around the first [`FIRST_TIMED`] calls of each thread, which carry its
//! warm-up (the rule cache, the first stacks), and then around one call in [`sample_every`]
//! (`CUGUARD_COST_SAMPLE`, a power of two, default [`DEFAULT_SAMPLE_EVERY`]), its place in each
//! window moving on by one ([`sampled_turn`]: calls that alternate in kind, a tensor's
//! allocation and its free, are each timed as often as they come). A part is timed
//! exactly when the allocation it is inside is, and its time kept or left out with that call's.
//! A thread's estimate of the whole is the time of its first calls plus the mean of its later
//! timed calls times the number of its later calls; a part's is its time in those first calls
//! plus its time in the later timed calls scaled by the same factor, so no part is ever more than
//! its whole, nor the parts together. The report adds the threads up. A later timed call that
//! took over [`OUTLIER_NS`] is left out of the mean and counted as dropped, its parts with it,
//! unless every call is timed (the thread was most likely descheduled; on a busy machine one
//! such sample, scaled up, would swamp the estimate). An untimed call costs a thread-local load,
//! a counter store and a compare: no clock, no syscall, no locked instruction (counters are per
//! thread, written by their own thread with relaxed loads and stores; threads past [`SLOTS`]
//! share one slot with relaxed `fetch_add`s).
//!
//! Report writing is timed whole, every time ([`report_written`]).
//!
//! # Memory
//!
//! [`Counting`] is the shim's global allocator: the system allocator, with every byte the
//! shim's own Rust code allocates and frees added up (the tracker's tables, the stack table,
//! the rule caches, the Python code table, the pool's host-side bookkeeping, reports being
//! built). [`heap_bytes`] is what is allocated now. The program's own `malloc`s are not in it
//! (they do not go through the shim's allocator); neither are thread stacks nor the stats
//! page. The counts are sharded by the caller's stack address, relaxed `fetch_add`s.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering::Relaxed};

/// Calls of each thread timed in full before sampling starts.
pub const FIRST_TIMED: u64 = 8;
/// One call in this many is timed after the first ones, unless `CUGUARD_COST_SAMPLE` says.
pub const DEFAULT_SAMPLE_EVERY: u64 = 32;
/// A sampled call that took longer than this (1 ms) is left out of the mean: the thread was
/// most likely descheduled, and scaling that up by the sample rate would swamp the estimate.
/// (Not when every call is timed: then the sum is measured, not estimated.)
pub const OUTLIER_NS: u64 = 1_000_000;
/// Threads with counters of their own; later ones share one slot.
pub const SLOTS: usize = 256;

/// What is billed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// The hooks' work on a tracked allocation: the whole.
    Hooks = 0,
    /// Native stack capture inside it (unwinding, hashing, the table): a part.
    Stacks = 1,
    /// Reading Python frames inside it: a part.
    Python = 2,
    /// Stacks captured outside an allocation (a context's, an event's), Python frames included.
    Captures = 3,
    /// Work done once, every time timed, taken out of the spans it falls in.
    OneTime = 4,
    /// A framework cache's block its hook recorded (PyTorch's tensor, made or freed): the
    /// record and its stack, whole (a capture inside it is not billed again as
    /// [`Metric::Captures`]).
    Blocks = 5,
}

const METRICS: usize = 6;
/// The parts of [`Metric::Hooks`].
const PARTS: [Metric; 2] = [Metric::Stacks, Metric::Python];

static SAMPLE_EVERY: AtomicU64 = AtomicU64::new(DEFAULT_SAMPLE_EVERY);

/// Sets how often calls are timed after the first ones (1: every call), rounded up to a power
/// of two (so the turn is a mask, not a division). Called once, when the settings are read.
pub fn configure(every: u64) {
    let every = every.clamp(1, 1 << 20).next_power_of_two();
    SAMPLE_EVERY.store(every, Relaxed);
}

/// One call in this many is timed after each thread's first [`FIRST_TIMED`].
pub fn sample_every() -> u64 {
    SAMPLE_EVERY.load(Relaxed)
}

/// One metric's counters in one slot.
#[derive(Default)]
struct Counts {
    /// Calls (all of them).
    calls: AtomicU64,
    /// Of them, those among the thread's first [`FIRST_TIMED`] (for a part: inside its whole's
    /// first calls), and their nanoseconds.
    first: AtomicU64,
    first_ns: AtomicU64,
    /// Later calls that were timed, and the nanoseconds of those kept (for one-time work: every
    /// call, all of its time).
    timed: AtomicU64,
    timed_ns: AtomicU64,
    /// Of the later timed calls, those left out of the mean ([`OUTLIER_NS`]).
    dropped: AtomicU64,
}

impl Counts {
    const fn new() -> Counts {
        Counts {
            calls: AtomicU64::new(0),
            first: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            timed: AtomicU64::new(0),
            timed_ns: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn clear(&self) {
        for c in [
            &self.calls,
            &self.first,
            &self.first_ns,
            &self.timed,
            &self.timed_ns,
            &self.dropped,
        ] {
            c.store(0, Relaxed);
        }
    }

    fn load(&self) -> Raw {
        Raw {
            calls: self.calls.load(Relaxed),
            first: self.first.load(Relaxed),
            first_ns: self.first_ns.load(Relaxed),
            timed: self.timed.load(Relaxed),
            timed_ns: self.timed_ns.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
        }
    }
}

/// One metric's counters, read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Raw {
    calls: u64,
    first: u64,
    first_ns: u64,
    timed: u64,
    timed_ns: u64,
    dropped: u64,
}

/// How a thread's later calls are scaled up from its timed ones: `later` calls after the first
/// ones, `kept` of them timed and kept, `first` first calls.
#[derive(Clone, Copy, Debug)]
struct Scale {
    first: u64,
    later: u64,
    kept: u64,
}

impl Scale {
    /// The sampled metric `r`'s own scale.
    fn of(r: &Raw) -> Scale {
        let first = r.calls.min(FIRST_TIMED);
        let later = r.calls - first;
        let timed = r.timed.min(later);
        Scale {
            first,
            later,
            kept: timed - r.dropped.min(timed),
        }
    }

    /// The time of all later calls, from the time `timed_ns` of the kept ones (or, with none
    /// kept, from the first calls' `first_ns`).
    fn later_ns(&self, first_ns: u64, timed_ns: u64) -> u64 {
        let scaled = |ns: u64, of: u64| u128::from(ns) * u128::from(self.later) / u128::from(of);
        if self.later == 0 {
            0
        } else if self.kept > 0 {
            scaled(timed_ns, self.kept) as u64
        } else if self.first > 0 {
            scaled(first_ns, self.first) as u64
        } else {
            0
        }
    }
}

/// One thread's (or one slot's) estimate of every metric.
fn estimates(raw: &[Raw; METRICS]) -> [Totals; METRICS] {
    let mut out = [Totals::default(); METRICS];
    for (m, r) in raw.iter().enumerate() {
        let t = &mut out[m];
        t.calls = r.calls;
        match m {
            // Parts: scaled as their whole is.
            1 | 2 => {
                let whole = Scale::of(&raw[Metric::Hooks as usize]);
                t.first_calls = r.first;
                t.first_ns = r.first_ns;
                t.timed = r.first + r.timed;
                t.ns = r
                    .first_ns
                    .saturating_add(whole.later_ns(r.first_ns, r.timed_ns));
            }
            // One-time work: every call timed, nothing scaled.
            4 => {
                t.timed = r.calls;
                t.ns = r.timed_ns;
            }
            _ => {
                let s = Scale::of(r);
                t.first_calls = s.first;
                t.first_ns = r.first_ns;
                t.timed = s.first + r.timed.min(s.later);
                t.dropped = r.dropped.min(r.timed);
                t.ns = r
                    .first_ns
                    .saturating_add(s.later_ns(r.first_ns, r.timed_ns));
            }
        }
    }
    out
}

/// Exact counts kept beside the timed bill (nothing sampled): how captures unwound, and what
/// the pool asked the driver for. The report's `cost.unwind` and `cost.pool_growth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tally {
    /// Frames stepped by the unwinder (the shim's own included).
    Frames = 0,
    /// Of them, rules taken from the thread's last capture at the same position.
    ByPosition = 1,
    /// Rules found in the thread's rule cache.
    Cached = 2,
    /// Rules found in the process-wide table (another thread's, or one evicted here).
    Shared = 3,
    /// Rules evaluated from the module's CFI (a miss of all three).
    Evaluated = 4,
    /// Nanoseconds those evaluations took (each timed; in [`Metric::OneTime`]).
    EvaluatedNs = 5,
    /// Chunks the pool took from the driver (`cuMemAlloc`).
    Chunks = 6,
    /// Their bytes.
    ChunkBytes = 7,
    /// Nanoseconds the driver took to give them.
    ChunkNs = 8,
}

/// How many [`Tally`] counters there are.
pub const TALLIES: usize = 9;

/// One thread's counters (or, for [`SHARED`], several threads').
#[repr(align(64))]
struct Slot {
    metrics: [Counts; METRICS],
    tallies: [AtomicU64; TALLIES],
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            metrics: [const { Counts::new() }; METRICS],
            tallies: [const { AtomicU64::new(0) }; TALLIES],
        }
    }

    fn load(&self) -> [Raw; METRICS] {
        self.metrics.each_ref().map(Counts::load)
    }
}

static SLOT_TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// Threads past [`SLOTS`] (and threads whose thread-locals are gone) count here, with
/// `fetch_add`.
static SHARED: Slot = Slot::new();
/// Slots handed out so far (`SLOTS` and more: all taken).
static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);
/// Estimates of exited threads, per metric: calls, timed, dropped, ns, first calls, first ns.
static RETIRED: [[AtomicU64; 6]; METRICS] = [const { [const { AtomicU64::new(0) }; 6] }; METRICS];
/// Tallies of exited threads.
static RETIRED_TALLIES: [AtomicU64; TALLIES] = [const { AtomicU64::new(0) }; TALLIES];
/// Slots of exited threads, free for new threads: one bit each (lock-free, so a fork cannot
/// leave it held).
static FREE: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];

const NO_SLOT: u32 = u32::MAX;
const SHARED_SLOT: u32 = u32::MAX - 1;

/// What a hooks call in progress on this thread is, for its parts (and its paused span).
const NONE: u8 = 0;
const UNTIMED: u8 = 1;
const FIRST: u8 = 2;
const SAMPLED: u8 = 3;
/// A sampled call whose first segment was left out of the mean: the rest of it is not timed.
const DROPPED: u8 = 4;

/// A thread's state of the bill, kept with the allocation path's other words of the thread
/// ([`super::local`]: one thread-local look-up for all of them); a span holds a reference to
/// it, so that its end (and a pause) reach it without another look-up. Its fields:
///
/// - `slot`: the thread's slot, [`NO_SLOT`] before its first call;
/// - `in_hooks`: the hooks call in progress on this thread, if any: its kind (see [`NONE`]…);
/// - `in_blocks`: whether a cache block's record ([`Metric::Blocks`]) is in progress;
/// - `paused`: a hooks call paused at the end of the record (see [`Span::pause`]): its kind, or
///   [`NONE`];
/// - `last_dropped`: whether the last hooks segment this thread ended was left out of the mean;
/// - `pending`: nanoseconds of the parts inside the hooks segment in progress, not yet kept;
/// - `one_time_ns`: nanoseconds of one-time work done on this thread so far: a span takes out
///   what grew while it ran.
type State = super::local::Bill;

thread_local! {
    static RELEASE: Release = const { Release };
}

/// The calling thread's [`State`]; `None` only where thread-locals cannot be reached at all.
#[inline(always)]
fn state() -> Option<&'static State> {
    super::local::get().map(|l| &l.bill)
}

/// Gives the thread's slot back when it exits, its estimate folded into [`RETIRED`].
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        let Some(i) = state().map(|s| s.slot.replace(SHARED_SLOT)) else {
            return;
        };
        let Some(slot) = SLOT_TABLE.get(i as usize) else {
            return;
        };
        for (m, t) in estimates(&slot.load()).iter().enumerate() {
            for (total, v) in RETIRED[m].iter().zip(t.fields()) {
                total.fetch_add(v, Relaxed);
            }
        }
        for c in &slot.metrics {
            c.clear();
        }
        for (total, c) in RETIRED_TALLIES.iter().zip(&slot.tallies) {
            total.fetch_add(c.swap(0, Relaxed), Relaxed);
        }
        FREE[i as usize / 64].fetch_or(1 << (i % 64), Relaxed);
    }
}

/// The calling thread's slot index ([`SHARED_SLOT`] when it has none of its own).
#[inline]
fn my_slot() -> u32 {
    state().map_or(SHARED_SLOT, slot_in)
}

/// The slot index of the thread whose state is `s`, claimed on its first call.
#[inline(always)]
fn slot_in(s: &State) -> u32 {
    let i = s.slot.get();
    if i != NO_SLOT {
        return i;
    }
    first_slot(s)
}

#[cold]
fn first_slot(s: &State) -> u32 {
    let i = claim();
    s.slot.set(i);
    if i != SHARED_SLOT {
        // Registers the destructor that gives the slot back.
        let _ = RELEASE.try_with(|_| ());
    }
    i
}

#[cold]
fn claim() -> u32 {
    for (w, word) in FREE.iter().enumerate() {
        let mut bits = word.load(Relaxed);
        while bits != 0 {
            let b = bits.trailing_zeros();
            match word.compare_exchange(bits, bits & !(1 << b), Relaxed, Relaxed) {
                Ok(_) => return (w * 64) as u32 + b,
                Err(now) => bits = now,
            }
        }
    }
    let i = NEXT_SLOT.fetch_add(1, Relaxed);
    if (i as usize) < SLOTS {
        i
    } else {
        NEXT_SLOT.store(SLOTS as u32, Relaxed);
        SHARED_SLOT
    }
}

/// Adds `v` to a counter: a plain load and store for the thread's own slot, `fetch_add` for
/// the shared one.
#[inline(always)]
fn add(c: &AtomicU64, v: u64, own: bool) {
    if own {
        c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
    } else {
        c.fetch_add(v, Relaxed);
    }
}

#[inline(always)]
fn slot_of(i: u32) -> (&'static Slot, bool) {
    match SLOT_TABLE.get(i as usize) {
        Some(s) => (s, true),
        None => (&SHARED, false),
    }
}

/// Nanoseconds on the monotonic clock (a vDSO read).
#[inline]
fn now() -> u64 {
    super::clock::monotonic_ns()
}

/// One-time work done on the thread of state `s` so far, in nanoseconds.
#[inline]
fn one_time_so_far(s: Option<&State>) -> u64 {
    s.map_or(0, |s| s.one_time_ns.get())
}

/// A timed (or only counted) span; ends when dropped.
#[must_use]
pub struct Span {
    /// The thread's state (`None` where thread-locals cannot be reached).
    state: Option<&'static State>,
    metric: Metric,
    /// [`UNTIMED`], [`FIRST`], [`SAMPLED`] or [`DROPPED`] (not timed).
    kind: u8,
    start: u64,
    /// [`one_time_so_far`] at the start.
    one_time: u64,
    /// A hooks call's second segment ([`resume`]).
    resumed: bool,
}

impl Span {
    fn untimed(state: Option<&'static State>, metric: Metric) -> Span {
        Span {
            state,
            metric,
            kind: UNTIMED,
            start: 0,
            one_time: 0,
            resumed: false,
        }
    }

    /// A span timed from now: out of line, since most calls are not timed.
    #[cold]
    #[inline(never)]
    fn timed(state: Option<&'static State>, metric: Metric, kind: u8) -> Span {
        Span {
            state,
            metric,
            kind,
            resumed: false,
            one_time: one_time_so_far(state),
            start: now(),
        }
    }
}

/// Counts one call of a sampled metric ([`Metric::Hooks`], [`Metric::Captures`],
/// [`Metric::Blocks`]) and times it
/// if it is one of the thread's first calls or its turn in the sample. Drop the span where the
/// call ends.
#[inline]
pub fn begin(metric: Metric) -> Span {
    begin_with(state(), metric)
}

/// [`begin`] on the thread whose words `l` are (already looked up: see [`super::local`]).
#[inline(always)]
pub fn begin_in(l: Option<&'static super::local::Local>, metric: Metric) -> Span {
    begin_with(l.map(|l| &l.bill), metric)
}

#[inline(always)]
fn begin_with(state: Option<&'static State>, metric: Metric) -> Span {
    let (slot, own) = slot_of(state.map_or(SHARED_SLOT, slot_in));
    let c = &slot.metrics[metric as usize];
    let n = if own {
        let n = c.calls.load(Relaxed);
        c.calls.store(n.wrapping_add(1), Relaxed);
        n
    } else {
        c.calls.fetch_add(1, Relaxed)
    };
    let kind = if n < FIRST_TIMED {
        FIRST
    } else if sampled_turn(n - FIRST_TIMED, sample_every()) {
        add(&c.timed, 1, own);
        SAMPLED
    } else {
        UNTIMED
    };
    if metric == Metric::Hooks
        && let Some(s) = state
    {
        s.in_hooks.set(kind);
    }
    if metric == Metric::Blocks
        && let Some(s) = state
    {
        s.in_blocks.set(true);
    }
    if kind == UNTIMED {
        Span::untimed(state, metric)
    } else {
        Span::timed(state, metric, kind)
    }
}

/// Whether call `k` after a thread's first ones is timed: one in each window of `every` (a power
/// of two), at an offset that moves on by one each window. A fixed offset would time only one
/// kind of call where kinds alternate (PyTorch's blocks: an allocation, then its free, so
/// every 32nd call was a free); moving, it times each kind as often as it comes.
#[inline]
fn sampled_turn(k: u64, every: u64) -> bool {
    let mask = every - 1;
    k & mask == (k >> every.trailing_zeros()) & mask
}

/// Whether a tracked allocation's hooks are at work on this thread (a capture then is a part of
/// their bill, [`part`]; else it is a bill of its own, [`Metric::Captures`]).
#[inline]
pub fn in_hooks() -> bool {
    state().map_or(NONE, |s| s.in_hooks.get()) != NONE
}

/// Whether a cache block's record is at work on this thread (a capture then is a part of its
/// bill, [`Metric::Blocks`]).
#[inline]
pub fn in_blocks() -> bool {
    state().is_some_and(|s| s.in_blocks.get())
}

/// Counts one call of a part of the hooks' work ([`Metric::Stacks`], [`Metric::Python`]) on
/// this thread, timed when the hooks call it is inside is. Call only [`in_hooks`].
#[inline]
pub fn part(metric: Metric) -> Span {
    let state = state();
    let kind = state.map_or(NONE, |s| s.in_hooks.get());
    let (slot, own) = slot_of(state.map_or(SHARED_SLOT, slot_in));
    let c = &slot.metrics[metric as usize];
    add(&c.calls, 1, own);
    match kind {
        FIRST => {
            add(&c.first, 1, own);
            Span::timed(state, metric, FIRST)
        }
        SAMPLED => {
            add(&c.timed, 1, own);
            Span::timed(state, metric, SAMPLED)
        }
        _ => Span::untimed(state, metric),
    }
}

/// Runs `f`, work done once (the module tables read, a thread's set-up), timed every time and
/// taken out of the spans it falls in ([`Metric::OneTime`]).
#[inline(never)]
pub fn one_time<T>(f: impl FnOnce() -> T) -> T {
    one_time_timed(f).0
}

/// [`one_time`], returning the nanoseconds it counted too.
#[inline(never)]
pub fn one_time_timed<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let state = state();
    let (start, before) = (now(), one_time_so_far(state));
    let r = f();
    // What nested one-time work took is already counted.
    let ns = now()
        .saturating_sub(start)
        .saturating_sub(one_time_so_far(state).saturating_sub(before));
    if let Some(s) = state {
        s.one_time_ns.set(s.one_time_ns.get().wrapping_add(ns));
    }
    let (slot, own) = slot_of(state.map_or(SHARED_SLOT, slot_in));
    let c = &slot.metrics[Metric::OneTime as usize];
    add(&c.calls, 1, own);
    add(&c.timed_ns, ns, own);
    (r, ns)
}

impl Span {
    /// Ends the span, adding its time so far; a hooks span can be [`resume`]d by the same
    /// thread later in the same call (the accounting after the allocation was served).
    pub fn pause(self) {
        let (metric, kind, state) = (self.metric, self.kind, self.state);
        drop(self);
        if metric == Metric::Hooks
            && let Some(s) = state
        {
            // A sampled call left out of the mean stays out.
            let kept = if kind == SAMPLED && s.last_dropped.get() {
                DROPPED
            } else {
                kind
            };
            s.paused.set(kept);
        }
    }

    /// Takes back the call count and forgets the span (the call turned out not to be one:
    /// a capture that read no Python frames).
    pub fn cancel(mut self) {
        let (slot, own) = slot_of(self.state.map_or(SHARED_SLOT, slot_in));
        let c = &slot.metrics[self.metric as usize];
        let sub = |a: &AtomicU64| {
            if own {
                a.store(a.load(Relaxed).wrapping_sub(1), Relaxed);
            } else {
                a.fetch_sub(1, Relaxed);
            }
        };
        sub(&c.calls);
        match self.kind {
            FIRST if matches!(self.metric, Metric::Stacks | Metric::Python) => sub(&c.first),
            SAMPLED => sub(&c.timed),
            _ => {}
        }
        self.kind = UNTIMED;
    }
}

impl Drop for Span {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(s) = self.state {
            match self.metric {
                Metric::Hooks => s.in_hooks.set(NONE),
                Metric::Blocks => s.in_blocks.set(false),
                _ => {}
            }
        }
        if matches!(self.kind, FIRST | SAMPLED) {
            self.end_timed();
        }
        // Else the parts of an untimed call were not timed either: nothing of theirs is
        // pending (only a part inside a timed call adds to it, and that call's end takes it).
    }
}

impl Span {
    /// The end of a timed span (one call in [`sample_every`] after a thread's first ones): out
    /// of line, so that an untimed call's end is two stores and a compare.
    #[cold]
    #[inline(never)]
    fn end_timed(&self) {
        let state = self.state;
        let ns = now()
            .saturating_sub(self.start)
            .saturating_sub(one_time_so_far(state).saturating_sub(self.one_time));
        let (slot, own) = slot_of(state.map_or(SHARED_SLOT, slot_in));
        let c = &slot.metrics[self.metric as usize];
        match self.metric {
            Metric::Stacks | Metric::Python => {
                // Kept or left out with the hooks call it is inside.
                let i = (self.metric as usize) - 1;
                if let Some(s) = state {
                    s.pending[i].set(s.pending[i].get().wrapping_add(ns));
                }
            }
            Metric::Hooks => {
                let pending = take_pending(state);
                let dropped = self.kind == SAMPLED && ns > OUTLIER_NS && sample_every() > 1;
                if let Some(s) = state {
                    s.last_dropped.set(dropped);
                }
                if dropped {
                    // The thread was most likely descheduled: left out of the mean, not scaled
                    // up, and its parts with it. (A second segment that runs long is left out
                    // alone: the call's first is kept, and counted.)
                    if !self.resumed {
                        add(&c.dropped, 1, own);
                    }
                    return;
                }
                let first = self.kind == FIRST;
                add(if first { &c.first_ns } else { &c.timed_ns }, ns, own);
                for (m, ns) in PARTS.iter().zip(pending) {
                    let pc = &slot.metrics[*m as usize];
                    add(if first { &pc.first_ns } else { &pc.timed_ns }, ns, own);
                }
            }
            _ => {
                if self.kind == FIRST {
                    add(&c.first_ns, ns, own);
                } else if ns > OUTLIER_NS && sample_every() > 1 {
                    add(&c.dropped, 1, own);
                } else {
                    add(&c.timed_ns, ns, own);
                }
            }
        }
    }
}

/// The parts' pending nanoseconds of the thread of state `s`, cleared.
fn take_pending(s: Option<&State>) -> [u64; 2] {
    s.map_or([0, 0], |s| {
        [s.pending[0].replace(0), s.pending[1].replace(0)]
    })
}

/// Resumes the hooks call this thread [`Span::pause`]d: the time until the returned span is
/// dropped is added to that call's (when it was timed and kept), and captures until then are its
/// parts. Counts no new call. `None` when no call is paused.
#[inline]
pub fn resume() -> Option<Span> {
    resume_with(state()?)
}

/// [`resume`] on the thread whose words `l` are (already looked up: see [`super::local`]).
#[inline(always)]
pub fn resume_in(l: &'static super::local::Local) -> Option<Span> {
    resume_with(&l.bill)
}

#[inline(always)]
fn resume_with(state: &'static State) -> Option<Span> {
    let kind = state.paused.replace(NONE);
    if kind == NONE {
        return None;
    }
    state.in_hooks.set(kind);
    let mut span = if matches!(kind, FIRST | SAMPLED) {
        Span::timed(Some(state), Metric::Hooks, kind)
    } else {
        Span::untimed(Some(state), Metric::Hooks)
    };
    span.resumed = true;
    Some(span)
}

/// One metric's totals: calls, how many were timed, how many of those were left out of the
/// mean, estimated nanoseconds, and of them the first calls of each thread and their time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub calls: u64,
    pub timed: u64,
    pub dropped: u64,
    pub ns: u64,
    pub first_calls: u64,
    pub first_ns: u64,
}

impl Totals {
    fn fields(&self) -> [u64; 6] {
        [
            self.calls,
            self.timed,
            self.dropped,
            self.ns,
            self.first_calls,
            self.first_ns,
        ]
    }
}

/// The totals of every metric over every thread, running and exited.
pub fn all_totals() -> [Totals; METRICS] {
    let mut sum = RETIRED
        .each_ref()
        .map(|m| m.each_ref().map(|c| c.load(Relaxed)));
    let used = (NEXT_SLOT.load(Relaxed) as usize).min(SLOTS);
    for slot in SLOT_TABLE[..used].iter().chain([&SHARED]) {
        for (m, t) in estimates(&slot.load()).iter().enumerate() {
            for (total, v) in sum[m].iter_mut().zip(t.fields()) {
                *total = total.saturating_add(v);
            }
        }
    }
    sum.map(
        |[calls, timed, dropped, ns, first_calls, first_ns]| Totals {
            calls,
            timed,
            dropped,
            ns,
            first_calls,
            first_ns,
        },
    )
}

/// The totals of `metric` over every thread, running and exited.
#[cfg(test)]
pub fn totals(metric: Metric) -> Totals {
    all_totals()[metric as usize]
}

/// Adds `values` to this thread's tallies, from `first` on (one thread-local lookup for
/// several counters).
#[inline]
pub fn tally(first: Tally, values: &[u64]) {
    let (slot, own) = slot_of(my_slot());
    for (c, &v) in slot.tallies[first as usize..].iter().zip(values) {
        if v != 0 {
            add(c, v, own);
        }
    }
}

/// Every tally over every thread, running and exited, by [`Tally`] index.
pub fn all_tallies() -> [u64; TALLIES] {
    let mut sum = RETIRED_TALLIES.each_ref().map(|c| c.load(Relaxed));
    let used = (NEXT_SLOT.load(Relaxed) as usize).min(SLOTS);
    for slot in SLOT_TABLE[..used].iter().chain([&SHARED]) {
        for (total, c) in sum.iter_mut().zip(&slot.tallies) {
            *total = total.saturating_add(c.load(Relaxed));
        }
    }
    sum
}

static REPORTS: AtomicU64 = AtomicU64::new(0);
static REPORT_NS: AtomicU64 = AtomicU64::new(0);

/// Adds one report's writing time.
pub fn report_written(ns: u64) {
    REPORTS.fetch_add(1, Relaxed);
    REPORT_NS.fetch_add(ns, Relaxed);
}

/// Reports written so far and the nanoseconds they took.
pub fn reports() -> (u64, u64) {
    (REPORTS.load(Relaxed), REPORT_NS.load(Relaxed))
}

/// In a forked child: its bill starts at zero (the parent's threads' slots stay taken).
pub fn reset_after_fork() {
    for slot in SLOT_TABLE.iter().chain([&SHARED]) {
        for c in &slot.metrics {
            c.clear();
        }
    }
    for m in &RETIRED {
        for c in m {
            c.store(0, Relaxed);
        }
    }
    for c in SLOT_TABLE
        .iter()
        .chain([&SHARED])
        .flat_map(|s| &s.tallies)
        .chain(&RETIRED_TALLIES)
    {
        c.store(0, Relaxed);
    }
    REPORTS.store(0, Relaxed);
    REPORT_NS.store(0, Relaxed);
    if let Some(s) = state() {
        s.paused.set(NONE);
        s.in_hooks.set(NONE);
        s.in_blocks.set(false);
        take_pending(Some(s));
    }
}

// ---------------------------------------------------------------------------------------------
// Memory.

const HEAP_SHARDS: usize = 16;

#[repr(align(64))]
struct HeapShard(AtomicI64);

static HEAP: [HeapShard; HEAP_SHARDS] = [const { HeapShard(AtomicI64::new(0)) }; HEAP_SHARDS];

/// The shim's global allocator: [`System`], counting bytes.
pub struct Counting;

#[inline(always)]
fn heap_add(delta: i64) {
    let marker = 0u8;
    let addr = std::ptr::addr_of!(marker) as u64;
    let i = ((addr >> 20).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60) as usize % HEAP_SHARDS;
    HEAP[i].0.fetch_add(delta, Relaxed);
}

// SAFETY: every call forwards to `System` with the caller's arguments unchanged; the counting
// touches only atomics, never allocates and never unwinds.
unsafe impl GlobalAlloc for Counting {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            heap_add(layout.size() as i64);
        }
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            heap_add(layout.size() as i64);
        }
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (that is, by System) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        heap_add(-(layout.size() as i64));
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's arguments, as GlobalAlloc::realloc requires.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            heap_add(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// Bytes the shim's own code has allocated and not freed, now.
pub fn heap_bytes() -> u64 {
    let sum: i64 = HEAP.iter().map(|s| s.0.load(Relaxed)).sum();
    sum.max(0) as u64
}

#[cfg(test)]
mod tests;
