//! The driver's stream-ordered memory pools (`cuMemAllocAsync`'s) and what each holds idle,
//! asked of the driver when an allocation is refused and when the report is written.
//!
//! A device's default pool and its current pool (`cuDeviceSetMemPool`) are asked by device;
//! pools the program created are known from the allocations made from them
//! (`cuMemAllocFromPoolAsync`, [`seen`]) and forgotten when destroyed ([`destroyed`]), so a
//! destroyed handle is never asked about. Each answer is three `cuMemPoolGetAttribute` calls:
//! reserved, used and the release threshold; idle is reserved less used (blocks freed with
//! `cuMemFreeAsync`, from the moment the free is enqueued, and the rounding of live ones: measured
//! on the H100, docs/gpu-runs/2026-12-06-run29). Nothing here allocates device memory or takes a
//! lock of the shim's.
//!
//! Created pools: at most [`MAX_SEEN`] are remembered (a slot each; an allocation from a pool
//! already known costs a scan of the slots, [`known`], and nothing more).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::real;
use crate::ffi::*;

/// Created pools remembered.
pub const MAX_SEEN: usize = 16;

/// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`, `_RESERVED_MEM_CURRENT`, `_USED_MEM_CURRENT`.
const ATTR_RELEASE_THRESHOLD: i32 = 4;
const ATTR_RESERVED_MEM_CURRENT: i32 = 5;
const ATTR_USED_MEM_CURRENT: i32 = 7;

/// `(handle, device)` of the created pools the program allocated from (handle 0: a free slot).
static SEEN: [(AtomicU64, AtomicU64); MAX_SEEN] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; MAX_SEEN];

/// Whether `pool` is remembered already: one relaxed load a slot, for the allocation path.
#[inline]
pub fn known(pool: CUmemoryPool) -> bool {
    let h = pool as u64;
    SEEN.iter().any(|(k, _)| k.load(Relaxed) == h)
}

/// The program allocated from `pool` in a context of `device` (the pool's memory is counted on
/// that device: the pool's own location, given to `cuMemPoolCreate`, is not seen).
#[inline]
pub fn seen(pool: CUmemoryPool, device: i32) {
    let h = pool as u64;
    if h == 0 || device < 0 || known(pool) {
        return;
    }
    for (k, d) in &SEEN {
        if k.compare_exchange(0, h, Relaxed, Relaxed).is_ok() {
            d.store(device as u64, Relaxed);
            return;
        }
    }
}

/// The program destroyed `pool` (whether or not the driver agreed: a handle it refused to
/// destroy is remembered again once allocated from).
pub fn destroyed(pool: CUmemoryPool) {
    let h = pool as u64;
    for (k, _) in &SEEN {
        let _ = k.compare_exchange(h, 0, Relaxed, Relaxed);
    }
}

/// In the child of a fork: the parent's pools are not the child's.
pub fn reset_after_fork() {
    for (k, _) in &SEEN {
        k.store(0, Relaxed);
    }
}

/// One pool, as the driver says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolState {
    pub handle: u64,
    /// The device's default pool.
    pub default: bool,
    pub reserved: u64,
    pub used: u64,
    pub release_threshold: u64,
}

impl PoolState {
    /// Reserved and not used: blocks freed with `cuMemFreeAsync` (from the moment the free is
    /// enqueued, as the driver counts them), and the rounding of live blocks.
    pub fn idle(&self) -> u64 {
        self.reserved.saturating_sub(self.used)
    }

    /// The pool for people: "the default memory pool of device 0", "memory pool 0x…".
    pub fn name(&self, device: i32) -> String {
        if self.default {
            format!("the default memory pool of device {device}")
        } else {
            format!("memory pool {:#x} of device {device}", self.handle)
        }
    }
}

/// The pools of `device` that hold memory: its default pool, its current pool, and the created
/// pools of that device the program allocated from; none when the driver lacks the entries.
pub fn on_device(device: i32) -> Vec<PoolState> {
    let (Some(default_of), Some(current_of)) = (
        real::cuDeviceGetDefaultMemPool(),
        real::cuDeviceGetMemPool(),
    ) else {
        return Vec::new();
    };
    let mut handles: Vec<(u64, bool)> = Vec::new();
    let ask = |f: unsafe extern "C" fn(*mut CUmemoryPool, CUdevice) -> CUresult| {
        let mut p: CUmemoryPool = std::ptr::null_mut();
        // SAFETY: valid out-parameter; any device ordinal is answered with an error or a pool.
        (unsafe { f(&mut p, device) } == CUDA_SUCCESS && !p.is_null()).then_some(p as u64)
    };
    let default = ask(default_of);
    if let Some(h) = default {
        handles.push((h, true));
    }
    if let Some(h) = ask(current_of).filter(|h| Some(*h) != default) {
        handles.push((h, false));
    }
    for (k, d) in &SEEN {
        let h = k.load(Relaxed);
        if h != 0 && d.load(Relaxed) == device as u64 && !handles.iter().any(|(k, _)| *k == h) {
            handles.push((h, false));
        }
    }
    handles
        .into_iter()
        .filter_map(|(handle, default)| ask_pool(handle, default))
        .filter(|p| p.reserved > 0)
        .collect()
}

/// What the driver says of `handle`, `None` when it does not answer.
fn ask_pool(handle: u64, default: bool) -> Option<PoolState> {
    let get = real::cuMemPoolGetAttribute()?;
    let attr = |a: i32| -> Option<u64> {
        let mut v: u64 = 0;
        // SAFETY: these three attributes are cuuint64_t, written through a valid pointer; the
        // handle is a pool the driver gave and the program has not destroyed.
        let r = unsafe {
            get(
                handle as CUmemoryPool,
                a,
                (&mut v as *mut u64).cast::<c_void>(),
            )
        };
        (r == CUDA_SUCCESS).then_some(v)
    };
    Some(PoolState {
        handle,
        default,
        reserved: attr(ATTR_RESERVED_MEM_CURRENT)?,
        used: attr(ATTR_USED_MEM_CURRENT)?,
        release_threshold: attr(ATTR_RELEASE_THRESHOLD)?,
    })
}
