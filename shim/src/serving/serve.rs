//! Where cuMemAlloc_v2, cuMemAllocPitch_v2 and the frees are served: the pool of the current
//! context when `CUGUARD_POOL` is on and no stream capture is in progress, else the real
//! driver. The hooks call only these functions,
//! so the pool stands behind them without the hooks changing.
//!
//! Frees always ask the pool first whether it owns the pointer (even if the pool has since been
//! turned off), so a pooled pointer never reaches the driver's free. A pooled block carries the
//! tracker's record of it, so a pooled allocation or free takes one lock, or none when the
//! calling thread's cache ([`crate::serving::cache`]) serves it.

use std::cell::RefCell;

use cuguard_pool::ARENAS;

use crate::config;
use crate::ffi::*;
use crate::guard;
use crate::serving::{cache, driver_context, regions, registry};
use crate::tracker::Record;

/// The real cuMemAlloc_v2.
pub type AllocFn = unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CUresult;
/// The real cuMemAllocPitch_v2.
pub type PitchFn =
    unsafe extern "C" fn(*mut CUdeviceptr, *mut usize, usize, usize, u32) -> CUresult;

/// The pitch the driver gives (measured on the H200: width 1000 → 1024, width 1 → 512).
pub const PITCH_ALIGN: usize = 512;

