//! The memory family's C entry points: the synchronous allocations (`cuMemAlloc_v2`,
//! `cuMemAllocPitch_v2`, `cuMemAllocManaged`, pinned and registered host memory), their frees,
//! `cuMemGetInfo_v2` and `cuMemGetAddressRange_v2`, and the legacy 32-bit forms (refused).
//!
//! A free waits for the work in flight on the allocation's device first, as the real driver
//! does.

use std::ffi::{c_uint, c_void};

use super::{guard, need, put};
use crate::errors::Fault;
use crate::ffi::consts::{
    CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE,
    CU_MEMHOSTALLOC_WRITECOMBINED,
};
use crate::ffi::{CUdeviceptr, CUresult};
use crate::hostmem;
use crate::model::memory::{Alloc, AllocKind, PITCH_ALIGN};
use crate::state::{self, State};

/// `cuMemAlloc_v2`.
///
/// # Safety
/// `dptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    guard("cuMemAlloc_v2", || {
        let drv = state::driver()?;
        need(dptr)?;
        let mut st = drv.lock();
        let ctx = st.current()?;
        st.refuse_unsafe()?;
        if bytesize == 0 {
            return Err(Fault::ZeroSize);
        }
        let base = st.alloc_device(ctx, bytesize as u64, AllocKind::Device)?;
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(dptr, base) }
    })
}

/// `cuMemAllocPitch_v2`: `*pPitch = round_up(WidthInBytes, 512)`; `ElementSizeBytes` must be 4, 8
/// or 16.
///
/// # Safety
/// `dptr` and `pPitch` are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pPitch: *mut usize,
    WidthInBytes: usize,
    Height: usize,
    ElementSizeBytes: c_uint,
) -> CUresult {
    guard("cuMemAllocPitch_v2", || {
        let drv = state::driver()?;
        need(dptr)?;
        need(pPitch)?;
        let mut st = drv.lock();
        let ctx = st.current()?;
        st.refuse_unsafe()?;
        if !matches!(ElementSizeBytes, 4 | 8 | 16) {
            return Err(Fault::BadPitchElementSize);
        }
        if WidthInBytes == 0 || Height == 0 {
            return Err(Fault::ZeroSize);
        }
        let pitch = WidthInBytes
            .checked_next_multiple_of(PITCH_ALIGN)
            .ok_or(Fault::OutOfMemory)?;
        let size = pitch.checked_mul(Height).ok_or(Fault::OutOfMemory)?;
        let base = st.alloc_device(
            ctx,
            size as u64,
            AllocKind::Pitched {
                pitch: pitch as u64,
            },
        )?;
        // SAFETY: both checked non-null; writable by the caller's contract.
        unsafe {
            put(pPitch, pitch)?;
            put(dptr, base)
        }
    })
}

/// `cuMemAllocManaged`: `flags` is `CU_MEM_ATTACH_GLOBAL` or `CU_MEM_ATTACH_HOST`. Managed memory
/// counts against the device like device memory.
///
/// # Safety
/// `dptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    flags: c_uint,
) -> CUresult {
    guard("cuMemAllocManaged", || {
        let drv = state::driver()?;
        need(dptr)?;
        let mut st = drv.lock();
        let ctx = st.current()?;
        st.refuse_unsafe()?;
        if flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST {
            return Err(Fault::BadFlags);
        }
        if bytesize == 0 {
            return Err(Fault::ZeroSize);
        }
        let base = st.alloc_device(ctx, bytesize as u64, AllocKind::Managed)?;
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(dptr, base) }
    })
}

/// Whether `cuMemFree_v2` accepts an allocation of this kind.
fn freed_by_mem_free(kind: AllocKind) -> bool {
    matches!(
        kind,
        AllocKind::Device
            | AllocKind::Pitched { .. }
            | AllocKind::Managed
            | AllocKind::Async { .. }
    )
}

/// `cuMemFree_v2`: waits for all work in flight on the allocation's device (as the real driver
/// does), then frees. Address 0 is a no-op. Works with no current context (measured).
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    guard("cuMemFree_v2", || {
        let drv = state::driver()?;
        if dptr == 0 {
            return Fault::FreeNull.tolerated();
        }
        let device = {
            let st = drv.lock();
            // No context needs to be current, but a dead one that is current is an error.
            st.current_if_any()?;
            st.check_free(dptr, freed_by_mem_free, Fault::WrongFreeFamily)?
                .ctx
                .device
        };
        drv.wait_device(device);
        let mut st = drv.lock();
        // Checked again: another thread may have freed it while this one waited.
        st.check_free(dptr, freed_by_mem_free, Fault::WrongFreeFamily)?;
        let a = st.unlink_alloc(dptr).ok_or(Fault::Internal)?;
        st.reclaim(a, false);
        // It waited for the device's work, yet releases no stream-ordered free's memory (as
        // measured on the H200: `state/pool.rs`'s module documentation).
        Ok(())
    })
}

