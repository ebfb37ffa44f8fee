//! Which pool serves the current context, and which pool owns an address.
//!
//! Pools are created on first use in a context and live for the rest of the process (a pool of a
//! destroyed context is emptied and forgotten, its memory leaked on purpose: other threads may
//! still hold a reference from their per-thread cache).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use super::ctxpool::{CtxPool, Limits, PoolStats};
use crate::driver::real;
use crate::ffi::*;
use crate::tracker::lock;

static POOLS: Mutex<Vec<&'static CtxPool>> = Mutex::new(Vec::new());
/// Set once any pool exists: until then frees need not ask.
static ANY: AtomicBool = AtomicBool::new(false);
/// Bumped when a pool is retired, so per-thread caches refresh.
static GENERATION: AtomicU64 = AtomicU64::new(1);
/// Chunk start → (end, owning pool).
static CHUNKS: RwLock<BTreeMap<u64, (u64, usize)>> = RwLock::new(BTreeMap::new());

thread_local! {
    static LAST: Cell<(u64, u64, usize)> = const { Cell::new((0, 0, 0)) };
}

fn as_ref(p: usize) -> &'static CtxPool {
    // SAFETY: every pool address stored here comes from a leaked Box that is never freed.
    unsafe { &*(p as *const CtxPool) }
}

/// Whether any pool was ever created.
#[inline]
pub fn any() -> bool {
    ANY.load(Ordering::Acquire)
}

/// The pool of context `ctx` (the calling thread's current one), if it has one already.
#[inline]
pub fn current_existing(ctx: u64) -> Option<&'static CtxPool> {
    let generation = GENERATION.load(Ordering::Acquire);
    if let Ok((g, c, p)) = LAST.try_with(|l| l.get()) {
        if g == generation && c == ctx && p != 0 {
            return Some(as_ref(p));
        }
    }
    let pool = lock(&POOLS).iter().find(|p| p.ctx == ctx).copied()?;
    let _ = LAST.try_with(|l| l.set((generation, ctx, pool as *const CtxPool as usize)));
    Some(pool)
}

/// The pool of context `ctx` (the calling thread's current one), created on first use.
#[inline]
pub fn current(ctx: u64) -> Option<&'static CtxPool> {
    let generation = GENERATION.load(Ordering::Acquire);
    if let Ok((g, c, p)) = LAST.try_with(|l| l.get()) {
        if g == generation && c == ctx && p != 0 {
            return Some(as_ref(p));
        }
    }
    let pool = find_or_create(ctx)?;
    let _ = LAST.try_with(|l| l.set((generation, ctx, pool as *const CtxPool as usize)));
    Some(pool)
}

fn find_or_create(ctx: u64) -> Option<&'static CtxPool> {
    let mut pools = lock(&POOLS);
    if let Some(p) = pools.iter().find(|p| p.ctx == ctx) {
        return Some(*p);
    }
    let mut device: CUdevice = -1;
    let f = real::cuCtxGetDevice()?;
    // SAFETY: valid out-parameter; ctx is current.
    if unsafe { f(&mut device) } != CUDA_SUCCESS {
        return None;
    }
    let total = device_total(device);
    let settings = &crate::config::get().pool_settings;
    let limits = Limits {
        limit: settings.limit.map(|a| a.resolve(total)),
        keep: settings.keep.resolve(total),
    };
    let pool: &'static CtxPool = Box::leak(Box::new(CtxPool::new(ctx, device, limits)));
    pools.push(pool);
    ANY.store(true, Ordering::Release);
    drop(pools);
    let initial = settings.initial.resolve(total);
    if initial > 0 {
        if let Err(r) = pool.reserve_initial(initial) {
            crate::diag::warn(&format!("CUGUARD_POOL_INITIAL: could not reserve {initial} bytes ({})", r.why));
        }
    }
    Some(pool)
}

fn device_total(device: i32) -> u64 {
    let Some(f) = real::cuDeviceTotalMem_v2() else { return 0 };
    let mut total = 0usize;
    // SAFETY: valid out-parameter.
    unsafe { f(&mut total, device) };
    total as u64
}

/// The pool whose chunks hold `addr`, if any.
pub fn owner(addr: u64) -> Option<&'static CtxPool> {
    let chunks = CHUNKS.read().unwrap_or_else(|e| e.into_inner());
    let (_, &(end, pool)) = chunks.range(..=addr).next_back()?;
    (addr < end).then(|| as_ref(pool))
}

/// A chunk was added to `pool`.
pub fn chunk_added(base: u64, size: u64, pool: &CtxPool) {
    let mut chunks = CHUNKS.write().unwrap_or_else(|e| e.into_inner());
    chunks.insert(base, (base + size, pool as *const CtxPool as usize));
}

/// A chunk went back to the driver.
pub fn chunk_removed(base: u64) {
    let mut chunks = CHUNKS.write().unwrap_or_else(|e| e.into_inner());
    chunks.remove(&base);
}

/// The context `ctx` is gone: retire its pool.
pub fn context_destroyed(ctx: u64) {
    let retired = {
        let mut pools = lock(&POOLS);
        let i = pools.iter().position(|p| p.ctx == ctx);
        i.map(|i| pools.remove(i))
    };
    let Some(pool) = retired else { return };
    let ranges = pool.chunk_ranges();
    pool.kill();
    {
        let mut chunks = CHUNKS.write().unwrap_or_else(|e| e.into_inner());
        for (base, _) in ranges {
            chunks.remove(&base);
        }
    }
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Counters summed over the live pools on `device`; `None` if it has none.
pub fn stats_for_device(device: i32) -> Option<PoolStats> {
    let pools = lock(&POOLS);
    let mut out: Option<PoolStats> = None;
    for p in pools.iter().filter(|p| p.device == device) {
        let s = p.stats();
        let o = out.get_or_insert_with(PoolStats::default);
        o.reserved_bytes += s.reserved_bytes;
        o.peak_reserved_bytes += s.peak_reserved_bytes;
        o.chunks += s.chunks;
        o.chunks_added += s.chunks_added;
        o.trims += s.trims;
        o.trimmed_bytes += s.trimmed_bytes;
        o.free_bytes += s.free_bytes;
        o.largest_free_block = o.largest_free_block.max(s.largest_free_block);
        o.pending_bytes += s.pending_bytes;
        o.fences += s.fences;
        o.syncs += s.syncs;
        o.limit_refusals += s.limit_refusals;
    }
    out
}

/// Idle bytes (free and pending) of the live pools on `device`.
pub fn idle_bytes_for_device(device: i32) -> u64 {
    lock(&POOLS).iter().filter(|p| p.device == device).map(|p| p.idle_bytes()).sum()
}
