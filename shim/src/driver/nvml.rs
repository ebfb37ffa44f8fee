//! The shim's own calls to NVML, the management library beside the driver, for what the CUDA driver does not say: how
//! much memory a device has in use by every process (without a context), and how much this
//! process uses as the driver accounts it (context included).
//!
//! Loaded lazily, the first time it is needed (a context being created, a report being written),
//! never at load time; `None` everywhere when `libnvidia-ml.so.1` is not there (the simulated
//! driver has none) or does not initialize. Devices are matched to CUDA ordinals by UUID, since
//! NVML's indices follow PCI order and ignore `CUDA_VISIBLE_DEVICES`.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// `nvmlReturn_t`.
pub type NvmlReturn = c_int;
/// `nvmlDevice_t`.
pub type Device = *mut c_void;

/// `NVML_SUCCESS`.
pub const NVML_SUCCESS: NvmlReturn = 0;
/// `NVML_ERROR_UNINITIALIZED`: what every NVML call answers before `nvmlInit`.
pub const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
pub struct Memory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t` (its `version` is `nvmlMemory_v2`, which the caller sets).
#[repr(C)]
#[derive(Default)]
pub struct MemoryV2 {
    pub version: u32,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

type ByUuidFn = unsafe extern "C" fn(*const c_char, *mut Device) -> NvmlReturn;
type MemoryFn = unsafe extern "C" fn(Device, *mut Memory) -> NvmlReturn;
type ProcessesFn = unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> NvmlReturn;

struct Nvml {
    by_uuid: ByUuidFn,
    memory: MemoryFn,
    processes: ProcessesFn,
}

// SAFETY: the struct holds only function pointers into a library that is never unloaded.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}

static NVML: OnceLock<Option<Nvml>> = OnceLock::new();

fn nvml() -> Option<&'static Nvml> {
    NVML.get_or_init(load).as_ref()
}

fn load() -> Option<Nvml> {
    let dlsym = super::loader::real_dlsym()?;
    // SAFETY: dlopen of the system's NVML by its soname; its constructors are the library's own.
    let h = unsafe {
        libc::dlopen(
            c"libnvidia-ml.so.1".as_ptr(),
            libc::RTLD_NOW | libc::RTLD_LOCAL,
        )
    };
    if h.is_null() {
        return None;
    }
    let sym = |name: &std::ffi::CStr| {
        // SAFETY: h is a live handle; name is NUL-terminated.
        let p = unsafe { dlsym(h, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let init = sym(c"nvmlInit_v2")?;
    let by_uuid = sym(c"nvmlDeviceGetHandleByUUID")?;
    let memory = sym(c"nvmlDeviceGetMemoryInfo")?;
    let processes = sym(c"nvmlDeviceGetComputeRunningProcesses_v3")
        .or_else(|| sym(c"nvmlDeviceGetComputeRunningProcesses_v2"))?;
    // SAFETY: each symbol is NVML's export of that name, with the C signature NVML documents.
    unsafe {
        let init: unsafe extern "C" fn() -> NvmlReturn = std::mem::transmute(init);
        if init() != 0 {
            return None;
        }
        Some(Nvml {
            by_uuid: std::mem::transmute::<*mut c_void, ByUuidFn>(by_uuid),
            memory: std::mem::transmute::<*mut c_void, MemoryFn>(memory),
            processes: std::mem::transmute::<*mut c_void, ProcessesFn>(processes),
        })
    }
}

/// The NVML handle of CUDA device `ordinal`, by its UUID.
fn device(n: &Nvml, ordinal: i32) -> Option<Device> {
    let text = format!("{}\0", super::device_uuid::uuid(ordinal)?);
    let mut d: Device = std::ptr::null_mut();
    // SAFETY: a NUL-terminated UUID string and a valid out-parameter.
    (unsafe { (n.by_uuid)(text.as_ptr().cast(), &mut d) } == 0).then_some(d)
}

/// Memory in use on device `ordinal` by every process (bytes), as NVML says; `None` without
/// NVML.
pub fn device_used(ordinal: i32) -> Option<u64> {
    let n = nvml()?;
    let d = device(n, ordinal)?;
    let mut m = Memory::default();
    // SAFETY: a valid device handle and out-parameter.
    (unsafe { (n.memory)(d, &mut m) } == 0).then_some(m.used)
}

/// What NVML says of this process on device `ordinal`.
pub enum ProcessUsage {
    /// NVML could not be asked (not present, not initialized, device unknown).
    Unavailable,
    /// NVML lists processes on the device, but not this pid (inside a container it may see the
    /// host's pids).
    NotListed,
    /// This process uses this many bytes.
    Bytes(u64),
}

/// This process's memory on device `ordinal`, as NVML accounts it.
pub fn process_used(ordinal: i32) -> ProcessUsage {
    let Some(n) = nvml() else {
        return ProcessUsage::Unavailable;
    };
    let Some(d) = device(n, ordinal) else {
        return ProcessUsage::Unavailable;
    };
    let mut infos = [ProcessInfo::default(); 64];
    let mut count: c_uint = infos.len() as c_uint;
    // SAFETY: `infos` holds `count` entries.
    if unsafe { (n.processes)(d, &mut count, infos.as_mut_ptr()) } != 0 {
        return ProcessUsage::Unavailable;
    }
    let me = std::process::id();
    infos[..(count as usize).min(infos.len())]
        .iter()
        .find(|p| p.pid == me)
        .map_or(ProcessUsage::NotListed, |p| {
            ProcessUsage::Bytes(p.used_gpu_memory)
        })
}
