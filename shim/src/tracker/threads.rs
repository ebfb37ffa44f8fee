//! The threads' own counters ([`Counters`]) and the registry of those of running threads: what
//! [`super::counters`] counts into on the allocation path, and what readers add up. A thread's
//! live bytes by stack not yet folded into the shared counters ([`super::stack_cells`]) are here
//! too ([`StackDelta`]), so that [`super::by_stack`] reads them ([`stack_deltas`]) without the
//! counting above.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, Ordering::Relaxed};

use super::devices::DEVICES;
use crate::process::global::lock;

/// One device's counters of one thread.
#[derive(Default)]
pub struct DeviceCounters {
    pub allocations: AtomicU64,
    pub frees: AtomicU64,
    pub total_allocated: AtomicU64,
    /// Live bytes not yet folded into the shared total.
    pub live_delta: AtomicI64,
}

/// A thread's live bytes and allocations by stack not yet folded into [`super::by_stack`]: for
/// one (device slot, stack index), the `key`.
pub struct StackDelta {
    /// `slot << 32 | index`, or [`NO_KEY`].
    pub(super) key: AtomicU64,
    pub(super) bytes: AtomicI64,
    pub(super) allocations: AtomicI64,
}

/// No stack delta held.
pub(super) const NO_KEY: u64 = u64::MAX;

impl StackDelta {
    pub(super) const fn new() -> Self {
        StackDelta {
            key: AtomicU64::new(NO_KEY),
            bytes: AtomicI64::new(0),
            allocations: AtomicI64::new(0),
        }
    }

    /// Folds the delta into the shared counters: only its own thread (or that thread's exit)
    /// writes it, so plain loads and stores do.
    #[inline]
    pub(super) fn fold(&self) {
        let key = self.key.load(Relaxed);
        if key == NO_KEY {
            return;
        }
        let (bytes, allocations) = (self.bytes.load(Relaxed), self.allocations.load(Relaxed));
        self.bytes.store(0, Relaxed);
        self.allocations.store(0, Relaxed);
        if bytes != 0 || allocations != 0 {
            super::stack_cells::add_shared(
                (key >> 32) as usize,
                key as u32 as usize,
                bytes,
                allocations,
            );
        }
    }
}

/// One thread's counters.
pub struct Counters {
    pub devices: [DeviceCounters; DEVICES],
    /// Live bytes by stack not yet folded.
    pub(super) stack: StackDelta,
    pub(super) ops: AtomicU64,
    /// Calls through the shim's exported symbols (the report's `doors.exported`).
    pub(super) exported_calls: AtomicU64,
}

impl Counters {
    pub(super) fn new() -> Self {
        Counters {
            devices: std::array::from_fn(|_| DeviceCounters::default()),
            stack: StackDelta::new(),
            ops: AtomicU64::new(0),
            exported_calls: AtomicU64::new(0),
        }
    }
}

/// The running threads' unfolded live bytes by stack on device slot `slot`: (index, bytes,
/// allocations).
pub fn stack_deltas(slot: usize) -> Vec<(usize, i64, i64)> {
    let running: Vec<&'static Counters> = lock(registry()).0.clone();
    running
        .iter()
        .filter_map(|c| {
            let key = c.stack.key.load(Relaxed);
            (key != NO_KEY && (key >> 32) as usize == slot).then(|| {
                (
                    key as u32 as usize,
                    c.stack.bytes.load(Relaxed),
                    c.stack.allocations.load(Relaxed),
                )
            })
        })
        .collect()
}

/// Counters of running threads, and free ones to reuse.
pub(super) type Registry = Mutex<(Vec<&'static Counters>, Vec<&'static Counters>)>;

pub(super) static REGISTRY: AtomicPtr<Registry> = AtomicPtr::new(std::ptr::null_mut());

/// The registry, created on first use; a forked child replaces it (see
/// [`super::counters::reset_after_fork`]).
pub(super) fn registry() -> &'static Registry {
    crate::process::global::get_or_create(&REGISTRY, || Mutex::new((Vec::new(), Vec::new())))
}
