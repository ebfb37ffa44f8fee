//! The NVML family's C entry points: a simulated NVML (`libnvidia-ml.so.1`), beside the
//! simulated driver and sharing its state: the same devices, the same memory figures, the same
//! UUIDs. Only what cuguard and the NVML readers it serves (pynvml, dask-cuda) need:
//! `nvmlInit_v2`, `nvmlInit`, `nvmlShutdown`, `nvmlDeviceGetCount_v2`,
//! `nvmlDeviceGetHandleByIndex_v2`, `nvmlDeviceGetHandleByUUID`, `nvmlDeviceGetUUID`,
//! `nvmlDeviceGetMemoryInfo`, `nvmlDeviceGetMemoryInfo_v2` and
//! `nvmlDeviceGetComputeRunningProcesses_v3`, with NVML's own return codes.
//!
//! The symbols live in the driver library itself, so a program finds them only where it looks
//! for them there: through `libcuda.so.1`, or through a `libnvidia-ml.so.1` that a test puts on
//! the library path as a link to this same file. glibc then recognizes the file it has already
//! loaded (same device and inode) and hands back the loaded driver, so the two names share one
//! state. Without such a link, `dlopen("libnvidia-ml.so.1")` fails as it does on a machine
//! without NVML.
//!
//! - Devices: index `i` is the driver's ordinal `i` (NVML's order ignores
//!   `CUDA_VISIBLE_DEVICES`; so does the simulator); UUIDs are `cuDeviceGetUuid`'s bytes written
//!   as `nvidia-smi` writes them (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
//! - Memory: total is `CUGUARD_SIM_MEMORY`; used is what the driver counts as taken by this
//!   process (0 before `cuInit`) and what the other processes of `CUGUARD_SIM_OTHERS` hold (from
//!   the start), together what `cuMemGetInfo_v2` subtracts; free is the rest; reserved is 0.
//! - Processes: this process, using the bytes the driver counts as taken by it (the others'
//!   not included), once it has any or a live context on the device; then the other processes
//!   of `CUGUARD_SIM_OTHERS` (`PID:SIZE,…`), in the order given, each with its size, on every
//!   device.
//! - `nvmlInit_v2` reads the simulator's settings (as `cuInit` does, see `config.rs`), without
//!   initializing the driver; init and shutdown are counted, and every other call fails with
//!   `NVML_ERROR_UNINITIALIZED` while the count is 0. `CUGUARD_SIM_FAIL` names these entries
//!   too; its code is then an NVML return code.
//!
//! Device handles are opaque numbers that no program dereferences.

use std::ffi::{CStr, c_char, c_uint, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use crate::config;
use crate::model::device::uuid_text;
use crate::state;

/// `nvmlReturn_t`.
pub type NvmlReturn = c_uint;
/// `nvmlDevice_t`.
pub type NvmlDevice = *mut c_void;

pub const NVML_SUCCESS: NvmlReturn = 0;
pub const NVML_ERROR_UNINITIALIZED: NvmlReturn = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub const NVML_ERROR_NOT_FOUND: NvmlReturn = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: NvmlReturn = 25;
pub const NVML_ERROR_UNKNOWN: NvmlReturn = 999;

/// `nvmlMemory_t`.
#[repr(C)]
pub struct Memory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct MemoryV2 {
    pub version: c_uint,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2`: the struct's size and version 2 in the top byte.
pub const MEMORY_V2: c_uint = (std::mem::size_of::<MemoryV2>() as c_uint) | (2 << 24);

/// `nvmlProcessInfo_t` (v2 and v3 alike).
#[repr(C)]
pub struct ProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
const UUID_BUFFER: usize = 96;

/// The first device handle; device `i` is `HANDLE_BASE + 16 * i`.
const HANDLE_BASE: usize = 0x6e00_0000_0000;

/// How many `nvmlInit` calls have not been matched by `nvmlShutdown`.
static INITS: Mutex<u32> = Mutex::new(0);

/// Runs an NVML entry: an injected failure if one is due, else `body`, with a panic answered
/// `NVML_ERROR_UNKNOWN`.
fn guard(entry: &'static str, body: impl FnOnce() -> NvmlReturn) -> NvmlReturn {
    if let Some(code) = config::injected_failure(entry) {
        return code as NvmlReturn;
    }
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(NVML_ERROR_UNKNOWN)
}

/// Runs `body` only while NVML is initialized.
fn initialized(body: impl FnOnce(u32) -> NvmlReturn) -> NvmlReturn {
    if *INITS.lock().unwrap_or_else(|p| p.into_inner()) == 0 {
        return NVML_ERROR_UNINITIALIZED;
    }
    body(config::load().devices)
}

/// The ordinal of a device handle, if it names one of `count` devices.
fn ordinal(device: NvmlDevice, count: u32) -> Option<i32> {
    let offset = (device as usize).checked_sub(HANDLE_BASE)?;
    (offset % 16 == 0 && offset / 16 < count as usize).then_some((offset / 16) as i32)
}

fn handle(ordinal: u32) -> NvmlDevice {
    (HANDLE_BASE + 16 * ordinal as usize) as NvmlDevice
}

/// `(total, used)` of device `ordinal`: the configured memory, and what is taken: by this
/// process as the driver counts it (nothing before `cuInit`), and by the other processes.
fn memory(ordinal: i32) -> (u64, u64) {
    let cfg = config::load();
    let total = cfg.memory;
    let used = own_used(ordinal).saturating_add(cfg.others_bytes());
    (total, used.min(total))
}

/// What the driver counts as taken by this process on device `ordinal` (nothing before
/// `cuInit`).
fn own_used(ordinal: i32) -> u64 {
    state::driver()
        .ok()
        .and_then(|d| d.lock().device(ordinal).ok().map(|dev| dev.mem.used))
        .unwrap_or(0)
}

/// The processes NVML lists on a device: this one (`pid`, its `used` bytes) when `listed`,
/// then each of `others`.
fn processes(
    pid: u32,
    used: u64,
    listed: bool,
    others: &[(u32, u64)],
) -> impl Iterator<Item = ProcessInfo> + '_ {
    listed
        .then_some((pid, used))
        .into_iter()
        .chain(others.iter().copied())
        .map(|(pid, used_gpu_memory)| ProcessInfo {
            pid,
            used_gpu_memory,
            gpu_instance_id: u32::MAX,
            compute_instance_id: u32::MAX,
        })
}

/// `nvmlInit_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    // Loaded before the guard so that `CUGUARD_SIM_FAIL` can already fail this call.
    if catch_unwind(config::load).is_err() {
        return NVML_ERROR_UNKNOWN;
    }
    guard("nvmlInit_v2", init)
}

/// `nvmlInit` (the first ABI, the same here).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> NvmlReturn {
    if catch_unwind(config::load).is_err() {
        return NVML_ERROR_UNKNOWN;
    }
    guard("nvmlInit", init)
}

