//! The VMM family's model: reservations of address space, physical allocations and the mappings
//! between them, with the range rules `cuMemMap`, `cuMemUnmap` and `cuMemSetAccess` check.
//!
//! - A reservation is a range of host address space mapped with no access.
//! - A physical allocation (`CUmemGenericAllocationHandle`) is a memory file of its size, charged
//!   to its device and counted live until it is gone.
//! - A mapping maps (part of) the file over (part of) a reservation, readable or read-write once
//!   `cuMemSetAccess` said so. Bytes written through one mapping are seen through every other
//!   mapping of the same physical allocation.
//!
//! Granularity (minimum and recommended) is 2 MiB; sizes, offsets and addresses must be
//! multiples of it ([`aligned`]). VMM memory belongs to the device, not to a context.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_uint};

use crate::errors::Fault;
use crate::ffi::consts::{CU_MEM_ACCESS_FLAGS_PROT_READ, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

/// Allocation granularity of every simulated device.
pub const GRANULARITY: u64 = 2 << 20;

/// A physical allocation.
#[derive(Debug)]
pub struct Phys {
    pub fd: c_int,
    pub size: u64,
    pub device: i32,
    pub handle_types: c_uint,
    /// `cuMemRelease` was called; the memory goes with the last mapping.
    pub released: bool,
    pub mappings: u32,
}

/// A mapping of a physical allocation into a reservation.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub size: u64,
    pub handle: u64,
    pub device: i32,
    /// `CU_MEM_ACCESS_FLAGS_PROT_*` set by `cuMemSetAccess`.
    pub access: c_uint,
}

/// All VMM state.
#[derive(Debug, Default)]
pub struct Vmm {
    /// Reservations: start and size.
    pub reservations: BTreeMap<u64, u64>,
    pub handles: HashMap<u64, Phys>,
    /// Mappings by start address.
    pub mappings: BTreeMap<u64, Mapping>,
}

impl Vmm {
    /// The mapping containing `ptr`.
    pub fn mapping_containing(&self, ptr: u64) -> Option<(u64, &Mapping)> {
        self.mappings
            .range(..=ptr)
            .next_back()
            .filter(|(b, m)| ptr < *b + m.size)
            .map(|(b, m)| (*b, m))
    }

    /// The mappings that exactly tile `[ptr, ptr + size)`, contiguous, or [`Fault::VmmBadRange`].
    pub fn tiling(&self, ptr: u64, size: u64) -> Result<Vec<u64>, Fault> {
        let end = ptr.checked_add(size).ok_or(Fault::VmmBadRange)?;
        let mut at = ptr;
        let mut bases = Vec::new();
        while at < end {
            let m = self.mappings.get(&at).ok_or(Fault::VmmBadRange)?;
            bases.push(at);
            at += m.size;
        }
        if at != end || bases.is_empty() {
            return Err(Fault::VmmBadRange);
        }
        Ok(bases)
    }

    /// Whether `[ptr, ptr + size)` lies in one reservation and overlaps no mapping.
    pub fn nothing_mapped(&self, ptr: u64, size: u64) -> Result<bool, Fault> {
        let end = ptr.checked_add(size).ok_or(Fault::VmmBadRange)?;
        let inside = self
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(b, s)| end <= b + s);
        if !inside {
            return Err(Fault::VmmBadRange);
        }
        Ok(
            self.mapping_containing(ptr).is_none()
                && self.mappings.range(ptr..end).next().is_none(),
        )
    }

    /// Checks that `[ptr, ptr + len)` lies in VMM mappings with at least `need` access. `Ok(None)`
    /// if `ptr` is in no mapping; `Ok(Some(device))` if the whole range is usable.
    pub fn check_access(&self, ptr: u64, len: u64, need_write: bool) -> Result<Option<i32>, Fault> {
        let Some((base, first)) = self.mapping_containing(ptr) else {
            return Ok(None);
        };
        let device = first.device;
        let end = ptr.checked_add(len).ok_or(Fault::BadRange)?;
        let needed = if need_write {
            CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        } else {
            CU_MEM_ACCESS_FLAGS_PROT_READ
        };
        let mut at = base;
        loop {
            let m = self.mappings.get(&at).ok_or(Fault::BadRange)?;
            if m.access & needed != needed {
                return Err(Fault::InaccessibleRange);
            }
            at += m.size;
            if at >= end {
                return Ok(Some(device));
            }
        }
    }
}

/// Whether `v` is a multiple of the granularity.
pub fn aligned(v: u64) -> bool {
    v.is_multiple_of(GRANULARITY)
}
