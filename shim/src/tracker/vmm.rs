//! The tracker's record of virtual memory management (cuMemCreate/Map/Unmap/Release, address reservations).
//!
//! Physical memory made by cuMemCreate stays allocated while its handle is unreleased or while
//! any mapping of it remains (the driver frees a released handle on its last unmap). Each such
//! handle is one allocation in the report; its address is where it is first mapped, if anywhere.
//! The history knows it by its handle until then, and from its first mapping by that address
//! ([`Handle::history_at`]), so that what a framework carves from the mapped memory (PyTorch's
//! tensors in its expandable segments) falls inside it; memory made and not yet mapped (PyTorch
//! makes every page of a growth before it maps them) is in the history all the same.

use std::collections::HashMap;
use std::sync::Mutex;

use super::record::Record;
use crate::process::global::lock;

/// One physical allocation.
#[derive(Clone, Debug)]
pub struct Handle {
    pub record: Record,
    pub released: bool,
    /// Mapped ranges: (address, size).
    pub mappings: Vec<(u64, u64)>,
    /// The address the history knows it by: its handle, then where it was first mapped.
    pub history_at: u64,
}

#[derive(Default)]
struct Inner {
    handles: HashMap<u64, Handle>,
    /// Mapped address → handle.
    mapped: HashMap<u64, u64>,
    /// Reserved address ranges: address → size.
    reserved: HashMap<u64, u64>,
}

/// The VMM bookkeeping.
pub struct Vmm {
    inner: Mutex<Inner>,
}

impl Vmm {
    pub(super) fn new() -> Self {
        Vmm {
            inner: Mutex::new(Inner::default()),
        }
    }

    /// A new physical allocation.
    pub fn created(&self, handle: u64, record: Record) {
        lock(&self.inner).handles.insert(
            handle,
            Handle {
                record,
                released: false,
                mappings: Vec::new(),
                history_at: handle,
            },
        );
    }

    /// The handle was released; returns its record and the address the history knows it by if
    /// its memory is now gone, and whether the handle was known at all.
    pub fn released(&self, handle: u64) -> (Option<(u64, Record)>, bool) {
        let mut inner = lock(&self.inner);
        let Some(h) = inner.handles.get_mut(&handle) else {
            return (None, false);
        };
        h.released = true;
        if h.mappings.is_empty() {
            let h = inner.handles.remove(&handle);
            return (h.map(|h| (h.history_at, h.record)), true);
        }
        (None, true)
    }

    /// `handle` was mapped at `addr`: its record, where this is its first mapping (for the
    /// history, which knows it from now on at `addr` rather than at its handle).
    pub fn mapped(&self, addr: u64, size: u64, handle: u64) -> Option<Record> {
        let mut inner = lock(&self.inner);
        let h = inner.handles.get_mut(&handle)?;
        h.mappings.push((addr, size));
        let first = (h.history_at == handle).then(|| {
            h.history_at = addr;
            h.record
        });
        inner.mapped.insert(addr, handle);
        first
    }

    /// `[addr, addr+size)` was unmapped; returns the handles whose memory is now gone, with the
    /// address the history knows each by and their records.
    pub fn unmapped(&self, addr: u64, size: u64) -> Vec<(u64, Record)> {
        let mut inner = lock(&self.inner);
        let end = addr.saturating_add(size);
        let hit: Vec<(u64, u64)> = inner
            .mapped
            .iter()
            .filter(|(a, _)| **a >= addr && **a < end)
            .map(|(a, h)| (*a, *h))
            .collect();
        let mut gone = Vec::new();
        for (a, handle) in hit {
            inner.mapped.remove(&a);
            let remove = match inner.handles.get_mut(&handle) {
                Some(h) => {
                    h.mappings.retain(|(m, _)| *m != a);
                    h.released && h.mappings.is_empty()
                }
                None => false,
            };
            if remove && let Some(h) = inner.handles.remove(&handle) {
                gone.push((h.history_at, h.record));
            }
        }
        gone
    }

    /// An address range was reserved.
    pub fn reserved(&self, addr: u64, size: u64) {
        lock(&self.inner).reserved.insert(addr, size);
    }

    /// An address range was freed.
    pub fn unreserved(&self, addr: u64) {
        lock(&self.inner).reserved.remove(&addr);
    }

    /// Physical allocations still held: (address, handle record). The address is the first
    /// mapping, or 0 for memory that is mapped nowhere.
    pub fn live(&self) -> Vec<(u64, u64, Record)> {
        lock(&self.inner)
            .handles
            .iter()
            .map(|(handle, h)| (h.mappings.first().map_or(0, |m| m.0), *handle, h.record))
            .collect()
    }

    /// Reserved ranges not freed: (count, bytes).
    pub fn reservations(&self) -> (usize, u64) {
        let inner = lock(&self.inner);
        (inner.reserved.len(), inner.reserved.values().sum())
    }
}
