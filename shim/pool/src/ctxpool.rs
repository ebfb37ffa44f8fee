//! One context's pool: chunks from the [`Device`], carved by the sub-allocator, with frees held
//! back until a fence says they are safe (see [`crate::reuse`]), and the slow path's decisions
//! taken by [`crate::policy`].
//!
//! A pool is split into [`ARENAS`] arenas, each with its own lock, chunks and fences; a thread
//! allocates from its own arena (the caller picks it, round-robin per thread in the shim), so
//! threads rarely meet on a lock. A block is freed into the arena that holds it, whichever
//! thread frees it. Each arena also keeps the caller's record of each of its live blocks (`R`,
//! in the shim the tracker's record), so a pooled allocation and a pooled free each take one
//! lock in all.
//!
//! In front of the arenas, each thread may keep a [`ThreadCache`] of blocks lent by the arenas
//! (`tcache.rs`): [`CtxPool::alloc_cached`] and [`CtxPool::free_cached`] serve a pair from it
//! without a lock. An arena remembers which of its grants are lent (`lent`); they are neither
//! its live records nor its free space, and it finds them in the caches when asked (another
//! thread's free, `find`, `records`, `kill`, the report's free bytes).
//!
//! A lock is never held across a call into the program; it is held across device calls only on
//! the slow path (growing, fencing, trimming), which the driver's own cuMemAlloc/cuMemFree
//! would have made the program wait for anyway.

use std::collections::VecDeque;
use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::addr_hash::{AddrMap, AddrSet};
use crate::chunking::{GrowthPolicy, Route, SizeRepeats};
use crate::device::Device;
#[cfg(test)] // the tests name it through `use super::*`
use crate::device::DeviceError;
use crate::policy;
use crate::reuse::Fences;
use crate::tcache::{self, CachedBlock, LiveBlock, MAX_CACHED_BLOCK, Packed, Shared, ThreadCache};
use crate::tlsf::{ChunkId, ChunkKind, FreeError, Freed, Grant, SubAllocator};

pub use answers::{Block, Export, InvalidFree, OverLimit, Reason, Refusal};

/// Arenas per pool.
pub const ARENAS: usize = 16;

/// Every block is aligned to at least this (the driver gives 512 or more; CUDA code assumes 256).
pub const ALIGN: u64 = 256;

/// A pool's settings, resolved for its device. [`Default`]: no limit, nothing kept, safe reuse.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Most bytes the pool may reserve on its device (`CUGUARD_POOL_LIMIT`).
    pub limit: Option<u64>,
    /// Idle bytes kept before chunks go back to the device (`CUGUARD_POOL_KEEP`), shared evenly
    /// among the arenas that hold chunks (a program with one thread keeps all of it in its one
    /// arena).
    pub keep: u64,
    /// For cuguard's own tests only (`CUGUARD_TEST_UNSAFE_REUSE`): reuse freed blocks at once,
    /// ignoring fences.
    pub unsafe_reuse: bool,
}

/// Counters for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct PoolStats {
    pub reserved_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub chunks: u64,
    pub chunks_added: u64,
    pub trims: u64,
    pub trimmed_bytes: u64,
    pub free_bytes: u64,
    pub largest_free_block: u64,
    pub pending_bytes: u64,
    pub fences: u64,
    pub syncs: u64,
    /// Host waits for the oldest fence in flight, in place of a synchronization.
    pub fence_waits: u64,
    /// Fences and synchronizations that also waited for other contexts' work (peers).
    pub peer_waits: u64,
    /// Frees reusable at once by the stream rule ([`Device::reuse_on_stream`]).
    pub stream_reuses: u64,
    pub limit_refusals: u64,
}

/// One arena: a sub-allocator, its frees waiting for fences, and the records of its blocks.
struct Arena<D: Device, R> {
    sub: SubAllocator,
    growth: GrowthPolicy,
    /// The exact sizes of the dedicated requests it was asked for: idle chunks of sizes asked
    /// for again are kept when the growth policy gives chunks back.
    repeats: SizeRepeats,
    /// Frees waiting for a fence: (mark, address, granted size), in mark order.
    pending: VecDeque<(u64, u64, u64)>,
    /// The addresses in `pending`.
    pending_set: AddrSet,
    /// The sizes in `pending`, summed.
    pending_bytes: u64,
    since_fence_bytes: u64,
    since_fence_count: u32,
    /// Frees that waited for a fence, counted for polling.
    frees: u32,
    fences: Fences<D::Event>,
    /// The record of each live block that was given one (not those lent to a thread cache).
    records: AddrMap<R>,
    /// Blocks lent to thread caches (granted here; cached or live there, see `tcache.rs`).
    lent: AddrSet,
    /// Dedicated chunks (by base, which is their one block's address) whose block was exported
    /// ([`CtxPool::export`]): given back to the device once that block is freed, never reused.
    exported: AddrSet,
    chunks_added: u64,
    trims: u64,
    trimmed_bytes: u64,
    limit_refusals: u64,
}

