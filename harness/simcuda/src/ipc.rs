//! Inter-process memory handles: `cuIpcGetMemHandle`, `cuIpcOpenMemHandle(_v2)`,
//! `cuIpcCloseMemHandle`.
//!
//! An allocation is private anonymous memory until it is first exported. Then its bytes move into
//! a memory file mapped over the same addresses (so the program's pointer does not change) and
//! the handle names the exporting process and that file's descriptor. Another process opens it
//! through `/proc/<pid>/fd/<fd>` and maps it, so both see the same bytes. The file is closed when
//! the exporter frees the allocation; existing mappings in other processes stay valid.
//!
//! Handle layout (64 bytes): magic `"CSIM"`, pid (i32), fd (i32), 4 zero bytes, size (u64),
//! buffer id (u64), then zeros. Each open maps afresh.

use std::ffi::{c_int, c_uint};

use crate::context;
use crate::errors::Fault;
use crate::ffi::consts::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS;
use crate::ffi::{CUdeviceptr, CUipcMemHandle, CUresult, guard, need, put};
use crate::hostmem;
use crate::memory::{self, Alloc, AllocKind};
use crate::state::{self, State};
use crate::stream;

const MAGIC: &[u8; 4] = b"CSIM";

struct Decoded {
    pid: i32,
    fd: c_int,
    size: u64,
}

fn encode(pid: i32, fd: c_int, size: u64, id: u64) -> CUipcMemHandle {
    let mut b = [0u8; 64];
    b[0..4].copy_from_slice(MAGIC);
    b[4..8].copy_from_slice(&pid.to_le_bytes());
    b[8..12].copy_from_slice(&fd.to_le_bytes());
    b[16..24].copy_from_slice(&size.to_le_bytes());
    b[24..32].copy_from_slice(&id.to_le_bytes());
    CUipcMemHandle {
        reserved: b.map(|x| x as std::ffi::c_char),
    }
}

fn decode(h: &CUipcMemHandle) -> Option<Decoded> {
    let b: [u8; 64] = h.reserved.map(|x| x as u8);
    if &b[0..4] != MAGIC {
        return None;
    }
    let i32_at = |i: usize| i32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    Some(Decoded {
        pid: i32_at(4),
        fd: i32_at(8),
        size: u64_at(16),
    })
}

/// Moves the bytes of allocation `base` into a memory file mapped at the same address, once.
fn make_shared(st: &mut State, base: u64) -> Result<c_int, Fault> {
    let a = st.allocs.get(&base).ok_or(Fault::UnknownPointer)?;
    if let Some(fd) = a.ipc_fd {
        return Ok(fd);
    }
    let len = a.map_len;
    let fd = hostmem::memfd(len)?;
    let copy = (|| {
        let tmp = hostmem::map_fd(len, fd)?;
        let page = hostmem::page_size();
        // SAFETY: `base` is a live allocation of `len` mapped bytes and `tmp` a fresh mapping of
        // the same length; pages that are all zero are skipped (the file starts zeroed), so
        // untouched memory stays untouched.
        unsafe {
            for off in (0..len).step_by(page) {
                let src = std::slice::from_raw_parts((base as usize + off) as *const u8, page);
                if src.iter().any(|&x| x != 0) {
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr(),
                        (tmp as usize + off) as *mut u8,
                        page,
                    );
                }
            }
            hostmem::unmap(tmp, len);
            hostmem::map_fd_fixed(base, len, fd, 0, libc::PROT_READ | libc::PROT_WRITE)
        }
    })();
    if let Err(f) = copy {
        hostmem::close(fd);
        return Err(f);
    }
    if let Some(a) = st.allocs.get_mut(&base) {
        a.ipc_fd = Some(fd);
    }
    Ok(fd)
}

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
            context::current(&st)?;
            let a = memory::containing(&st, dptr).ok_or(Fault::UnknownPointer)?;
            if !matches!(a.kind, AllocKind::Device | AllocKind::Pitched { .. }) {
                return Err(Fault::IpcNotExportable);
            }
            (a.base, a.ctx.device)
        };
        // No simulated work may write the bytes while they move.
        stream::wait_device(drv, device);
        let mut st = drv.lock();
        let fd = make_shared(&mut st, base)?;
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
    let ctx = context::current(&drv.lock())?;
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
    memory::insert(
        &mut st,
        Alloc {
            base,
            size: h.size,
            map_len,
            kind: AllocKind::IpcImported,
            ctx,
            buffer_id,
            ipc_fd: None,
        },
    );
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
        context::current(&st)?;
        match st.allocs.get(&dptr) {
            Some(a) if a.kind == AllocKind::IpcImported => {}
            _ => return Err(Fault::IpcNotOpened),
        }
        let a = memory::unlink(&mut st, dptr).ok_or(Fault::Internal)?;
        memory::reclaim(&mut st, a, false);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip() {
        let h = encode(1234, 17, 1 << 20, 99);
        let d = decode(&h).unwrap();
        assert_eq!((d.pid, d.fd, d.size), (1234, 17, 1 << 20));
        assert!(decode(&CUipcMemHandle { reserved: [0; 64] }).is_none());
    }
}
