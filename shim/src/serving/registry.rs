//! Which pool serves the current context, and which pool (and arena) owns an address.
//!
//! Pools are created on first use in a context and live for the rest of the process (a pool of a
//! destroyed context is emptied and forgotten, its memory leaked on purpose: other threads may
//! still hold a reference from their per-thread cache). A forked child starts with no pools: the
//! parent's chunks belong to a context the child cannot use, and no peer relations
//! ([`super::peers`]).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use cuguard_pool::{PoolStats, Settings};

use super::pool::{DriverContext, Pool};
use crate::driver::real;
use crate::ffi::*;
use crate::process::global::lock;
use crate::tracker::Record;

/// Everything the registry holds; replaced wholesale in a forked child.
struct Registry {
    pools: Mutex<Vec<&'static Pool>>,
    /// Chunk start → (end, owning pool, arena).
    chunks: RwLock<BTreeMap<u64, (u64, usize, usize)>>,
}

static REGISTRY: AtomicPtr<Registry> = AtomicPtr::new(std::ptr::null_mut());
/// Set once any pool exists: until then frees need not ask.
static ANY: AtomicBool = AtomicBool::new(false);
/// Bumped when a pool is retired (or after a fork), so per-thread caches refresh.
static GENERATION: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static LAST: Cell<(u64, u64, usize)> = const { Cell::new((0, 0, 0)) };
}

fn registry() -> &'static Registry {
    crate::process::global::get_or_create(&REGISTRY, new_registry)
}

fn new_registry() -> Registry {
    Registry {
        pools: Mutex::new(Vec::new()),
        chunks: RwLock::new(BTreeMap::new()),
    }
}

fn as_ref(p: usize) -> &'static Pool {
    // SAFETY: every pool address stored here comes from a leaked Box that is never freed (the
    // address a pool gives `Device::chunk_added` is its own, and pools are made only here).
    unsafe { &*(p as *const Pool) }
}

/// The pool at address `p`, an address a pool gave its device (`Device::chunk_added`,
/// `Device::frees_waiting`): pools are never freed.
pub fn pool_at(p: usize) -> &'static Pool {
    as_ref(p)
}

/// Whether any pool was ever created.
#[inline]
pub fn any() -> bool {
    ANY.load(Ordering::Acquire)
}

#[inline]
fn cached(ctx: u64) -> Option<&'static Pool> {
    let generation = GENERATION.load(Ordering::Acquire);
    let (g, c, p) = LAST.try_with(|l| l.get()).ok()?;
    (g == generation && c == ctx && p != 0).then(|| as_ref(p))
}

fn remember(ctx: u64, pool: &'static Pool) {
    let generation = GENERATION.load(Ordering::Acquire);
    let _ = LAST.try_with(|l| l.set((generation, ctx, pool as *const Pool as usize)));
}

/// The pool of context `ctx` (the calling thread's current one), if it has one already.
#[inline]
pub fn current_existing(ctx: u64) -> Option<&'static Pool> {
    if let Some(p) = cached(ctx) {
        return Some(p);
    }
    let pool = lock(&registry().pools)
        .iter()
        .find(|p| p.device().handle == ctx)
        .copied()?;
    remember(ctx, pool);
    Some(pool)
}

/// The pool of context `ctx`, if it has one (whichever context is current).
pub fn existing(ctx: u64) -> Option<&'static Pool> {
    lock(&registry().pools)
        .iter()
        .find(|p| p.device().handle == ctx)
        .copied()
}

/// The pool of context `ctx` (the calling thread's current one), created on first use.
#[inline]
pub fn current(ctx: u64) -> Option<&'static Pool> {
    if let Some(p) = cached(ctx) {
        return Some(p);
    }
    let pool = find_or_create(ctx)?;
    remember(ctx, pool);
    Some(pool)
}

fn find_or_create(ctx: u64) -> Option<&'static Pool> {
    let mut pools = lock(&registry().pools);
    if let Some(p) = pools.iter().find(|p| p.device().handle == ctx) {
        return Some(*p);
    }
    // The process's NVTX tool, attached before the first pool is published (CUDA is initialized
    // here), so that every thread that finds a pool finds the tool attached or not for good.
    // Under the lock: a driver call the tool makes meanwhile is left to the driver
    // (`crate::nvtx::in_tool`), and frees see no pool yet.
    if !any() {
        crate::nvtx::start();
    }
    let mut device: CUdevice = -1;
    let f = real::cuCtxGetDevice()?;
    // SAFETY: valid out-parameter; ctx is current.
    if unsafe { f(&mut device) } != CUDA_SUCCESS {
        return None;
    }
    let total = device_total(device);
    let config = crate::config::get();
    let settings = &config.pool_settings;
    let resolved = Settings {
        limit: settings.limit.map(|a| a.resolve(total)),
        keep: settings.keep.resolve(total),
        unsafe_reuse: config.unsafe_reuse,
    };
    let context = DriverContext {
        handle: ctx,
        ordinal: device,
    };
    let pool: &'static Pool = Box::leak(Box::new(Pool::new(context, resolved)));
    pools.push(pool);
    ANY.store(true, Ordering::Release);
    drop(pools);
    let initial = settings.initial.resolve(total);
    if initial > 0
        && let Err(r) = pool.reserve_initial(initial)
    {
        crate::process::diag::warn(&format!(
            "CUGUARD_POOL_INITIAL: could not reserve {} ({})",
            cuguard_format::human_bytes(initial),
            r.message(cuguard_format::human_bytes)
        ));
    }
    Some(pool)
}