/// A context's pool, over device `D`, keeping a record `R` with each block.
///
/// Every method may be called from any thread; the ones that can reach the device (`alloc`,
/// `free`, `reserve_initial`) expect the pool's context to be current, and check it (through
/// [`Device::is_current`]) before fencing or synchronizing.
pub struct CtxPool<D: Device, R> {
    device: D,
    arenas: Box<[Mutex<Arena<D, R>>]>,
    settings: Settings,
    /// Bytes reserved from the device, all arenas together (for the limit).
    reserved: AtomicU64,
    /// Bit `i`: arena `i` has added a chunk (the keep is shared among these).
    arenas_used: AtomicU32,
    peak_reserved: AtomicU64,
    /// The context is gone; the device freed the chunks with it.
    dead: AtomicBool,
    /// The thread caches bound to this pool (see `tcache.rs`).
    caches: Mutex<Vec<Arc<Shared>>>,
    /// Bumped when the context dies: every thread cache bound before forgets its blocks.
    cache_generation: AtomicU64,
    /// Some thread cache was orphaned (its thread exited) and waits to be adopted.
    orphans: AtomicBool,
    /// Submissions up to this mark are complete (the highest any arena's fences reached).
    completed: AtomicU64,
    /// Frees the device let be reused at once by the stream rule.
    stream_reuses: AtomicU64,
}

