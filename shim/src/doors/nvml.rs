//! The doors to NVML's memory-info entries, both by which a program reaches NVML: the shim's exports
//! `nvmlDeviceGetMemoryInfo` and `nvmlDeviceGetMemoryInfo_v2` (programs linked with
//! `-lnvidia-ml`, and `RTLD_DEFAULT` lookups), and [`on_lookup`] for `dlsym` on an NVML handle
//! (pynvml: `CDLL("libnvidia-ml.so.1")`, then attribute lookups).
//!
//! Under a limit shown to the program (`CUGUARD_LIMIT` or `CUGUARD_POOL_LIMIT`, unless
//! `CUGUARD_LIMIT_VIRTUAL=0`; [`crate::hooks::shown`]), a lookup on a handle gets the export in
//! place of NVML's entry, and the export answers through [`crate::hooks::nvml`]; otherwise the lookup gets NVML's own entry, and the export forwards.
//! The real entries are the ones the program's lookups found, else NVML's after the shim
//! ([`crate::driver::nvml_entries`]); with no NVML at all, the exports answer
//! `NVML_ERROR_UNINITIALIZED`, as NVML does before `nvmlInit`.

use std::ffi::c_void;

use crate::driver::nvml::{Device, Memory, MemoryV2, NVML_ERROR_UNINITIALIZED, NvmlReturn};
use crate::driver::nvml_entries::{self, NvmlEntry};

/// The shim's `nvmlDeviceGetMemoryInfo`.
///
/// # Safety
/// The caller's contract is NVML's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: Device,
    memory: *mut Memory,
) -> NvmlReturn {
    let Some(real) = crate::guard::shield(None, nvml_entries::memory_info) else {
        return NVML_ERROR_UNINITIALIZED;
    };
    // SAFETY: the caller's own arguments, under NVML's contract.
    unsafe { crate::hooks::nvml::memory_info(real, device, memory) }
}

/// The shim's `nvmlDeviceGetMemoryInfo_v2`.
///
/// # Safety
/// The caller's contract is NVML's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: Device,
    memory: *mut MemoryV2,
) -> NvmlReturn {
    let Some(real) = crate::guard::shield(None, nvml_entries::memory_info_v2) else {
        return NVML_ERROR_UNINITIALIZED;
    };
    // SAFETY: the caller's own arguments, under NVML's contract.
    unsafe { crate::hooks::nvml::memory_info_v2(real, device, memory) }
}

/// The shim's export standing in for `entry`.
fn own(entry: NvmlEntry) -> *mut c_void {
    match entry {
        NvmlEntry::MemoryInfo => nvmlDeviceGetMemoryInfo as *mut c_void,
        NvmlEntry::MemoryInfoV2 => nvmlDeviceGetMemoryInfo_v2 as *mut c_void,
    }
}

/// What `dlsym(handle, name)` gives for an `nvml…` name whose real lookup found `found`
/// (non-NULL).
pub fn on_lookup(handle: *mut c_void, name: &[u8], found: *mut c_void) -> *mut c_void {
    let Some(entry) = NvmlEntry::named(name) else {
        return found;
    };
    if found == own(entry) {
        // The lookup found the shim's own export (RTLD_DEFAULT finds it first). Without the
        // shim it would have found NVML's entry, or nothing if NVML is not there: keep that.
        return if nvml_entries::is_known(entry) {
            found
        } else {
            std::ptr::null_mut()
        };
    }
    nvml_entries::record(handle, entry, found);
    if crate::hooks::shown::on() {
        own(entry)
    } else {
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No NVML in this process: the exports answer as NVML does before `nvmlInit`.
    #[test]
    fn without_nvml_the_exports_answer_uninitialized() {
        let mut m = Memory::default();
        let mut m2 = MemoryV2::default();
        // SAFETY: valid out-parameters; no NVML is loaded, so nothing reads the device handle.
        unsafe {
            assert_eq!(
                nvmlDeviceGetMemoryInfo(std::ptr::null_mut(), &mut m),
                NVML_ERROR_UNINITIALIZED
            );
            assert_eq!(
                nvmlDeviceGetMemoryInfo_v2(std::ptr::null_mut(), &mut m2),
                NVML_ERROR_UNINITIALIZED
            );
        }
    }
}