fn device_total(device: i32) -> u64 {
    let Some(f) = real::cuDeviceTotalMem_v2() else {
        return 0;
    };
    let mut total = 0usize;
    // SAFETY: valid out-parameter.
    unsafe { f(&mut total, device) };
    total as u64
}

/// The pool and arena whose chunks hold `addr`, if any.
pub fn owner(addr: u64) -> Option<(&'static Pool, usize)> {
    let chunks = registry().chunks.read().unwrap_or_else(|e| e.into_inner());
    let (_, &(end, pool, arena)) = chunks.range(..=addr).next_back()?;
    (addr < end).then(|| (as_ref(pool), arena))
}

/// The live block of cuguard's pools that holds `addr` (its address, or inside it), with its
/// record.
pub fn holding(addr: u64) -> Option<(u64, Record)> {
    let (pool, arena) = owner(addr)?;
    let block = pool.find(arena, addr)?;
    Some((block.addr, block.record?))
}

/// A chunk was added to arena `arena` of the pool at address `pool`.
pub fn chunk_added(base: u64, size: u64, pool: usize, arena: usize) {
    let mut chunks = registry().chunks.write().unwrap_or_else(|e| e.into_inner());
    chunks.insert(base, (base + size, pool, arena));
}

/// A chunk went back to the driver: its size, when it was known.
pub fn chunk_removed(base: u64) -> Option<u64> {
    let mut chunks = registry().chunks.write().unwrap_or_else(|e| e.into_inner());
    chunks.remove(&base).map(|(end, _, _)| end - base)
}

/// The context `ctx` is gone: retire its pool. Returns the records of the pooled blocks that
/// were still live (lost with the context).
pub fn context_destroyed(ctx: u64) -> Vec<(u64, Record)> {
    let reg = registry();
    let retired = {
        let mut pools = lock(&reg.pools);
        let i = pools.iter().position(|p| p.device().handle == ctx);
        i.map(|i| pools.remove(i))
    };
    let Some(pool) = retired else {
        return Vec::new();
    };
    let ranges = pool.chunk_ranges();
    if crate::nvtx::on() {
        super::regions::context_gone(&ranges);
    }
    let gone = pool.kill();
    {
        let mut chunks = reg.chunks.write().unwrap_or_else(|e| e.into_inner());
        let ordinal = pool.device().ordinal;
        for (base, _) in ranges {
            if let Some((end, _, _)) = chunks.remove(&base) {
                // Gone with the context: no longer held against the process's limit.
                crate::tracker::limit::credit(ordinal, end - base);
            }
        }
    }
    GENERATION.fetch_add(1, Ordering::AcqRel);
    gone
}

/// The records of every live pooled block, in every pool.
pub fn records() -> Vec<(u64, Record)> {
    if !any() {
        return Vec::new();
    }
    let pools: Vec<&'static Pool> = lock(&registry().pools).clone();
    pools.iter().flat_map(|p| p.records()).collect()
}

/// Counters summed over the live pools on `device`; `None` if it has none.
pub fn stats_for_device(device: i32) -> Option<PoolStats> {
    let pools: Vec<&'static Pool> = lock(&registry().pools).clone();
    let mut out: Option<PoolStats> = None;
    for p in pools.iter().filter(|p| p.device().ordinal == device) {
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
        o.fence_waits += s.fence_waits;
        o.peer_waits += s.peer_waits;
        o.stream_reuses += s.stream_reuses;
        o.limit_refusals += s.limit_refusals;
    }
    out
}

/// Bytes the live pools on `device` reserved from it, read without taking an arena's lock.
pub fn reserved_for_device(device: i32) -> u64 {
    if !any() {
        return 0;
    }
    let pools: Vec<&'static Pool> = lock(&registry().pools).clone();
    pools
        .iter()
        .filter(|p| p.device().ordinal == device)
        .map(|p| p.reserved_bytes())
        .sum()
}

/// Bytes the live pools on `device` granted beyond what their live blocks asked for: a dedicated
/// chunk is the request rounded up to 2 MiB, a shared block to 256 bytes. Report time only: it
/// visits every live block.
pub fn slack_for_device(device: i32) -> u64 {
    if !any() {
        return 0;
    }
    let pools: Vec<&'static Pool> = lock(&registry().pools).clone();
    let mut slack = 0;
    for p in pools.iter().filter(|p| p.device().ordinal == device) {
        for (addr, record) in p.records() {
            if let Some((owner, arena)) = owner(addr)
                && std::ptr::eq(owner, *p)
                && let Some(b) = p.find(arena, addr)
            {
                slack += b.granted.saturating_sub(record.size);
            }
        }
    }
    slack
}

/// Idle bytes (free and pending) of the live pools on `device`.
pub fn idle_bytes_for_device(device: i32) -> u64 {
    let pools: Vec<&'static Pool> = lock(&registry().pools).clone();
    pools
        .iter()
        .filter(|p| p.device().ordinal == device)
        .map(|p| p.idle_bytes())
        .sum()
}

/// In the child of a fork: no pools (the parent's belong to a context this process cannot use).
/// The old registry is leaked, not dropped: its locks may be held by threads that do not exist
/// here.
pub fn reset_after_fork() {
    crate::process::global::replace(&REGISTRY, new_registry());
    ANY.store(false, Ordering::Release);
    GENERATION.fetch_add(1, Ordering::AcqRel);
}
