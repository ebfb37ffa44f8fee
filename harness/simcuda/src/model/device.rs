//! The device family's model: a simulated device (its memory accounting, primary context and
//! pools), its name, attributes and UUID.
//!
//! Every simulated device is an H200 (compute capability 9.0) with the memory size the settings
//! give; its attributes are those of the real board where they matter to programs that manage
//! memory (memory pools, VMM, unified addressing, alignments).

use std::ffi::{c_char, c_int};

use crate::errors::Fault;
use crate::ffi::CUuuid;
use crate::model::memory::DeviceMem;

/// One simulated device.
pub struct Device {
    pub mem: DeviceMem,
    /// Handle of the device's primary context (the same handle for every activation).
    pub primary: usize,
    /// The device's default memory pool.
    pub default_pool: usize,
    /// The pool `cuMemAllocAsync` draws from (`cuDeviceSetMemPool`).
    pub current_pool: usize,
}

/// The name every simulated device reports.
pub const DEVICE_NAME: &str = "NVIDIA H200";

/// The attributes of an H200 (`CUdevice_attribute` values of CUDA 13.0). Attributes below
/// [`ATTRIBUTE_MAX`] and not listed are 0.
#[rustfmt::skip]
const ATTRIBUTES: &[(c_int, c_int)] = &[
    (1, 1024),          // MAX_THREADS_PER_BLOCK
    (2, 1024), (3, 1024), (4, 64),                // MAX_BLOCK_DIM_X/Y/Z
    (5, 2147483647), (6, 65535), (7, 65535),       // MAX_GRID_DIM_X/Y/Z
    (8, 49152),         // MAX_SHARED_MEMORY_PER_BLOCK
    (9, 65536),         // TOTAL_CONSTANT_MEMORY
    (10, 32),           // WARP_SIZE
    (11, 2147483647),   // MAX_PITCH
    (12, 65536),        // MAX_REGISTERS_PER_BLOCK
    (13, 1980000),      // CLOCK_RATE (kHz)
    (14, 512),          // TEXTURE_ALIGNMENT
    (15, 1),            // GPU_OVERLAP
    (16, 132),          // MULTIPROCESSOR_COUNT
    (19, 1),            // CAN_MAP_HOST_MEMORY
    (21, 131072), (22, 131072), (23, 65536),      // MAXIMUM_TEXTURE1D_WIDTH, 2D_WIDTH/HEIGHT
    (24, 16384), (25, 16384), (26, 16384),        // MAXIMUM_TEXTURE3D_*
    (30, 512),          // SURFACE_ALIGNMENT
    (31, 1),            // CONCURRENT_KERNELS
    (32, 1),            // ECC_ENABLED
    (36, 2619000),      // MEMORY_CLOCK_RATE (kHz)
    (37, 6144),         // GLOBAL_MEMORY_BUS_WIDTH
    (38, 52428800),     // L2_CACHE_SIZE
    (39, 2048),         // MAX_THREADS_PER_MULTIPROCESSOR
    (40, 5),            // ASYNC_ENGINE_COUNT
    (41, 1),            // UNIFIED_ADDRESSING
    (51, 32),           // TEXTURE_PITCH_ALIGNMENT
    (75, 9),            // COMPUTE_CAPABILITY_MAJOR
    (76, 0),            // COMPUTE_CAPABILITY_MINOR
    (78, 1),            // STREAM_PRIORITIES_SUPPORTED
    (79, 1), (80, 1),   // GLOBAL_L1_CACHE_SUPPORTED, LOCAL_L1_CACHE_SUPPORTED
    (81, 233472),       // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    (82, 65536),        // MAX_REGISTERS_PER_MULTIPROCESSOR
    (83, 1),            // MANAGED_MEMORY
    (87, 2),            // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
    (89, 1),            // CONCURRENT_MANAGED_ACCESS
    (90, 1),            // COMPUTE_PREEMPTION_SUPPORTED
    (91, 1),            // CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM
    (95, 1), (96, 1),   // COOPERATIVE_LAUNCH, COOPERATIVE_MULTI_DEVICE_LAUNCH
    (97, 232448),       // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    (99, 1),            // HOST_REGISTER_SUPPORTED
    (102, 1),           // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
    (103, 1),           // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
    (106, 32),          // MAX_BLOCKS_PER_MULTIPROCESSOR
    (107, 1),           // GENERIC_COMPRESSION_SUPPORTED
    (108, 32505856),    // MAX_PERSISTING_L2_CACHE_SIZE
    (109, 134213632),   // MAX_ACCESS_POLICY_WINDOW_SIZE
    (110, 1),           // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
    (111, 1024),        // RESERVED_SHARED_MEMORY_PER_BLOCK
    (112, 1), (113, 1), (114, 1),                 // SPARSE_CUDA_ARRAY, READ_ONLY_HOST_REGISTER, TIMELINE_SEMAPHORE_INTEROP
    (115, 1),           // MEMORY_POOLS_SUPPORTED
    (116, 1), (117, 1), // GPU_DIRECT_RDMA_SUPPORTED, GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS
    (119, 1),           // MEMPOOL_SUPPORTED_HANDLE_TYPES (POSIX file descriptor)
    (120, 1), (121, 1), (122, 1), (123, 1), (124, 1), (125, 1), // CLUSTER_LAUNCH .. IPC_EVENT_SUPPORTED
    (126, 4),           // MEM_SYNC_DOMAIN_COUNT
    (127, 1),           // TENSOR_MAP_ACCESS_SUPPORTED
    (129, 1),           // UNIFIED_FUNCTION_POINTERS
    (131, -1),          // NUMA_ID
    (132, 1),           // MULTICAST_SUPPORTED
    (134, -1),          // HOST_NUMA_ID
    (139, 0x233310de),  // GPU_PCI_DEVICE_ID
];

