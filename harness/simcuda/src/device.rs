//! The driver and its devices: `cuInit`, `cuDriverGetVersion` and the `cuDevice*` queries.
//!
//! Every simulated device is an H200 (compute capability 9.0) with the memory size the settings
//! give; its attributes are those of the real board where they matter to programs that manage
//! memory (memory pools, VMM, unified addressing, alignments).

use std::ffi::{c_char, c_int, c_uint};

use crate::config;
use crate::context;
use crate::errors::Fault;
use crate::ffi::{CUdevice, CUresult, CUuuid, guard, put};
use crate::memory::DeviceMem;
use crate::pool;
use crate::state::{self, State};

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

/// Builds the devices, their primary contexts (inactive) and default pools.
fn build_devices(st: &mut State, count: u32, memory: u64) {
    for ordinal in 0..count as i32 {
        let primary = context::new_primary(st, ordinal);
        let default_pool = pool::new_default(st, ordinal);
        st.devices.push(Device {
            mem: DeviceMem::new(memory),
            primary,
            default_pool,
            current_pool: default_pool,
        });
    }
}

/// `cuInit`: reads the settings (the first time) and sets up the devices.
#[unsafe(no_mangle)]
pub extern "C" fn cuInit(Flags: c_uint) -> CUresult {
    // Loaded before the guard so that `CUGUARD_SIM_FAIL` can already fail this call.
    let Ok(cfg) = std::panic::catch_unwind(config::load) else {
        return Fault::Internal.code();
    };
    guard("cuInit", || {
        if Flags != 0 {
            return Err(Fault::BadFlags);
        }
        if cfg.devices == 0 {
            return Err(Fault::NoDevice);
        }
        state::init(|st| build_devices(st, cfg.devices, cfg.memory));
        Ok(())
    })
}

/// `cuDriverGetVersion`: `CUGUARD_SIM_VERSION` (13000 unless set). Works before `cuInit`, when it
/// reads that one variable without loading the other settings.
///
/// # Safety
/// `driverVersion` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(driverVersion: *mut c_int) -> CUresult {
    guard("cuDriverGetVersion", || {
        let version = config::get().map_or_else(config::version_before_init, |c| c.version);
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(driverVersion, version) }
    })
}

/// `cuDeviceGet`.
///
/// # Safety
/// `device` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    guard("cuDeviceGet", || {
        let drv = state::driver()?;
        drv.lock().device(ordinal)?;
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(device, ordinal) }
    })
}

/// `cuDeviceGetCount`.
///
/// # Safety
/// `count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    guard("cuDeviceGetCount", || {
        let drv = state::driver()?;
        let n = drv.lock().devices.len() as c_int;
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(count, n) }
    })
}

/// `cuDeviceGetName`: writes at most `len - 1` characters and a NUL.
///
/// # Safety
/// `name` is NULL or writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    guard("cuDeviceGetName", || {
        let drv = state::driver()?;
        drv.lock().device(dev)?;
        if name.is_null() || len <= 0 {
            return Err(Fault::BadArgument);
        }
        let bytes = DEVICE_NAME.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: `name` is writable for `len` > n bytes by the caller's contract.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
            *name.add(n) = 0;
        }
        Ok(())
    })
}

/// `cuDeviceTotalMem_v2`: the configured memory size.
///
/// # Safety
/// `bytes` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    guard("cuDeviceTotalMem_v2", || {
        let drv = state::driver()?;
        let total = drv.lock().device(dev)?.mem.limit;
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(bytes, total as usize) }
    })
}

/// `cuDeviceGetAttribute`.
///
/// # Safety
/// `pi` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_int,
    dev: CUdevice,
) -> CUresult {
    guard("cuDeviceGetAttribute", || {
        let drv = state::driver()?;
        drv.lock().device(dev)?;
        let value = attribute(attrib, dev)?;
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(pi, value) }
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

fn get_uuid(entry: &'static str, out: *mut CUuuid, dev: CUdevice) -> CUresult {
    guard(entry, || {
        let drv = state::driver()?;
        drv.lock().device(dev)?;
        // SAFETY: NULL or writable, as the exported entries require of their callers.
        unsafe { put(out, uuid(dev)) }
    })
}

/// `cuDeviceGetUuid`.
///
/// # Safety
/// `uuid` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    get_uuid("cuDeviceGetUuid", uuid, dev)
}

/// `cuDeviceGetUuid_v2`.
///
/// # Safety
/// `uuid` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    get_uuid("cuDeviceGetUuid_v2", uuid, dev)
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
}
