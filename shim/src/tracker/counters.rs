//! Per-thread state of the allocation path, so that the hot path touches no shared cache line
//! it does not need: the thread's pool arena and its counters (allocations, frees and live bytes
//! per device, and calls through the shim's exported symbols).
//!
//! Counters are written only by their own thread (plain loads and stores, no locked
//! instructions) and read by whoever writes a report. Live bytes are kept as a per-thread
//! delta that is folded into the device's shared total every [`FLUSH_BYTES`] bytes or
//! [`FLUSH_OPS`] operations; the peak is taken at each fold, so with several threads
//! allocating at once the recorded peak may miss up to `FLUSH_BYTES` per thread (exact for one
//! thread). A thread's counters go back to a free list when it exits, after folding in.
//! Every change of live device bytes is also shown to [`super::windows`] (one relaxed load
//! while no window is open).
//!
//! The live bytes by stack ([`super::by_stack`]) of the stack a thread last allocated or freed
//! from are kept the same way: a per-thread delta, folded into the stack's shared counters when
//! the thread moves to another stack or device, and when it exits. Readers add the deltas of
//! running threads ([`super::threads::stack_deltas`]), so a snapshot misses nothing but what a thread folds at
//! that very moment. Without it, every thread allocating from one stack (or with stacks off)
//! would meet on one cache line, twice per allocation and twice per free.

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};

pub use super::devices::DEVICES;
use super::threads::{Counters, DeviceCounters, NO_KEY, REGISTRY, StackDelta, registry};
use crate::process::global::lock;

/// A thread folds its live-bytes delta into the shared total at least this often…
pub const FLUSH_BYTES: i64 = 1 << 20;
/// …or after this many operations.
pub const FLUSH_OPS: u32 = 64;

/// Counts `bytes` more (or, negative, fewer) live on `device` from `stack`, and one allocation
/// more or fewer (`allocations`: +1 or -1).
#[inline]
pub fn add(stack: u32, device: i32, bytes: i64, allocations: i64) {
    let (d, i) = (slot(device), super::stack_cells::index(stack));
    if !stack_change(d, i, bytes, allocations) {
        super::stack_cells::add_shared(d, i, bytes, allocations);
    }
}

/// Counts `bytes` and `allocations` more live (or fewer, negative) on device slot `slot` from
/// stack index `index` in this thread's delta; false when the thread has no counters (it is
/// exiting), for the caller to count them shared.
#[inline]
pub fn stack_change(slot: usize, index: usize, bytes: i64, allocations: i64) -> bool {
    let Some(c) = counters() else {
        return false;
    };
    stack_change_in(c, slot, index, bytes, allocations);
    true
}

/// [`stack_change`] in the thread's counters `c`.
#[inline]
fn stack_change_in(c: &Counters, slot: usize, index: usize, bytes: i64, allocations: i64) {
    let d = &c.stack;
    let key = (slot as u64) << 32 | index as u64;
    if d.key.load(Relaxed) != key {
        d.fold();
        d.key.store(key, Relaxed);
    }
    d.bytes.store(d.bytes.load(Relaxed) + bytes, Relaxed);
    d.allocations
        .store(d.allocations.load(Relaxed) + allocations, Relaxed);
}

/// Adds `v` to a counter only this thread writes.
#[inline]
fn bump(c: &AtomicU64, v: u64) {
    c.store(c.load(Relaxed).wrapping_add(v), Relaxed);
}

/// The shared side: live bytes and their peak per device, and the registry of counters.
pub struct Shared {
    pub live: [AtomicI64; DEVICES],
    pub peak: [AtomicI64; DEVICES],
    /// Counts of threads that have exited, folded in.
    pub retired: Counters,
}

static SHARED: Shared = Shared {
    live: [const { AtomicI64::new(0) }; DEVICES],
    peak: [const { AtomicI64::new(0) }; DEVICES],
    retired: Counters {
        devices: [const {
            DeviceCounters {
                allocations: AtomicU64::new(0),
                frees: AtomicU64::new(0),
                total_allocated: AtomicU64::new(0),
                live_delta: AtomicI64::new(0),
            }
        }; DEVICES],
        ops: AtomicU64::new(0),
        stack: StackDelta::new(),
        exported_calls: AtomicU64::new(0),
    },
};

/// Round-robin arena assignment.
static NEXT_ARENA: AtomicUsize = AtomicUsize::new(0);