/// `CU_DEVICE_ATTRIBUTE_MAX` of CUDA 13.0.
const ATTRIBUTE_MAX: c_int = 148;
const PCI_BUS_ID: c_int = 33;
const PCI_DEVICE_ID: c_int = 34;
const MULTI_GPU_BOARD_GROUP_ID: c_int = 85;

/// The value of attribute `attrib` for device `dev`.
pub fn attribute(attrib: c_int, dev: i32) -> Result<c_int, Fault> {
    if attrib <= 0 || attrib >= ATTRIBUTE_MAX {
        return Err(Fault::BadAttribute);
    }
    Ok(match attrib {
        PCI_BUS_ID => 0x18 + 0x10 * dev,
        PCI_DEVICE_ID => 0,
        MULTI_GPU_BOARD_GROUP_ID => dev,
        _ => ATTRIBUTES
            .iter()
            .find(|(a, _)| *a == attrib)
            .map_or(0, |&(_, v)| v),
    })
}

/// The UUID of device `dev`: the bytes of "cuguard-sim" and the ordinal.
pub fn uuid(dev: i32) -> CUuuid {
    let mut bytes = [0 as c_char; 16];
    for (b, &c) in bytes.iter_mut().zip(b"cuguard-sim".iter()) {
        *b = c as c_char;
    }
    bytes[15] = dev as c_char;
    CUuuid { bytes }
}

/// Device `ordinal`'s UUID as NVML (and `nvidia-smi`) writes it.
pub fn uuid_text(ordinal: i32) -> String {
    let CUuuid { bytes } = uuid(ordinal);
    let hex: String = bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_programs_rely_on() {
        assert_eq!(attribute(75, 0), Ok(9));
        assert_eq!(attribute(76, 0), Ok(0));
        assert_eq!(attribute(115, 0), Ok(1));
        assert_eq!(attribute(41, 0), Ok(1));
        assert_eq!(attribute(102, 0), Ok(1));
        assert_eq!(attribute(51, 0), Ok(32));
        assert_eq!(attribute(0, 0), Err(Fault::BadAttribute));
        assert_eq!(attribute(ATTRIBUTE_MAX, 0), Err(Fault::BadAttribute));
        assert_eq!(attribute(147, 0), Ok(0));
    }

    #[test]
    fn attribute_table_is_sorted_and_in_range() {
        for w in ATTRIBUTES.windows(2) {
            assert!(w[0].0 < w[1].0);
        }
        assert!(ATTRIBUTES.iter().all(|&(a, _)| a > 0 && a < ATTRIBUTE_MAX));
    }

    #[test]
    fn uuids_as_nvidia_smi_prints_them() {
        assert_eq!(uuid_text(1), "GPU-63756775-6172-642d-7369-6d0000000001");
    }
}