/// The legacy `cuMemAlloc` (32-bit `CUdeviceptr`): not supported on a 64-bit driver.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAlloc(_dptr: *mut c_uint, _bytesize: c_uint) -> CUresult {
    guard("cuMemAlloc", || Err(Fault::LegacyAbi))
}

/// The legacy `cuMemAllocPitch` (32-bit `CUdeviceptr` and sizes): not supported.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAllocPitch(
    _dptr: *mut c_uint,
    _pitch: *mut c_uint,
    _width: c_uint,
    _height: c_uint,
    _element: c_uint,
) -> CUresult {
    guard("cuMemAllocPitch", || Err(Fault::LegacyAbi))
}

/// The legacy `cuMemAllocHost` (32-bit size): not supported.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAllocHost(_pp: *mut *mut c_void, _bytesize: c_uint) -> CUresult {
    guard("cuMemAllocHost", || Err(Fault::LegacyAbi))
}

/// The legacy `cuMemGetInfo` (32-bit sizes): not supported.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetInfo(_free: *mut c_uint, _total: *mut c_uint) -> CUresult {
    guard("cuMemGetInfo", || Err(Fault::LegacyAbi))
}

/// The legacy `cuMemGetAddressRange` (32-bit `CUdeviceptr` and size): not supported.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemGetAddressRange(
    _pbase: *mut c_uint,
    _psize: *mut c_uint,
    _dptr: c_uint,
) -> CUresult {
    guard("cuMemGetAddressRange", || Err(Fault::LegacyAbi))
}

/// The legacy `cuMemFree` (32-bit `CUdeviceptr`): not supported on a 64-bit driver.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFree(_dptr: c_uint) -> CUresult {
    guard("cuMemFree", || Err(Fault::LegacyAbi))
}

fn host_alloc(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(pp)?;
    let known =
        CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    if flags & !known != 0 {
        return Err(Fault::BadFlags);
    }
    let mut st = drv.lock();
    let ctx = st.current()?;
    if bytesize == 0 {
        Fault::HostZeroSize.tolerated()?;
        // SAFETY: checked non-null; writable by the caller's contract.
        return unsafe { put(pp, std::ptr::null_mut()) };
    }
    let (base, map_len) = hostmem::map_anon(bytesize)?;
    let buffer_id = st.new_id();
    st.insert_alloc(Alloc {
        base,
        size: bytesize as u64,
        map_len,
        kind: AllocKind::Host { flags },
        ctx,
        buffer_id,
        ipc_fd: None,
    });
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(pp, base as *mut c_void) }
}

/// `cuMemAllocHost_v2`: pinned host memory, owned by the current context.
///
/// # Safety
/// `pp` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    guard("cuMemAllocHost_v2", || host_alloc(pp, bytesize, 0))
}

/// `cuMemHostAlloc`: flags are `CU_MEMHOSTALLOC_PORTABLE`, `_DEVICEMAP`, `_WRITECOMBINED`.
///
/// # Safety
/// `pp` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(
    pp: *mut *mut c_void,
    bytesize: usize,
    Flags: c_uint,
) -> CUresult {
    guard("cuMemHostAlloc", || host_alloc(pp, bytesize, Flags))
}

/// `cuMemFreeHost`: waits for work in flight on the device (an async copy may still use the
/// buffer), then frees. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    guard("cuMemFreeHost", || {
        let drv = state::driver()?;
        if p.is_null() {
            return Fault::FreeHostNull.tolerated();
        }
        let base = p as u64;
        let is_host = |k: AllocKind| matches!(k, AllocKind::Host { .. });
        let device = {
            let st = drv.lock();
            st.current_if_any()?;
            match st.allocs.get(&base) {
                Some(a) if is_host(a.kind) => a.ctx.device,
                Some(_) => return Err(Fault::WrongFreeFamily),
                None => return Err(Fault::UnknownHostPointer),
            }
        };
        drv.wait_device(device);
        let mut st = drv.lock();
        match st.allocs.get(&base) {
            Some(a) if is_host(a.kind) => {}
            _ => return Err(Fault::UnknownHostPointer),
        }
        let a = st.unlink_alloc(base).ok_or(Fault::Internal)?;
        st.reclaim(a, false);
        Ok(())
    })
}

const CU_MEMHOSTREGISTER_ALL: c_uint = 0x1 | 0x2 | 0x4 | 0x8;

