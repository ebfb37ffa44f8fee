//! The shared counters of live device memory per stack that [`super::by_stack`] reads: atomics
//! in chunks of [`CHUNK`] stacks, made on first use per device, which the threads' deltas fold
//! into ([`add_shared`]). Allocations without a stack are counted under [`NO_STACK`].

use std::sync::atomic::{AtomicI64, AtomicPtr, Ordering::Relaxed};

use super::devices::DEVICES;
use super::record::NONE;

pub(super) const CHUNK_BITS: usize = 10;
/// Stacks per chunk.
pub const CHUNK: usize = 1 << CHUNK_BITS;
/// Stacks that can be counted: the stack table's capacity, plus one slot for [`NO_STACK`].
pub(super) const SLOTS: usize = crate::stack::MAX_STACKS + CHUNK;
pub(super) const CHUNKS: usize = SLOTS / CHUNK;
/// Where allocations without a stack are counted.
pub const NO_STACK: usize = crate::stack::MAX_STACKS;

#[derive(Default)]
pub(super) struct Cell {
    pub(super) bytes: AtomicI64,
    pub(super) allocations: AtomicI64,
}

pub(super) type Chunk = [Cell; CHUNK];

/// Per device, the chunks of counters.
pub(super) struct Device {
    pub(super) chunks: [AtomicPtr<Chunk>; CHUNKS],
}

pub(super) static DEVICES_: [Device; DEVICES] = [const {
    Device {
        chunks: [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS],
    }
}; DEVICES];

pub(super) fn slot(device: i32) -> usize {
    (device.max(0) as usize).min(DEVICES - 1)
}

/// The counters' index of `stack` ([`NO_STACK`] for none).
#[inline]
pub(super) fn index(stack: u32) -> usize {
    if stack == NONE || stack as usize >= NO_STACK {
        NO_STACK
    } else {
        stack as usize
    }
}

/// The cell of `index` on device slot `d`, making its chunk on first use.
#[inline]
fn cell(d: usize, index: usize) -> &'static Cell {
    let slot = &DEVICES_[d].chunks[index >> CHUNK_BITS];
    let mut p = slot.load(std::sync::atomic::Ordering::Acquire);
    if p.is_null() {
        let fresh = Box::into_raw(Box::new(std::array::from_fn::<Cell, CHUNK, _>(|_| {
            Cell::default()
        })));
        match slot.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
        ) {
            Ok(_) => p = fresh,
            Err(existing) => {
                // SAFETY: fresh was never published; it is ours to free.
                drop(unsafe { Box::from_raw(fresh) });
                p = existing;
            }
        }
    }
    // SAFETY: published chunks are leaked boxes, never freed (a forked child zeroes them).
    unsafe { &(*p)[index & (CHUNK - 1)] }
}

/// Adds to the shared counters of stack index `index` on device slot `d`.
pub(super) fn add_shared(d: usize, index: usize, bytes: i64, allocations: i64) {
    let c = cell(d, index);
    c.bytes.fetch_add(bytes, Relaxed);
    c.allocations.fetch_add(allocations, Relaxed);
}