fn init() -> NvmlReturn {
    *INITS.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    NVML_SUCCESS
}

/// `nvmlShutdown`: undoes one init.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    guard("nvmlShutdown", || {
        let mut n = INITS.lock().unwrap_or_else(|p| p.into_inner());
        if *n == 0 {
            return NVML_ERROR_UNINITIALIZED;
        }
        *n -= 1;
        NVML_SUCCESS
    })
}

/// `nvmlDeviceGetCount_v2`.
///
/// # Safety
/// `count` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    guard("nvmlDeviceGetCount_v2", || {
        initialized(|n| {
            if count.is_null() {
                return NVML_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: non-null, and writable by the caller's contract.
            unsafe { count.write(n) };
            NVML_SUCCESS
        })
    })
}

/// `nvmlDeviceGetHandleByIndex_v2`.
///
/// # Safety
/// `device` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard("nvmlDeviceGetHandleByIndex_v2", || {
        initialized(|n| {
            if device.is_null() || index >= n {
                return NVML_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: non-null, and writable by the caller's contract.
            unsafe { device.write(handle(index)) };
            NVML_SUCCESS
        })
    })
}

/// `nvmlDeviceGetHandleByUUID`.
///
/// # Safety
/// `uuid` is NULL or a NUL-terminated string; `device` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    guard("nvmlDeviceGetHandleByUUID", || {
        initialized(|n| {
            if uuid.is_null() || device.is_null() {
                return NVML_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: non-null and NUL-terminated by the caller's contract.
            let wanted = unsafe { CStr::from_ptr(uuid) }.to_bytes();
            match (0..n).find(|&i| uuid_text(i as i32).as_bytes() == wanted) {
                Some(i) => {
                    // SAFETY: non-null, and writable by the caller's contract.
                    unsafe { device.write(handle(i)) };
                    NVML_SUCCESS
                }
                None => NVML_ERROR_NOT_FOUND,
            }
        })
    })
}

/// `nvmlDeviceGetUUID`: the UUID and a NUL, or `NVML_ERROR_INSUFFICIENT_SIZE` when `length`
/// cannot hold them.
///
/// # Safety
/// `uuid` is NULL or writable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    guard("nvmlDeviceGetUUID", || {
        initialized(|n| {
            let Some(d) = ordinal(device, n) else {
                return NVML_ERROR_INVALID_ARGUMENT;
            };
            if uuid.is_null() {
                return NVML_ERROR_INVALID_ARGUMENT;
            }
            let text = uuid_text(d);
            if (length as usize) < (text.len() + 1).min(UUID_BUFFER) {
                return NVML_ERROR_INSUFFICIENT_SIZE;
            }
            // SAFETY: writable for `length` > text.len() bytes by the caller's contract.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), uuid.cast::<u8>(), text.len());
                *uuid.add(text.len()) = 0;
            }
            NVML_SUCCESS
        })
    })
}

