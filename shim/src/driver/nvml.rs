//! The shim's own calls to NVML, the management library beside the driver, for what the CUDA driver does not say: how
//! much memory a device has in use by every process (without a context), how much this
//! process uses as the driver accounts it (context included), and what other processes hold on
//! a device ([`others`], for the out-of-memory card).
//!
//! Loaded lazily, the first time it is needed (a context being created, a report being written),
//! never at load time, and never by [`others`], which a refused allocation calls; `None`
//! everywhere when `libnvidia-ml.so.1` is not there (the simulated driver has none unless a test
//! links it) or does not initialize. Devices are matched to CUDA ordinals by UUID, since NVML's
//! indices follow PCI order and ignore `CUDA_VISIBLE_DEVICES`; each ordinal's handle is kept
//! once found.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

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

/// The most ordinals whose NVML handle is kept.
const KEPT_HANDLES: usize = 64;

/// The NVML handle of each CUDA ordinal below [`KEPT_HANDLES`], once found (0 until then).
/// NVML's handles stay valid while it is initialized, and the shim never shuts it down.
static HANDLES: [AtomicUsize; KEPT_HANDLES] = [const { AtomicUsize::new(0) }; KEPT_HANDLES];

/// The NVML handle of CUDA device `ordinal`, by its UUID (kept once found).
fn device(n: &Nvml, ordinal: i32) -> Option<Device> {
    let slot = usize::try_from(ordinal).ok().and_then(|i| HANDLES.get(i));
    if let Some(kept) = slot.map(|s| s.load(Ordering::Acquire)).filter(|h| *h != 0) {
        return Some(kept as Device);
    }
    let text = format!("{}\0", super::device_uuid::uuid(ordinal)?);
    let mut d: Device = std::ptr::null_mut();
    // SAFETY: a NUL-terminated UUID string and a valid out-parameter.
    if unsafe { (n.by_uuid)(text.as_ptr().cast(), &mut d) } != 0 || d.is_null() {
        return None;
    }
    if let Some(s) = slot {
        s.store(d as usize, Ordering::Release);
    }
    Some(d)
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
    let mut infos = [ProcessInfo::default(); MAX_LISTED];
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

/// Whether NVML was loaded and initialized (never loads it).
pub fn loaded() -> bool {
    matches!(NVML.get(), Some(Some(_)))
}

/// Lists device `ordinal`'s processes once and forgets the list: NVML's first listing in a
/// process costs it far more than the next (0.27 ms against 15-21 µs on an H100), and the next
/// is an out-of-memory card's ([`others`]). Nothing when NVML is not loaded.
pub fn list_once(ordinal: i32) {
    let Some(Some(n)) = NVML.get() else {
        return;
    };
    let Some(d) = device(n, ordinal) else {
        return;
    };
    let mut infos = [ProcessInfo::default(); MAX_LISTED];
    let mut count: c_uint = infos.len() as c_uint;
    // SAFETY: `infos` holds `count` entries; `d` is a handle NVML gave for this device.
    unsafe { (n.processes)(d, &mut count, infos.as_mut_ptr()) };
}

/// `NVML_VALUE_NOT_AVAILABLE`: a process's `usedGpuMemory` where NVML cannot say it.
const NOT_AVAILABLE: u64 = u64::MAX;

/// The most processes [`process_used`] and [`others`] read from NVML's list of a device's.
const MAX_LISTED: usize = 64;

/// Why [`others`] could not say what other processes hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OthersUnknown {
    /// The shim had not loaded NVML before (it loads it when a context is made or a report is
    /// written, never for this question).
    NotLoaded,
    /// NVML is not there, or did not initialize.
    Unavailable,
    /// NVML did not answer for the device (unknown to it, more processes than read, an error).
    NoAnswer,
    /// NVML lists the device's processes but not this pid: its pids are not this process's
    /// (inside a container they may differ), so which are others cannot be told.
    NotListed,
    /// NVML lists other processes without their memory (`NVML_VALUE_NOT_AVAILABLE`).
    NoFigures,
}