thread_local! {
    /// Why the last pooled allocation on this thread failed, for the `alloc_failed` event.
    static FAILURE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Takes the reason the last pooled allocation on this thread failed, if it did.
pub fn take_failure_reason() -> Option<String> {
    FAILURE.try_with(|f| f.borrow_mut().take()).ok().flatten()
}

fn set_failure_reason(why: String) {
    let _ = FAILURE.try_with(|f| *f.borrow_mut() = Some(why));
}

/// Whether new allocations come from the pool. Not while a stream capture is in progress: the
/// driver then answers as it would without the pool (a global-mode or thread-local capture
/// forbids cuMemAlloc, with `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, and the driver invalidates
/// the capture; a relaxed one, or another thread's thread-local one, lets it allocate), which
/// only the driver can do: it alone can invalidate a capture, and knows each thread's capture
/// mode.
#[inline]
fn pool_on() -> bool {
    let c = config::get();
    c.pool && !c.disabled && !crate::phase::broken() && !crate::serving::submissions::capturing()
}

/// Whether an allocation asked now in context `cur` goes to the pool (it may still fall back to
/// the driver, when the pool fails inside).
#[inline]
pub fn pool_serves(cur: Option<u64>) -> bool {
    cur.is_some() && pool_on()
}

/// How an allocation was served.
pub struct Served {
    pub result: CUresult,
    /// The pool answered (and, on success, holds the block and its record).
    pub pooled: bool,
    /// The block came from the calling thread's cache: every free of it happened before this
    /// allocation began (see `cuguard_pool::CtxPool::alloc_cached_hit`), so a moment taken
    /// before it was served (the record's order key) already follows them.
    pub cached: bool,
}

/// Allocates `size` bytes from the current context's pool, keeping `record` with the block:
/// the address and whether the thread's cache held it, or `None` to let the driver answer (no
/// pool: no current context, not initialized, or the pool failed internally).
fn pooled(
    cur: Option<u64>,
    size: u64,
    record: Option<Record>,
) -> Option<Result<(u64, bool), CUresult>> {
    let ctx = cur?;
    // One relaxed load when no NVTX tool is or can be attached; the rest is out of line.
    if crate::nvtx::maybe() {
        return pooled_told(ctx, size, record);
    }
    let pool = guard::shield(None, || registry::current(ctx))?;
    let arena = crate::tracker::counters::arena(ARENAS);
    guard::shield(None, || Some(alloc_from(pool, arena, size, record)))
}

/// [`pooled`] while an NVTX tool is or may be attached ([`regions`]): the block asked with its
/// red zone, and registered with the size the program asked. An allocation the tool itself
/// makes from inside a call the shim made to it goes to the driver.
#[cold]
#[inline(never)]
fn pooled_told(
    ctx: u64,
    size: u64,
    record: Option<Record>,
) -> Option<Result<(u64, bool), CUresult>> {
    if crate::nvtx::in_tool() {
        return None;
    }
    let pool = guard::shield(None, || registry::current(ctx))?;
    let arena = crate::tracker::counters::arena(ARENAS);
    // Read after the pool: making the first one attaches the tool (or finds there is none).
    let told = crate::nvtx::on();
    let asked = if told {
        size.saturating_add(regions::redzone())
    } else {
        size
    };
    guard::shield(None, || {
        let result = alloc_from(pool, arena, asked, record);
        if told && let Ok((addr, _)) = result {
            regions::block_out(addr, size);
        }
        Some(result)
    })
}

/// A block of `size` bytes from `pool`: the calling thread's cache, else arena `arena`, and
/// whether the cache held it; a refusal becomes the driver's answer, its reason kept for the
/// `alloc_failed` event.
#[inline]
fn alloc_from(
    pool: &'static super::pool::Pool,
    arena: usize,
    size: u64,
    record: Option<Record>,
) -> Result<(u64, bool), CUresult> {
    let result = cache::with(pool, true, |c| {
        pool.alloc_cached_hit(c, arena, size, record)
    })
    .unwrap_or_else(|| pool.alloc(arena, size, record).map(|addr| (addr, false)));
    result.map_err(|refusal| {
        let why = match refusal.over_limit {
            // The process's limit refused the pool's chunk: said as the limit says it.
            Some(o) if o.process => crate::tracker::limit::Refused {
                device: pool.device().ordinal,
                limit: o.limit,
                held: o.reserved,
                asked: o.asked,
            }
            .reason(),
            _ => refusal.message(cuguard_format::human_bytes),
        };
        set_failure_reason(why);
        driver_context::result_of(refusal.reason)
    })
}

/// Serves cuMemAlloc_v2. `record` is the tracker's record of the allocation, kept with a pooled
/// block.
pub fn device_alloc(
    cur: Option<u64>,
    dptr: *mut CUdeviceptr,
    size: usize,
    real: AllocFn,
    record: Option<Record>,
) -> Served {
    if pool_on() && !dptr.is_null() {
        match pooled(cur, size as u64, record) {
            Some(Ok((addr, cached))) => {
                // SAFETY: dptr is the program's non-null out-parameter.
                unsafe { *dptr = addr };
                return Served {
                    result: CUDA_SUCCESS,
                    pooled: true,
                    cached,
                };
            }
            Some(Err(code)) => {
                return Served {
                    result: code,
                    pooled: true,
                    cached: false,
                };
            }
            None => {}
        }
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    let result = unsafe { real(dptr, size) };
    Served {
        result,
        pooled: false,
        cached: false,
    }
}

/// Serves cuMemAllocPitch_v2, keeping the driver's rules: element size 4, 8 or 16, non-zero
/// width and height, pitch a multiple of [`PITCH_ALIGN`]. The record's size is set to
/// pitch × height here.
#[allow(clippy::too_many_arguments)]
pub fn pitch_alloc(
    cur: Option<u64>,
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element_size: u32,
    real: PitchFn,
    record: Option<Record>,
) -> Served {
    if pool_on() && !dptr.is_null() && !pitch.is_null() {
        let refuse = |result| Served {
            result,
            pooled: true,
            cached: false,
        };
        if !matches!(element_size, 4 | 8 | 16) || width == 0 || height == 0 {
            return refuse(CUDA_ERROR_INVALID_VALUE);
        }
        let Some(p) = width.checked_next_multiple_of(PITCH_ALIGN) else {
            return refuse(CUDA_ERROR_INVALID_VALUE);
        };
        let Some(size) = p.checked_mul(height) else {
            return refuse(CUDA_ERROR_OUT_OF_MEMORY);
        };
        let record = record.map(|mut r| {
            r.size = size as u64;
            r
        });
        match pooled(cur, size as u64, record) {
            Some(Ok((addr, cached))) => {
                // SAFETY: dptr and pitch are the program's non-null out-parameters.
                unsafe {
                    *dptr = addr;
                    *pitch = p;
                }
                return Served {
                    result: CUDA_SUCCESS,
                    pooled: true,
                    cached,
                };
            }
            Some(Err(code)) => return refuse(code),
            None => {}
        }
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    let result = unsafe { real(dptr, pitch, width, height, element_size) };
    Served {
        result,
        pooled: false,
        cached: false,
    }
}

/// The pool's answer for freeing `addr` (with the block's record), or `None` if no pool owns it.
/// Used by cuMemFree_v2 and cuMemFreeAsync: a pooled block freed on a stream waits, like any
/// pooled free, for a fence that covers the work enqueued before it, on that stream too.
pub fn pool_free(cur: Option<u64>, addr: CUdeviceptr) -> Option<(CUresult, Option<Record>)> {
    if addr == 0 || !registry::any() {
        return None;
    }
    if crate::nvtx::maybe() && !freeing_told(addr) {
        return None;
    }
    let answer = guard::shield(None, || {
        // The thread's cache follows the current context's pool; a block of another pool is
        // freed to that pool directly.
        let free = |pool: &'static super::pool::Pool, arena: usize, rebind: bool| {
            cache::with(pool, rebind, |c| pool.free_cached(c, arena, addr))
                .unwrap_or_else(|| pool.free(arena, addr))
        };
        if let Some(pool) = cur.and_then(registry::current_existing)
            && let Some(r) = free(pool, crate::tracker::counters::arena(ARENAS), true)
        {
            return Some(r);
        }
        let (pool, arena) = registry::owner(addr)?;
        free(pool, arena, false)
    })?;
    Some(match answer {
        Ok(record) => (CUDA_SUCCESS, record),
        Err(_) => (CUDA_ERROR_INVALID_VALUE, None),
    })
}

/// Before [`pool_free`] while an NVTX tool is or may be attached: the block's region goes now,
/// before the pool takes the block back (it may be handed out again at once). False for a free
/// the tool itself makes from inside a call the shim made to it, which goes to the driver.
#[cold]
#[inline(never)]
fn freeing_told(addr: CUdeviceptr) -> bool {
    if crate::nvtx::in_tool() {
        return false;
    }
    if crate::nvtx::on() {
        guard::shield((), || regions::block_in(addr));
    }
    true
}

/// What the pool knows of an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolLookup {
    /// No pool holds it: the driver's answers stand.
    NotPooled,
    /// It is in a pool's chunk, but in no live block (freed, or never handed out).
    InChunk,
    /// It is in a live pooled block.
    Block {
        /// The block's first address.
        start: u64,
        /// The size the program sees.
        size: u64,
    },
}

/// What the pool knows of `addr` (interior pointers of a block included).
pub fn lookup(addr: CUdeviceptr) -> PoolLookup {
    if !registry::any() {
        return PoolLookup::NotPooled;
    }
    guard::shield(PoolLookup::NotPooled, || {
        let Some((pool, arena)) = registry::owner(addr) else {
            return PoolLookup::NotPooled;
        };
        match pool.find(arena, addr) {
            Some(b) => PoolLookup::Block {
                start: b.addr,
                size: b.record.map_or(b.granted, |r| r.size),
            },
            None => PoolLookup::InChunk,
        }
    })
}

/// For `cuIpcGetMemHandle` of `addr`, a pooled address: whether the block holding it is a
/// dedicated chunk whole, so that the driver's handle of it names exactly the block (see
/// [`cuguard_pool::CtxPool::export`]); with `mark`, the chunk is then kept for this block alone
/// and goes back to the driver when the block is freed.
pub fn export(addr: CUdeviceptr, mark: bool) -> cuguard_pool::Export {
    use cuguard_pool::Export;
    if !registry::any() {
        return Export::NotLive;
    }
    guard::shield(Export::NotLive, || {
        let Some((pool, arena)) = registry::owner(addr) else {
            return Export::NotLive;
        };
        if mark {
            pool.export(arena, addr)
        } else {
            pool.exportable(arena, addr)
        }
    })
}

/// Idle pool bytes on `device` (counted as free by cuMemGetInfo).
pub fn idle_bytes(device: i32) -> u64 {
    if !registry::any() {
        return 0;
    }
    guard::shield(0, || registry::idle_bytes_for_device(device))
}

/// A context is about to be destroyed (`cuCtxDestroy`, `cuDevicePrimaryCtxReset`): with an NVTX
/// tool attached, its chunks' heaps go now, while their memory is still allocated
/// ([`regions::context_closing`]).
pub fn context_closing(handle: u64) {
    if !crate::nvtx::on() || crate::nvtx::in_tool() {
        return;
    }
    guard::shield((), || {
        if let Some(pool) = registry::existing(handle) {
            regions::context_closing(&pool.chunk_ranges());
        }
    });
}

/// A context is gone, and the driver freed everything in it. Returns the records of the pooled
/// blocks that were still live.
pub fn context_destroyed(handle: u64) -> Vec<(u64, Record)> {
    guard::shield(Vec::new(), || {
        let gone = registry::context_destroyed(handle);
        crate::serving::submissions::context_gone(handle);
        crate::serving::peers::context_gone(handle);
        crate::serving::stream_reuse::context_gone(handle);
        gone
    })
}

/// Every live allocation of the program: those the driver made (the tracker's) and the pool's.
pub fn live_allocations(t: &crate::tracker::Tracker) -> Vec<(u64, Record)> {
    let mut v = t.live.snapshot();
    v.extend(pooled_records());
    v
}

/// The records of every live pooled block.
pub fn pooled_records() -> Vec<(u64, Record)> {
    guard::shield(Vec::new(), registry::records)
}

/// The report's `stats.devices[].pool` for `device` (`None` when it has no pool).
pub fn pool_stats(device: i32) -> Option<cuguard_format::PoolStats> {
    let s = registry::stats_for_device(device)?;
    Some(cuguard_format::PoolStats {
        reserved_bytes: s.reserved_bytes,
        peak_reserved_bytes: s.peak_reserved_bytes,
        chunks: Some(s.chunks),
        chunks_added: Some(s.chunks_added),
        trims: Some(s.trims),
        trimmed_bytes: Some(s.trimmed_bytes),
        free_bytes: Some(s.free_bytes),
        largest_free_block: Some(s.largest_free_block),
        fragmentation: (s.free_bytes != 0)
            .then(|| 1.0 - s.largest_free_block as f64 / s.free_bytes as f64),
        pending_bytes: Some(s.pending_bytes),
        fences: Some(s.fences),
        syncs: Some(s.syncs),
        fence_waits: Some(s.fence_waits),
        peer_waits: Some(s.peer_waits),
        stream_reuses: Some(s.stream_reuses),
        stream_waits: Some(crate::serving::stream_reuse::waits_for_device(device)),
        limit_refusals: Some(s.limit_refusals),
    })
}
