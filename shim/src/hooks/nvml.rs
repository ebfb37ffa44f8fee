//! The hooks of NVML's memory figures, under a limit (`CUGUARD_LIMIT` or `CUGUARD_POOL_LIMIT`, unless
//! `CUGUARD_LIMIT_VIRTUAL=0`; [`super::shown`]): the
//! answers of `nvmlDeviceGetMemoryInfo` and `nvmlDeviceGetMemoryInfo_v2` that the doors hand
//! out, the same as cuMemGetInfo's ([`super::cuMemGetInfo_v2`]), for the programs that size
//! their memory from NVML (pynvml, dask-cuda).
//!
//! Real NVML first; a failure is returned untouched. Then the NVML device's CUDA ordinal
//! ([`crate::driver::device_uuid::ordinal_of`]: by UUID against the driver the program initialized,
//! else by `CUDA_VISIBLE_DEVICES`), and under that ordinal's limit: total = the limit, free =
//! what is left of it (never below 0, never above NVML's free plus the pool's idle bytes),
//! used = total − free, and v2's reserved = 0. A device with no limit keeps NVML's figures.
//!
//! - One limit for every device (`CUGUARD_LIMIT=8GiB`, `=50%`) needs no ordinal: an unmatched
//!   device gets it too, a share being of NVML's total, with nothing held against it (the
//!   program holds nothing before it initializes the driver). So does the pool's limit, which is
//!   one for every device.
//! - Per-device limits with no ordinal found: NVML's own figures, said once on stderr.
//! - Before the driver is initialized, a device matched by `CUDA_VISIBLE_DEVICES` has its limit
//!   worked out against NVML's total (the driver's resolution of the limit waits for the
//!   driver), and nothing held.

use std::sync::atomic::AtomicBool;

use crate::config::amount::Amount;
use crate::driver::device_uuid::{self, Ordinal};
use crate::driver::nvml::{Device, Memory, MemoryV2, NVML_SUCCESS, NvmlReturn};
use crate::driver::nvml_entries::{self, MemoryInfoFn, MemoryInfoV2Fn};
use crate::guard::shield;
use crate::serving::serve;
use crate::tracker::limit;

use super::shown::Shown;

/// `nvmlDeviceGetMemoryInfo`.
///
/// # Safety
/// The program's arguments, under NVML's contract.
pub unsafe fn memory_info(real: MemoryInfoFn, device: Device, memory: *mut Memory) -> NvmlReturn {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(device, memory) };
    if r != NVML_SUCCESS || memory.is_null() {
        return r;
    }
    // SAFETY: checked non-null; NVML just wrote it.
    let m = unsafe { &mut *memory };
    if let Some((total, free)) = shield(None, || limited(device, m.total, m.free)) {
        *m = Memory {
            total,
            free,
            used: total - free,
        };
    }
    r
}

/// `nvmlDeviceGetMemoryInfo_v2`.
///
/// # Safety
/// The program's arguments, under NVML's contract.
pub unsafe fn memory_info_v2(
    real: MemoryInfoV2Fn,
    device: Device,
    memory: *mut MemoryV2,
) -> NvmlReturn {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(device, memory) };
    if r != NVML_SUCCESS || memory.is_null() {
        return r;
    }
    // SAFETY: checked non-null; NVML just wrote it.
    let m = unsafe { &mut *memory };
    if let Some((total, free)) = shield(None, || limited(device, m.total, m.free)) {
        m.total = total;
        m.reserved = 0;
        m.free = free;
        m.used = total - free;
    }
    r
}

/// `(total, free)` of NVML device `device` under the limits shown ([`super::shown`]), from
/// NVML's own `total` and `free`; `None` when NVML's figures stand.
fn limited(device: Device, total: u64, free: u64) -> Option<(u64, u64)> {
    if !super::shown::on() {
        return None;
    }
    let spec = crate::config::get()
        .limit
        .as_ref()
        .filter(|_| limit::virtual_on());
    let pool = crate::config::get()
        .pool_settings
        .limit
        .filter(|_| super::shown::pool_limit_shown());
    let uuid = nvml_entries::uuid(device);
    let ordinal = uuid
        .as_deref()
        .map_or(Ordinal::Unknown, device_uuid::ordinal_of);
    // Each limit in force as (total, held), and the pool's idle bytes (counted as free).
    let (process, pooled, idle) = match ordinal {
        Ordinal::ByDriver(o) => (
            limit::limit(o)
                .filter(|_| spec.is_some())
                .map(|l| (l, super::shown::process_held(o))),
            super::shown::pool_limit(o).map(|l| (l, super::shown::pool_in_use(o))),
            serve::idle_bytes(o),
        ),
        // Before the driver is initialized the program holds nothing: each limit is worked out
        // against NVML's total.
        Ordinal::ByVisibleDevices(o) => (
            spec.and_then(|s| of_total(s.for_device(o)?, total))
                .map(|l| (l, 0)),
            pool.and_then(|a| super::shown::within(a, total))
                .map(|l| (l, 0)),
            0,
        ),
        Ordinal::Unknown => {
            let process = match spec {
                Some(s) if s.devices.is_empty() => s.default.and_then(|a| of_total(a, total)),
                Some(_) => {
                    static SAID: AtomicBool = AtomicBool::new(false);
                    crate::process::diag::warn_once(
                        &SAID,
                        &format!(
                            "CUGUARD_LIMIT: NVML device {} matches no CUDA device (by UUID once the \
                             program has initialized the driver, else by UUID in \
                             CUDA_VISIBLE_DEVICES); NVML's memory figures are the device's own",
                            uuid.as_deref().unwrap_or("(UUID unknown)")
                        ),
                    );
                    None
                }
                None => None,
            };
            // The pool's limit is one for every device: it needs no match.
            (
                process.map(|l| (l, 0)),
                pool.and_then(|a| super::shown::within(a, total))
                    .map(|l| (l, 0)),
                0,
            )
        }
    };
    let limits: Vec<Shown> = process
        .into_iter()
        .chain(pooled)
        .map(|(total, held)| Shown { total, held })
        .collect();
    let device_free = free.saturating_add(idle).min(total);
    let (free, total) = super::shown::combine(&limits, device_free)?;
    Some((total, free))
}

/// `amount` of a device of `total` bytes, if it is a limit the tracker would keep (neither zero
/// nor more than the device).
fn of_total(amount: Amount, total: u64) -> Option<u64> {
    let bytes = amount.resolve(total);
    (bytes > 0 && bytes <= total).then_some(bytes)
}