fn host_register(p: *mut c_void, bytesize: usize, flags: c_uint) -> Result<(), Fault> {
    let drv = state::driver()?;
    if flags & !CU_MEMHOSTREGISTER_ALL != 0 {
        return Err(Fault::BadFlags);
    }
    if p.is_null() || bytesize == 0 {
        return Err(Fault::BadArgument);
    }
    let mut st = drv.lock();
    let ctx = st.current()?;
    let base = p as u64;
    let end = base
        .checked_add(bytesize as u64)
        .ok_or(Fault::BadArgument)?;
    if st.containing(base).is_some() || st.allocs.range(base..end).next().is_some() {
        return Err(Fault::HostAlreadyRegistered);
    }
    let buffer_id = st.new_id();
    let kind = AllocKind::Registered { flags };
    st.insert_alloc(Alloc {
        base,
        size: bytesize as u64,
        map_len: 0,
        kind,
        ctx,
        buffer_id,
        ipc_fd: None,
    });
    Ok(())
}

/// `cuMemHostRegister_v2`: page-locks (registers) the program's memory `[p, p + bytesize)`.
///
/// # Safety
/// The range is the program's memory and stays mapped while registered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostRegister_v2(
    p: *mut c_void,
    bytesize: usize,
    Flags: c_uint,
) -> CUresult {
    guard("cuMemHostRegister_v2", || host_register(p, bytesize, Flags))
}

/// `cuMemHostRegister` (CUDA 4.0, same signature): as `cuMemHostRegister_v2`.
///
/// # Safety
/// As `cuMemHostRegister_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostRegister(
    p: *mut c_void,
    bytesize: usize,
    Flags: c_uint,
) -> CUresult {
    guard("cuMemHostRegister", || host_register(p, bytesize, Flags))
}

/// `cuMemHostUnregister`: `p` is the start of a registered range. Waits for work in flight on
/// the device first.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    guard("cuMemHostUnregister", || {
        let drv = state::driver()?;
        let base = p as u64;
        let registered = |st: &State| match st.allocs.get(&base) {
            Some(a) if matches!(a.kind, AllocKind::Registered { .. }) => Ok(a.ctx.device),
            _ => Err(Fault::HostNotRegistered),
        };
        let device = {
            let st = drv.lock();
            st.current()?;
            registered(&st)?
        };
        drv.wait_device(device);
        let mut st = drv.lock();
        registered(&st)?;
        let a = st.unlink_alloc(base).ok_or(Fault::Internal)?;
        st.reclaim(a, false);
        Ok(())
    })
}

/// `cuMemHostGetDevicePointer_v2`: with unified addressing the device address of pinned (or
/// registered) host memory is its host address. `Flags` must be 0.
///
/// # Safety
/// `pdptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut CUdeviceptr,
    p: *mut c_void,
    Flags: c_uint,
) -> CUresult {
    guard("cuMemHostGetDevicePointer_v2", || {
        let drv = state::driver()?;
        need(pdptr)?;
        if Flags != 0 {
            return Err(Fault::BadFlags);
        }
        let st = drv.lock();
        st.current()?;
        match st.containing(p as u64) {
            Some(a) if a.kind.pinned_host() => {}
            _ => return Err(Fault::NotPinned),
        }
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(pdptr, p as u64) }
    })
}

/// `cuMemGetInfo_v2`: free and total memory of the current context's device.
///
/// # Safety
/// Both pointers are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    guard("cuMemGetInfo_v2", || {
        let drv = state::driver()?;
        need(free)?;
        need(total)?;
        let st = drv.lock();
        let c = st.current()?;
        let mem = &st.device(c.device)?.mem;
        // SAFETY: both checked non-null; writable by the caller's contract.
        unsafe {
            put(free, mem.free() as usize)?;
            put(total, mem.limit as usize)
        }
    })
}

/// `cuMemGetAddressRange_v2`: base and size of the allocation (or VMM mapping) containing
/// `dptr`; either out-pointer may be NULL.
///
/// # Safety
/// Each out-pointer is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    pbase: *mut CUdeviceptr,
    psize: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    guard("cuMemGetAddressRange_v2", || {
        let drv = state::driver()?;
        let st = drv.lock();
        let (base, size) = match st.containing(dptr) {
            Some(a) => (a.base, a.size),
            None => st
                .vmm
                .mapping_containing(dptr)
                .map(|(b, m)| (b, m.size))
                .ok_or(Fault::AddressRangeNotFound)?,
        };
        // SAFETY: each out-pointer is NULL or writable by the caller's contract.
        unsafe {
            if !pbase.is_null() {
                put(pbase, base)?;
            }
            if !psize.is_null() {
                put(psize, size as usize)?;
            }
        }
        Ok(())
    })
}