/// Locks a mutex, taking it back from a thread that panicked while holding it (the same rule as
/// the shim's tracker: a pool that refused every call after one panic would help nobody).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<D: Device, R: Packed> CtxPool<D, R> {
    /// An empty pool on `device`.
    pub fn new(device: D, settings: Settings) -> CtxPool<D, R> {
        let arena = || {
            Mutex::new(Arena {
                sub: SubAllocator::new(ALIGN),
                growth: GrowthPolicy::default(),
                repeats: SizeRepeats::default(),
                pending: VecDeque::new(),
                pending_set: AddrSet::default(),
                pending_bytes: 0,
                since_fence_bytes: 0,
                since_fence_count: 0,
                frees: 0,
                fences: Fences::default(),
                records: AddrMap::default(),
                lent: AddrSet::default(),
                exported: AddrSet::default(),
                chunks_added: 0,
                trims: 0,
                trimmed_bytes: 0,
                limit_refusals: 0,
            })
        };
        CtxPool {
            device,
            arenas: (0..ARENAS).map(|_| arena()).collect(),
            settings,
            reserved: AtomicU64::new(0),
            arenas_used: AtomicU32::new(0),
            peak_reserved: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            caches: Mutex::new(Vec::new()),
            cache_generation: AtomicU64::new(1),
            orphans: AtomicBool::new(false),
            completed: AtomicU64::new(0),
            stream_reuses: AtomicU64::new(0),
        }
    }

    /// The mark a free made now keeps: the submission count, or 0 (reusable at once) when the
    /// count is not covered yet but the device says the stream rule lets the block be reused
    /// now ([`Device::reuse_on_stream`]).
    #[inline]
    fn free_mark(&self) -> u64 {
        let mark = self.device.submissions();
        if self.settings.unsafe_reuse {
            return mark;
        }
        self.stream_rule_mark(mark)
    }

    /// `mark`, or 0 when it is not covered yet and the stream rule lets the block be reused now.
    #[inline]
    fn stream_rule_mark(&self, mark: u64) -> u64 {
        let completed = self.completed.load(Acquire);
        if mark > completed && self.device.reuse_on_stream(completed) {
            self.stream_reuses.fetch_add(1, Relaxed);
            return 0;
        }
        mark
    }

    /// Notes that an arena's fences reached `mark`.
    #[inline]
    fn note_completed(&self, mark: u64) {
        if mark > self.completed.load(Relaxed) {
            self.completed.fetch_max(mark, Release);
        }
    }

    /// The device it draws from.
    #[inline]
    pub fn device(&self) -> &D {
        &self.device
    }

    /// Bytes reserved from the device, all arenas together: one load, no lock.
    pub fn reserved_bytes(&self) -> u64 {
        self.reserved.load(Relaxed)
    }

    fn dead(&self) -> bool {
        self.dead.load(Relaxed)
    }

    fn within_limit(&self, more: u64) -> bool {
        self.within_pool_limit(more) && self.within_process_limit(more)
    }

    /// Whether `more` bytes fit the pool's own limit (`CUGUARD_POOL_LIMIT`).
    fn within_pool_limit(&self, more: u64) -> bool {
        match self.settings.limit {
            None => true,
            Some(l) => self.reserved.load(Relaxed).saturating_add(more) <= l,
        }
    }

    /// Whether `more` bytes fit the process's limit on the device
    /// ([`Device::process_limit`]).
    fn within_process_limit(&self, more: u64) -> bool {
        self.device
            .process_limit()
            .is_none_or(|(limit, held)| held.saturating_add(more) <= limit)
    }

    /// Reserves `bytes` up front (`CUGUARD_POOL_INITIAL`), in arena 0, whatever the limit.
    pub fn reserve_initial(&self, bytes: u64) -> Result<(), Refusal> {
        let mut g = lock(&self.arenas[0]);
        let size = bytes.next_multiple_of(g.growth.granularity.max(ALIGN));
        g.grow(size, false, self, 0)
    }

    /// Allocates `size` bytes for the program from arena `arena`, keeping `record` with the
    /// block.
    pub fn alloc(&self, arena: usize, size: u64, record: Option<R>) -> Result<u64, Refusal> {
        if size == 0 {
            return Err(Refusal {
                reason: Reason::ZeroSize,
                why: "size 0".into(),
                over_limit: None,
            });
        }
        if self.dead() {
            return Err(Refusal {
                reason: Reason::ContextDestroyed,
                why: "context destroyed".into(),
                over_limit: None,
            });
        }
        if self.orphans.load(Relaxed) {
            self.adopt_orphans();
        }
        let arena = arena % ARENAS;
        let mut g = lock(&self.arenas[arena]);
        if !g.pending.is_empty() {
            g.release_ready(self);
        }
        if size >= g.growth.dedicated_threshold {
            g.repeats.note(size);
        }
        let grant = match g.try_alloc(size) {
            Some(grant) => grant,
            None => g.alloc_slow(size, self, arena)?,
        };
        if let Some(r) = record {
            g.records.insert(grant.addr, r);
        }
        Ok(grant.addr)
    }

    /// Frees `addr` if arena `arena` holds it: `None` when it does not, else `Ok` with the
    /// block's record, or [`InvalidFree`] for an address in the arena's chunks that starts no
    /// live block.
    pub fn free(&self, arena: usize, addr: u64) -> Option<Result<Option<R>, InvalidFree>> {
        self.free_lending(arena, addr, None)
    }

    /// [`free`](Self::free), lending the block to `lend`'s cache (into its free slot) when the
    /// cache has room for it.
    fn free_lending(
        &self,
        arena: usize,
        addr: u64,
        lend: Option<(&mut ThreadCache, usize)>,
    ) -> Option<Result<Option<R>, InvalidFree>> {
        if self.dead() {
            return None;
        }
        let arena = arena % ARENAS;
        let mut g = lock(&self.arenas[arena]);
        let lent = !g.lent.is_empty() && g.lent.contains(&addr);
        let mut mark = self.device.submissions();
        if mark > self.completed.load(Acquire) && !self.settings.unsafe_reuse {
            // Asking the stream rule may arm its guard (`Device::reuse_on_stream`): not for an
            // address this arena does not hold (a free of the driver's own allocation).
            if !lent && g.sub.granted(addr).is_none() && g.sub.chunk_containing(addr).is_none() {
                return None;
            }
            mark = self.stream_rule_mark(mark);
        }
        if lent {
            // Lent to a thread cache: live there (freed by another thread), or cached there
            // (freed twice).
            let Some(block) = self.claim_live(addr) else {
                return Some(Err(InvalidFree));
            };
            g.lent.remove(&addr);
            g.release(self, addr, block.granted, mark);
            return Some(Ok(block.record));
        }
        if let Some((cache, slot)) = lend
            && let Some(granted) = g.sub.granted(addr)
            && granted <= MAX_CACHED_BLOCK
            && cache.wants(granted)
            && (g.pending_set.is_empty() || !g.pending_set.contains(&addr))
        {
            let record = g.records.remove(&addr);
            g.lent.insert(addr);
            drop(g);
            cache.put_cached(slot, addr, granted, arena, mark);
            return Some(Ok(record));
        }
        let immediate = mark <= g.fences.completed() || self.settings.unsafe_reuse;
        if immediate && (g.pending_set.is_empty() || !g.pending_set.contains(&addr)) {
            return match g.free_block(self, addr) {
                Ok(freed) => {
                    let record = g.records.remove(&addr);
                    if freed.chunk_idle {
                        g.after_release(self);
                    }
                    Some(Ok(record))
                }
                Err(FreeError::NotInPool) => None,
                Err(_) => Some(Err(InvalidFree)),
            };
        }
        match g.sub.find(addr) {
            Some(grant) if grant.addr == addr && !g.pending_set.contains(&addr) => {
                let record = g.records.remove(&addr);
                if g.pending.is_empty() {
                    self.device.frees_waiting(std::ptr::from_ref(self) as usize);
                }
                g.pending.push_back((mark, addr, grant.size));
                g.pending_set.insert(addr);
                g.pending_bytes += grant.size;
                g.since_fence_bytes += grant.size;
                g.since_fence_count += 1;
                g.frees = g.frees.wrapping_add(1);
                if policy::fence_due(g.since_fence_bytes, g.since_fence_count) {
                    g.fence(self);
                }
                if policy::poll_due(g.frees) {
                    let done = g.fences.poll(&self.device);
                    self.note_completed(done);
                    g.release_ready(self);
                    g.after_release(self);
                }
                Some(Ok(record))
            }
            Some(_) => Some(Err(InvalidFree)),
            None if g.sub.chunk_containing(addr).is_some() => Some(Err(InvalidFree)),
            None => None,
        }
    }

    /// The live block of arena `arena` containing `addr` (interior pointers too).
    pub fn find(&self, arena: usize, addr: u64) -> Option<Block<R>> {
        if self.dead() {
            return None;
        }
        let g = lock(&self.arenas[arena % ARENAS]);
        let grant = g.sub.find(addr)?;
        if g.pending_set.contains(&grant.addr) {
            return None;
        }
        if !g.lent.is_empty() && g.lent.contains(&grant.addr) {
            let live = self.find_live(grant.addr)?;
            return Some(Block {
                addr: grant.addr,
                granted: grant.size,
                record: live.record,
            });
        }
        Some(Block {
            addr: grant.addr,
            granted: grant.size,
            record: g.records.get(&grant.addr).copied(),
        })
    }

    /// Marks the live block at `addr` of arena `arena` exported (a CUDA IPC handle names it),
    /// when the block is a dedicated chunk whole, and returns the chunk's base (the block's
    /// address): the device's own handle of that chunk then names exactly this block, for any
    /// process that opens it. From then on the chunk goes back to the device when the block is
    /// freed, never to another allocation. [`Export::Shared`] for a block that shares its chunk
    /// (a handle would name the whole chunk, at another address); [`Export::NotLive`] for an
    /// address in no live block.
    pub fn export(&self, arena: usize, addr: u64) -> Export {
        self.whole_chunk(arena, addr, true)
    }

    /// What [`export`](Self::export) would answer, without marking anything.
    pub fn exportable(&self, arena: usize, addr: u64) -> Export {
        self.whole_chunk(arena, addr, false)
    }

    fn whole_chunk(&self, arena: usize, addr: u64, mark: bool) -> Export {
        if self.dead() {
            return Export::NotLive;
        }
        let mut g = lock(&self.arenas[arena % ARENAS]);
        let Some(grant) = g.sub.find(addr) else {
            return Export::NotLive;
        };
        if g.pending_set.contains(&grant.addr) {
            return Export::NotLive;
        }
        match g.sub.chunk_containing(grant.addr) {
            Some(c)
                if c.kind == ChunkKind::Dedicated && c.base == grant.addr && c.live_blocks == 1 =>
            {
                if mark {
                    g.exported.insert(c.base);
                }
                Export::Whole { base: c.base }
            }
            _ => Export::Shared,
        }
    }

    /// For a thread of the implementor's, off the program's threads, with the pool's context
    /// current: retires the fences that completed, releases the frees they cover, gives idle
    /// chunks beyond the keep back to the device (without waiting), and, with `fence`, records a
    /// fence for frees that wait without one when their release could take the arena's idle
    /// bytes beyond its keep, or give an exported chunk back. Arenas busy now are left for the
    /// next call.
    /// Returns whether frees still wait (or an arena was busy).
    ///
    /// # Time Complexity
    /// O(arenas + fences in flight + frees released).
    pub fn tend(&self, fence: bool) -> bool {
        if self.dead() {
            return false;
        }
        let mut waiting = false;
        for a in self.arenas.iter() {
            let Ok(mut g) = a.try_lock() else {
                waiting = true;
                continue;
            };
            if g.pending.is_empty() {
                continue;
            }
            let done = g.fences.poll(&self.device);
            self.note_completed(done);
            g.release_ready(self);
            g.after_release(self);
            if let Some(&(newest, _, _)) = g.pending.back() {
                waiting = true;
                // Only frees whose release could make the arena trim are worth a fence of its
                // own: others wait, as before, for the program's next fence (a fence recorded
                // early would leave the pool's completed mark short of later work, and the
                // stream rule less often applicable).
                let could_trim = policy::trim_due(
                    g.sub.stats().idle_bytes + g.pending_bytes,
                    self.keep_share(),
                ) || (!g.exported.is_empty()
                    && g.pending.iter().any(|p| g.exported.contains(&p.1)));
                if fence && could_trim && !g.fences.covers(newest) {
                    g.fence(self);
                }
            }
        }
        waiting
    }

    /// The idle bytes one arena keeps: [`Settings::keep`] shared evenly among the arenas that
    /// hold chunks.
    fn keep_share(&self) -> u64 {
        let used = self.arenas_used.load(Relaxed).count_ones().max(1);
        self.settings.keep / u64::from(used)
    }

    /// Bytes the program could still get from the pool without the device: free and pending.
    pub fn idle_bytes(&self) -> u64 {
        if self.dead() {
            return 0;
        }
        self.arenas
            .iter()
            .map(|a| {
                let g = lock(a);
                g.sub.stats().free_bytes + g.pending_bytes
            })
            .sum::<u64>()
            + self.cached_bytes()
    }

    /// The records of every live block, with their addresses.
    pub fn records(&self) -> Vec<(u64, R)> {
        let mut out = Vec::new();
        for a in self.arenas.iter() {
            out.extend(lock(a).records.iter().map(|(k, v)| (*k, *v)));
        }
        for shared in self.registered() {
            for s in &shared.slots {
                if let Some((_, b)) = s.read_live::<R>()
                    && let Some(r) = b.record
                {
                    out.push((b.addr, r));
                }
            }
        }
        out
    }

    /// The context is gone and took the chunks with it: forget them (without telling the
    /// device). Returns the records of the blocks that were live (the program never freed them).
    pub fn kill(&self) -> Vec<(u64, R)> {
        self.dead.store(true, Relaxed);
        let mut gone = Vec::new();
        // Thread caches: their live records are lost with the context; each owner forgets its
        // slots when it sees the generation changed.
        let caches = {
            let mut c = lock(&self.caches);
            self.cache_generation.fetch_add(1, AcqRel);
            std::mem::take(&mut *c)
        };
        for shared in caches {
            for s in &shared.slots {
                if let Some((_, b)) = s.read_live::<R>()
                    && let Some(r) = b.record
                {
                    gone.push((b.addr, r));
                }
            }
        }
        for a in self.arenas.iter() {
            let mut g = lock(a);
            gone.extend(g.records.drain());
            g.lent.clear();
            g.exported.clear();
            g.pending.clear();
            g.pending_set.clear();
            g.pending_bytes = 0;
            g.sub = SubAllocator::new(ALIGN);
        }
        self.reserved.store(0, Relaxed);
        gone
    }

    /// Chunk ranges `(start, end)`, all arenas together.
    pub fn chunk_ranges(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for a in self.arenas.iter() {
            out.extend(lock(a).sub.chunks().map(|c| (c.base, c.base + c.size)));
        }
        out
    }

    /// The report's counters, all arenas together.
    pub fn stats(&self) -> PoolStats {
        let mut o = PoolStats {
            peak_reserved_bytes: self.peak_reserved.load(Relaxed),
            stream_reuses: self.stream_reuses.load(Relaxed),
            ..PoolStats::default()
        };
        for a in self.arenas.iter() {
            let g = lock(a);
            let s = g.sub.stats();
            o.reserved_bytes += s.reserved_bytes;
            o.chunks += s.chunks;
            o.chunks_added += g.chunks_added;
            o.trims += g.trims;
            o.trimmed_bytes += g.trimmed_bytes;
            o.free_bytes += s.free_bytes;
            o.largest_free_block = o.largest_free_block.max(s.largest_free_block);
            o.pending_bytes += g.pending_bytes;
            o.fences += g.fences.recorded;
            o.syncs += g.fences.syncs;
            o.fence_waits += g.fences.fence_waits;
            o.peer_waits += g.fences.peer_waits;
            o.limit_refusals += g.limit_refusals;
        }
        o.free_bytes += self.cached_bytes();
        o
    }

    // ---- thread caches (see `tcache.rs`) ----------------------------------------------------

    /// Allocates like [`alloc`](Self::alloc), from `cache` when it holds a ready block of the
    /// size's class: then without a lock. The cache is bound to this pool on first use; a cache
    /// bound to another pool is not used (give it back first with that pool's
    /// [`flush_cache`](Self::flush_cache)).
    #[inline]
    pub fn alloc_cached(
        &self,
        cache: &mut ThreadCache,
        arena: usize,
        size: u64,
        record: Option<R>,
    ) -> Result<u64, Refusal> {
        self.alloc_cached_hit(cache, arena, size, record)
            .map(|(addr, _)| addr)
    }

    /// [`alloc_cached`](Self::alloc_cached), saying whether the block came from `cache`
    /// itself (`true`): then every free of it happened on the cache's thread, or before the
    /// block reached the cache, so before this call began.
    #[inline]
    pub fn alloc_cached_hit(
        &self,
        cache: &mut ThreadCache,
        arena: usize,
        size: u64,
        record: Option<R>,
    ) -> Result<(u64, bool), Refusal> {
        if size != 0 && size <= MAX_CACHED_BLOCK && self.cache_ready(cache) {
            let rounded = size.next_multiple_of(ALIGN);
            let ready = self.ready_mark();
            match cache.take(rounded, ready, record) {
                tcache::Take::Hit(addr) => return Ok((addr, true)),
                tcache::Take::Miss { unready: true } => {
                    // Blocks that wait for their fence go back to their arenas, which fence.
                    let blocks = cache.take_unready(rounded, ready);
                    self.return_cached(blocks);
                }
                tcache::Take::Miss { unready: false } => {}
            }
        }
        self.alloc(arena, size, record).map(|addr| (addr, false))
    }

    /// Frees like [`free`](Self::free): a block live in `cache` goes back into it without a
    /// lock (or to its arena when the cache is full); another block of the pool freed by this
    /// thread is lent to the cache when it has room.
    #[inline]
    pub fn free_cached(
        &self,
        cache: &mut ThreadCache,
        arena: usize,
        addr: u64,
    ) -> Option<Result<Option<R>, InvalidFree>> {
        if !self.cache_ready(cache) {
            return self.free(arena, addr);
        }
        if let Some(slot) = cache.lookup(addr) {
            let mark = self.free_mark();
            match cache.release::<R>(slot, mark) {
                tcache::Release::Cached(record) => return Some(Ok(record)),
                tcache::Release::ToArena(b) => {
                    let mut g = lock(&self.arenas[b.arena]);
                    g.lent.remove(&b.addr);
                    g.release(self, b.addr, b.granted, mark);
                    return Some(Ok(b.record));
                }
                tcache::Release::Gone => {}
            }
        }
        let mut lend = None;
        if cache.wants(ALIGN)
            && let Some((slot, handed)) = cache.free_slot::<R>()
        {
            if let Some(b) = handed {
                self.hand_over(b);
            }
            lend = Some(slot);
        }
        self.free_lending(arena, addr, lend.map(|slot| (cache, slot)))
    }

    /// Gives every block of `cache` back to this pool (cached ones to be reused, live ones
    /// with their records to their arenas) and unbinds it; for a thread moving to another
    /// context's pool. Does nothing to a cache bound to another pool; a cache of this pool's
    /// dead context is only forgotten.
    pub fn flush_cache(&self, cache: &mut ThreadCache) {
        if cache.bound_pool() != self.key() {
            return;
        }
        if cache.generation != self.cache_generation.load(Acquire) {
            cache.forget();
            return;
        }
        if let Some(shared) = cache.shared.clone() {
            lock(&self.caches).retain(|s| !Arc::ptr_eq(s, &shared));
        }
        let (cached, live) = cache.take_all::<R>();
        self.return_cached(cached);
        for b in live {
            self.hand_over(b);
        }
    }

    /// `cache`'s thread is exiting: marks the cache orphaned, for the pool to adopt on a later
    /// allocation. Two atomic stores: no lock, no allocation. The cache is unbound.
    pub fn orphan_cache(&self, cache: &mut ThreadCache) {
        if cache.bound_pool() != self.key() {
            return;
        }
        if cache.generation == self.cache_generation.load(Acquire)
            && let Some(shared) = &cache.shared
        {
            shared.orphaned.store(true, Release);
            self.orphans.store(true, Release);
        }
        cache.pool = 0;
    }

    /// This pool's identity for the caches bound to it.
    #[inline]
    fn key(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Marks up to this are covered by completed fences (everything, with `unsafe_reuse`).
    #[inline]
    fn ready_mark(&self) -> u64 {
        if self.settings.unsafe_reuse {
            u64::MAX
        } else {
            self.completed.load(Acquire)
        }
    }

    /// Whether `cache` may be used with this pool now, binding it on first use.
    #[inline]
    fn cache_ready(&self, cache: &mut ThreadCache) -> bool {
        let me = self.key();
        if cache.pool == me {
            if cache.generation == self.cache_generation.load(Acquire) {
                return true;
            }
            cache.forget();
        }
        if cache.pool != 0 || self.dead() {
            return false;
        }
        let mut caches = lock(&self.caches);
        let generation = self.cache_generation.load(Acquire);
        if self.dead() {
            return false;
        }
        caches.push(cache.bind(me, generation));
        true
    }

    /// The caches bound to this pool now.
    fn registered(&self) -> Vec<Arc<Shared>> {
        lock(&self.caches).clone()
    }

    /// Bytes cached in the thread caches.
    fn cached_bytes(&self) -> u64 {
        self.registered()
            .iter()
            .flat_map(|s| s.slots.iter())
            .map(|s| s.cached_bytes())
            .sum()
    }

    /// The live block at `addr` in some thread cache.
    fn find_live(&self, addr: u64) -> Option<LiveBlock<R>> {
        self.registered().iter().find_map(|shared| {
            shared.slots.iter().find_map(|s| {
                s.read_live::<R>()
                    .map(|(_, b)| b)
                    .filter(|b| b.addr == addr)
            })
        })
    }

    /// Takes the live block at `addr` out of the thread cache that holds it.
    fn claim_live(&self, addr: u64) -> Option<LiveBlock<R>> {
        let caches = self.registered();
        caches
            .iter()
            .find_map(|shared| shared.slots.iter().find_map(|s| s.claim_live::<R>(addr)))
    }

    /// Cached blocks taken out of a cache go back to their arenas, freed at their marks.
    fn return_cached(&self, blocks: Vec<CachedBlock>) {
        for b in blocks {
            let mut g = lock(&self.arenas[b.arena]);
            g.lent.remove(&b.addr);
            g.release(self, b.addr, b.granted, b.mark);
        }
    }

    /// A live block taken out of a cache becomes an ordinary live block of its arena.
    fn hand_over(&self, b: LiveBlock<R>) {
        let mut g = lock(&self.arenas[b.arena]);
        g.lent.remove(&b.addr);
        if let Some(r) = b.record {
            g.records.insert(b.addr, r);
        }
    }

    /// Takes in the blocks of caches whose threads exited.
    fn adopt_orphans(&self) {
        if !self.orphans.swap(false, AcqRel) {
            return;
        }
        let orphans: Vec<Arc<Shared>> = {
            let mut caches = lock(&self.caches);
            let (orphans, keep) = std::mem::take(&mut *caches)
                .into_iter()
                .partition(|s| s.orphaned.load(Acquire));
            *caches = keep;
            orphans
        };
        for shared in orphans {
            let (mut cached, mut live) = (Vec::new(), Vec::new());
            tcache::drain::<R>(&shared, &mut cached, &mut live);
            self.return_cached(cached);
            for b in live {
                self.hand_over(b);
            }
        }
    }
}

