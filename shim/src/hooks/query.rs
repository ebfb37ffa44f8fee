//! Queries about pointers and memory, answered for pooled pointers as the driver would answer
//! for a real allocation: the range is the block's, not the chunk's; idle pool memory counts as
//! free; an IPC handle is the driver's own for a block that is a dedicated chunk whole, and
//! refused for one that shares its chunk (the handle could only name the whole chunk). Under a
//! limit (`CUGUARD_LIMIT` or `CUGUARD_POOL_LIMIT`, unless `CUGUARD_LIMIT_VIRTUAL=0`),
//! cuMemGetInfo answers with the limit as the total and what is left of it as free
//! ([`super::shown`]).

#![allow(non_snake_case)]

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::track::{current_tracked_context, event};
use crate::driver::{Entry, real, sig};
use crate::ffi::*;
use crate::guard::shield;
use crate::serving::serve::{self, PoolLookup};
use crate::tracker::events::Kind;

const BUFFER_ID: u32 = 7;
const IS_LEGACY_CUDA_IPC_CAPABLE: u32 = 10;
const RANGE_START_ADDR: u32 = 11;
const RANGE_SIZE: u32 = 12;

/// Buffer ids for pooled blocks: distinct from each other (the chunk's own id would be shared
/// by every block in it). The high bit keeps them apart from the driver's small counters.
fn buffer_id(start: u64) -> u64 {
    static SALT: AtomicU64 = AtomicU64::new(0);
    let salt = SALT.load(Ordering::Relaxed);
    (1 << 63) | ((start >> 8) ^ salt)
}

/// Writes a pooled block's answer for `attribute` into `data`; false when the driver's answer
/// stands.
///
/// # Safety
/// `data` must point to storage of the attribute's type (the program's contract).
unsafe fn answer(attribute: u32, data: *mut c_void, start: u64, size: u64) -> bool {
    if data.is_null() {
        return false;
    }
    // SAFETY: per the caller's contract, data holds the attribute's type: CUdeviceptr, size_t,
    // unsigned long long, or int.
    unsafe {
        match attribute {
            RANGE_START_ADDR => *(data as *mut u64) = start,
            RANGE_SIZE => *(data as *mut usize) = size as usize,
            BUFFER_ID => *(data as *mut u64) = buffer_id(start),
            IS_LEGACY_CUDA_IPC_CAPABLE => {
                *(data as *mut i32) = matches!(
                    serve::export(start, false),
                    cuguard_pool::Export::Whole { .. }
                ) as i32
            }
            _ => return false,
        }
    }
    true
}

/// Whether the calling thread is inside a call the shim made into the NVTX tool: the tool is
/// then answered by the driver (it validates the chunk it was told of, not a block; and the pool
/// may hold the lock its lookup takes).
#[inline]
fn from_tool() -> bool {
    crate::nvtx::on() && crate::nvtx::in_tool()
}

/// `cuMemGetAddressRange_v2`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemGetAddressRange_v2(
    _e: Entry,
    real: sig::cuMemGetAddressRange_v2,
    pbase: *mut CUdeviceptr,
    psize: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    if from_tool() {
        // SAFETY: the tool's own arguments, forwarded unchanged.
        return unsafe { real(pbase, psize, dptr) };
    }
    match serve::lookup(dptr) {
        PoolLookup::Block { start, size } => {
            // SAFETY: the program's out-parameters, either may be NULL.
            unsafe {
                if !pbase.is_null() {
                    *pbase = start;
                }
                if !psize.is_null() {
                    *psize = size as usize;
                }
            }
            CUDA_SUCCESS
        }
        // In a chunk, but no live block there: the driver says this of freed memory.
        PoolLookup::InChunk => CUDA_ERROR_NOT_FOUND,
        // SAFETY: the program's own arguments, forwarded unchanged.
        PoolLookup::NotPooled => unsafe { real(pbase, psize, dptr) },
    }
}

