//! What the shim knows about the program's memory: every live allocation, those lost with their
//! context, the misuse it saw, and per-device counters.
//!
//! The live map is sharded by address so threads rarely meet on a lock. Records of freed
//! allocations are dropped at once (bookkeeping stays proportional to what is live); only the
//! last few thousand freed addresses are remembered, lossily, to tell a double free from a free
//! of an address that never existed.

pub mod by_stack;
pub mod cache_blocks;
pub mod contexts;
pub mod counters;
pub mod devices;
pub mod doors;
pub mod end;
pub mod events;
pub mod given_back;
pub mod limit;
pub mod ooms;
pub mod order;
pub mod peaks;
pub mod record;
pub mod stack_cells;
pub mod stats;
pub mod tags;
pub mod threads;
pub mod vmm;
pub mod windows;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

pub use crate::process::global::lock;
pub use record::{LeakState, NONE, Record};

/// A hasher for addresses: one multiply. Addresses are at least 256-byte aligned, so the low
/// bits are dropped first.
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (v >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;

const SHARDS: usize = 64;

/// Live allocations by address.
pub struct LiveMap {
    shards: [Mutex<AddrMap<Record>>; SHARDS],
}

impl LiveMap {
    fn new() -> Self {
        LiveMap {
            shards: std::array::from_fn(|_| Mutex::new(AddrMap::default())),
        }
    }

    #[inline]
    fn shard(&self, addr: u64) -> &Mutex<AddrMap<Record>> {
        let h = (addr >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.shards[h as usize % SHARDS]
    }

    /// Adds an allocation; returns the record it replaced, if the address was somehow live.
    pub fn insert(&self, addr: u64, record: Record) -> Option<Record> {
        lock(self.shard(addr)).insert(addr, record)
    }

    /// Removes and returns the allocation at exactly `addr`.
    pub fn remove(&self, addr: u64) -> Option<Record> {
        lock(self.shard(addr)).remove(&addr)
    }

    /// Removes and returns every allocation for which `pred` holds.
    pub fn drain_where(&self, mut pred: impl FnMut(&Record) -> bool) -> Vec<(u64, Record)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let mut map = lock(shard);
            let addrs: Vec<u64> = map
                .iter()
                .filter(|(_, r)| pred(r))
                .map(|(a, _)| *a)
                .collect();
            for a in addrs {
                if let Some(r) = map.remove(&a) {
                    out.push((a, r));
                }
            }
        }
        out
    }

    /// The live allocation at `ptr`, or the one that holds it: its address and record (an
    /// exact address is one look-up; an inner pointer walks every shard).
    pub fn holding(&self, ptr: u64) -> Option<(u64, Record)> {
        if let Some(r) = lock(self.shard(ptr)).get(&ptr) {
            return Some((ptr, *r));
        }
        self.shards.iter().find_map(|shard| {
            lock(shard)
                .iter()
                .find(|(a, r)| **a <= ptr && ptr - **a < r.size.max(1))
                .map(|(a, r)| (*a, *r))
        })
    }

    /// A copy of every live allocation.
    pub fn snapshot(&self) -> Vec<(u64, Record)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            out.extend(lock(shard).iter().map(|(a, r)| (*a, *r)));
        }
        out
    }
}

/// Dense sequence numbers for raw order keys: `items` are (key, thread) pairs; the result gives
/// each, in input order, its rank 0.. in (key, thread, input position) order. Reports use this to
/// turn time-stamp-counter keys into the `seq` the contract describes (global allocation order).
pub fn dense_order(items: &[(u64, u32)]) -> Vec<u64> {
    let mut idx: Vec<usize> = (0..items.len()).collect();
    idx.sort_by_key(|&i| (items[i].0, items[i].1, i));
    let mut out = vec![0u64; items.len()];
    for (rank, i) in idx.into_iter().enumerate() {
        out[i] = rank as u64;
    }
    out
}

/// How many freed addresses are remembered for double-free detection.
const FREED_SLOTS: usize = 4096;

/// Recently freed addresses, direct-mapped: a newer free may overwrite an older one, so a very
/// old double free is reported as an invalid free. Lock-free.
pub struct RecentlyFreed {
    slots: [AtomicU64; FREED_SLOTS],
}

