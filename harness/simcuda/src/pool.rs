//! Memory pools and stream-ordered allocation (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`,
//! `cuMemFreeAsync`).
//!
//! A pool holds blocks: each is a host mapping charged to the device for `cap` bytes. An async
//! allocation takes a cached block that fits (at least the size, at most twice it) or makes a new
//! one. `cuMemFreeAsync` unlinks the allocation at once (the address is dead to the program) and
//! issues an operation on the stream that gives the block back to the pool when the stream gets
//! there. Cached blocks go back to the host when the pool is trimmed: by `cuMemPoolTrimTo`, or
//! down to the pool's release threshold (default 0) after any stream, event or context
//! synchronisation, as the real driver does.
//!
//! `cuMemFreeAsync` also takes synchronous allocations (`cuMemAlloc_v2`, pitched, managed). Their
//! address dies at once too, but their memory stays taken (in `cuMemGetInfo_v2`, NVML and
//! `cusimGetUsage`) after the stream reaches the free, until a synchronization with the stream
//! of the free releases it ([`stream_synchronized`]: `cuStreamSynchronize` of that stream, or of
//! the legacy stream when the free was on the legacy stream or a blocking one; `cuEventSynchronize`
//! of an event recorded on such a stream; [`synchronized`]: `cuCtxSynchronize`), or the context
//! goes. Measured on the H200 (docs/gpu-runs/2026-12-02-run1/giveback.md): 3 GiB freed this way on
//! the legacy stream stayed taken in every 100 ms sample for a second, after a stream query, an
//! event query, an allocation under pressure, synchronizing another, non-blocking stream and a
//! `cuMemFree_v2` of another allocation (which waits for the device's work, yet releases
//! nothing); it came back at the legacy stream's synchronize, an event's synchronize and
//! `cuCtxSynchronize`.
//!
//! Every device has a default pool. Pools made with `cuMemPoolCreate` belong to the context that
//! was current when they were made (if any) and go away with it.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use crate::context::{self, CtxRef};
use crate::errors::Fault;
use crate::ffi::consts::{
    CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_NONE,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_LOCATION_TYPE_DEVICE,
};
use crate::ffi::{
    CUdevice, CUdeviceptr, CUmemPoolProps, CUmemoryPool, CUresult, CUstream, guard, need, put,
};
use crate::hostmem;
use crate::memory::{self, Alloc, AllocKind};
use crate::state::{self, State};
use crate::stream;

/// A block of pool memory.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    pub base: u64,
    /// Bytes charged to the device for this block.
    pub cap: u64,
    pub map_len: usize,
}

/// A memory pool.
pub struct Pool {
    pub handle: usize,
    pub device: i32,
    pub is_default: bool,
    /// The context that made the pool (created pools only).
    pub owner_ctx: Option<u64>,
    pub destroyed: bool,
    pub handle_types: u32,
    /// `CU_MEMPOOL_ATTR_REUSE_*` (attributes 1 to 3), stored and reported.
    pub reuse: [c_int; 3],
    pub release_threshold: u64,
    /// Blocks free for reuse.
    pub cached: Vec<Block>,
    /// Bytes of all blocks (in use, pending a free, cached).
    pub reserved: u64,
    pub reserved_high: u64,
    /// Bytes of live allocations.
    pub used: u64,
    pub used_high: u64,
}

impl Pool {
    fn new(
        handle: usize,
        device: i32,
        is_default: bool,
        owner_ctx: Option<u64>,
        handle_types: u32,
    ) -> Pool {
        Pool {
            handle,
            device,
            is_default,
            owner_ctx,
            destroyed: false,
            handle_types,
            reuse: [1, 1, 1],
            release_threshold: 0,
            cached: Vec::new(),
            reserved: 0,
            reserved_high: 0,
            used: 0,
            used_high: 0,
        }
    }
}

/// Makes the default pool of device `dev`; returns its handle.
pub fn new_default(st: &mut State, dev: i32) -> usize {
    let handle = st.new_handle();
    st.pools.insert(
        handle,
        Pool::new(handle, dev, true, None, CU_MEM_HANDLE_TYPE_NONE),
    );
    handle
}

/// The live pool with handle `h`.
fn lookup(st: &State, h: CUmemoryPool) -> Result<&Pool, Fault> {
    st.pools
        .get(&(h as usize))
        .filter(|p| !p.destroyed)
        .ok_or(Fault::BadPool)
}