impl<D: Device, R: Packed> Arena<D, R> {
    /// Takes back a block granted here (no longer live, lent or pending) freed at `mark`:
    /// reusable at once when the mark is covered, else pending until a fence covers it.
    fn release(&mut self, pool: &CtxPool<D, R>, addr: u64, size: u64, mark: u64) {
        if mark <= self.fences.completed() || pool.settings.unsafe_reuse {
            if let Ok(freed) = self.free_block(pool, addr)
                && freed.chunk_idle
            {
                self.after_release(pool);
            }
            return;
        }
        if self.pending.is_empty() {
            pool.device.frees_waiting(std::ptr::from_ref(pool) as usize);
        }
        // Pending frees stay in mark order: a block cached a while ago waits as long as the
        // newest pending one (longer than it must, never shorter).
        let mark = mark.max(self.pending.back().map_or(0, |p| p.0));
        self.pending.push_back((mark, addr, size));
        self.pending_set.insert(addr);
        self.pending_bytes += size;
        self.since_fence_bytes += size;
        self.since_fence_count += 1;
        self.frees = self.frees.wrapping_add(1);
        if policy::fence_due(self.since_fence_bytes, self.since_fence_count) {
            self.fence(pool);
        }
        if policy::poll_due(self.frees) {
            let done = self.fences.poll(&pool.device);
            pool.note_completed(done);
            self.release_ready(pool);
            self.after_release(pool);
        }
    }