/// Returns the thread's counters to the free list when it exits.
struct Owner(&'static Counters);

impl Drop for Owner {
    fn drop(&mut self) {
        fold_all(self.0);
        let mut r = lock(registry());
        r.0.retain(|c| !std::ptr::eq(*c, self.0));
        r.1.push(self.0);
    }
}

thread_local! {
    static OWNER: std::cell::RefCell<Option<Owner>> = const { std::cell::RefCell::new(None) };
    static ARENA: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn slot(device: i32) -> usize {
    (device.max(0) as usize).min(DEVICES - 1)
}

/// The calling thread's counters, registered on first use. `None` while the thread is exiting.
#[inline(always)]
fn counters() -> Option<&'static Counters> {
    counters_in(crate::process::local::get())
}

/// [`counters`] of the thread whose words `l` are (already looked up: `process::local`).
#[inline(always)]
fn counters_in(l: Option<&crate::process::local::Local>) -> Option<&'static Counters> {
    // The pointer lives with the allocation path's other words of the thread
    // (`process::local`): one thread-local look-up for them all.
    let p = l?.counters.get() as *const Counters;
    if !p.is_null() {
        // SAFETY: only `register` sets it, to counters that are leaked and never freed.
        return Some(unsafe { &*p });
    }
    register()
}

/// The calling thread's counters, registered now (its first count).
#[cold]
#[inline(never)]
fn register() -> Option<&'static Counters> {
    let c: &'static Counters = {
        let mut r = lock(registry());
        let c =
            r.1.pop()
                .unwrap_or_else(|| Box::leak(Box::new(Counters::new())));
        r.0.push(c);
        c
    };
    OWNER.try_with(|o| *o.borrow_mut() = Some(Owner(c))).ok()?;
    crate::process::local::get()?
        .counters
        .set(c as *const Counters as *const ());
    Some(c)
}

/// The pool arena this thread uses (assigned round-robin on first use).
#[inline]
pub fn arena(count: usize) -> usize {
    let a = ARENA.try_with(|a| a.get()).unwrap_or(0);
    if a != usize::MAX {
        return a % count.max(1);
    }
    let a = NEXT_ARENA.fetch_add(1, Relaxed);
    let _ = ARENA.try_with(|c| c.set(a));
    a % count.max(1)
}

/// Counts device memory of `size` bytes on `device` from stack `stack` allocated (`+1`) or
/// freed (`-1`, `allocated` false): what [`allocated`] or [`freed`] count, and the stack's live
/// bytes ([`super::by_stack`]), with one look-up of the thread's counters.
#[inline(always)]
pub fn device_change(device: i32, size: u64, stack: u32, allocated: bool) {
    device_change_in(crate::process::local::get(), device, size, stack, allocated);
}

/// [`device_change`] on the thread whose words `l` are (already looked up: `process::local`).
#[inline(always)]
pub fn device_change_in(
    l: Option<&crate::process::local::Local>,
    device: i32,
    size: u64,
    stack: u32,
    allocated: bool,
) {
    let s = slot(device);
    let index = super::stack_cells::index(stack);
    let delta = if allocated {
        size as i64
    } else {
        -(size as i64)
    };
    super::windows::note(delta);
    match counters_in(l) {
        Some(c) => {
            let d = &c.devices[s];
            if allocated {
                bump(&d.allocations, 1);
                bump(&d.total_allocated, size);
            } else {
                bump(&d.frees, 1);
            }
            stack_change_in(c, s, index, delta, if allocated { 1 } else { -1 });
            live_change(c, s, delta);
        }
        None => {
            let d = &SHARED.retired.devices[s];
            if allocated {
                d.allocations.fetch_add(1, Relaxed);
                d.total_allocated.fetch_add(size, Relaxed);
            } else {
                d.frees.fetch_add(1, Relaxed);
            }
            super::stack_cells::add_shared(s, index, delta, if allocated { 1 } else { -1 });
            shared_live(s, delta);
        }
    }
}

/// Counts an allocation of `size` bytes on `device`; `on_device` says whether it occupies
/// device memory (pinned host memory does not).
#[inline]
pub fn allocated(device: i32, size: u64, on_device: bool) {
    let s = slot(device);
    if on_device {
        super::windows::note(size as i64);
    }
    match counters() {
        Some(c) => {
            let d = &c.devices[s];
            bump(&d.allocations, 1);
            bump(&d.total_allocated, size);
            if on_device {
                live_change(c, s, size as i64);
            }
        }
        None => {
            let d = &SHARED.retired.devices[s];
            d.allocations.fetch_add(1, Relaxed);
            d.total_allocated.fetch_add(size, Relaxed);
            if on_device {
                shared_live(s, size as i64);
            }
        }
    }
}

/// Counts a free by the program of `size` bytes on `device`.
#[inline]
pub fn freed(device: i32, size: u64, on_device: bool) {
    let s = slot(device);
    if on_device {
        super::windows::note(-(size as i64));
    }
    match counters() {
        Some(c) => {
            bump(&c.devices[s].frees, 1);
            if on_device {
                live_change(c, s, -(size as i64));
            }
        }
        None => {
            SHARED.retired.devices[s].frees.fetch_add(1, Relaxed);
            if on_device {
                shared_live(s, -(size as i64));
            }
        }
    }
}

/// Counts one call through the shim's exported symbols.
#[inline]
pub fn count_exported_call() {
    match counters() {
        Some(c) => bump(&c.exported_calls, 1),
        None => {
            SHARED.retired.exported_calls.fetch_add(1, Relaxed);
        }
    }
}

