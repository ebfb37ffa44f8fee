//! The C side of the driver: the types, constants and structures of `cuda.h` that the exported
//! entries use (written here by hand, with the layouts of CUDA 13.0). Plain data: the wrapper
//! every export runs its body in is `entries/mod.rs`'s `guard`.
//!
//! `CUresult` crosses the boundary as a plain `c_uint`, never as a Rust enum: a program may hand
//! the driver any number, and a Rust enum holding an undeclared value is undefined behaviour.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_ushort, c_void};

pub type CUresult = c_uint;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUcontext = *mut c_void;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUmemoryPool = *mut c_void;
pub type CUmemGenericAllocationHandle = u64;

/// `CUuuid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUuuid {
    pub bytes: [c_char; 16],
}

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUipcMemHandle {
    pub reserved: [c_char; 64],
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemLocation {
    pub type_: c_uint,
    pub id: c_int,
}

/// The `allocFlags` member of `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAllocationPropFlags {
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: c_ushort,
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAllocationProp {
    pub type_: c_uint,
    pub requested_handle_types: c_uint,
    pub location: CUmemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: CUmemAllocationPropFlags,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: c_uint,
}

/// `CUmemPoolProps` (CUDA 12.2 and later: `maxSize`, `usage`, then 54 reserved bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemPoolProps {
    pub alloc_type: c_uint,
    pub handle_types: c_uint,
    pub location: CUmemLocation,
    pub win32_security_attributes: *mut c_void,
    pub max_size: usize,
    pub usage: c_ushort,
    pub reserved: [u8; 54],
}

/// `CUctxCreateParams` (argument of `cuCtxCreate_v4`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUctxCreateParams {
    pub exec_affinity_params: *mut c_void,
    pub num_exec_affinity_params: c_int,
    pub cig_params: *mut c_void,
}

/// Constants of `cuda.h` used by the entries.
pub mod consts {
    use std::ffi::c_uint;

    pub const CU_STREAM_DEFAULT: c_uint = 0;
    pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
    /// The `CU_STREAM_LEGACY` handle.
    pub const CU_STREAM_LEGACY: usize = 1;
    /// The `CU_STREAM_PER_THREAD` handle.
    pub const CU_STREAM_PER_THREAD: usize = 2;

    pub const CU_EVENT_BLOCKING_SYNC: c_uint = 1;
    pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
    pub const CU_EVENT_INTERPROCESS: c_uint = 4;
    pub const CU_EVENT_WAIT_DEFAULT: c_uint = 0;
    pub const CU_EVENT_WAIT_EXTERNAL: c_uint = 1;

    /// All `CU_CTX_*` flag bits (scheduling, map-host, lmem-resize, coredump, sync-memops).
    pub const CU_CTX_FLAGS_MASK: c_uint = 0xff;
    pub const CU_CTX_SCHED_MASK: c_uint = 0x07;

    pub const CU_MEM_ATTACH_GLOBAL: c_uint = 1;
    pub const CU_MEM_ATTACH_HOST: c_uint = 2;

    pub const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
    pub const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
    pub const CU_MEMHOSTALLOC_WRITECOMBINED: c_uint = 4;

    pub const CU_MEMORYTYPE_HOST: c_uint = 1;
    pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;

    pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_uint = 1;
    pub const CU_MEM_LOCATION_TYPE_DEVICE: c_uint = 1;
    pub const CU_MEM_HANDLE_TYPE_NONE: c_uint = 0;
    pub const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: c_uint = 1;
    pub const CU_MEM_HANDLE_TYPE_FABRIC: c_uint = 8;
    pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: c_uint = 0;
    pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: c_uint = 1;
    pub const CU_MEM_ACCESS_FLAGS_PROT_NONE: c_uint = 0;
    pub const CU_MEM_ACCESS_FLAGS_PROT_READ: c_uint = 1;
    pub const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_uint = 3;

    pub const CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 1;

    pub const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
    pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1;
    pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;
    pub const CU_GET_PROC_ADDRESS_SUCCESS: i32 = 0;
    pub const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: i32 = 1;
    pub const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: i32 = 2;
}
