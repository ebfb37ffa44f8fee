//! The shim's own bill: what cuguard cost the program it runs in (the report's `cost`).
//!
//! # Time, sampled
//!
//! Three spans of the allocation path are timed ([`Metric`]): the hooks' work on each tracked
//! allocation ([`Metric::Hooks`]: its record, call stack included, and its accounting once
//! served; not the driver's or the pool's serving), the native stack capture inside it
//! ([`Metric::Stacks`]: unwinding, hashing, the stack table) and the reading of Python frames
//! ([`Metric::Python`], only the captures that read at least one).
//!
//! Every call is counted (exactly). Time is read with `clock_gettime(CLOCK_MONOTONIC)` (a vDSO
//! read: no syscall) around the first [`FIRST_TIMED`] calls of each thread, which carry its
//! one-time costs (rule cache, module list, first stacks), and then around one call in
//! [`sample_every`] (`CUGUARD_COST_SAMPLE`, a power of two, default [`DEFAULT_SAMPLE_EVERY`]). A thread's
//! estimate is the time of its first calls plus the mean of its later timed calls times the
//! number of its later calls; the report adds the threads up. A later timed call that took
//! over [`OUTLIER_NS`] is left out of the mean and counted as dropped, unless every call is
//! timed (the thread was most likely descheduled; on a busy machine one such sample, scaled
//! up, would swamp the estimate). An untimed call costs a
//! thread-local load, a counter store and a compare: no clock, no syscall, no locked
//! instruction (counters are per thread, written by their own thread with relaxed loads and
//! stores; threads past [`SLOTS`] share one slot with relaxed `fetch_add`s).
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
use std::cell::Cell;
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

/// A timed span of the allocation path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// The hooks' work on a tracked allocation.
    Hooks = 0,
    /// Native stack capture (unwinding, hashing, the table).
    Stacks = 1,
    /// Reading Python frames.
    Python = 2,
}

const METRICS: usize = 3;

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
    /// Nanoseconds of the first [`FIRST_TIMED`] calls.
    first_ns: AtomicU64,
    /// Later calls that were timed, and their nanoseconds.
    timed: AtomicU64,
    timed_ns: AtomicU64,
    /// Of the later timed calls, those left out of the mean ([`OUTLIER_NS`]).
    dropped: AtomicU64,
}

impl Counts {
    const fn new() -> Counts {
        Counts {
            calls: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            timed: AtomicU64::new(0),
            timed_ns: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn clear(&self) {
        for c in [
            &self.calls,
            &self.first_ns,
            &self.timed,
            &self.timed_ns,
            &self.dropped,
        ] {
            c.store(0, Relaxed);
        }
    }

    /// (calls, timed calls, dropped timed calls, estimated ns) of one thread's counters.
    fn estimate(&self) -> [u64; 4] {
        let calls = self.calls.load(Relaxed);
        let first = calls.min(FIRST_TIMED);
        let first_ns = self.first_ns.load(Relaxed);
        let later = calls - first;
        let timed = self.timed.load(Relaxed).min(later);
        let dropped = self.dropped.load(Relaxed).min(timed);
        let kept = timed - dropped;
        let timed_ns = self.timed_ns.load(Relaxed);
        let later_ns = if later == 0 {
            0
        } else if kept > 0 {
            (u128::from(timed_ns) * u128::from(later) / u128::from(kept)) as u64
        } else if first > 0 {
            (u128::from(first_ns) * u128::from(later) / u128::from(first)) as u64
        } else {
            0
        };
        [
            calls,
            first + timed,
            dropped,
            first_ns.saturating_add(later_ns),
        ]
    }
}

/// One thread's counters (or, for [`SHARED`], several threads').
#[repr(align(64))]
struct Slot {
    metrics: [Counts; METRICS],
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            metrics: [const { Counts::new() }; METRICS],
        }
    }
}

static SLOT_TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// Threads past [`SLOTS`] (and threads whose thread-locals are gone) count here, with
/// `fetch_add`.
static SHARED: Slot = Slot::new();
/// Slots handed out so far (`SLOTS` and more: all taken).
static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);
/// Estimates of exited threads: per metric (calls, timed, dropped, ns).
static RETIRED: [[AtomicU64; 4]; METRICS] = [const { [const { AtomicU64::new(0) }; 4] }; METRICS];
/// Slots of exited threads, free for new threads: one bit each (lock-free, so a fork cannot
/// leave it held).
static FREE: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];

const NO_SLOT: u32 = u32::MAX;
const SHARED_SLOT: u32 = u32::MAX - 1;

