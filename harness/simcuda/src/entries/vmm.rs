//! The VMM family's C entry points: `cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`,
//! `cuMemSetAccess`, `cuMemUnmap`, `cuMemRelease`, `cuMemAddressFree`,
//! `cuMemGetAllocationGranularity` (the model: `model/vmm.rs`).
//!
//! `cuMemMap` maps with no access; `cuMemSetAccess` makes the range readable or read-write.
//! `cuMemUnmap` puts the no-access reservation back, after the work in flight on the mappings'
//! devices; a released physical allocation is freed when its last mapping goes.

use std::ffi::c_uint;

use super::{guard, need, put};
use crate::errors::Fault;
use crate::ffi::consts::{
    CU_MEM_ACCESS_FLAGS_PROT_NONE, CU_MEM_ACCESS_FLAGS_PROT_READ,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEM_ALLOC_GRANULARITY_MINIMUM,
    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_FABRIC,
    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_LOCATION_TYPE_DEVICE,
};
use crate::ffi::{
    CUdeviceptr, CUmemAccessDesc, CUmemAllocationProp, CUmemGenericAllocationHandle, CUresult,
};
use crate::hostmem;
use crate::model::vmm::{GRANULARITY, Mapping, Phys, aligned};
use crate::state::{self, State};

/// Checks an allocation property: pinned memory on a valid device, with handle types the
/// simulator knows. Returns the device.
fn check_prop(st: &State, prop: &CUmemAllocationProp) -> Result<i32, Fault> {
    if prop.type_ != CU_MEM_ALLOCATION_TYPE_PINNED
        || prop.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE
    {
        return Err(Fault::BadArgument);
    }
    if prop.requested_handle_types
        & !(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC)
        != 0
    {
        return Err(Fault::BadArgument);
    }
    st.device(prop.location.id)?;
    Ok(prop.location.id)
}

/// `cuMemGetAllocationGranularity`: 2 MiB.
///
/// # Safety
/// `granularity` is NULL or writable; `prop` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const CUmemAllocationProp,
    option: c_uint,
) -> CUresult {
    guard("cuMemGetAllocationGranularity", || {
        let drv = state::driver()?;
        need(granularity)?;
        need(prop)?;
        // SAFETY: checked non-null; readable by the caller's contract.
        let prop = unsafe { *prop };
        check_prop(&drv.lock(), &prop)?;
        if option != CU_MEM_ALLOC_GRANULARITY_MINIMUM
            && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
        {
            return Err(Fault::BadFlags);
        }
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(granularity, GRANULARITY as usize) }
    })
}

/// `cuMemCreate`: a physical allocation of `size` bytes (a multiple of the granularity).
///
/// # Safety
/// `handle` is NULL or writable; `prop` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CUresult {
    guard("cuMemCreate", || {
        let drv = state::driver()?;
        need(handle)?;
        need(prop)?;
        // SAFETY: checked non-null; readable by the caller's contract.
        let prop = unsafe { *prop };
        let mut st = drv.lock();
        let device = check_prop(&st, &prop)?;
        if flags != 0 {
            return Err(Fault::BadFlags);
        }
        let size = size as u64;
        if size == 0 || !aligned(size) {
            return Err(Fault::VmmNotAligned);
        }
        st.charge_device(device, size)?;
        let fd = match hostmem::memfd(size as usize) {
            Ok(fd) => fd,
            Err(f) => {
                st.device_mut(device)?.mem.uncharge(size);
                return Err(f);
            }
        };
        st.device_mut(device)?.mem.add_live(size);
        let id = st.new_id();
        let phys = Phys {
            fd,
            size,
            device,
            handle_types: prop.requested_handle_types,
            released: false,
            mappings: 0,
        };
        st.vmm.handles.insert(id, phys);
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(handle, id) }
    })
}

/// `cuMemRelease`: the memory goes once no mapping uses it.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    guard("cuMemRelease", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        match st.vmm.handles.get_mut(&handle) {
            Some(p) if !p.released => p.released = true,
            _ => return Err(Fault::BadVmmHandle),
        }
        st.drop_phys_if_done(handle);
        Ok(())
    })
}

/// `cuMemAddressReserve`: `alignment` 0 means the granularity; `addr` is only a hint and is
/// ignored; `flags` must be 0.
///
/// # Safety
/// `ptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    let _ = addr;
    guard("cuMemAddressReserve", || {
        let drv = state::driver()?;
        need(ptr)?;
        if flags != 0 {
            return Err(Fault::BadFlags);
        }
        let size64 = size as u64;
        if size64 == 0 || !aligned(size64) {
            return Err(Fault::VmmNotAligned);
        }
        let alignment = if alignment == 0 {
            GRANULARITY as usize
        } else {
            alignment
        };
        if !alignment.is_power_of_two() {
            return Err(Fault::BadArgument);
        }
        let start = hostmem::reserve(size, alignment.max(GRANULARITY as usize))?;
        drv.lock().vmm.reservations.insert(start, size64);
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(ptr, start) }
    })
}

