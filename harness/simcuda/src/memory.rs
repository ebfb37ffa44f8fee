//! Device memory: the map of live allocations, each device's accounting, and the synchronous
//! allocation entries (`cuMemAlloc_v2`, `cuMemAllocPitch_v2`, `cuMemAllocManaged`, pinned and
//! registered host memory) with their frees and queries.
//!
//! Each allocation is its own anonymous mapping, so its address is page-aligned and its bytes are
//! real. The map is a `BTreeMap` by start address, so an address inside an allocation is found
//! with one range query.
//!
//! Accounting per device ([`DeviceMem`]):
//! - `used` counts what the limit (`CUGUARD_SIM_MEMORY`) is checked against and what
//!   `cuMemGetInfo_v2` reports as taken: the requested bytes of every live `cuMemAlloc_v2`,
//!   pitched (`pitch * height`) and managed allocation, every block a memory pool holds (in use
//!   or cached), and every VMM physical allocation (`cuMemCreate`).
//! - `live_bytes`/`live_allocs` count what the program holds and has not freed: the same
//!   synchronous allocations, async allocations not yet passed to a free, and VMM physical
//!   allocations until their memory goes (released and unmapped) (`cusimGetUsage`). Pinned or registered host memory and IPC
//!   mappings count in neither. A synchronous allocation freed with `cuMemFreeAsync` counts in
//!   both until the driver releases its memory at a synchronization (`pool.rs`): the driver
//!   still holds it.
//!
//! Allocation addresses are page-aligned, each allocation its own mapping. (The real driver packs
//! small allocations 512 bytes apart in shared pages; programs must not rely on either.)
//!
//! Pitch: `cuMemAllocPitch_v2` returns `pitch = round_up(WidthInBytes, 512)` and allocates
//! `pitch * Height` bytes.

use std::ffi::{c_int, c_uint, c_void};

use crate::capture;
use crate::context::{self, CtxRef};
use crate::errors::Fault;
use crate::ffi::consts::{
    CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE,
    CU_MEMHOSTALLOC_WRITECOMBINED,
};
use crate::ffi::{CUdeviceptr, CUresult, guard, need, put};
use crate::hostmem;
use crate::pool;
use crate::state::{self, State};
use crate::stream;
use crate::vmm;

/// Pitch alignment of `cuMemAllocPitch_v2`.
pub const PITCH_ALIGN: usize = 512;

/// One device's memory accounting (see the module documentation).
#[derive(Debug, Clone)]
pub struct DeviceMem {
    pub limit: u64,
    pub used: u64,
    pub live_bytes: u64,
    pub live_allocs: u64,
}

impl DeviceMem {
    pub fn new(limit: u64) -> Self {
        DeviceMem {
            limit,
            used: 0,
            live_bytes: 0,
            live_allocs: 0,
        }
    }

    /// Takes `n` bytes, or fails with out-of-memory leaving everything as it was.
    pub fn charge(&mut self, n: u64) -> Result<(), Fault> {
        match self.used.checked_add(n) {
            Some(total) if total <= self.limit => {
                self.used = total;
                Ok(())
            }
            _ => Err(Fault::OutOfMemory),
        }
    }

    pub fn uncharge(&mut self, n: u64) {
        self.used = self.used.saturating_sub(n);
    }

    pub fn free(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }

    pub fn add_live(&mut self, bytes: u64) {
        self.live_bytes += bytes;
        self.live_allocs += 1;
    }

    pub fn drop_live(&mut self, bytes: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
        self.live_allocs = self.live_allocs.saturating_sub(1);
    }
}

/// What made an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// `cuMemAlloc_v2`.
    Device,
    /// `cuMemAllocPitch_v2`.
    Pitched { pitch: u64 },
    /// `cuMemAllocManaged`.
    Managed,
    /// `cuMemAllocAsync`/`cuMemAllocFromPoolAsync`, from a pool block of `cap` bytes.
    Async { pool: usize, cap: u64 },
    /// `cuMemAllocHost_v2`/`cuMemHostAlloc`.
    Host { flags: c_uint },
    /// `cuMemHostRegister_v2`: the program's own memory, registered (never unmapped here).
    Registered { flags: c_uint },
    /// `cuIpcOpenMemHandle_v2`: another process's allocation mapped here.
    IpcImported,
}

impl AllocKind {
    /// Charged to `DeviceMem::used` by the allocation itself (async blocks are charged by their
    /// pool).
    fn charged(self) -> bool {
        matches!(
            self,
            AllocKind::Device | AllocKind::Pitched { .. } | AllocKind::Managed
        )
    }