impl RecentlyFreed {
    fn new() -> Self {
        RecentlyFreed {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn slot(&self, addr: u64) -> &AtomicU64 {
        let h = (addr >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52;
        &self.slots[h as usize % FREED_SLOTS]
    }

    /// Remembers that `addr` was freed.
    #[inline]
    pub fn note(&self, addr: u64) {
        self.slot(addr).store(addr, Ordering::Relaxed);
    }

    /// Whether `addr` was freed recently.
    pub fn contains(&self, addr: u64) -> bool {
        addr != 0 && self.slot(addr).load(Ordering::Relaxed) == addr
    }
}

/// Everything the tracker holds for one process. A forked child starts a fresh one.
pub struct Tracker {
    pub live: LiveMap,
    /// Allocations lost with their context, kept for the report.
    pub released: Mutex<Vec<(u64, Record)>>,
    pub freed: RecentlyFreed,
    pub contexts: contexts::Contexts,
    pub events: events::Events,
    pub stats: stats::Stats,
    pub vmm: vmm::Vmm,
    /// Allocations refused for lack of memory.
    pub ooms: ooms::Ooms,
}

impl Tracker {
    /// An empty tracker.
    pub fn new() -> Self {
        Tracker {
            live: LiveMap::new(),
            released: Mutex::new(Vec::new()),
            freed: RecentlyFreed::new(),
            contexts: contexts::Contexts::new(),
            events: events::Events::new(),
            stats: stats::Stats::new(),
            vmm: vmm::Vmm::new(),
            ooms: ooms::Ooms::new(),
        }
    }

    /// The order key of an allocation or event made now (see [`dense_order`]).
    #[inline]
    pub fn next_seq(&self) -> u64 {
        order::order_key()
    }

    /// Records a new allocation at `addr`, made on `stream` (the history's key of it, 0 for a
    /// call that takes none: see [`crate::recorder::allocated_at`]).
    pub fn add(&self, addr: u64, record: Record, stream: u64) {
        // The history's moment first: a new peak's record (in `stats`) reads its moment after
        // it and then walks every stack, so `--at` that moment finds the allocation live.
        record.history_allocated_at(None, addr, false, stream);
        self.stats.allocated(&record);
        if let Some(old) = self.live.insert(addr, record) {
            // The driver handed out an address the shim still thought live: the free that
            // released it went through no door the shim watches.
            self.stats.freed(&old);
            self.events.push(events::Event {
                kind: events::Kind::UntrackedFree,
                address: addr,
                api: Some(old.api),
                seq: record.seq,
                thread: record.thread,
                stack: record.stack,
                result: Some(0),
                size: Some(old.size),
                context: old.context,
                time_ms: record.time_ms,
                device: None,
                message: Some(
                    "address handed out again by the driver while still live: freed through an unwatched path"
                        .into(),
                ),
            });
        }
    }

    /// Removes the allocation at `addr` before the driver frees it.
    pub fn take(&self, addr: u64) -> Option<Record> {
        self.live.remove(addr)
    }

    /// Accounts for a completed free of `record` at `addr` on `stream` (0 for a free that takes
    /// none: see [`crate::recorder::freed`]), begun at `tsc` ([`crate::recorder::stamp`]);
    /// `pooled`: a block of cuguard's pool.
    #[inline(always)]
    pub fn freed(&self, addr: u64, record: &Record, tsc: u64, stream: u64, pooled: bool) {
        self.stats.freed_from(record, pooled);
        record.history_freed_on(addr, tsc, stream);
        self.freed.note(addr);
    }

    /// Puts back a record whose free the driver refused.
    pub fn restore(&self, addr: u64, record: Record) {
        self.live.insert(addr, record);
    }

    /// Whether `addr` is an allocation lost with its context.
    pub fn was_released(&self, addr: u64) -> bool {
        lock(&self.released).iter().any(|(a, _)| *a == addr)
    }

    /// Moves every live allocation of context `id` (and `pooled`, the pool's records of it) to
    /// the released list; returns their count and bytes.
    pub fn release_context(&self, id: u32, pooled: Vec<(u64, Record)>) -> (usize, u64) {
        crate::recorder::context_released(id);
        let mut gone = self.live.drain_where(|r| r.context == id);
        let driver = gone.len();
        gone.extend(pooled);
        let bytes = gone.iter().map(|(_, r)| r.size).sum();
        let n = gone.len();
        for (i, (_, r)) in gone.iter().enumerate() {
            self.stats.released(r, i >= driver);
        }
        lock(&self.released).extend(gone);
        (n, bytes)
    }
}

/// The calling thread's stack for a record or an event: its id, or [`NONE`] when capture is off
/// or fails (see [`crate::stack::capture_with_settings`]).
#[inline]
pub fn capture_stack() -> u32 {
    crate::stack::capture_with_settings().unwrap_or(NONE)
}

static TRACKER: AtomicPtr<Tracker> = AtomicPtr::new(std::ptr::null_mut());

/// The process's tracker, created on first use (never at load); `first` runs once, when this
/// call is the one that created it.
#[inline]
pub fn get_or_create(first: fn()) -> &'static Tracker {
    if let Some(t) = crate::process::global::get(&TRACKER) {
        return t;
    }
    crate::process::global::get_or_create(&TRACKER, || {
        first();
        Tracker::new()
    })
}

/// The process's tracker if one exists; never creates it.
#[inline]
pub fn if_any() -> Option<&'static Tracker> {
    crate::process::global::get(&TRACKER)
}

/// In the child of a fork: forget the parent's allocations and start afresh. The old tracker is
/// leaked, not dropped: its locks may be held by threads that do not exist in the child.
pub fn reset_after_fork() {
    if if_any().is_some() {
        crate::process::global::replace(&TRACKER, Tracker::new());
    }
    by_stack::reset_after_fork();
    cache_blocks::reset_after_fork();
    end::reset_after_fork();
    limit::reset_after_fork();
    crate::driver::mem_pools::reset_after_fork();
    peaks::reset_after_fork();
    windows::reset_after_fork();
}

impl Default for Tracker {
    fn default() -> Self {
        Self::new()
    }
}