thread_local! {
    static MY_SLOT: Cell<u32> = const { Cell::new(NO_SLOT) };
    static RELEASE: Release = const { Release };
    /// A hooks span paused at the end of the record (see [`pause`]): 0 none, 1 a first call,
    /// 2 a sampled later call.
    static PAUSED: Cell<u8> = const { Cell::new(0) };
}

/// Gives the thread's slot back when it exits, its estimate folded into [`RETIRED`].
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        let Ok(i) = MY_SLOT.try_with(|s| s.replace(SHARED_SLOT)) else {
            return;
        };
        let Some(slot) = SLOT_TABLE.get(i as usize) else {
            return;
        };
        for (m, counts) in slot.metrics.iter().enumerate() {
            for (total, v) in RETIRED[m].iter().zip(counts.estimate()) {
                total.fetch_add(v, Relaxed);
            }
            counts.clear();
        }
        FREE[i as usize / 64].fetch_or(1 << (i % 64), Relaxed);
    }
}

/// The calling thread's slot index ([`SHARED_SLOT`] when it has none of its own).
#[inline]
fn my_slot() -> u32 {
    MY_SLOT
        .try_with(|s| {
            let i = s.get();
            if i != NO_SLOT {
                return i;
            }
            let i = claim();
            s.set(i);
            if i != SHARED_SLOT {
                // Registers the destructor that gives the slot back.
                let _ = RELEASE.try_with(|_| ());
            }
            i
        })
        .unwrap_or(SHARED_SLOT)
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

/// A timed (or only counted) span; ends when dropped.
#[must_use]
pub struct Span {
    metric: Metric,
    /// 0: not timed; 1: one of the first calls; 2: a sampled later call.
    kind: u8,
    start: u64,
}

/// Counts one call of `metric` and times it if it is one of the thread's first calls or its
/// turn in the sample. Drop the span where the call ends (or [`Span::cancel`] it).
#[inline]
pub fn begin(metric: Metric) -> Span {
    let (slot, own) = slot_of(my_slot());
    let c = &slot.metrics[metric as usize];
    let n = if own {
        let n = c.calls.load(Relaxed);
        c.calls.store(n.wrapping_add(1), Relaxed);
        n
    } else {
        c.calls.fetch_add(1, Relaxed)
    };
    let kind = if n < FIRST_TIMED {
        1
    } else if (n - FIRST_TIMED) & (sample_every() - 1) == 0 {
        add(&c.timed, 1, own);
        2
    } else {
        return Span {
            metric,
            kind: 0,
            start: 0,
        };
    };
    Span {
        metric,
        kind,
        start: now(),
    }
}

impl Span {
    /// Ends the span, adding its time so far; a hooks span can be [`resume`]d by the same
    /// thread later in the same call (the accounting after the allocation was served).
    pub fn pause(self) {
        let kind = self.kind;
        drop(self);
        if kind != 0 {
            let _ = PAUSED.try_with(|p| p.set(kind));
        }
    }

    /// Takes back the call count and forgets the span (the call turned out not to be one:
    /// a capture that read no Python frames).
    pub fn cancel(mut self) {
        let (slot, own) = slot_of(my_slot());
        let c = &slot.metrics[self.metric as usize];
        if own {
            c.calls
                .store(c.calls.load(Relaxed).wrapping_sub(1), Relaxed);
            if self.kind == 2 {
                c.timed
                    .store(c.timed.load(Relaxed).wrapping_sub(1), Relaxed);
            }
        } else {
            c.calls.fetch_sub(1, Relaxed);
            if self.kind == 2 {
                c.timed.fetch_sub(1, Relaxed);
            }
        }
        self.kind = 0;
    }
}

impl Drop for Span {
    #[inline]
    fn drop(&mut self) {
        if self.kind == 0 {
            return;
        }
        let ns = now().saturating_sub(self.start);
        let (slot, own) = slot_of(my_slot());
        let c = &slot.metrics[self.metric as usize];
        if self.kind == 1 {
            add(&c.first_ns, ns, own);
        } else if ns > OUTLIER_NS && sample_every() > 1 {
            // The thread was most likely descheduled: left out of the mean, not scaled up.
            add(&c.dropped, 1, own);
        } else {
            add(&c.timed_ns, ns, own);
        }
    }
}

/// Resumes the hooks span this thread [`Span::pause`]d, if it was timed: the time until the
/// returned span is dropped is added to that call's. Counts no new call.
#[inline]
pub fn resume() -> Option<Span> {
    let kind = PAUSED.try_with(|p| p.replace(0)).unwrap_or(0);
    (kind != 0).then(|| Span {
        metric: Metric::Hooks,
        kind,
        start: now(),
    })
}

/// One metric's totals: calls, how many were timed, how many of those were left out of the
/// mean, estimated nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub calls: u64,
    pub timed: u64,
    pub dropped: u64,
    pub ns: u64,
}