/// Gives a block back to the host.
fn release_block(st: &mut State, device: i32, b: Block) {
    if let Ok(d) = st.device_mut(device) {
        d.mem.uncharge(b.cap);
    }
    // SAFETY: the block is in no allocation and no cache anymore; nothing refers to it.
    unsafe { hostmem::unmap(b.base, b.map_len) };
}

/// Releases cached blocks of pool `h` until it holds at most `keep` bytes (or has no cached
/// block left). Largest blocks go first.
fn trim(st: &mut State, h: usize, keep: u64) {
    let Some(p) = st.pools.get_mut(&h) else {
        return;
    };
    p.cached.sort_by_key(|b| b.cap);
    let device = p.device;
    let mut freed = Vec::new();
    while p.reserved > keep {
        let Some(b) = p.cached.pop() else { break };
        p.reserved -= b.cap;
        freed.push(b);
    }
    let gone = p.destroyed && p.reserved == 0;
    for b in freed {
        release_block(st, device, b);
    }
    if gone {
        st.pools.remove(&h);
    }
}

/// What a whole-device synchronisation (`cuCtxSynchronize`) does on device `dev`: synchronous
/// allocations freed with `cuMemFreeAsync` (whose stream reached the free) are released, and each
/// pool releases cached memory above its release threshold.
pub fn synchronized(st: &mut State, dev: i32) {
    release_held(st, |h| h.alloc.ctx.device == dev);
    trim_pools(st, dev);
}

/// What synchronizing with stream `s` does (`cuStreamSynchronize`, or `cuEventSynchronize` of an
/// event recorded on it): the held allocations freed on `s` are released (on the legacy stream,
/// also those freed on the blocking streams it waits for), and each pool of the device releases
/// cached memory above its release threshold.
pub fn stream_synchronized(st: &mut State, s: &Arc<stream::Stream>) {
    let legacy = s.kind == stream::StreamKind::Legacy;
    release_held(st, |h| {
        Arc::ptr_eq(&h.stream, s)
            || (legacy
                && h.stream.ctx_id == s.ctx_id
                && h.stream.kind != stream::StreamKind::NonBlocking)
    });
    trim_pools(st, s.device);
}

/// Releases the held allocations (see the module documentation) that `which` picks.
pub fn release_held(st: &mut State, which: impl Fn(&Held) -> bool) {
    if st.held.is_empty() {
        return;
    }
    let (go, stay): (Vec<Held>, Vec<Held>) =
        std::mem::take(&mut st.held).into_iter().partition(which);
    st.held = stay;
    for h in go {
        memory::drop_live(st, &h.alloc);
        memory::reclaim(st, h.alloc, false);
    }
}

/// A synchronous allocation freed with `cuMemFreeAsync` whose stream reached the free: its
/// memory is still taken until a synchronization with `stream` (see the module documentation).
pub struct Held {
    pub alloc: Alloc,
    /// The stream the free was issued on.
    pub stream: Arc<stream::Stream>,
}

/// Each pool of device `dev` releases cached memory above its release threshold.
fn trim_pools(st: &mut State, dev: i32) {
    let pools: Vec<(usize, u64)> = st
        .pools
        .values()
        .filter(|p| p.device == dev)
        .map(|p| (p.handle, p.release_threshold))
        .collect();
    for (h, threshold) in pools {
        trim(st, h, threshold);
    }
}

/// A block of pool `pool` on device `device` comes back from an allocation of `size` bytes:
/// into the cache, or to the host if the pool is destroyed or `release` is set.
pub fn block_returned(
    st: &mut State,
    pool: usize,
    device: i32,
    b: Block,
    size: u64,
    release: bool,
) {
    let Some(p) = st.pools.get_mut(&pool) else {
        release_block(st, device, b);
        return;
    };
    p.used = p.used.saturating_sub(size);
    if release || p.destroyed {
        p.reserved = p.reserved.saturating_sub(b.cap);
        let gone = p.destroyed && p.reserved == 0;
        let device = p.device;
        release_block(st, device, b);
        if gone {
            st.pools.remove(&pool);
        }
    } else {
        p.cached.push(b);
    }
}

/// Destroys the pools a dead context made, and releases what the device's other pools cache.
pub fn release_context(st: &mut State, ctx_id: u64, dev: i32) {
    let owned: Vec<usize> = st
        .pools
        .values()
        .filter(|p| p.owner_ctx == Some(ctx_id))
        .map(|p| p.handle)
        .collect();
    for h in owned {
        destroy(st, h);
    }
    let on_device: Vec<usize> = st
        .pools
        .values()
        .filter(|p| p.device == dev)
        .map(|p| p.handle)
        .collect();
    for h in on_device {
        trim(st, h, 0);
    }
    release_held(st, |h| h.alloc.ctx.id == ctx_id);
}

