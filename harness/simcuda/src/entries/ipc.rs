//! The IPC family's C entry points: `cuIpcGetMemHandle`, `cuIpcOpenMemHandle(_v2)`,
//! `cuIpcCloseMemHandle`.
//!
//! An allocation is private anonymous memory until it is first exported. Then its bytes move into
//! a memory file mapped over the same addresses (so the program's pointer does not change) and
//! the handle names the exporting process and that file's descriptor. Another process opens it
//! through `/proc/<pid>/fd/<fd>` and maps it, so both see the same bytes. The file is closed when
//! the exporter frees the allocation; existing mappings in other processes stay valid.
//!
//! The handle's layout: `model/ipc.rs`. Each open maps afresh.

use std::ffi::c_uint;

use super::{guard, need, put};
use crate::errors::Fault;
use crate::ffi::consts::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS;
use crate::ffi::{CUdeviceptr, CUipcMemHandle, CUresult};
use crate::hostmem;
use crate::model::ipc::{decode, encode};
use crate::model::memory::{Alloc, AllocKind};
use crate::state;

/// `cuIpcGetMemHandle`: `dptr` is in a `cuMemAlloc_v2` or pitched allocation; an interior
/// address names the whole allocation (measured).
///
/// # Safety
/// `pHandle` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcGetMemHandle(
    pHandle: *mut CUipcMemHandle,
    dptr: CUdeviceptr,
) -> CUresult {
    guard("cuIpcGetMemHandle", || {
        let drv = state::driver()?;
        need(pHandle)?;
        let (base, device) = {
            let st = drv.lock();
            st.current()?;
            let a = st.containing(dptr).ok_or(Fault::UnknownPointer)?;
            if !matches!(a.kind, AllocKind::Device | AllocKind::Pitched { .. }) {
                return Err(Fault::IpcNotExportable);
            }
            (a.base, a.ctx.device)
        };
        // No simulated work may write the bytes while they move.
        drv.wait_device(device);
        let mut st = drv.lock();
        let fd = st.share_alloc(base)?;
        let a = st.allocs.get(&base).ok_or(Fault::UnknownPointer)?;
        // SAFETY: the process id query has no preconditions.
        let pid = unsafe { libc::getpid() };
        let handle = encode(pid, fd, a.size, a.buffer_id);
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(pHandle, handle) }
    })
}

fn open(pdptr: *mut CUdeviceptr, handle: CUipcMemHandle, flags: c_uint) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(pdptr)?;
    if flags & !CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS != 0 {
        return Err(Fault::BadFlags);
    }
    let ctx = drv.lock().current()?;
    let h = decode(&handle).ok_or(Fault::IpcBadHandle)?;
    // SAFETY: the process id query has no preconditions.
    if h.pid == unsafe { libc::getpid() } {
        return Err(Fault::IpcSameProcess);
    }
    let path = format!("/proc/{}/fd/{}\0", h.pid, h.fd);
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Fault::IpcOpenFailed);
    }
    let mapped = usize::try_from(h.size)
        .map_err(|_| Fault::IpcBadHandle)
        .and_then(|len| hostmem::map_fd(len, fd));
    hostmem::close(fd);
    let base = mapped.map_err(|_| Fault::IpcOpenFailed)?;
    let mut st = drv.lock();
    let buffer_id = st.new_id();
    let map_len = hostmem::page_round(h.size as usize).ok_or(Fault::IpcBadHandle)?;
    st.insert_alloc(Alloc {
        base,
        size: h.size,
        map_len,
        kind: AllocKind::IpcImported,
        ctx,
        buffer_id,
        ipc_fd: None,
    });
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(pdptr, base) }
}

/// `cuIpcOpenMemHandle_v2`: maps another process's exported allocation.
///
/// # Safety
/// `pdptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    Flags: c_uint,
) -> CUresult {
    guard("cuIpcOpenMemHandle_v2", || open(pdptr, handle, Flags))
}

/// `cuIpcOpenMemHandle`: as `cuIpcOpenMemHandle_v2`.
///
/// # Safety
/// `pdptr` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenMemHandle(
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    Flags: c_uint,
) -> CUresult {
    guard("cuIpcOpenMemHandle", || open(pdptr, handle, Flags))
}

/// `cuIpcCloseMemHandle`: unmaps what `cuIpcOpenMemHandle_v2` mapped.
#[unsafe(no_mangle)]
pub extern "C" fn cuIpcCloseMemHandle(dptr: CUdeviceptr) -> CUresult {
    guard("cuIpcCloseMemHandle", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        st.current()?;
        match st.allocs.get(&dptr) {
            Some(a) if a.kind == AllocKind::IpcImported => {}
            _ => return Err(Fault::IpcNotOpened),
        }
        let a = st.unlink_alloc(dptr).ok_or(Fault::Internal)?;
        st.reclaim(a, false);
        Ok(())
    })
}
