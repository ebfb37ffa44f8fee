//! CUDA driver types and constants as the shim passes them across the C ABI.
//!
//! Handles and pointers come from cudarc's bindings. Result codes are kept as plain `u32`: the
//! driver may return codes newer than any Rust enum knows, and a foreign value in a Rust enum is
//! undefined behaviour, so no `CUresult` enum ever crosses the boundary here.

#![allow(non_camel_case_types, dead_code)]

use std::ffi::c_void;

pub use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUmemGenericAllocationHandle, CUmemoryPool, CUstream,
};

/// A driver result code, passed through untouched.
pub type CUresult = u32;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_CONTEXT_IS_DESTROYED: CUresult = 709;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// `CUmemAllocationProp`, as far as the shim reads it (the device it is made on). Only the
/// leading fields are declared; the shim never writes or copies the struct.
#[repr(C)]
pub struct MemAllocationPropHead {
    pub type_: u32,
    pub requested_handle_types: u32,
    pub location_type: u32,
    pub location_id: i32,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const CU_MEM_LOCATION_TYPE_DEVICE: u32 = 1;

/// `CUmemLocation_st` passed by value (to the generated `submit` rows), with its fields reduced
/// to their C ABI.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ByCUmemLocation_st {
    pub type_: u32,
    pub id: i32,
}

/// Opaque pointer for parameters the shim passes through without reading.
pub type Opaque = *const c_void;