/// Marks pool `h` destroyed: cached blocks go at once, blocks still allocated when their frees
/// run.
fn destroy(st: &mut State, h: usize) {
    let Some(p) = st.pools.get_mut(&h) else {
        return;
    };
    p.destroyed = true;
    let device = p.device;
    if let Ok(d) = st.device_mut(device)
        && d.current_pool == h
    {
        d.current_pool = d.default_pool;
    }
    trim(st, h, 0);
}

/// Takes `size` bytes from pool `h` for context `ctx`.
fn alloc(st: &mut State, h: usize, size: u64, ctx: CtxRef) -> Result<u64, Fault> {
    let p = st
        .pools
        .get_mut(&h)
        .filter(|p| !p.destroyed)
        .ok_or(Fault::BadPool)?;
    let device = p.device;
    let fit = p
        .cached
        .iter()
        .enumerate()
        .filter(|(_, b)| b.cap >= size && b.cap / 2 <= size)
        .min_by_key(|(_, b)| b.cap)
        .map(|(i, _)| i);
    let block = match fit {
        Some(i) => p.cached.swap_remove(i),
        None => {
            let len = usize::try_from(size).map_err(|_| Fault::OutOfMemory)?;
            if st.device_mut(device)?.mem.charge(size).is_err() {
                // Under pressure, give back what every pool of the device caches, then retry.
                trim_device(st, device);
                st.device_mut(device)?.mem.charge(size)?;
            }
            let (base, map_len) = match hostmem::map_anon(len) {
                Ok(m) => m,
                Err(f) => {
                    st.device_mut(device)?.mem.uncharge(size);
                    return Err(f);
                }
            };
            let p = st.pools.get_mut(&h).ok_or(Fault::Internal)?;
            p.reserved += size;
            p.reserved_high = p.reserved_high.max(p.reserved);
            Block {
                base,
                cap: size,
                map_len,
            }
        }
    };
    let p = st.pools.get_mut(&h).ok_or(Fault::Internal)?;
    p.used += size;
    p.used_high = p.used_high.max(p.used);
    let buffer_id = st.new_id();
    memory::insert(
        st,
        Alloc {
            base: block.base,
            size,
            map_len: block.map_len,
            kind: AllocKind::Async {
                pool: h,
                cap: block.cap,
            },
            ctx,
            buffer_id,
            ipc_fd: None,
        },
    );
    Ok(block.base)
}

fn trim_device(st: &mut State, dev: i32) {
    let pools: Vec<usize> = st
        .pools
        .values()
        .filter(|p| p.device == dev)
        .map(|p| p.handle)
        .collect();
    for h in pools {
        trim(st, h, 0);
    }
}

/// Stream-ordered allocation from pool `pool` (or the stream's device's current pool).
fn alloc_async(
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: Option<CUmemoryPool>,
    h: CUstream,
    pt: bool,
) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(dptr)?;
    let mut st = drv.lock();
    let s = stream::resolve(&mut st, h, pt)?;
    let ctx = context::by_handle(&st, s.ctx_handle).map_err(|_| Fault::BadStream)?;
    let pool = match pool {
        Some(p) => lookup(&st, p)?.handle,
        None => st.device(s.device)?.current_pool,
    };
    if size == 0 {
        Fault::AsyncZeroSize.tolerated()?;
        // SAFETY: checked non-null; writable by the caller's contract.
        return unsafe { put(dptr, 0) };
    }
    let base = alloc(&mut st, pool, size as u64, ctx)?;
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(dptr, base) }
}

/// Whether `cuMemFreeAsync` accepts an allocation of this kind.
fn freed_by_free_async(kind: AllocKind) -> bool {
    matches!(
        kind,
        AllocKind::Async { .. }
            | AllocKind::Device
            | AllocKind::Pitched { .. }
            | AllocKind::Managed
    )
}