    fn try_alloc(&mut self, size: u64) -> Option<Grant> {
        let r = match self.growth.route(size) {
            Route::Shared => self.sub.alloc(size, ALIGN),
            Route::Dedicated { max_block } => self.sub.alloc_dedicated(size, ALIGN, max_block),
        };
        r.ok()
    }

    /// Hands every pending block whose mark is covered back to the sub-allocator.
    fn release_ready(&mut self, pool: &CtxPool<D, R>) {
        let done = self.fences.completed();
        while let Some(&(mark, addr, size)) = self.pending.front() {
            if mark > done {
                break;
            }
            self.pending.pop_front();
            self.pending_set.remove(&addr);
            self.pending_bytes -= size;
            let _ = self.free_block(pool, addr);
        }
    }

    /// Frees the block at `addr` in the sub-allocator; the dedicated chunk of an exported block
    /// goes back to the device with it (without waiting), so that it is never handed out again
    /// under a handle another process may hold.
    fn free_block(&mut self, pool: &CtxPool<D, R>, addr: u64) -> Result<Freed, FreeError> {
        let freed = self.sub.free(addr)?;
        if !self.exported.is_empty() && self.exported.remove(&addr) {
            self.release_chunks(std::iter::once(freed.chunk), pool, false);
            return Ok(Freed {
                chunk_idle: false,
                ..freed
            });
        }
        Ok(freed)
    }