/// `cuMemAddressFree`: the whole reservation, with nothing mapped in it.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    guard("cuMemAddressFree", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        if st.vmm.reservations.get(&ptr) != Some(&(size as u64)) {
            return Err(Fault::VmmBadRange);
        }
        if st
            .vmm
            .mappings
            .range(ptr..ptr + size as u64)
            .next()
            .is_some()
        {
            return Err(Fault::VmmStillMapped);
        }
        st.vmm.reservations.remove(&ptr);
        // SAFETY: the reservation is ours, has no mapping, and is now forgotten.
        unsafe { hostmem::unmap(ptr, size) };
        Ok(())
    })
}

/// `cuMemMap`: maps `size` bytes of `handle` from `offset` at `ptr`, inside one reservation and
/// over nothing already mapped. The range has no access until `cuMemSetAccess`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    guard("cuMemMap", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        if flags != 0 {
            return Err(Fault::BadFlags);
        }
        let (size, offset) = (size as u64, offset as u64);
        let (fd, phys_size, device) = match st.vmm.handles.get(&handle) {
            Some(p) if !p.released => (p.fd, p.size, p.device),
            _ => return Err(Fault::BadVmmHandle),
        };
        if size == 0 || !aligned(ptr) || !aligned(size) || !aligned(offset) {
            return Err(Fault::VmmNotAligned);
        }
        if offset.checked_add(size).is_none_or(|end| end > phys_size) {
            return Err(Fault::BadArgument);
        }
        let end = ptr.checked_add(size).ok_or(Fault::VmmBadRange)?;
        let inside = st
            .vmm
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(b, s)| end <= b + s);
        if !inside {
            return Err(Fault::VmmBadRange);
        }
        let overlaps = st.vmm.mapping_containing(ptr).is_some()
            || st.vmm.mappings.range(ptr..end).next().is_some();
        if overlaps {
            return Err(Fault::VmmAlreadyMapped);
        }
        // SAFETY: the range is inside one of our reservations and holds no mapping.
        unsafe { hostmem::map_fd_fixed(ptr, size as usize, fd, offset, libc::PROT_NONE)? };
        st.vmm.mappings.insert(
            ptr,
            Mapping {
                size,
                handle,
                device,
                access: CU_MEM_ACCESS_FLAGS_PROT_NONE,
            },
        );
        if let Some(p) = st.vmm.handles.get_mut(&handle) {
            p.mappings += 1;
        }
        Ok(())
    })
}

/// `cuMemUnmap`: the range must be made of whole mappings, or hold no mapping at all inside a
/// reservation (a no-op). Waits for work in flight on their devices first.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    guard("cuMemUnmap", || {
        let drv = state::driver()?;
        let devices: Vec<i32> = {
            let st = drv.lock();
            if st.vmm.nothing_mapped(ptr, size as u64)? {
                // Unmapping a range already unmapped succeeds (measured).
                return Ok(());
            }
            let bases = st.vmm.tiling(ptr, size as u64)?;
            bases.iter().map(|b| st.vmm.mappings[b].device).collect()
        };
        for d in devices {
            drv.wait_device(d);
        }
        let mut st = drv.lock();
        let bases = st.vmm.tiling(ptr, size as u64)?;
        for b in bases {
            let Some(m) = st.vmm.mappings.remove(&b) else {
                continue;
            };
            // SAFETY: the mapping is ours and forgotten; the range stays reserved.
            unsafe { hostmem::unmap_to_reserved(b, m.size as usize)? };
            if let Some(p) = st.vmm.handles.get_mut(&m.handle) {
                p.mappings -= 1;
            }
            st.drop_phys_if_done(m.handle);
        }
        Ok(())
    })
}

/// `cuMemSetAccess`: the range must be made of whole mappings; each descriptor names a device
/// and `PROT_NONE`, `PROT_READ` or `PROT_READWRITE`. The widest access given applies.
///
/// # Safety
/// `desc` is NULL or readable for `count` descriptors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const CUmemAccessDesc,
    count: usize,
) -> CUresult {
    guard("cuMemSetAccess", || {
        let drv = state::driver()?;
        if desc.is_null() || count == 0 {
            return Err(Fault::BadArgument);
        }
        // SAFETY: non-null and readable for `count` descriptors by the caller's contract.
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let mut st = drv.lock();
        let mut access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        for d in descs {
            if d.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
                return Err(Fault::BadArgument);
            }
            st.device(d.location.id)?;
            if !matches!(
                d.flags,
                CU_MEM_ACCESS_FLAGS_PROT_NONE
                    | CU_MEM_ACCESS_FLAGS_PROT_READ
                    | CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            ) {
                return Err(Fault::BadFlags);
            }
            access |= d.flags;
        }
        let prot = match access {
            CU_MEM_ACCESS_FLAGS_PROT_READWRITE => libc::PROT_READ | libc::PROT_WRITE,
            CU_MEM_ACCESS_FLAGS_PROT_READ => libc::PROT_READ,
            _ => libc::PROT_NONE,
        };
        for b in st.vmm.tiling(ptr, size as u64)? {
            let m = st.vmm.mappings.get_mut(&b).ok_or(Fault::Internal)?;
            // SAFETY: the mapping is ours.
            unsafe { hostmem::protect(b, m.size as usize, prot)? };
            m.access = access;
        }
        Ok(())
    })
}
