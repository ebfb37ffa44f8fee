//! The pool family's C entry points: stream-ordered allocation (`cuMemAllocAsync`,
//! `cuMemAllocFromPoolAsync`), `cuMemFreeAsync`, and the `cuMemPool*` and device pool entries;
//! `_ptsz` forms where they exist.
//!
//! `cuMemFreeAsync` unlinks the allocation at once (the address is dead to the program) and
//! issues an operation on the stream that gives the memory back when the stream gets there
//! (`state/pool.rs` says how and when).

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use super::{guard, need, put};
use crate::errors::Fault;
use crate::ffi::consts::{
    CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_NONE,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_LOCATION_TYPE_DEVICE,
};
use crate::ffi::{CUdevice, CUdeviceptr, CUmemPoolProps, CUmemoryPool, CUresult, CUstream};
use crate::model::memory::AllocKind;
use crate::model::pool::*;
use crate::model::stream::Work;
use crate::state;

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
    let s = st.resolve_stream(h as usize, pt)?;
    let ctx = st
        .context_by_handle(s.ctx_handle)
        .map_err(|_| Fault::BadStream)?;
    let pool = match pool {
        Some(p) => st.live_pool(p as usize)?.handle,
        None => st.device(s.device)?.current_pool,
    };
    if size == 0 {
        Fault::AsyncZeroSize.tolerated()?;
        // SAFETY: checked non-null; writable by the caller's contract.
        return unsafe { put(dptr, 0) };
    }
    let base = st.pool_alloc(pool, size as u64, ctx)?;
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
    let s = st.resolve_stream(h as usize, pt)?;
    if dptr == 0 {
        return Fault::FreeAsyncNull.tolerated();
    }
    let kind = st
        .check_free(dptr, freed_by_free_async, Fault::WrongFreeFamily)?
        .kind;
    let held = !matches!(kind, AllocKind::Async { .. });
    // A held allocation stays counted as live until it is released.
    let a = if held {
        st.detach_alloc(dptr)
    } else {
        st.unlink_alloc(dptr)
    }
    .ok_or(Fault::Internal)?;
    if let AllocKind::Async { pool, .. } = a.kind {
        st.pool_block_freed(pool, a.size);
    }
    // The allocation waits in `slot` for the operation; if the operation cannot be issued it is
    // still there, and is freed at once rather than leaked.
    let slot = Arc::new(Mutex::new(Some(a)));
    let in_op = slot.clone();
    let on = s.clone();
    let op: Work = Box::new(move || {
        let taken = in_op.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let (Some(a), Ok(drv)) = (taken, state::driver()) {
            let mut st = drv.lock();
            if held {
                st.held.push(Held {
                    alloc: a,
                    stream: on,
                });
            } else {
                st.freed_block_returned(a);
            }
        }
    });
    if let Err(f) = st.submit(&s, None, Some(op)) {
        if let Some(a) = slot.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if held {
                st.drop_live(&a);
                st.reclaim(a, false);
            } else {
                st.freed_block_returned(a);
            }
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
        let p = st.live_pool(pool as usize)?;
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
        let owner = st.current().ok().map(|c| c.id);
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
        let p = st.live_pool(pool as usize)?;
        if p.is_default {
            return Err(Fault::DestroyDefaultPool);
        }
        let h = p.handle;
        st.destroy_pool(h);
        Ok(())
    })
}

/// `cuMemPoolTrimTo`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, minBytesToKeep: usize) -> CUresult {
    guard("cuMemPoolTrimTo", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        let h = st.live_pool(pool as usize)?.handle;
        st.trim_pool(h, minBytesToKeep as u64);
        Ok(())
    })
}

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
        let h = st.live_pool(pool as usize)?.handle;
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
        let p = st.live_pool(pool as usize)?;
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
