//! One context's pool: chunks from the driver, carved by the sub-allocator, with frees held
//! back until a fence says they are safe (see [`super::fence`]).
//!
//! A pool is split into [`ARENAS`] arenas, each with its own lock, chunks and fences; a thread
//! allocates from its own arena (assigned round-robin), so threads rarely meet on a lock. A
//! block is freed into the arena that holds it, whichever thread frees it. Each arena also keeps
//! the tracker's record of each of its live blocks, so a pooled allocation and a pooled free
//! each take one lock in all.
//!
//! A lock is never held across a call into the program; it is held across driver calls only on
//! the slow path (growing, fencing, trimming), which the driver's own cuMemAlloc/cuMemFree
//! would have made the program wait for anyway.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use super::fence::{self, Fences};
use super::growth::{GrowthPolicy, Route};
use super::tlsf::{FreeError, Grant, SubAllocator};
use crate::driver::{current_context, real};
use crate::ffi::*;
use crate::tracker::{AddrHasher, Record, lock};

/// Arenas per pool.
pub const ARENAS: usize = 16;

/// Every block is aligned to at least this (the driver gives 512 or more; CUDA code assumes 256).
pub const ALIGN: u64 = 256;
/// A fence is recorded once this many bytes, or [`FENCE_COUNT`] blocks, wait for one.
const FENCE_BYTES: u64 = 64 << 20;
const FENCE_COUNT: u32 = 64;
/// Frees between polls of the fences in flight.
const POLL_EVERY: u32 = 32;

type AddrSet = HashSet<u64, BuildHasherDefault<AddrHasher>>;
type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;

/// Limits and policy, resolved for this pool's device.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most bytes the pool may reserve on its device (`CUGUARD_POOL_LIMIT`).
    pub limit: Option<u64>,
    /// Idle bytes kept before chunks go back to the driver (`CUGUARD_POOL_KEEP`).
    pub keep: u64,
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
    pub limit_refusals: u64,
}

/// Why an allocation failed.
pub struct Refusal {
    pub result: CUresult,
    pub why: String,
}

struct Inner {
    sub: SubAllocator,
    policy: GrowthPolicy,
    /// This arena's share of the idle bytes kept (`CUGUARD_POOL_KEEP` / [`ARENAS`]).
    keep: u64,
    /// Frees waiting for a fence: (mark, address, granted size), in mark order.
    pending: VecDeque<(u64, u64, u64)>,
    pending_set: AddrSet,
    pending_bytes: u64,
    since_fence_bytes: u64,
    since_fence_count: u32,
    frees: u32,
    fences: Fences,
    /// The tracker's record of each live block (absent while tracking is off).
    records: AddrMap<Record>,
    chunks_added: u64,
    trims: u64,
    trimmed_bytes: u64,
    limit_refusals: u64,
}

/// A context's pool.
pub struct CtxPool {
    pub ctx: u64,
    pub device: i32,
    arenas: Box<[Mutex<Inner>]>,
    limits: Limits,
    /// Bytes reserved from the driver, all arenas together (for the limit).
    reserved: AtomicU64,
    peak_reserved: AtomicU64,
    /// The context is gone; the driver freed the chunks with it.
    dead: AtomicBool,
}

impl CtxPool {
    /// An empty pool for context `ctx` on `device`.
    pub fn new(ctx: u64, device: i32, limits: Limits) -> CtxPool {
        let arena = || {
            Mutex::new(Inner {
                sub: SubAllocator::new(ALIGN),
                policy: GrowthPolicy::default(),
                keep: limits.keep / ARENAS as u64,
                pending: VecDeque::new(),
                pending_set: AddrSet::default(),
                pending_bytes: 0,
                since_fence_bytes: 0,
                since_fence_count: 0,
                frees: 0,
                fences: Fences::default(),
                records: AddrMap::default(),
                chunks_added: 0,
                trims: 0,
                trimmed_bytes: 0,
                limit_refusals: 0,
            })
        };
        CtxPool {
            ctx,
            device,
            arenas: (0..ARENAS).map(|_| arena()).collect(),
            limits,
            reserved: AtomicU64::new(0),
            peak_reserved: AtomicU64::new(0),
            dead: AtomicBool::new(false),
        }
    }

    fn dead(&self) -> bool {
        self.dead.load(Relaxed)
    }

    fn within_limit(&self, more: u64) -> bool {
        match self.limits.limit {
            None => true,
            Some(l) => self.reserved.load(Relaxed).saturating_add(more) <= l,
        }
    }

