//! Device memory cuguard's pool gave back that the driver may not have returned yet, per device,
//! for the report's reconciliation (`report/reconcile.rs`).
//!
//! A chunk the pool gives back with `cuMemFreeAsync` on the legacy stream (to spare the program's
//! thread the wait of `cuMemFree`) stays taken on the device until a synchronizing call: measured
//! on the H200, 3 GiB freed that way stayed used in every 100 ms sample for a second and came back
//! at `cuCtxSynchronize`. So the pool counts here what it gives back that way
//! ([`freed_async`]) and forgets it when it synchronizes a context of the device itself
//! ([`synchronized`]). The program's own synchronizations go to the driver unseen (they are
//! not hooked), so what is counted is what *may* still be held: the reconciliation counts no more
//! of it than what the device says is used leaves.
//!
//! One relaxed atomic per device; nothing on the allocation path. A forked child starts with
//! nothing counted ([`reset_after_fork`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::counters::DEVICES;

static PENDING: [AtomicU64; DEVICES] = [const { AtomicU64::new(0) }; DEVICES];

fn slot(device: i32) -> Option<&'static AtomicU64> {
    PENDING.get(usize::try_from(device).ok()?)
}

/// The pool gave `bytes` back on `device` with `cuMemFreeAsync`.
pub fn freed_async(device: i32, bytes: u64) {
    if let Some(s) = slot(device) {
        s.fetch_add(bytes, Relaxed);
    }
}

/// The pool synchronized a context of `device` (`cuCtxSynchronize`): the driver has returned
/// what was given back before.
pub fn synchronized(device: i32) {
    if let Some(s) = slot(device) {
        s.store(0, Relaxed);
    }
}

/// Bytes given back on `device` with `cuMemFreeAsync` since the pool last synchronized it.
pub fn pending(device: i32) -> u64 {
    slot(device).map_or(0, |s| s.load(Relaxed))
}

/// In the child of a fork: the parent's contexts are not the child's.
pub fn reset_after_fork() {
    for s in &PENDING {
        s.store(0, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_until_a_synchronization() {
        // Device 15: no other test gives memory back there.
        freed_async(15, 3 << 30);
        freed_async(15, 1 << 20);
        assert_eq!(pending(15), (3 << 30) + (1 << 20));
        synchronized(15);
        assert_eq!(pending(15), 0);
        freed_async(-1, 1);
        freed_async(99, 1);
        assert_eq!(pending(-1), 0);
    }
}
