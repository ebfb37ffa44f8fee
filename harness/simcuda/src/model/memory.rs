//! The memory family's model: an allocation (what made it, its bytes, its owner) and a device's
//! memory accounting.
//!
//! Each allocation is its own anonymous mapping, so its address is page-aligned and its bytes are
//! real. The state keeps live allocations in a `BTreeMap` by start address (`state/memory.rs`),
//! so an address inside an allocation is found with one range query.
//!
//! Accounting per device ([`DeviceMem`]):
//! - `used` counts what the limit (`CUGUARD_SIM_MEMORY`) is checked against and what
//!   `cuMemGetInfo_v2` reports as taken: the requested bytes of every live `cuMemAlloc_v2`,
//!   pitched (`pitch * height`) and managed allocation, every block a memory pool holds (in use
//!   or cached), and every VMM physical allocation (`cuMemCreate`).
//! - `others` is what other processes hold on the device (`CUGUARD_SIM_OTHERS`), taken from the
//!   start and never given back: `cuMemGetInfo_v2`'s free and every charge's room shrink by it,
//!   while `used` stays this process's own (what NVML lists for it).
//! - `live_bytes`/`live_allocs` count what the program holds and has not freed: the same
//!   synchronous allocations, async allocations not yet passed to a free, and VMM physical
//!   allocations until their memory goes (released and unmapped) (`cusimGetUsage`). Pinned or registered host memory and IPC
//!   mappings count in neither. A synchronous allocation freed with `cuMemFreeAsync` counts in
//!   both until the driver releases its memory at a synchronization (`state/pool.rs`): the driver
//!   still holds it.
//!
//! Allocation addresses are page-aligned, each allocation its own mapping. (The real driver packs
//! small allocations 512 bytes apart in shared pages; programs must not rely on either.)
//!
//! Pitch: `cuMemAllocPitch_v2` returns `pitch = round_up(WidthInBytes, 512)` and allocates
//! `pitch * Height` bytes.

use std::ffi::{c_int, c_uint};

use crate::errors::Fault;
use crate::model::context::CtxRef;

/// Pitch alignment of `cuMemAllocPitch_v2`.
pub const PITCH_ALIGN: usize = 512;

/// One device's memory accounting (see the module documentation).
#[derive(Debug, Clone)]
pub struct DeviceMem {
    pub limit: u64,
    pub used: u64,
    /// Held by other processes, no more than `limit`.
    pub others: u64,
    pub live_bytes: u64,
    pub live_allocs: u64,
}

impl DeviceMem {
    /// A device of `limit` bytes of which other processes hold `others`.
    pub fn beside(limit: u64, others: u64) -> Self {
        DeviceMem {
            limit,
            used: 0,
            others: others.min(limit),
            live_bytes: 0,
            live_allocs: 0,
        }
    }

    /// Takes `n` bytes, or fails with out-of-memory leaving everything as it was.
    pub fn charge(&mut self, n: u64) -> Result<(), Fault> {
        match self.used.checked_add(n) {
            Some(total) if total <= self.limit - self.others => {
                self.used = total;
                Ok(())
            }
            _ => Err(Fault::OutOfMemory),
        }
    }

    pub fn uncharge(&mut self, n: u64) {
        self.used = self.used.saturating_sub(n);
    }

    /// What no process holds.
    pub fn free(&self) -> u64 {
        self.limit
            .saturating_sub(self.others)
            .saturating_sub(self.used)
    }

    pub fn add_live(&mut self, bytes: u64) {
        self.live_bytes += bytes;
        self.live_allocs += 1;
    }

    pub fn drop_live(&mut self, bytes: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
        self.live_allocs = self.live_allocs.saturating_sub(1);
    }
}

/// What made an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    /// `cuMemAlloc_v2`.
    Device,
    /// `cuMemAllocPitch_v2`.
    Pitched { pitch: u64 },
    /// `cuMemAllocManaged`.
    Managed,
    /// `cuMemAllocAsync`/`cuMemAllocFromPoolAsync`, from a pool block of `cap` bytes.
    Async { pool: usize, cap: u64 },
    /// `cuMemAllocHost_v2`/`cuMemHostAlloc`.
    Host { flags: c_uint },
    /// `cuMemHostRegister_v2`: the program's own memory, registered (never unmapped here).
    Registered { flags: c_uint },
    /// `cuIpcOpenMemHandle_v2`: another process's allocation mapped here.
    IpcImported,
}

impl AllocKind {
    /// Charged to `DeviceMem::used` by the allocation itself (async blocks are charged by their
    /// pool).
    pub fn charged(self) -> bool {
        matches!(
            self,
            AllocKind::Device | AllocKind::Pitched { .. } | AllocKind::Managed
        )
    }

    /// Page-locked host memory, allocated or registered.
    pub fn pinned_host(self) -> bool {
        matches!(self, AllocKind::Host { .. } | AllocKind::Registered { .. })
    }

    /// Counted in `live_bytes`/`live_allocs`.
    pub fn counted_live(self) -> bool {
        matches!(
            self,
            AllocKind::Device
                | AllocKind::Pitched { .. }
                | AllocKind::Managed
                | AllocKind::Async { .. }
        )
    }
}

/// A live allocation.
#[derive(Debug)]
pub struct Alloc {
    pub base: u64,
    /// Bytes the program got (`pitch * height` for pitched allocations).
    pub size: u64,
    /// Length of the host mapping at `base`.
    pub map_len: usize,
    pub kind: AllocKind,
    pub ctx: CtxRef,
    /// Unique id (`CU_POINTER_ATTRIBUTE_BUFFER_ID`).
    pub buffer_id: u64,
    /// The memory file backing this allocation once it was exported through IPC.
    pub ipc_fd: Option<c_int>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_stop_at_the_limit() {
        let mut m = DeviceMem::beside(1000, 0);
        assert!(m.charge(600).is_ok());
        assert_eq!(m.charge(401), Err(Fault::OutOfMemory));
        assert!(m.charge(400).is_ok());
        assert_eq!(m.free(), 0);
        m.uncharge(1000);
        assert_eq!(m.free(), 1000);
        assert_eq!(m.charge(u64::MAX), Err(Fault::OutOfMemory));
    }

    #[test]
    fn other_processes_take_their_share_from_the_start() {
        let mut m = DeviceMem::beside(1000, 600);
        assert_eq!(m.free(), 400);
        assert_eq!(m.charge(401), Err(Fault::OutOfMemory));
        assert!(m.charge(400).is_ok());
        assert_eq!((m.used, m.free()), (400, 0));
        m.uncharge(400);
        assert_eq!((m.used, m.free()), (0, 400));
        // No more than the device has.
        let mut m = DeviceMem::beside(1000, 5000);
        assert_eq!((m.others, m.free()), (1000, 0));
        assert_eq!(m.charge(1), Err(Fault::OutOfMemory));
    }
}
