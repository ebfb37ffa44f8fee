//! The pointer family's model: where a copy operand's bytes live ([`Place`]), what the driver
//! knows about an address ([`Info`]), and the value each pointer attribute takes from it.
//!
//! With unified addressing every address is either inside something the driver made (an
//! allocation, a VMM mapping) or ordinary pageable host memory (`state/pointer.rs` tells which).

use std::ffi::{c_int, c_uint};

use crate::errors::Fault;
use crate::ffi::consts::{CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST};

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

/// Everything the attributes report about an address the driver knows.
pub struct Info {
    pub base: u64,
    pub size: u64,
    pub host: bool,
    pub managed: bool,
    pub ctx: usize,
    pub device: i32,
    pub buffer_id: u64,
    pub pool: usize,
    pub ipc_capable: bool,
    pub handle_types: u64,
    pub access: c_uint,
}

/// A value of one attribute, with the width the attribute has in C.
pub enum Value {
    U32(u32),
    I32(i32),
    U64(u64),
}

/// The value of `attribute` for the address `ptr` described by `i`, or `None` if the attribute
/// has no value for it (the host pointer of device memory).
pub fn value(attribute: c_int, ptr: u64, i: &Info) -> Result<Option<Value>, Fault> {
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
pub fn default_value(attribute: c_int) -> Result<Value, Fault> {
    Ok(match attribute {
        2 | 8 | 16 => Value::U32(0),
        6 | 10 | 13 | 15 | 21 => Value::I32(0),
        // The runtime reports device -2 for memory CUDA does not know.
        9 => Value::I32(-2),
        1 | 3 | 4 | 7 | 11 | 12 | 14 | 17 | 18 | 19 | 20 => Value::U64(0),
        _ => return Err(Fault::BadArgument),
    })
}