impl OthersUnknown {
    /// Why, in words, for the report (`ooms[].other_processes_note`).
    pub fn note(self) -> String {
        match self {
            OthersUnknown::NotLoaded => {
                "NVML was not loaded before the refusal (cuguard loads it when a context is made)"
                    .into()
            }
            OthersUnknown::Unavailable => "NVML is not available".into(),
            OthersUnknown::NoAnswer => "NVML did not list the device's processes".into(),
            OthersUnknown::NotListed => format!(
                "NVML does not list this process (pid {}): inside a container its pids may differ",
                std::process::id()
            ),
            OthersUnknown::NoFigures => "NVML does not give other processes' memory".into(),
        }
    }
}

/// The other processes on CUDA device `ordinal` as NVML lists them, this process left out:
/// the `most` that hold the most, each made by `make(pid, bytes)`, most bytes first, and what
/// all of them hold.
///
/// For a refused allocation: NVML is used only if the shim already loaded and initialized it
/// (never loaded here), with one call (`nvmlDeviceGetComputeRunningProcesses`) on the handle
/// kept since the context was made, the list read into the stack; no lock is taken.
pub fn others<T>(
    ordinal: i32,
    most: usize,
    make: impl Fn(u32, u64) -> T,
) -> Result<(Vec<T>, u64), OthersUnknown> {
    let n = match NVML.get() {
        None => return Err(OthersUnknown::NotLoaded),
        Some(None) => return Err(OthersUnknown::Unavailable),
        Some(Some(n)) => n,
    };
    let d = device(n, ordinal).ok_or(OthersUnknown::NoAnswer)?;
    let mut infos = [ProcessInfo::default(); MAX_LISTED];
    let mut count: c_uint = infos.len() as c_uint;
    // SAFETY: `infos` holds `count` entries; `d` is a handle NVML gave for this device.
    if unsafe { (n.processes)(d, &mut count, infos.as_mut_ptr()) } != NVML_SUCCESS {
        return Err(OthersUnknown::NoAnswer);
    }
    let listed = &mut infos[..(count as usize).min(MAX_LISTED)];
    split_others(listed, std::process::id(), most, make)
}

/// [`others`] of NVML's `listed` processes, `me` being this process's pid: sorts `listed`,
/// most bytes first.
fn split_others<T>(
    listed: &mut [ProcessInfo],
    me: u32,
    most: usize,
    make: impl Fn(u32, u64) -> T,
) -> Result<(Vec<T>, u64), OthersUnknown> {
    if !listed.iter().any(|p| p.pid == me) {
        return Err(OthersUnknown::NotListed);
    }
    let others = || listed.iter().filter(|p| p.pid != me);
    if others().any(|p| p.used_gpu_memory == NOT_AVAILABLE) {
        return Err(OthersUnknown::NoFigures);
    }
    let total = others().fold(0u64, |sum, p| sum.saturating_add(p.used_gpu_memory));
    listed.sort_unstable_by_key(|p| (std::cmp::Reverse(p.used_gpu_memory), p.pid));
    let top = listed
        .iter()
        .filter(|p| p.pid != me)
        .take(most)
        .map(|p| make(p.pid, p.used_gpu_memory))
        .collect();
    Ok((top, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(pid: u32, bytes: u64) -> ProcessInfo {
        ProcessInfo {
            pid,
            used_gpu_memory: bytes,
            ..Default::default()
        }
    }

    #[test]
    fn others_leave_this_process_out_most_first() {
        let mut listed = [info(7, 100), info(9, 50), info(8, 300), info(10, 300)];
        let got = split_others(&mut listed, 7, 2, |pid, bytes| (pid, bytes));
        assert_eq!(got, Ok((vec![(8, 300), (10, 300)], 650)));
        // Only this process: none.
        let got = split_others(&mut [info(7, 100)], 7, 16, |pid, bytes| (pid, bytes));
        assert_eq!(got, Ok((vec![], 0)));
    }

    #[test]
    fn others_are_not_known_without_this_process_or_their_figures() {
        let f = |pid: u32, bytes: u64| (pid, bytes);
        let got = split_others(&mut [info(8, 300)], 7, 16, f);
        assert_eq!(got, Err(OthersUnknown::NotListed));
        let got = split_others(&mut [], 7, 16, f);
        assert_eq!(got, Err(OthersUnknown::NotListed));
        let got = split_others(&mut [info(7, 1), info(8, NOT_AVAILABLE)], 7, 16, f);
        assert_eq!(got, Err(OthersUnknown::NoFigures));
    }
}
