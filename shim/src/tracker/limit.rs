//! The process's device-memory limit (`CUGUARD_LIMIT`) as it is enforced: each device's limit in
//! bytes and the bytes held against it.
//!
//! With no limit set, every entry here is one load of a flag ([`on`]) and nothing else. With one:
//!
//! - `held` counts, exactly, what the process occupies on the device: the device bytes of every
//!   live allocation the tracker counts outside cuguard's pool ([`super::stats::Stats`] charges
//!   and credits it as records come and go: driver, async, VMM and managed memory alike, by
//!   their recorded size), every chunk cuguard's pool holds, whole, its idle memory included
//!   (charged when the pool takes the chunk from the driver and credited when it gives it back
//!   or its context goes: `serving::driver_context`; the pool grows only within the limit, and
//!   gives its idle chunks back first), plus the bytes of every allocation in flight that
//!   [`admit`] let through and whose outcome is not accounted yet. So it is never below what the
//!   process holds, and two threads cannot both pass the limit with the same bytes. (An
//!   allocation the pool was to serve and passed to the driver instead, when the pool failed
//!   inside, is counted once made but was not asked first.)
//! - A device's limit is resolved once, the first time the device is asked about: from the spec
//!   ([`crate::config::limit`]) and, for a share, the device's total memory
//!   (`cuDeviceTotalMem_v2`). A limit of zero bytes or above the device's memory gets one line on
//!   stderr and the device runs without a limit.
//! - Devices with an ordinal of [`DEVICES`] or more, and allocations with no device, are not
//!   limited.
//!
//! A forked child starts with nothing held ([`reset_after_fork`]), like its tracker.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering::*};

use super::counters::DEVICES;
use crate::ffi::CUDA_SUCCESS;

/// A device's limit not resolved yet.
const UNRESOLVED: u64 = 0;
/// A device without a limit.
const NONE: u64 = u64::MAX;

struct Slot {
    /// The limit in bytes, [`UNRESOLVED`] or [`NONE`].
    limit: AtomicU64,
    /// Bytes held against it (see the module documentation).
    held: AtomicU64,
}

static SLOTS: [Slot; DEVICES] = [const {
    Slot {
        limit: AtomicU64::new(UNRESOLVED),
        held: AtomicU64::new(0),
    }
}; DEVICES];

/// Whether any limit was set (`CUGUARD_LIMIT`; off with `CUGUARD_DISABLE=1`, which forwards
/// everything untouched): the settings' one load, read once.
#[inline]
pub fn on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let c = crate::config::get();
        c.limit.is_some() && !c.disabled
    })
}

/// Whether a limit is set and shown to the program as its device (`CUGUARD_LIMIT_VIRTUAL` is not
/// `0`).
#[inline]
pub fn virtual_on() -> bool {
    on() && crate::config::get().limit_virtual
}

fn slot(device: i32) -> Option<&'static Slot> {
    SLOTS.get(usize::try_from(device).ok()?)
}

/// The limit of `device` in bytes, resolved now if it was not yet; `None` when it has none.
pub fn limit(device: i32) -> Option<u64> {
    if !on() {
        return None;
    }
    let s = slot(device)?;
    let l = match s.limit.load(Acquire) {
        UNRESOLVED => {
            let resolved = resolve(device);
            match s
                .limit
                .compare_exchange(UNRESOLVED, resolved, AcqRel, Acquire)
            {
                Ok(_) => resolved,
                Err(other) => other,
            }
        }
        l => l,
    };
    (l != NONE).then_some(l)
}

/// Works out `device`'s limit from the settings; says why in one line when it cannot be had.
fn resolve(device: i32) -> u64 {
    use crate::config::amount::Amount;
    let Some(amount) = crate::config::get()
        .limit
        .as_ref()
        .and_then(|s| s.for_device(device))
    else {
        return NONE;
    };
    let total = total_memory(device);
    let human = cuguard_format::human_bytes;
    let given = match amount {
        Amount::Bytes(b) => human(b),
        Amount::Percent(p) => format!("{p}%"),
    };
    let bytes = match (amount, total) {
        (Amount::Bytes(b), _) => b,
        (Amount::Percent(_), Some(t)) => amount.resolve(t),
        (Amount::Percent(_), None) => {
            crate::process::diag::warn(&format!(
                "CUGUARD_LIMIT: {given} of device {device}, whose memory the driver would not tell; no limit on device {device}"
            ));
            return NONE;
        }
    };
    if bytes == 0 {
        crate::process::diag::warn(&format!(
            "CUGUARD_LIMIT: {given} of device {device} is zero bytes; no limit on device {device}"
        ));
        return NONE;
    }
    if let Some(t) = total.filter(|t| bytes > *t) {
        crate::process::diag::warn(&format!(
            "CUGUARD_LIMIT: {given} is more than device {device}'s {}; no limit on device {device}",
            human(t)
        ));
        return NONE;
    }
    bytes
}

