//! The device family's C entry points: `cuInit`, `cuDriverGetVersion` and the `cuDevice*`
//! queries (the devices themselves: `model/device.rs`).

use std::ffi::{c_char, c_int, c_uint};

use super::{guard, put};
use crate::config;
use crate::errors::Fault;
use crate::ffi::{CUdevice, CUresult, CUuuid};
use crate::model::device::{DEVICE_NAME, attribute, uuid};
use crate::state;

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
        state::init(|st| st.build_devices(cfg.devices, cfg.memory, cfg.others_bytes()));
        state::fork::register();
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