    /// Page-locked host memory, allocated or registered.
    pub fn pinned_host(self) -> bool {
        matches!(self, AllocKind::Host { .. } | AllocKind::Registered { .. })
    }

    /// Counted in `live_bytes`/`live_allocs`.
    fn counted_live(self) -> bool {
        matches!(
            self,
            AllocKind::Device
                | AllocKind::Pitched { .. }
                | AllocKind::Managed
                | AllocKind::Async { .. }
        )
    }
}

/// A live allocation.
#[derive(Debug)]
pub struct Alloc {
    pub base: u64,
    /// Bytes the program got (`pitch * height` for pitched allocations).
    pub size: u64,
    /// Length of the host mapping at `base`.
    pub map_len: usize,
    pub kind: AllocKind,
    pub ctx: CtxRef,
    /// Unique id (`CU_POINTER_ATTRIBUTE_BUFFER_ID`).
    pub buffer_id: u64,
    /// The memory file backing this allocation once it was exported through IPC.
    pub ipc_fd: Option<c_int>,
}

/// The live allocation containing `ptr`.
pub fn containing(st: &State, ptr: u64) -> Option<&Alloc> {
    st.allocs
        .range(..=ptr)
        .next_back()
        .map(|(_, a)| a)
        .filter(|a| ptr < a.base + a.size.max(1))
}

/// Checks that `ptr` is the start of a live allocation that `accepts` the free; returns its kind.
pub fn check_free(
    st: &State,
    ptr: u64,
    accepts: impl Fn(AllocKind) -> bool,
    wrong: Fault,
) -> Result<&Alloc, Fault> {
    match st.allocs.get(&ptr) {
        Some(a) if accepts(a.kind) => Ok(a),
        Some(_) => Err(wrong),
        None if containing(st, ptr).is_some() => Err(Fault::InteriorPointer),
        None => Err(Fault::UnknownPointer),
    }
}

/// Records a new allocation and counts it.
pub fn insert(st: &mut State, a: Alloc) {
    if a.kind.counted_live()
        && let Ok(d) = st.device_mut(a.ctx.device)
    {
        d.mem.add_live(a.size);
    }
    st.allocs.insert(a.base, a);
}

/// Removes the allocation at `base` from the map and from the program's live count; its memory
/// is not returned yet (see [`reclaim`]).
pub fn unlink(st: &mut State, base: u64) -> Option<Alloc> {
    let a = detach(st, base)?;
    drop_live(st, &a);
    Some(a)
}

/// Removes the allocation at `base` from the map only: its address is dead, but it still counts
/// as live (a held stream-ordered free, `pool.rs`) until [`drop_live`].
pub fn detach(st: &mut State, base: u64) -> Option<Alloc> {
    st.allocs.remove(&base)
}

/// Takes a detached allocation out of the program's live count.
pub fn drop_live(st: &mut State, a: &Alloc) {
    if a.kind.counted_live()
        && let Ok(d) = st.device_mut(a.ctx.device)
    {
        d.mem.drop_live(a.size);
    }
}

/// Returns an unlinked allocation's memory: to its pool (async blocks, unless `context_gone`,
/// which releases them), or to the host.
pub fn reclaim(st: &mut State, a: Alloc, context_gone: bool) {
    if let Some(fd) = a.ipc_fd {
        hostmem::close(fd);
    }
    match a.kind {
        AllocKind::Async { pool, cap } => {
            let block = pool::Block {
                base: a.base,
                cap,
                map_len: a.map_len,
            };
            pool::block_returned(st, pool, a.ctx.device, block, a.size, context_gone);
        }
        kind => {
            if kind.charged()
                && let Ok(d) = st.device_mut(a.ctx.device)
            {
                d.mem.uncharge(a.size);
            }
            // SAFETY: the allocation is out of the map; nothing in the driver refers to it, and a
            // program touching it after its free is at fault (as on a real GPU).
            unsafe { hostmem::unmap(a.base, a.map_len) };
        }
    }
}

/// Frees every allocation of a destroyed context.
pub fn release_context(st: &mut State, ctx_id: u64) {
    let bases: Vec<u64> = st
        .allocs
        .values()
        .filter(|a| a.ctx.id == ctx_id)
        .map(|a| a.base)
        .collect();
    for base in bases {
        if let Some(a) = unlink(st, base) {
            reclaim(st, a, true);
        }
    }
}