/// Calls through the shim's exported symbols so far, every thread's.
pub fn exported_calls() -> u64 {
    let running: Vec<&'static Counters> = lock(registry()).0.clone();
    SHARED.retired.exported_calls.load(Relaxed)
        + running
            .iter()
            .map(|c| c.exported_calls.load(Relaxed))
            .sum::<u64>()
}

/// Memory gone without a free (its context was destroyed): live bytes only.
pub fn released(device: i32, size: u64) {
    super::windows::note(-(size as i64));
    shared_live(slot(device), -(size as i64));
}

#[inline]
fn live_change(c: &'static Counters, s: usize, delta: i64) {
    let d = &c.devices[s];
    let v = d.live_delta.load(Relaxed) + delta;
    let ops = c.ops.load(Relaxed) + 1;
    if v.abs() >= FLUSH_BYTES || ops >= u64::from(FLUSH_OPS) {
        d.live_delta.store(0, Relaxed);
        c.ops.store(0, Relaxed);
        shared_live(s, v);
    } else {
        d.live_delta.store(v, Relaxed);
        c.ops.store(ops, Relaxed);
    }
}

fn shared_live(s: usize, delta: i64) {
    if delta == 0 {
        return;
    }
    let now = SHARED.live[s].fetch_add(delta, Relaxed) + delta;
    if now > SHARED.peak[s].load(Relaxed) {
        SHARED.peak[s].fetch_max(now, Relaxed);
        super::peaks::new_high(s, now as u64);
    }
}

/// Folds a thread's pending live delta and its counts into the shared totals.
fn fold_all(c: &Counters) {
    c.stack.fold();
    SHARED
        .retired
        .exported_calls
        .fetch_add(c.exported_calls.swap(0, Relaxed), Relaxed);
    for (s, d) in c.devices.iter().enumerate() {
        shared_live(s, d.live_delta.swap(0, Relaxed));
        let r = &SHARED.retired.devices[s];
        r.allocations
            .fetch_add(d.allocations.swap(0, Relaxed), Relaxed);
        r.frees.fetch_add(d.frees.swap(0, Relaxed), Relaxed);
        r.total_allocated
            .fetch_add(d.total_allocated.swap(0, Relaxed), Relaxed);
    }
}

/// One device's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub allocations: u64,
    pub frees: u64,
    pub total_allocated: u64,
    pub live: i64,
    pub peak: i64,
}

/// Every device's totals now, with every thread's pending delta counted.
pub fn totals() -> [Totals; DEVICES] {
    let mut out = [Totals::default(); DEVICES];
    let running: Vec<&'static Counters> = lock(registry()).0.clone();
    for (s, t) in out.iter_mut().enumerate() {
        let r = &SHARED.retired.devices[s];
        t.allocations = r.allocations.load(Relaxed);
        t.frees = r.frees.load(Relaxed);
        t.total_allocated = r.total_allocated.load(Relaxed);
        t.live = SHARED.live[s].load(Relaxed);
        for c in &running {
            let d = &c.devices[s];
            t.allocations += d.allocations.load(Relaxed);
            t.frees += d.frees.load(Relaxed);
            t.total_allocated += d.total_allocated.load(Relaxed);
            t.live += d.live_delta.load(Relaxed);
        }
        t.peak = SHARED.peak[s].load(Relaxed).max(t.live);
    }
    out
}

/// In the child of a fork: every count starts from zero, and only this thread runs.
pub fn reset_after_fork() {
    SHARED.retired.exported_calls.store(0, Relaxed);
    for s in 0..DEVICES {
        SHARED.live[s].store(0, Relaxed);
        SHARED.peak[s].store(0, Relaxed);
        let r = &SHARED.retired.devices[s];
        r.allocations.store(0, Relaxed);
        r.frees.store(0, Relaxed);
        r.total_allocated.store(0, Relaxed);
        r.live_delta.store(0, Relaxed);
    }
    // The registry's lock may be held by a thread that no longer exists: start a new one. The
    // old one and the other threads' counters are leaked; this thread's are zeroed and kept.
    crate::process::global::replace(&REGISTRY, Mutex::new((Vec::new(), Vec::new())));
    if let Some(c) = crate::process::local::get()
        .map(|l| l.counters.get() as *const Counters)
        .filter(|p| !p.is_null())
    {
        // SAFETY: only `register` sets it, to counters that are leaked and never freed.
        let c = unsafe { &*c };
        c.exported_calls.store(0, Relaxed);
        for d in &c.devices {
            d.allocations.store(0, Relaxed);
            d.frees.store(0, Relaxed);
            d.total_allocated.store(0, Relaxed);
            d.live_delta.store(0, Relaxed);
        }
        c.stack.key.store(NO_KEY, Relaxed);
        c.stack.bytes.store(0, Relaxed);
        c.stack.allocations.store(0, Relaxed);
        lock(registry()).0.push(c);
    }
}