/// `cuPointerGetAttribute`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuPointerGetAttribute(
    _e: Entry,
    real: sig::cuPointerGetAttribute,
    data: *mut c_void,
    attribute: u32,
    ptr: CUdeviceptr,
) -> CUresult {
    if from_tool() {
        // SAFETY: the tool's own arguments, forwarded unchanged.
        return unsafe { real(data, attribute, ptr) };
    }
    match serve::lookup(ptr) {
        PoolLookup::InChunk => CUDA_ERROR_INVALID_VALUE,
        // SAFETY: data is the program's storage for this attribute.
        PoolLookup::Block { start, size } if unsafe { answer(attribute, data, start, size) } => {
            CUDA_SUCCESS
        }
        // SAFETY: the program's own arguments, forwarded unchanged.
        _ => unsafe { real(data, attribute, ptr) },
    }
}

/// `cuPointerGetAttributes`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuPointerGetAttributes(
    _e: Entry,
    real: sig::cuPointerGetAttributes,
    n: u32,
    attributes: *mut u32,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(n, attributes, data, ptr) };
    if r != CUDA_SUCCESS || attributes.is_null() || data.is_null() || from_tool() {
        return r;
    }
    if let PoolLookup::Block { start, size } = serve::lookup(ptr) {
        for i in 0..n as usize {
            // SAFETY: both arrays have n entries (the program's contract, which the driver
            // just relied on too).
            unsafe { answer(*attributes.add(i), *data.add(i), start, size) };
        }
    }
    r
}

/// `cuMemGetInfo_v2`.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemGetInfo_v2(
    _e: Entry,
    real: sig::cuMemGetInfo_v2,
    free: *mut usize,
    total: *mut usize,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(free, total) };
    if r == CUDA_SUCCESS && !free.is_null() {
        let device = shield(-1, || {
            let Some(get) = real::cuCtxGetDevice() else {
                return -1;
            };
            let mut device = -1;
            // SAFETY: valid out-parameter.
            if unsafe { get(&mut device) } != CUDA_SUCCESS {
                return -1;
            }
            device
        });
        let idle = if device < 0 {
            0
        } else {
            shield(0, || serve::idle_bytes(device))
        };
        // SAFETY: checked non-null; the driver just wrote it.
        unsafe {
            let t = if total.is_null() { usize::MAX } else { *total };
            *free = (*free).saturating_add(idle as usize).min(t);
        }
        // Under a limit (the process's or the pool's), the limit is the device as the program
        // sees it.
        // SAFETY: checked non-null; written just above.
        let device_free = unsafe { *free } as u64;
        if let Some((f, t)) = shield(None, || super::shown::info(device, device_free)) {
            // SAFETY: free checked non-null; total written only when the program passed one.
            unsafe {
                *free = f as usize;
                if !total.is_null() {
                    *total = t as usize;
                }
            }
        }
    }
    r
}

/// `cuIpcGetMemHandle`: a pooled block that is a dedicated chunk whole is exported by the
/// driver itself (its handle names that chunk, which starts at the block: any process that opens
/// it gets the block's own address), and its chunk is kept for it alone. A block that shares its
/// chunk is refused: the driver's handle would name the whole chunk, so a process that opens it
/// would get the chunk's address, not the block's (and no cuguard in it to tell the offset).
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuIpcGetMemHandle(
    e: Entry,
    real: sig::cuIpcGetMemHandle,
    handle: *mut c_void,
    dptr: CUdeviceptr,
) -> CUresult {
    if serve::lookup(dptr) != PoolLookup::NotPooled
        && !matches!(
            serve::export(dptr, true),
            cuguard_pool::Export::Whole { .. }
        )
    {
        static SAID: AtomicBool = AtomicBool::new(false);
        crate::process::diag::warn_once(
            &SAID,
            "cuIpcGetMemHandle refused for a pooled pointer: the allocation shares a chunk of the \
             pool with others (allocations under 2 MiB do), and the handle would name the chunk, \
             not the allocation; run with CUGUARD_POOL=0 to share small allocations between \
             processes",
        );
        if let Some((_guard, t)) = super::track::active() {
            shield((), || {
                let (ctx, _) = current_tracked_context(t);
                event(
                    t,
                    Kind::IpcRefused,
                    dptr,
                    e,
                    CUDA_ERROR_NOT_SUPPORTED,
                    None,
                    ctx,
                    Some(
                        "IPC export of a pooled allocation that shares a chunk (under 2 MiB); \
                         set CUGUARD_POOL=0 to share it"
                            .into(),
                    ),
                );
            });
        }
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    // SAFETY: the program's own arguments, forwarded unchanged.
    unsafe { real(handle, dptr) }
}