    /// Reserves `bytes` up front (`CUGUARD_POOL_INITIAL`), in the pool's context (current).
    pub fn reserve_initial(&self, bytes: u64) -> Result<(), Refusal> {
        let mut g = lock(&self.arenas[0]);
        let size = bytes.next_multiple_of(g.policy.granularity.max(ALIGN));
        g.grow(size, false, self, 0)
    }

    /// Allocates `size` bytes for the program from arena `arena`, keeping `record` with the
    /// block; the pool's context is current.
    pub fn alloc(&self, arena: usize, size: u64, record: Option<Record>) -> Result<u64, Refusal> {
        if size == 0 {
            return Err(Refusal {
                result: CUDA_ERROR_INVALID_VALUE,
                why: "size 0".into(),
            });
        }
        if self.dead() {
            return Err(Refusal {
                result: CUDA_ERROR_CONTEXT_IS_DESTROYED,
                why: "context destroyed".into(),
            });
        }
        let arena = arena % ARENAS;
        let mut g = lock(&self.arenas[arena]);
        if !g.pending.is_empty() {
            g.release_ready();
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

    /// Frees `addr` if arena `arena` holds it: `None` when it does not, else the driver's answer
    /// for the free (success, or CUDA_ERROR_INVALID_VALUE for a block that is not live) and the
    /// block's record.
    pub fn free(&self, arena: usize, addr: u64) -> Option<(CUresult, Option<Record>)> {
        if self.dead() {
            return None;
        }
        let mark = fence::mark();
        let mut g = lock(&self.arenas[arena % ARENAS]);
        let immediate = mark <= g.fences.completed() || crate::config::get().unsafe_reuse;
        if immediate && (g.pending_set.is_empty() || !g.pending_set.contains(&addr)) {
            return match g.sub.free(addr) {
                Ok(freed) => {
                    let record = g.records.remove(&addr);
                    if freed.chunk_idle {
                        g.after_release(self);
                    }
                    Some((CUDA_SUCCESS, record))
                }
                Err(FreeError::NotInPool) => None,
                Err(_) => Some((CUDA_ERROR_INVALID_VALUE, None)),
            };
        }
        match g.sub.find(addr) {
            Some(grant) if grant.addr == addr && !g.pending_set.contains(&addr) => {
                let record = g.records.remove(&addr);
                g.pending.push_back((mark, addr, grant.size));
                g.pending_set.insert(addr);
                g.pending_bytes += grant.size;
                g.since_fence_bytes += grant.size;
                g.since_fence_count += 1;
                g.frees = g.frees.wrapping_add(1);
                if g.since_fence_bytes >= FENCE_BYTES || g.since_fence_count >= FENCE_COUNT {
                    g.fence(self);
                }
                if g.frees % POLL_EVERY == 0 {
                    g.fences.poll();
                    g.release_ready();
                    g.after_release(self);
                }
                Some((CUDA_SUCCESS, record))
            }
            Some(_) => Some((CUDA_ERROR_INVALID_VALUE, None)),
            None if g.sub.chunk_containing(addr).is_some() => {
                Some((CUDA_ERROR_INVALID_VALUE, None))
            }
            None => None,
        }
    }

    /// The live block of arena `arena` containing `addr` (interior pointers too): (start, the
    /// program's size, or the granted size where no record says).
    pub fn find(&self, arena: usize, addr: u64) -> Option<(u64, u64)> {
        if self.dead() {
            return None;
        }
        let g = lock(&self.arenas[arena % ARENAS]);
        let grant = g.sub.find(addr)?;
        if g.pending_set.contains(&grant.addr) {
            return None;
        }
        Some((
            grant.addr,
            g.records.get(&grant.addr).map_or(grant.size, |r| r.size),
        ))
    }

    /// Bytes the program could still get from the pool without the driver: free and pending.
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
            .sum()
    }

    /// The records of every live pooled block.
    pub fn records(&self) -> Vec<(u64, Record)> {
        let mut out = Vec::new();
        for a in self.arenas.iter() {
            out.extend(lock(a).records.iter().map(|(k, v)| (*k, *v)));
        }
        out
    }

    /// The context is gone and took the chunks with it: forget them. Returns the records of the
    /// blocks that were live (the program never freed them).
    pub fn kill(&self) -> Vec<(u64, Record)> {
        self.dead.store(true, Relaxed);
        let mut gone = Vec::new();
        for a in self.arenas.iter() {
            let mut g = lock(a);
            gone.extend(g.records.drain());
            g.pending.clear();
            g.pending_set.clear();
            g.pending_bytes = 0;
            g.sub = SubAllocator::new(ALIGN);
        }
        self.reserved.store(0, Relaxed);
        gone
    }

    /// Chunk ranges with their arena, for the registry's address map.
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
            o.limit_refusals += g.limit_refusals;
        }
        o
    }

    /// Gives idle chunks of the other arenas back to the driver (those whose lock is free now),
    /// to make room under the limit; returns the bytes given back.
    fn trim_other_arenas(&self, except: usize) -> u64 {
        let mut freed = 0;
        for (i, a) in self.arenas.iter().enumerate() {
            if i == except {
                continue;
            }
            if let Ok(mut g) = a.try_lock() {
                let before = g.trimmed_bytes;
                g.trim(0, self, true);
                freed += g.trimmed_bytes - before;
            }
        }
        freed
    }
}