/// The device's total memory, asked of the real driver.
fn total_memory(device: i32) -> Option<u64> {
    let f = crate::driver::real::cuDeviceTotalMem_v2()?;
    let mut bytes = 0usize;
    // SAFETY: a valid out-parameter; the driver checks the ordinal.
    (unsafe { f(&mut bytes, device) } == CUDA_SUCCESS && bytes > 0).then_some(bytes as u64)
}

/// Bytes held against `device`'s limit (0 when it has none).
pub fn held(device: i32) -> u64 {
    if limit(device).is_none() {
        return 0;
    }
    slot(device).map_or(0, |s| s.held.load(Acquire))
}

/// An allocation let through by [`admit`]: its bytes stay held until [`Grant::done`], called
/// once its outcome is accounted (a success's record charged, or a failure).
#[must_use = "a grant's bytes stay held until done() is called"]
#[derive(Debug)]
pub struct Grant {
    device: i32,
    bytes: u64,
}

impl Grant {
    /// A grant that holds nothing (no limit applies).
    pub fn none() -> Grant {
        Grant {
            device: -1,
            bytes: 0,
        }
    }

    /// Gives back the grant's bytes.
    pub fn done(self) {
        if self.bytes > 0 {
            credit(self.device, self.bytes);
        }
    }

    /// Keeps the grant's bytes held, for memory whose release credits them itself (a chunk of
    /// cuguard's pool: `serving::driver_context`).
    pub fn keep(self) {}
}

/// Why [`admit`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub device: i32,
    pub limit: u64,
    pub held: u64,
    pub asked: u64,
}

impl Refused {
    /// The reason in words, as the OOM record and the failed allocation's event give it
    /// (`crate::hooks` recognizes its first word).
    pub fn reason(&self) -> String {
        let human = cuguard_format::human_bytes;
        format!(
            "CUGUARD_LIMIT of {} on device {} reached: {} held, {} more asked for",
            human(self.limit),
            self.device,
            human(self.held),
            human(self.asked)
        )
    }
}

/// Lets an allocation of `bytes` on `device` through if what is held plus `bytes` fits the
/// device's limit, holding them until the grant is done; refuses it otherwise.
#[inline]
pub fn admit(device: i32, bytes: u64) -> Result<Grant, Refused> {
    let free = Grant { device, bytes: 0 };
    if !on() {
        return Ok(free);
    }
    let (Some(limit), Some(s)) = (limit(device), slot(device)) else {
        return Ok(free);
    };
    match s.held.fetch_update(AcqRel, Acquire, |h| {
        h.checked_add(bytes).filter(|n| *n <= limit)
    }) {
        Ok(_) => Ok(Grant { device, bytes }),
        Err(held) => Err(Refused {
            device,
            limit,
            held,
            asked: bytes,
        }),
    }
}

/// Counts `bytes` of a new allocation on `device` as held.
#[inline]
pub fn charge(device: i32, bytes: u64) {
    if !on() {
        return;
    }
    if let (Some(_), Some(s)) = (limit(device), slot(device)) {
        s.held.fetch_add(bytes, AcqRel);
    }
}

/// Counts `bytes` on `device` as no longer held.
#[inline]
pub fn credit(device: i32, bytes: u64) {
    if !on() {
        return;
    }
    if let (Some(_), Some(s)) = (limit(device), slot(device)) {
        let _ = s
            .held
            .fetch_update(AcqRel, Acquire, |h| Some(h.saturating_sub(bytes)));
    }
}

/// In the child of a fork: nothing is held (the child's tracker starts afresh too).
pub fn reset_after_fork() {
    for s in &SLOTS {
        s.held.store(0, Relaxed);
    }
}

/// What cuMemGetInfo reports on `device` under its limit: `(free, total)` from the driver's own
/// `free` (already counting the pool's idle bytes as free), or `None` when the device has no
/// limit or the virtualization is off (`CUGUARD_LIMIT_VIRTUAL=0`).
pub fn virtual_info(device: i32, free: u64) -> Option<(u64, u64)> {
    let limit = limit(device)?;
    if !crate::config::get().limit_virtual {
        return None;
    }
    Some((virtual_free(limit, held(device), free), limit))
}

/// Free memory under a limit: what is left of it, never below zero and never above what the
/// device has free.
pub fn virtual_free(limit: u64, held: u64, device_free: u64) -> u64 {
    limit.saturating_sub(held).min(device_free)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_under_a_limit() {
        assert_eq!(virtual_free(100, 30, 1000), 70);
        assert_eq!(virtual_free(100, 130, 1000), 0);
        assert_eq!(virtual_free(100, 30, 50), 50);
    }
}