/// Allocates `size` bytes of simulated device (or managed) memory in context `ctx`.
fn alloc_device(st: &mut State, ctx: CtxRef, size: u64, kind: AllocKind) -> Result<u64, Fault> {
    st.device_mut(ctx.device)?.mem.charge(size)?;
    let (base, map_len) = match usize::try_from(size)
        .map_err(|_| Fault::OutOfMemory)
        .and_then(hostmem::map_anon)
    {
        Ok(m) => m,
        Err(f) => {
            st.device_mut(ctx.device)?.mem.uncharge(size);
            return Err(f);
        }
    };
    let buffer_id = st.new_id();
    insert(
        st,
        Alloc {
            base,
            size,
            map_len,
            kind,
            ctx,
            buffer_id,
            ipc_fd: None,
        },
    );
    Ok(base)
}

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
        let ctx = context::current(&st)?;
        capture::refuse_unsafe(&mut st)?;
        if bytesize == 0 {
            return Err(Fault::ZeroSize);
        }
        let base = alloc_device(&mut st, ctx, bytesize as u64, AllocKind::Device)?;
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
        let ctx = context::current(&st)?;
        capture::refuse_unsafe(&mut st)?;
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
        let base = alloc_device(
            &mut st,
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
        let ctx = context::current(&st)?;
        capture::refuse_unsafe(&mut st)?;
        if flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST {
            return Err(Fault::BadFlags);
        }
        if bytesize == 0 {
            return Err(Fault::ZeroSize);
        }
        let base = alloc_device(&mut st, ctx, bytesize as u64, AllocKind::Managed)?;
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
            context::current_if_any(&st)?;
            check_free(&st, dptr, freed_by_mem_free, Fault::WrongFreeFamily)?
                .ctx
                .device
        };
        stream::wait_device(drv, device);
        let mut st = drv.lock();
        // Checked again: another thread may have freed it while this one waited.
        check_free(&st, dptr, freed_by_mem_free, Fault::WrongFreeFamily)?;
        let a = unlink(&mut st, dptr).ok_or(Fault::Internal)?;
        reclaim(&mut st, a, false);
        // It waited for the device's work, yet releases no stream-ordered free's memory (as
        // measured on the H200: `pool`'s module documentation).
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
    let ctx = context::current(&st)?;
    if bytesize == 0 {
        Fault::HostZeroSize.tolerated()?;
        // SAFETY: checked non-null; writable by the caller's contract.
        return unsafe { put(pp, std::ptr::null_mut()) };
    }
    let (base, map_len) = hostmem::map_anon(bytesize)?;
    let buffer_id = st.new_id();
    insert(
        &mut st,
        Alloc {
            base,
            size: bytesize as u64,
            map_len,
            kind: AllocKind::Host { flags },
            ctx,
            buffer_id,
            ipc_fd: None,
        },
    );
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
            context::current_if_any(&st)?;
            match st.allocs.get(&base) {
                Some(a) if is_host(a.kind) => a.ctx.device,
                Some(_) => return Err(Fault::WrongFreeFamily),
                None => return Err(Fault::UnknownHostPointer),
            }
        };
        stream::wait_device(drv, device);
        let mut st = drv.lock();
        match st.allocs.get(&base) {
            Some(a) if is_host(a.kind) => {}
            _ => return Err(Fault::UnknownHostPointer),
        }
        let a = unlink(&mut st, base).ok_or(Fault::Internal)?;
        reclaim(&mut st, a, false);
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
    let ctx = context::current(&st)?;
    let base = p as u64;
    let end = base
        .checked_add(bytesize as u64)
        .ok_or(Fault::BadArgument)?;
    if containing(&st, base).is_some() || st.allocs.range(base..end).next().is_some() {
        return Err(Fault::HostAlreadyRegistered);
    }
    let buffer_id = st.new_id();
    let kind = AllocKind::Registered { flags };
    insert(
        &mut st,
        Alloc {
            base,
            size: bytesize as u64,
            map_len: 0,
            kind,
            ctx,
            buffer_id,
            ipc_fd: None,
        },
    );
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
            context::current(&st)?;
            registered(&st)?
        };
        stream::wait_device(drv, device);
        let mut st = drv.lock();
        registered(&st)?;
        let a = unlink(&mut st, base).ok_or(Fault::Internal)?;
        reclaim(&mut st, a, false);
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
        context::current(&st)?;
        match containing(&st, p as u64) {
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
        let c = context::current(&st)?;
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
        let (base, size) = match containing(&st, dptr) {
            Some(a) => (a.base, a.size),
            None => vmm::mapping_containing(&st.vmm, dptr)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_limit() {
        let mut m = DeviceMem::new(1000);
        assert!(m.charge(600).is_ok());
        assert_eq!(m.charge(401), Err(Fault::OutOfMemory));
        assert!(m.charge(400).is_ok());
        assert_eq!(m.free(), 0);
        m.uncharge(1000);
        assert_eq!(m.free(), 1000);
        assert_eq!(m.charge(u64::MAX), Err(Fault::OutOfMemory));
    }
}