impl Inner {
    fn try_alloc(&mut self, size: u64) -> Option<Grant> {
        let r = match self.policy.route(size) {
            Route::Shared => self.sub.alloc(size, ALIGN),
            Route::Dedicated { max_block } => self.sub.alloc_dedicated(size, ALIGN, max_block),
        };
        r.ok()
    }

    /// Hands every pending block whose mark is covered back to the sub-allocator.
    fn release_ready(&mut self) {
        let done = self.fences.completed();
        while let Some(&(mark, addr, size)) = self.pending.front() {
            if mark > done {
                break;
            }
            self.pending.pop_front();
            self.pending_set.remove(&addr);
            self.pending_bytes -= size;
            let _ = self.sub.free(addr);
        }
    }

    /// Records a fence for everything pending, if the pool's context is current.
    fn fence(&mut self, pool: &CtxPool) {
        if current_context() == Some(pool.ctx) && self.fences.record(pool.ctx) {
            self.since_fence_bytes = 0;
            self.since_fence_count = 0;
        }
    }

    /// Waits for the context's work, then releases every pending block.
    fn synchronize(&mut self, pool: &CtxPool) -> bool {
        if self.pending.is_empty() || current_context() != Some(pool.ctx) {
            return false;
        }
        if self.fences.synchronize(pool.ctx).is_none() {
            return false;
        }
        self.release_ready();
        self.since_fence_bytes = 0;
        self.since_fence_count = 0;
        true
    }

    /// The slow path: reclaim, fence, synchronize, trim and grow, in the order the pool promises.
    fn alloc_slow(&mut self, size: u64, pool: &CtxPool, arena: usize) -> Result<Grant, Refusal> {
        let dedicated = matches!(self.policy.route(size), Route::Dedicated { .. });
        let Some(footprint) = self.sub.footprint(size, ALIGN) else {
            return Err(Refusal {
                result: CUDA_ERROR_OUT_OF_MEMORY,
                why: "request too large".into(),
            });
        };
        // 1. Fences that completed since.
        self.fences.poll();
        self.release_ready();
        if let Some(a) = self.try_alloc(size) {
            return Ok(a);
        }
        // 2. Frees still waiting for the GPU that could serve this request: wait for them
        // rather than grow. Measured on resnet18 training (docs/benchmarks.md): growing instead
        // makes the pool ask the driver for a chunk of nearly every new size, as slow as no
        // pool at all, because the same-size block from the previous step is still pending.
        if self.pending_bytes >= footprint && self.synchronize(pool) {
            if let Some(a) = self.try_alloc(size) {
                return Ok(a);
            }
        }
        if !self.pending.is_empty() {
            self.fence(pool);
        }
        // 3. Grow.
        let stats = self.sub.stats();
        let want = if dedicated {
            self.policy.dedicated_chunk_size(size).unwrap_or(footprint)
        } else {
            let shared = stats.reserved_bytes - stats.dedicated_bytes;
            self.policy
                .shared_chunk_size(footprint, shared)
                .unwrap_or(footprint)
        };
        let minimum = footprint.next_multiple_of(self.policy.granularity.max(ALIGN));
        if dedicated {
            // Idle dedicated chunks are reused only by requests of about their size: give some
            // back before asking for a new one, so reserved memory tracks live memory.
            let release = self.policy.dedicated_release(self.sub.idle_chunks(), want);
            self.release_chunks(release.iter().map(|c| c.id), pool, false);
        }
        for chunk in [want, minimum] {
            if pool.within_limit(chunk) && self.grow(chunk, dedicated, pool, arena).is_ok() {
                if let Some(a) = self.try_alloc(size) {
                    return Ok(a);
                }
            }
            if chunk == minimum {
                break;
            }
        }
        // 4. Under pressure: synchronize, reclaim, give idle chunks back, retry.
        self.synchronize(pool);
        if let Some(a) = self.try_alloc(size) {
            return Ok(a);
        }
        self.trim(0, pool, true);
        if !pool.within_limit(minimum) {
            pool.trim_other_arenas(arena);
        }
        if pool.within_limit(minimum) {
            if self.grow(minimum, dedicated, pool, arena).is_ok() {
                if let Some(a) = self.try_alloc(size) {
                    return Ok(a);
                }
            }
            return Err(Refusal {
                result: CUDA_ERROR_OUT_OF_MEMORY,
                why: "device out of memory".into(),
            });
        }
        self.limit_refusals += 1;
        let limit = pool.limits.limit.unwrap_or(0);
        Err(Refusal {
            result: CUDA_ERROR_OUT_OF_MEMORY,
            why: format!(
                "CUGUARD_POOL_LIMIT of {limit} bytes reached: {} bytes reserved, {size} more asked for",
                pool.reserved.load(Relaxed)
            ),
        })
    }