/// Stream-ordered free: the address dies now; the memory returns when the stream gets there (a
/// pool's block), or is held until a synchronization after that (a synchronous allocation).
fn free_async(dptr: CUdeviceptr, h: CUstream, pt: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let s = stream::resolve(&mut st, h, pt)?;
    if dptr == 0 {
        return Fault::FreeAsyncNull.tolerated();
    }
    let kind = memory::check_free(&st, dptr, freed_by_free_async, Fault::WrongFreeFamily)?.kind;
    let held = !matches!(kind, AllocKind::Async { .. });
    // A held allocation stays counted as live until it is released.
    let a = if held {
        memory::detach(&mut st, dptr)
    } else {
        memory::unlink(&mut st, dptr)
    }
    .ok_or(Fault::Internal)?;
    // The allocation waits in `slot` for the operation; if the operation cannot be issued it is
    // still there, and is freed at once rather than leaked.
    let slot = Arc::new(Mutex::new(Some(a)));
    let in_op = slot.clone();
    let on = s.clone();
    let op: stream::Work = Box::new(move || {
        let taken = in_op.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (Some(a), Ok(drv)) = (taken, state::driver()) {
            let mut st = drv.lock();
            if held {
                st.held.push(Held {
                    alloc: a,
                    stream: on,
                });
            } else {
                memory::reclaim(&mut st, a, false);
            }
        }
    });
    if let Err(f) = stream::submit(&st, &s, None, Some(op)) {
        if let Some(a) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if held {
                memory::drop_live(&mut st, &a);
            }
            memory::reclaim(&mut st, a, false);
        }
        return Err(f);
    }
    Ok(())
}

/// `cuMemAllocAsync`: from the current pool of the stream's device. Size 0 gives address 0.
///
/// # Safety
/// `dptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemAllocAsync", || {
        alloc_async(dptr, bytesize, None, hStream, false)
    })
}

/// `cuMemAllocAsync_ptsz`.
///
/// # Safety
/// `dptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemAllocAsync_ptsz", || {
        alloc_async(dptr, bytesize, None, hStream, true)
    })
}

/// `cuMemAllocFromPoolAsync`.
///
/// # Safety
/// `dptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemAllocFromPoolAsync", || {
        alloc_async(dptr, bytesize, Some(pool), hStream, false)
    })
}

/// `cuMemAllocFromPoolAsync_ptsz`.
///
/// # Safety
/// `dptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemAllocFromPoolAsync_ptsz", || {
        alloc_async(dptr, bytesize, Some(pool), hStream, true)
    })
}

/// `cuMemFreeAsync`: also accepts `cuMemAlloc_v2` memory. Address 0 is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, hStream: CUstream) -> CUresult {
    guard("cuMemFreeAsync", || free_async(dptr, hStream, false))
}

/// `cuMemFreeAsync_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, hStream: CUstream) -> CUresult {
    guard("cuMemFreeAsync_ptsz", || free_async(dptr, hStream, true))
}

/// `cuDeviceGetDefaultMemPool`.
///
/// # Safety
/// `pool_out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(
    pool_out: *mut CUmemoryPool,
    dev: CUdevice,
) -> CUresult {
    guard("cuDeviceGetDefaultMemPool", || {
        let drv = state::driver()?;
        need(pool_out)?;
        let h = drv.lock().device(dev)?.default_pool;
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(pool_out, h as CUmemoryPool) }
    })
}

/// `cuDeviceGetMemPool`: the pool `cuMemAllocAsync` uses on `dev`.
///
/// # Safety
/// `pool` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, dev: CUdevice) -> CUresult {
    guard("cuDeviceGetMemPool", || {
        let drv = state::driver()?;
        need(pool)?;
        let h = drv.lock().device(dev)?.current_pool;
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(pool, h as CUmemoryPool) }
    })
}

/// `cuDeviceSetMemPool`: the pool must be of that device.
#[unsafe(no_mangle)]
pub extern "C" fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) -> CUresult {
    guard("cuDeviceSetMemPool", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        st.device(dev)?;
        let p = lookup(&st, pool)?;
        if p.device != dev {
            return Err(Fault::BadArgument);
        }
        let h = p.handle;
        st.device_mut(dev)?.current_pool = h;
        Ok(())
    })
}

/// `cuMemPoolCreate`: pinned device memory on a valid device; handle types none or POSIX file
/// descriptor.
///
/// # Safety
/// `pool` is NULL or writable; `poolProps` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut CUmemoryPool,
    poolProps: *const CUmemPoolProps,
) -> CUresult {
    guard("cuMemPoolCreate", || {
        let drv = state::driver()?;
        need(pool)?;
        need(poolProps)?;
        // SAFETY: checked non-null; readable by the caller's contract.
        let props = unsafe { *poolProps };
        if props.alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED
            || props.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE
        {
            return Err(Fault::BadArgument);
        }
        if props.handle_types != CU_MEM_HANDLE_TYPE_NONE
            && props.handle_types != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        {
            return Err(Fault::BadArgument);
        }
        let mut st = drv.lock();
        st.device(props.location.id)
            .map_err(|_| Fault::BadArgument)?;
        let owner = context::current(&st).ok().map(|c| c.id);
        let h = st.new_handle();
        st.pools.insert(
            h,
            Pool::new(h, props.location.id, false, owner, props.handle_types),
        );
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(pool, h as CUmemoryPool) }
    })
}

