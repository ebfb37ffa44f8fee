//! What the driver knows about an address: where a copy's bytes live ([`place`]), and the
//! pointer attributes (`cuPointerGetAttribute`, `cuPointerGetAttributes`).
//!
//! With unified addressing every address is either inside something the driver made
//! (an allocation, a VMM mapping) or ordinary pageable host memory.

use std::ffi::{c_int, c_uint, c_void};

use crate::errors::Fault;
use crate::ffi::consts::{
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST,
};
use crate::ffi::{CUdeviceptr, CUresult, guard, need};
use crate::memory::{self, AllocKind};
use crate::state::{self, State};
use crate::vmm;

/// Where the bytes of a copy operand live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Device memory: `cuMemAlloc*`, async, VMM, IPC mappings.
    Device,
    /// Managed memory (device memory the host may touch).
    Managed,
    /// Pinned host memory from `cuMemAllocHost_v2`/`cuMemHostAlloc`.
    Pinned,
    /// Anything else: pageable host memory the driver does not know.
    Pageable,
}

impl Place {
    /// Device-side memory for the synchronisation rules of copies.
    pub fn device_side(self) -> bool {
        matches!(self, Place::Device | Place::Managed)
    }
}

/// Where `[ptr, ptr + len)` lives. A range that starts in driver memory must end in it
/// ([`Fault::BadRange`]); VMM memory must allow the access ([`Fault::InaccessibleRange`]).
pub fn place(st: &State, ptr: u64, len: u64, write: bool) -> Result<Place, Fault> {
    if let Some(a) = memory::containing(st, ptr) {
        if ptr.checked_add(len).is_none_or(|end| end > a.base + a.size) {
            return Err(Fault::BadRange);
        }
        return Ok(match a.kind {
            AllocKind::Managed => Place::Managed,
            k if k.pinned_host() => Place::Pinned,
            _ => Place::Device,
        });
    }
    match vmm::check_access(&st.vmm, ptr, len, write)? {
        Some(_) => Ok(Place::Device),
        None => Ok(Place::Pageable),
    }
}

/// Everything the attributes report about an address the driver knows.
struct Info {
    base: u64,
    size: u64,
    host: bool,
    managed: bool,
    ctx: usize,
    device: i32,
    buffer_id: u64,
    pool: usize,
    ipc_capable: bool,
    handle_types: u64,
    access: c_uint,
}

fn info(st: &State, ptr: u64) -> Option<Info> {
    if let Some(a) = memory::containing(st, ptr) {
        let (pool, handle_types) = match a.kind {
            AllocKind::Async { pool, .. } => (
                pool,
                st.pools.get(&pool).map_or(0, |p| p.handle_types as u64),
            ),
            _ => (0, 0),
        };
        return Some(Info {
            base: a.base,
            size: a.size,
            host: a.kind.pinned_host(),
            managed: a.kind == AllocKind::Managed,
            ctx: a.ctx.handle,
            device: a.ctx.device,
            buffer_id: a.buffer_id,
            pool,
            ipc_capable: matches!(a.kind, AllocKind::Device | AllocKind::Pitched { .. }),
            handle_types,
            access: CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        });
    }
    let (base, m) = vmm::mapping_containing(&st.vmm, ptr)?;
    let handle_types = st
        .vmm
        .handles
        .get(&m.handle)
        .map_or(0, |p| p.handle_types as u64);
    Some(Info {
        base,
        size: m.size,
        host: false,
        managed: false,
        ctx: 0,
        device: m.device,
        buffer_id: m.handle,
        pool: 0,
        ipc_capable: false,
        handle_types,
        access: m.access,
    })
}

/// A value of one attribute, with the width the attribute has in C.
enum Value {
    U32(u32),
    I32(i32),
    U64(u64),
}

