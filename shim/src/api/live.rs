//! `cuguard_live`: live and peak bytes per device, cheap enough for a loop.
//!
//! Read from the same counters the report's `stats.devices` comes from
//! ([`crate::tracker::stats`]): every thread's pending counts summed, no JSON, and no lock the
//! allocation path takes (the thread registry's, taken when threads start and end, and the
//! pool registry's, taken when a thread first meets a context). The peak is the report's:
//! exact for one allocating thread, and with several it may miss what each had not folded yet
//! (up to 1 MiB per thread; see [`crate::tracker::counters`]).

use super::{E_INVALID, OK, call};

/// One device's figures (`struct cuguard_device_live` in C; 48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceLive {
    /// Device ordinal.
    pub device: i32,
    /// Always 0.
    pub reserved: u32,
    /// The program's live device memory.
    pub live_bytes: u64,
    /// Its peak so far.
    pub peak_bytes: u64,
    /// Device memory cuguard's pool holds from the driver (0 with the pool off).
    pub pool_reserved_bytes: u64,
    /// Device allocations not freed yet.
    pub live_allocations: u64,
    /// Device bytes allocated so far, in all (pinned host memory included, as the report's
    /// `total_allocated_bytes`).
    pub allocated_bytes: u64,
}

const _: () = assert!(std::mem::size_of::<DeviceLive>() == 48);

/// Every device that allocated, in ordinal order.
pub fn devices() -> Vec<DeviceLive> {
    let Some(t) = crate::tracker::if_any() else {
        return Vec::new();
    };
    t.stats
        .snapshot()
        .into_iter()
        .map(|d| DeviceLive {
            device: d.device,
            reserved: 0,
            live_bytes: d.live_bytes,
            peak_bytes: d.peak_live_bytes,
            pool_reserved_bytes: crate::serving::registry::reserved_for_device(d.device),
            live_allocations: d.live_allocations,
            allocated_bytes: d.total_allocated_bytes,
        })
        .collect()
}

/// Writes the figures of up to `cap` devices to `out` and their number to `*count`.
///
/// # Safety
///
/// `out` is valid for `cap` writes (it may be NULL when `cap` is 0); `count` for one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuguard_live(out: *mut DeviceLive, cap: u32, count: *mut u32) -> i32 {
    if count.is_null() || (out.is_null() && cap > 0) {
        return E_INVALID;
    }
    call(|| {
        let all = devices();
        for (i, d) in all.iter().take(cap as usize).enumerate() {
            // SAFETY: i < cap, and the caller promises `out` holds cap entries.
            unsafe { out.add(i).write(*d) };
        }
        // SAFETY: checked not NULL above; the caller promises it is valid.
        unsafe { count.write(all.len() as u32) };
        OK
    })
}