/// `cuMemPoolDestroy`: cached memory goes at once, memory still allocated when it is freed. A
/// device's default pool cannot be destroyed.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult {
    guard("cuMemPoolDestroy", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        let p = lookup(&st, pool)?;
        if p.is_default {
            return Err(Fault::DestroyDefaultPool);
        }
        let h = p.handle;
        destroy(&mut st, h);
        Ok(())
    })
}

/// `cuMemPoolTrimTo`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, minBytesToKeep: usize) -> CUresult {
    guard("cuMemPoolTrimTo", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        let h = lookup(&st, pool)?.handle;
        trim(&mut st, h, minBytesToKeep as u64);
        Ok(())
    })
}

const ATTR_REUSE_FIRST: c_int = 1;
const ATTR_REUSE_LAST: c_int = 3;
const ATTR_RELEASE_THRESHOLD: c_int = 4;
const ATTR_RESERVED_MEM_CURRENT: c_int = 5;
const ATTR_RESERVED_MEM_HIGH: c_int = 6;
const ATTR_USED_MEM_CURRENT: c_int = 7;
const ATTR_USED_MEM_HIGH: c_int = 8;

/// `cuMemPoolSetAttribute`: reuse flags (int), release threshold (u64), and the high-water marks
/// (u64, only 0, which resets them).
///
/// # Safety
/// `value` is NULL or readable for the attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: CUmemoryPool,
    attr: c_int,
    value: *mut c_void,
) -> CUresult {
    guard("cuMemPoolSetAttribute", || {
        let drv = state::driver()?;
        need(value)?;
        let mut st = drv.lock();
        let h = lookup(&st, pool)?.handle;
        let p = st.pools.get_mut(&h).ok_or(Fault::Internal)?;
        let read_int = || {
            // SAFETY: `value` is non-null (checked) and, for these attributes, readable for an
            // `int` by the caller's contract.
            unsafe { (value as *const c_int).read_unaligned() }
        };
        let read_u64 = || {
            // SAFETY: as above, for a `cuuint64_t`.
            unsafe { (value as *const u64).read_unaligned() }
        };
        match attr {
            ATTR_REUSE_FIRST..=ATTR_REUSE_LAST => p.reuse[(attr - 1) as usize] = read_int(),
            ATTR_RELEASE_THRESHOLD => p.release_threshold = read_u64(),
            ATTR_RESERVED_MEM_HIGH | ATTR_USED_MEM_HIGH => {
                if read_u64() != 0 {
                    return Err(Fault::PoolAttributeNotSettable);
                }
                if attr == ATTR_RESERVED_MEM_HIGH {
                    p.reserved_high = p.reserved;
                } else {
                    p.used_high = p.used;
                }
            }
            ATTR_RESERVED_MEM_CURRENT | ATTR_USED_MEM_CURRENT => {
                return Err(Fault::PoolAttributeNotSettable);
            }
            _ => return Err(Fault::BadArgument),
        }
        Ok(())
    })
}

/// `cuMemPoolGetAttribute`.
///
/// # Safety
/// `value` is NULL or writable for the attribute's type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: CUmemoryPool,
    attr: c_int,
    value: *mut c_void,
) -> CUresult {
    guard("cuMemPoolGetAttribute", || {
        let drv = state::driver()?;
        need(value)?;
        let st = drv.lock();
        let p = lookup(&st, pool)?;
        let wide = match attr {
            ATTR_REUSE_FIRST..=ATTR_REUSE_LAST => {
                // SAFETY: non-null and writable for an int by the caller's contract.
                return unsafe { put(value as *mut c_int, p.reuse[(attr - 1) as usize]) };
            }
            ATTR_RELEASE_THRESHOLD => p.release_threshold,
            ATTR_RESERVED_MEM_CURRENT => p.reserved,
            ATTR_RESERVED_MEM_HIGH => p.reserved_high,
            ATTR_USED_MEM_CURRENT => p.used,
            ATTR_USED_MEM_HIGH => p.used_high,
            _ => return Err(Fault::BadArgument),
        };
        // SAFETY: non-null and writable for a u64 by the caller's contract.
        unsafe { put(value as *mut u64, wide) }
    })
}