/// The value of `attribute` for the address `ptr` described by `i`, or `None` if the attribute
/// has no value for it (the host pointer of device memory).
fn value(attribute: c_int, ptr: u64, i: &Info) -> Result<Option<Value>, Fault> {
    use Value::*;
    Ok(Some(match attribute {
        1 => U64(i.ctx as u64), // CONTEXT
        2 => U32(if i.host {
            CU_MEMORYTYPE_HOST
        } else {
            CU_MEMORYTYPE_DEVICE
        }), // MEMORY_TYPE
        3 => U64(ptr),          // DEVICE_POINTER
        4 if i.host || i.managed => U64(ptr), // HOST_POINTER
        4 => return Ok(None),
        6 => I32(0),                         // SYNC_MEMOPS
        7 => U64(i.buffer_id),               // BUFFER_ID
        8 => U32(i.managed as u32),          // IS_MANAGED
        9 => I32(i.device),                  // DEVICE_ORDINAL
        10 => I32(i.ipc_capable as i32),     // IS_LEGACY_CUDA_IPC_CAPABLE
        11 => U64(i.base),                   // RANGE_START_ADDR
        12 => U64(i.size),                   // RANGE_SIZE
        13 => I32(1),                        // MAPPED
        14 => U64(i.handle_types),           // ALLOWED_HANDLE_TYPES
        15 => I32(!i.host as i32),           // IS_GPU_DIRECT_RDMA_CAPABLE
        16 => U32(i.access),                 // ACCESS_FLAGS
        17 => U64(i.pool as u64),            // MEMPOOL_HANDLE
        18 => U64(i.size),                   // MAPPING_SIZE
        19 => U64(i.base),                   // MAPPING_BASE_ADDR
        20 => U64(i.buffer_id),              // MEMORY_BLOCK_ID
        21 => I32(0),                        // IS_HW_DECOMPRESS_CAPABLE
        _ => return Err(Fault::BadArgument), // P2P_TOKENS and unknown
    }))
}

/// The value `cuPointerGetAttributes` reports for an address the driver does not know.
fn default_value(attribute: c_int) -> Result<Value, Fault> {
    Ok(match attribute {
        2 | 8 | 16 => Value::U32(0),
        6 | 10 | 13 | 15 | 21 => Value::I32(0),
        // The runtime reports device -2 for memory CUDA does not know.
        9 => Value::I32(-2),
        1 | 3 | 4 | 7 | 11 | 12 | 14 | 17 | 18 | 19 | 20 => Value::U64(0),
        _ => return Err(Fault::BadArgument),
    })
}

/// Writes `v` at `data` with its C width.
///
/// # Safety
/// `data` is non-null and writable for the attribute's width.
unsafe fn write(data: *mut c_void, v: Value) {
    // SAFETY: by the caller's contract.
    unsafe {
        match v {
            Value::U32(x) => data.cast::<u32>().write_unaligned(x),
            Value::I32(x) => data.cast::<i32>().write_unaligned(x),
            Value::U64(x) => data.cast::<u64>().write_unaligned(x),
        }
    }
}

/// `cuPointerGetAttribute`: `CUDA_ERROR_INVALID_VALUE` for an address the driver does not know.
///
/// # Safety
/// `data` is NULL or writable for the attribute's width.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: CUdeviceptr,
) -> CUresult {
    guard("cuPointerGetAttribute", || {
        let drv = state::driver()?;
        need(data)?;
        let st = drv.lock();
        let i = info(&st, ptr).ok_or(Fault::PointerNotFound)?;
        let v = value(attribute, ptr, &i)?.ok_or(Fault::BadArgument)?;
        // SAFETY: checked non-null; writable for the width by the caller's contract.
        unsafe { write(data, v) };
        Ok(())
    })
}

/// `cuPointerGetAttributes`: for an address the driver does not know, every attribute gets its
/// default (0, NULL, device -2) and the call succeeds. A NULL slot in `data` is skipped.
///
/// # Safety
/// `attributes` and `data` are NULL or readable for `numAttributes` entries, and each non-null
/// `data[i]` is writable for the width of `attributes[i]`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttributes(
    numAttributes: c_uint,
    attributes: *mut c_int,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    guard("cuPointerGetAttributes", || {
        let drv = state::driver()?;
        need(attributes)?;
        need(data)?;
        let n = numAttributes as usize;
        // SAFETY: both non-null and readable for `n` entries by the caller's contract.
        let (attrs, slots) = unsafe {
            (
                std::slice::from_raw_parts(attributes, n),
                std::slice::from_raw_parts(data, n),
            )
        };
        let st = drv.lock();
        let i = info(&st, ptr);
        let mut values = Vec::with_capacity(n);
        for &a in attrs {
            let v = match &i {
                Some(i) => value(a, ptr, i)?.unwrap_or(Value::U64(0)),
                None => default_value(a)?,
            };
            values.push(v);
        }
        for (slot, v) in slots.iter().zip(values) {
            if !slot.is_null() {
                // SAFETY: non-null and writable for the width by the caller's contract.
                unsafe { write(*slot, v) };
            }
        }
        Ok(())
    })
}