/// `nvmlDeviceGetMemoryInfo`.
///
/// # Safety
/// `memory` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: NvmlDevice,
    memory: *mut Memory,
) -> NvmlReturn {
    guard("nvmlDeviceGetMemoryInfo", || {
        initialized(|n| {
            let (Some(d), false) = (ordinal(device, n), memory.is_null()) else {
                return NVML_ERROR_INVALID_ARGUMENT;
            };
            let (total, used) = self::memory(d);
            // SAFETY: non-null, and writable by the caller's contract.
            unsafe {
                memory.write(Memory {
                    total,
                    free: total - used,
                    used,
                })
            };
            NVML_SUCCESS
        })
    })
}

/// `nvmlDeviceGetMemoryInfo_v2`: the struct's `version` must be `nvmlMemory_v2`.
///
/// # Safety
/// `memory` is NULL or points to a writable `nvmlMemory_v2_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut MemoryV2,
) -> NvmlReturn {
    guard("nvmlDeviceGetMemoryInfo_v2", || {
        initialized(|n| {
            let (Some(d), false) = (ordinal(device, n), memory.is_null()) else {
                return NVML_ERROR_INVALID_ARGUMENT;
            };
            // SAFETY: non-null, and a readable struct by the caller's contract.
            if unsafe { (*memory).version } != MEMORY_V2 {
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
            }
            let (total, used) = self::memory(d);
            // SAFETY: non-null, and writable by the caller's contract.
            unsafe {
                memory.write(MemoryV2 {
                    version: MEMORY_V2,
                    total,
                    reserved: 0,
                    free: total - used,
                    used,
                })
            };
            NVML_SUCCESS
        })
    })
}

/// `nvmlDeviceGetComputeRunningProcesses_v3`: this process, if it uses the device, and the other
/// processes of `CUGUARD_SIM_OTHERS`; with too small a buffer, `NVML_ERROR_INSUFFICIENT_SIZE`
/// and the count needed.
///
/// # Safety
/// `count` is NULL or readable and writable; `infos` is NULL or writable for `*count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    guard("nvmlDeviceGetComputeRunningProcesses_v3", || {
        initialized(|n| {
            let (Some(d), false) = (ordinal(device, n), count.is_null()) else {
                return NVML_ERROR_INVALID_ARGUMENT;
            };
            let used = own_used(d);
            let listed = used > 0 || has_context(d);
            let others = &config::load().others;
            let needed =
                c_uint::try_from(usize::from(listed) + others.len()).unwrap_or(c_uint::MAX);
            // SAFETY: non-null, and readable and writable by the caller's contract.
            let room = unsafe { count.read() };
            // SAFETY: as above.
            unsafe { count.write(needed) };
            if room < needed {
                return NVML_ERROR_INSUFFICIENT_SIZE;
            }
            if needed > 0 && infos.is_null() {
                return NVML_ERROR_INVALID_ARGUMENT;
            }
            for (i, info) in processes(std::process::id(), used, listed, others).enumerate() {
                // SAFETY: writable for `room` >= `needed` entries by the caller's contract, and
                // `i` < `needed`.
                unsafe { infos.add(i).write(info) };
            }
            NVML_SUCCESS
        })
    })
}

/// Whether the process has a live context on device `ordinal`.
fn has_context(ordinal: i32) -> bool {
    state::driver().is_ok_and(|d| {
        d.lock()
            .contexts
            .values()
            .any(|c| c.alive && c.device == ordinal)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_version_and_handles() {
        assert_eq!(MEMORY_V2, 0x0200_0028);
        assert_eq!(std::mem::size_of::<ProcessInfo>(), 24);
        assert_eq!(ordinal(handle(3), 4), Some(3));
        assert_eq!(ordinal(handle(4), 4), None);
        assert_eq!(ordinal(std::ptr::null_mut(), 4), None);
        assert_eq!(ordinal((HANDLE_BASE + 8) as NvmlDevice, 4), None);
    }

    #[test]
    fn other_processes_are_listed_after_this_one() {
        let others = [(4242, 600 << 20), (17, 1 << 30)];
        let rows: Vec<(u32, u64)> = processes(99, 64 << 20, true, &others)
            .map(|p| (p.pid, p.used_gpu_memory))
            .collect();
        assert_eq!(rows, [(99, 64 << 20), (4242, 600 << 20), (17, 1 << 30)]);
        // Before this process uses the device: the others alone.
        let rows: Vec<u32> = processes(99, 0, false, &others).map(|p| p.pid).collect();
        assert_eq!(rows, [4242, 17]);
        assert_eq!(processes(99, 0, false, &[]).count(), 0);
    }
}