/// The totals of `metric` over every thread, running and exited.
pub fn totals(metric: Metric) -> Totals {
    let m = metric as usize;
    let mut sum = RETIRED[m].each_ref().map(|c| c.load(Relaxed));
    let used = (NEXT_SLOT.load(Relaxed) as usize).min(SLOTS);
    for slot in SLOT_TABLE[..used].iter().chain([&SHARED]) {
        for (total, v) in sum.iter_mut().zip(slot.metrics[m].estimate()) {
            *total = total.saturating_add(v);
        }
    }
    Totals {
        calls: sum[0],
        timed: sum[1],
        dropped: sum[2],
        ns: sum[3],
    }
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
    REPORTS.store(0, Relaxed);
    REPORT_NS.store(0, Relaxed);
    let _ = PAUSED.try_with(|p| p.set(0));
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
mod tests {
    use super::*;

    #[test]
    fn every_call_counted_first_ones_and_samples_timed() {
        // A thread of its own, so its slot starts empty.
        std::thread::spawn(|| {
            let n = FIRST_TIMED + 3 * sample_every();
            for _ in 0..n {
                let s = begin(Metric::Python);
                std::hint::black_box(&s);
            }
            let (slot, own) = slot_of(my_slot());
            assert!(own);
            let [calls, timed, dropped, ns] = slot.metrics[Metric::Python as usize].estimate();
            assert_eq!(calls, n);
            assert_eq!(timed, FIRST_TIMED + 3);
            assert!(dropped <= 3);
            assert!(ns > 0);
            // A cancelled span takes its call back.
            begin(Metric::Python).cancel();
            assert_eq!(slot.metrics[Metric::Python as usize].estimate()[0], n);
        })
        .join()
        .unwrap();
        // The exited thread's figures are kept.
        assert!(totals(Metric::Python).calls >= FIRST_TIMED + 3 * sample_every());
    }

    #[test]
    fn a_paused_hooks_span_resumes_once() {
        std::thread::spawn(|| {
            begin(Metric::Hooks).pause();
            assert!(resume().is_some());
            assert!(resume().is_none());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_estimate_scales_later_samples() {
        let c = Counts::new();
        c.calls.store(FIRST_TIMED + 100, Relaxed);
        c.first_ns.store(800, Relaxed);
        c.timed.store(4, Relaxed);
        c.timed_ns.store(40, Relaxed);
        assert_eq!(
            c.estimate(),
            [FIRST_TIMED + 100, FIRST_TIMED + 4, 0, 800 + 1000]
        );
        // A dropped sample is left out of the mean: the other four give 10 ns each.
        c.timed.store(5, Relaxed);
        c.dropped.store(1, Relaxed);
        assert_eq!(
            c.estimate(),
            [FIRST_TIMED + 100, FIRST_TIMED + 5, 1, 800 + 1000]
        );
    }

    /// What the bill adds to one call: a span counted but not timed, a span timed, and an
    /// allocation through the counting allocator against the system allocator.
    /// `cargo test -p cuguard-shim --release --lib -- --ignored bench_bill --nocapture`
    #[test]
    #[ignore]
    fn bench_bill() {
        std::thread::spawn(|| {
            const N: u32 = 10_000_000;
            let time = |f: &dyn Fn()| {
                let mut best = f64::MAX;
                for _ in 0..5 {
                    let t = std::time::Instant::now();
                    for _ in 0..N {
                        f();
                    }
                    best = best.min(t.elapsed().as_nanos() as f64 / f64::from(N));
                }
                best
            };
            configure(1 << 20);
            let untimed = time(&|| drop(std::hint::black_box(begin(Metric::Stacks))));
            configure(1);
            let timed = time(&|| drop(std::hint::black_box(begin(Metric::Stacks))));
            configure(DEFAULT_SAMPLE_EVERY);
            let layout = Layout::from_size_align(64, 8).unwrap();
            // SAFETY: each block is freed with the layout it was allocated with.
            let counted = time(&|| unsafe {
                Counting.dealloc(std::hint::black_box(Counting.alloc(layout)), layout)
            });
            // SAFETY: as above.
            let plain = time(&|| unsafe {
                System.dealloc(std::hint::black_box(System.alloc(layout)), layout)
            });
            println!(
                "span counted, not timed: {untimed:.1} ns; timed: {timed:.1} ns; \
                 64-byte alloc+free counted {counted:.1} ns, plain {plain:.1} ns"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn heap_counts_own_allocations() {
        let before = heap_bytes();
        let v: Vec<u8> = Vec::with_capacity(1 << 20);
        assert!(heap_bytes() >= before + (1 << 20) - (64 << 10));
        drop(v);
    }
}
