//! Per-device counters (the report's `stats.devices`), lock-free.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::Memory;

/// Devices with ordinals at or above this share the last slot.
pub const MAX_DEVICES: usize = 64;

/// Counters for one device.
#[derive(Default)]
pub struct DeviceStats {
    pub live_bytes: AtomicU64,
    pub peak_live_bytes: AtomicU64,
    pub total_allocated_bytes: AtomicU64,
    pub allocations: AtomicU64,
    pub frees: AtomicU64,
    /// Bytes lost with destroyed contexts.
    pub released_bytes: AtomicU64,
    /// Pinned host memory made in this device's contexts (not counted in `live_bytes`).
    pub host_pinned_live_bytes: AtomicU64,
}

/// A plain copy of one device's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounts {
    pub device: i32,
    pub live_bytes: u64,
    pub peak_live_bytes: u64,
    pub total_allocated_bytes: u64,
    pub allocations: u64,
    pub frees: u64,
    pub released_bytes: u64,
    pub host_pinned_live_bytes: u64,
}

/// Counters for every device.
pub struct Stats {
    devices: [DeviceStats; MAX_DEVICES],
}

fn slot(device: i32) -> usize {
    (device.max(0) as usize).min(MAX_DEVICES - 1)
}

impl Stats {
    pub(super) fn new() -> Self {
        Stats {
            devices: std::array::from_fn(|_| DeviceStats::default()),
        }
    }

    /// Counts an allocation.
    #[inline]
    pub fn allocated(&self, device: i32, memory: Memory, size: u64) {
        let d = &self.devices[slot(device)];
        d.allocations.fetch_add(1, Relaxed);
        d.total_allocated_bytes.fetch_add(size, Relaxed);
        if memory.on_device() {
            let now = d.live_bytes.fetch_add(size, Relaxed) + size;
            d.peak_live_bytes.fetch_max(now, Relaxed);
        } else {
            d.host_pinned_live_bytes.fetch_add(size, Relaxed);
        }
    }

    /// Counts a free by the program.
    #[inline]
    pub fn freed(&self, device: i32, memory: Memory, size: u64) {
        let d = &self.devices[slot(device)];
        d.frees.fetch_add(1, Relaxed);
        self.unlive(d, memory, size);
    }

    /// Counts memory lost with its context.
    pub fn released(&self, device: i32, memory: Memory, size: u64) {
        let d = &self.devices[slot(device)];
        d.released_bytes.fetch_add(size, Relaxed);
        self.unlive(d, memory, size);
    }

    fn unlive(&self, d: &DeviceStats, memory: Memory, size: u64) {
        let counter = if memory.on_device() {
            &d.live_bytes
        } else {
            &d.host_pinned_live_bytes
        };
        counter.fetch_sub(size, Relaxed);
    }

    /// Counters of every device that saw an allocation.
    pub fn snapshot(&self) -> Vec<DeviceCounts> {
        self.devices
            .iter()
            .enumerate()
            .filter(|(_, d)| d.allocations.load(Relaxed) > 0)
            .map(|(i, d)| DeviceCounts {
                device: i as i32,
                live_bytes: d.live_bytes.load(Relaxed),
                peak_live_bytes: d.peak_live_bytes.load(Relaxed),
                total_allocated_bytes: d.total_allocated_bytes.load(Relaxed),
                allocations: d.allocations.load(Relaxed),
                frees: d.frees.load(Relaxed),
                released_bytes: d.released_bytes.load(Relaxed),
                host_pinned_live_bytes: d.host_pinned_live_bytes.load(Relaxed),
            })
            .collect()
    }
}
