//! Per-device counters (the report's `stats.devices`).
//!
//! The frequent ones (allocations, frees, bytes, live bytes) are kept per thread by
//! [`crate::tracker::counters`], so allocating threads share no cache line; the rare ones (bytes lost with
//! a context, pinned host memory) are plain shared atomics here. Device memory is also charged
//! and credited to the process's limit ([`super::limit`]; nothing when no limit is set).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::counters::{self, DEVICES};
use super::limit;
use super::record::Record;

/// The rare counters of one device.
#[derive(Default)]
struct Rare {
    /// Bytes lost with destroyed contexts.
    released_bytes: AtomicU64,
    /// Pinned host memory made in this device's contexts (not counted in live bytes).
    host_pinned_live_bytes: AtomicU64,
    /// Allocations lost with destroyed contexts, of any memory.
    released_allocations: AtomicU64,
    /// Live pinned host allocations.
    host_pinned_live_allocations: AtomicU64,
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
    /// Live allocations of device memory (pinned host memory and allocations lost with their
    /// context left out).
    pub live_allocations: u64,
}

/// Counters for every device.
pub struct Stats {
    rare: [Rare; DEVICES],
}

fn slot(device: i32) -> usize {
    (device.max(0) as usize).min(DEVICES - 1)
}

impl Stats {
    pub(super) fn new() -> Self {
        Stats {
            rare: std::array::from_fn(|_| Rare::default()),
        }
    }

    /// Counts an allocation (and, for device memory, its stack's live bytes).
    #[inline(always)]
    pub fn allocated(&self, r: &Record) {
        self.allocated_from(r, false);
    }

    /// [`Self::allocated`] of a block of cuguard's pool (`pooled`), whose chunk, not the block,
    /// is held against the process's limit ([`limit`]).
    #[inline(always)]
    pub fn allocated_from(&self, r: &Record, pooled: bool) {
        self.allocated_from_in(crate::process::local::get(), r, pooled);
    }

    /// [`Self::allocated_from`] on the thread whose words `l` are (already looked up:
    /// `process::local`).
    #[inline(always)]
    pub fn allocated_from_in(
        &self,
        l: Option<&crate::process::local::Local>,
        r: &Record,
        pooled: bool,
    ) {
        let (device, size) = (r.device, r.size);
        if r.memory.on_device() {
            if !pooled {
                limit::charge(device, size);
            }
            counters::device_change_in(l, device, size, r.stack, true);
            super::tags::count(r.tag, size, true);
        } else {
            let rare = &self.rare[slot(device)];
            rare.host_pinned_live_bytes.fetch_add(size, Relaxed);
            rare.host_pinned_live_allocations.fetch_add(1, Relaxed);
            counters::allocated(device, size, false);
        }
    }

    /// Counts a free by the program.
    #[inline(always)]
    pub fn freed(&self, r: &Record) {
        self.freed_from(r, false);
    }

    /// [`Self::freed`] of a block of cuguard's pool (`pooled`: see [`Self::allocated_from`]).
    #[inline(always)]
    pub fn freed_from(&self, r: &Record, pooled: bool) {
        let (device, size) = (r.device, r.size);
        if r.memory.on_device() {
            if !pooled {
                limit::credit(device, size);
            }
            counters::device_change(device, size, r.stack, false);
            super::tags::count(r.tag, size, false);
        } else {
            let rare = &self.rare[slot(device)];
            rare.host_pinned_live_bytes.fetch_sub(size, Relaxed);
            rare.host_pinned_live_allocations.fetch_sub(1, Relaxed);
            counters::freed(device, size, false);
        }
    }

    /// Counts memory lost with its context (`pooled`: a block of cuguard's pool, whose chunk
    /// the pool credits to the limit).
    pub fn released(&self, r: &Record, pooled: bool) {
        let (device, size) = (r.device, r.size);
        let rare = &self.rare[slot(device)];
        rare.released_bytes.fetch_add(size, Relaxed);
        rare.released_allocations.fetch_add(1, Relaxed);
        if r.memory.on_device() {
            counters::add(r.stack, device, -(size as i64), -1);
            super::tags::count(r.tag, size, false);
            if !pooled {
                limit::credit(device, size);
            }
            counters::released(device, size);
        } else {
            rare.host_pinned_live_bytes.fetch_sub(size, Relaxed);
            rare.host_pinned_live_allocations.fetch_sub(1, Relaxed);
        }
    }

    /// Counters of every device that saw an allocation.
    pub fn snapshot(&self) -> Vec<DeviceCounts> {
        counters::totals()
            .iter()
            .enumerate()
            .filter(|(_, t)| t.allocations > 0)
            .map(|(i, t)| DeviceCounts {
                device: i as i32,
                live_bytes: t.live.max(0) as u64,
                peak_live_bytes: t.peak.max(0) as u64,
                total_allocated_bytes: t.total_allocated,
                allocations: t.allocations,
                frees: t.frees,
                released_bytes: self.rare[i].released_bytes.load(Relaxed),
                host_pinned_live_bytes: self.rare[i].host_pinned_live_bytes.load(Relaxed),
                live_allocations: t
                    .allocations
                    .saturating_sub(t.frees)
                    .saturating_sub(self.rare[i].released_allocations.load(Relaxed))
                    .saturating_sub(self.rare[i].host_pinned_live_allocations.load(Relaxed)),
            })
            .collect()
    }
}