    /// Adds a chunk of `size` bytes from the driver.
    fn grow(
        &mut self,
        size: u64,
        dedicated: bool,
        pool: &CtxPool,
        arena: usize,
    ) -> Result<(), Refusal> {
        let Some(alloc) = real::cuMemAlloc_v2() else {
            return Err(Refusal {
                result: CUDA_ERROR_NOT_INITIALIZED,
                why: "no driver".into(),
            });
        };
        let mut base: CUdeviceptr = 0;
        // SAFETY: valid out-parameter; the pool's context is current.
        let r = unsafe { alloc(&mut base, size as usize) };
        if r != CUDA_SUCCESS {
            return Err(Refusal {
                result: r,
                why: format!("driver refused a {size}-byte chunk"),
            });
        }
        let added = if dedicated {
            self.sub.add_dedicated_chunk(base, size)
        } else {
            self.sub.add_chunk(base, size)
        };
        if added.is_err() {
            free_chunk(base);
            return Err(Refusal {
                result: CUDA_ERROR_OUT_OF_MEMORY,
                why: "chunk refused by the sub-allocator".into(),
            });
        }
        self.chunks_added += 1;
        let reserved = pool.reserved.fetch_add(size, Relaxed) + size;
        pool.peak_reserved.fetch_max(reserved, Relaxed);
        super::registry::chunk_added(base, size, pool, arena);
        Ok(())
    }

    /// After blocks went back to the sub-allocator: give idle chunks back beyond what is kept.
    fn after_release(&mut self, pool: &CtxPool) {
        let keep = self.keep;
        if self.sub.stats().idle_bytes > keep {
            self.trim(keep, pool, false);
        }
    }

    /// Gives idle chunks back to the driver until at most `keep` idle bytes remain.
    fn trim(&mut self, keep: u64, pool: &CtxPool, wait: bool) {
        let mut idle: Vec<_> = self.sub.idle_chunks().collect();
        idle.sort_by_key(|c| std::cmp::Reverse(c.size));
        let mut idle_bytes: u64 = idle.iter().map(|c| c.size).sum();
        let mut release = Vec::new();
        for c in idle {
            if idle_bytes <= keep {
                break;
            }
            idle_bytes -= c.size;
            release.push(c.id);
        }
        self.release_chunks(release.into_iter(), pool, wait);
    }

    /// Gives these (idle) chunks back to the driver; `wait` when the memory must be free again
    /// before this returns (under pressure).
    fn release_chunks(
        &mut self,
        ids: impl Iterator<Item = super::tlsf::ChunkId>,
        pool: &CtxPool,
        wait: bool,
    ) {
        for id in ids {
            if let Ok((base, size)) = self.sub.remove_chunk(id) {
                super::registry::chunk_removed(base);
                if wait {
                    free_chunk(base);
                } else {
                    free_chunk_async(base);
                }
                pool.reserved.fetch_sub(size, Relaxed);
                self.trims += 1;
                self.trimmed_bytes += size;
            }
        }
    }
}

fn free_chunk(base: u64) {
    if let Some(f) = real::cuMemFree_v2() {
        // SAFETY: base is a chunk this pool allocated and no block of it is live.
        unsafe { f(base) };
    }
}

/// Gives a chunk back without waiting: cuMemFree would wait for all work on the device, which
/// stalls a program whose CPU runs ahead of its kernels. No block of the chunk is live or
/// pending, so no work can still touch it; the driver takes it back in legacy-stream order.
fn free_chunk_async(base: u64) {
    if let Some(f) = real::cuMemFreeAsync() {
        // SAFETY: base is a chunk this pool allocated with cuMemAlloc and no block of it is live
        // or waiting for a fence; a null stream is the legacy default stream.
        if unsafe { f(base, std::ptr::null_mut()) } == CUDA_SUCCESS {
            return;
        }
    }
    free_chunk(base);
}
