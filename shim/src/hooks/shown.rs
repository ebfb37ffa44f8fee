//! The device as the program is shown it under the limits cuguard enforces: `CUGUARD_LIMIT` (the
//! process's, [`crate::tracker::limit`]) and `CUGUARD_POOL_LIMIT` (the pool's cap on what it
//! reserves per device), unless `CUGUARD_LIMIT_VIRTUAL=0`. cuMemGetInfo
//! ([`super::cuMemGetInfo_v2`]) and NVML's memory info ([`super::nvml`]) answer from here, so a
//! framework that sizes itself from either (PyTorch's `mem_get_info`, RMM, XLA, dask-cuda) is
//! told the limit it will meet.
//!
//! Under each limit in force the device's total is the limit and its free memory what is left
//! of it: for `CUGUARD_LIMIT`, the limit less what the process holds on the device; for the
//! pool's, the limit less what the pool's blocks hold (its reserved bytes less its idle ones,
//! which it gives back or reuses before it refuses). Under both, the smaller total and the
//! smaller free. Free is never above what the device itself has free (the pool's idle bytes
//! counted as free). The pool's limit is shown only while the pool serves allocations
//! (`CUGUARD_POOL=1`), as it is only then enforced, and only when it is not more than the
//! device: a limit of the whole device is the device itself.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering::*};

use crate::config::amount::Amount;
use crate::serving::{registry, serve};
use crate::tracker::counters::DEVICES;
use crate::tracker::limit;

/// Whether any limit is shown to the program (the lookup doors hand out the shim's NVML
/// entries only then).
#[inline]
pub fn on() -> bool {
    limit::virtual_on() || pool_limit_shown()
}

/// Whether `CUGUARD_POOL_LIMIT` is set, enforced (the pool serves allocations) and shown
/// (`CUGUARD_LIMIT_VIRTUAL` is not `0`): the settings' one load, read once.
#[inline]
pub fn pool_limit_shown() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let c = crate::config::get();
        c.pool && !c.disabled && c.limit_virtual && c.pool_settings.limit.is_some()
    })
}

/// A device's pool limit not resolved yet.
const UNRESOLVED: u64 = 0;
/// A device whose pool limit is not shown (more than the device, or zero).
const NONE: u64 = u64::MAX;

static POOL_LIMITS: [AtomicU64; DEVICES] = [const { AtomicU64::new(UNRESOLVED) }; DEVICES];

/// The pool's limit on `device` in bytes, as the pool resolves it (a share is of the device's
/// total), when it is shown; resolved once per device.
pub fn pool_limit(device: i32) -> Option<u64> {
    if !pool_limit_shown() {
        return None;
    }
    let slot = POOL_LIMITS.get(usize::try_from(device).ok()?)?;
    let l = match slot.load(Acquire) {
        UNRESOLVED => {
            let amount = crate::config::get().pool_settings.limit?;
            let resolved = device_total(device)
                .and_then(|t| within(amount, t))
                .unwrap_or(NONE);
            slot.store(resolved, Release);
            resolved
        }
        l => l,
    };
    (l != NONE).then_some(l)
}

/// The pool's limit on `device` in bytes, shown to the program or not (for the out-of-memory
/// record of a refusal it made).
pub fn pool_limit_bytes(device: i32) -> Option<u64> {
    pool_limit(device).or_else(|| {
        let amount = crate::config::get().pool_settings.limit?;
        device_total(device).map(|t| amount.resolve(t))
    })
}

/// `amount` of a device of `total` bytes, if it is shown: more than zero, not more than the
/// device.
pub fn within(amount: Amount, total: u64) -> Option<u64> {
    let bytes = amount.resolve(total);
    (bytes > 0 && bytes <= total).then_some(bytes)
}

fn device_total(device: i32) -> Option<u64> {
    let f = crate::driver::real::cuDeviceTotalMem_v2()?;
    let mut bytes = 0usize;
    // SAFETY: a valid out-parameter; the driver checks the ordinal.
    (unsafe { f(&mut bytes, device) } == crate::ffi::CUDA_SUCCESS && bytes > 0)
        .then_some(bytes as u64)
}

/// What the process holds against its limit on `device`, as the program is shown it: the
/// limit's `held` less cuguard's pool's idle memory, which the pool serves the program from
/// (so it reads as free, as the device's own free memory counts it).
pub fn process_held(device: i32) -> u64 {
    limit::held(device).saturating_sub(serve::idle_bytes(device))
}

/// Bytes the pool's blocks hold on `device`: what its pools reserved less what is idle.
pub fn pool_in_use(device: i32) -> u64 {
    registry::reserved_for_device(device).saturating_sub(serve::idle_bytes(device))
}

/// One limit as the program is shown it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The limit: the device's total as shown.
    pub total: u64,
    /// What is held against it.
    pub held: u64,
}

/// What the program is shown of a device whose own free memory (the pool's idle bytes counted
/// as free) is `device_free`, under the limits `limits`: `(free, total)`, or `None` when no
/// limit applies. The smaller total and the smaller free; free never above `device_free`.
pub fn combine(limits: &[Shown], device_free: u64) -> Option<(u64, u64)> {
    let total = limits.iter().map(|l| l.total).min()?;
    let free = limits
        .iter()
        .map(|l| limit::virtual_free(l.total, l.held, device_free))
        .min()?;
    Some((free.min(total), total))
}

/// What cuMemGetInfo reports on `device` (a CUDA ordinal the driver gave) whose free memory,
/// the pool's idle bytes counted, is `device_free`: `(free, total)`, or `None` when no limit
/// is shown there.
pub fn info(device: i32, device_free: u64) -> Option<(u64, u64)> {
    if !on() {
        return None;
    }
    let process = limit::virtual_info(device, device_free).map(|(_, total)| Shown {
        total,
        held: process_held(device),
    });
    let pool = pool_limit(device).map(|total| Shown {
        total,
        held: pool_in_use(device),
    });
    let limits: Vec<Shown> = process.into_iter().chain(pool).collect();
    combine(&limits, device_free)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tighter_limit_is_shown() {
        let (a, b) = (
            Shown {
                total: 100,
                held: 30,
            },
            Shown { total: 80, held: 0 },
        );
        assert_eq!(combine(&[], 1000), None);
        assert_eq!(combine(&[a], 1000), Some((70, 100)));
        // The smaller total, and the smaller free.
        assert_eq!(combine(&[a, b], 1000), Some((70, 80)));
        assert_eq!(
            combine(
                &[
                    a,
                    Shown {
                        total: 200,
                        held: 190
                    }
                ],
                1000
            ),
            Some((10, 100))
        );
        // Never above the device's own free memory, never below zero.
        assert_eq!(combine(&[a, b], 50), Some((50, 80)));
        assert_eq!(
            combine(
                &[Shown {
                    total: 10,
                    held: 20
                }],
                50
            ),
            Some((0, 10))
        );
    }

    #[test]
    fn a_pool_limit_is_shown_within_the_device() {
        assert_eq!(within(Amount::Bytes(1 << 30), 16 << 30), Some(1 << 30));
        assert_eq!(within(Amount::Percent(25.0), 1000), Some(250));
        assert_eq!(within(Amount::Bytes(1000), 1000), Some(1000));
        assert_eq!(within(Amount::Bytes(1001), 1000), None);
        assert_eq!(within(Amount::Bytes(0), 1000), None);
    }
}