    /// Records a fence for everything pending, if the pool's context is current.
    fn fence(&mut self, pool: &CtxPool<D, R>) {
        if pool.device.is_current() && self.fences.record(&pool.device) {
            self.since_fence_bytes = 0;
            self.since_fence_count = 0;
        }
    }

    /// After blocks went back to the sub-allocator: give idle chunks back beyond what is kept.
    fn after_release(&mut self, pool: &CtxPool<D, R>) {
        let keep = pool.keep_share();
        if policy::trim_due(self.sub.stats().idle_bytes, keep) {
            self.trim(keep, pool, false);
        }
    }

    /// Gives idle chunks back to the device until at most `keep` idle bytes remain.
    fn trim(&mut self, keep: u64, pool: &CtxPool<D, R>, wait: bool) {
        let release = policy::to_trim(self.sub.idle_chunks(), keep);
        self.release_chunks(release.into_iter(), pool, wait);
    }

    /// Gives these (idle) chunks back to the device; `wait` when the memory must be free again
    /// before this returns (under pressure).
    fn release_chunks(
        &mut self,
        ids: impl Iterator<Item = ChunkId>,
        pool: &CtxPool<D, R>,
        wait: bool,
    ) {
        for id in ids {
            if let Ok((base, size)) = self.sub.remove_chunk(id) {
                pool.device.chunk_removed(base);
                pool.device.free_chunk(base, wait);
                pool.reserved.fetch_sub(size, Relaxed);
                self.trims += 1;
                self.trimmed_bytes += size;
            }
        }
    }
}

mod answers;
#[cfg(test)]
mod fake;
#[cfg(test)]
mod invariants;
mod slow;
#[cfg(test)]
mod tests;
