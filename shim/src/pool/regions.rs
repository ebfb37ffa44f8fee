//! What the pool tells the process's NVTX tool ([`crate::nvtx`]: compute-sanitizer's, when it
//! runs the program) while one is attached, so that its memcheck sees each pooled block as the
//! allocation it stands for:
//!
//! - each chunk is a heap of a sub-allocator (`nvtxMemHeapRegister`) once the driver gave it,
//!   and goes (`nvtxMemHeapUnregister`) before the chunk goes back to the driver (a trim, a
//!   dedicated chunk's block freed, the give-back thread's `cuMemFree` later) or after its
//!   context went (destroy, reset, last release: the driver freed it);
//! - each block handed out, by an arena or a thread's cache, is a region of its chunk's heap
//!   (`nvtxMemRegionsRegister`) at the block's address with the size the program asked for, and
//!   is unregistered (`nvtxMemRegionsUnregister`) when the program frees it, before the pool can
//!   hand it out again.
//!
//! A heap holds only its registered regions: the tool reports an access anywhere else in the
//! chunk, so a write past a block's end or a use after its free is caught. Blocks are asked of
//! the sub-allocator with [`redzone`] bytes more than the program asked (256 by default,
//! `CUGUARD_POOL_REDZONE`), which no region covers, so that even a write just past a block whose
//! size is a multiple of the alignment lands in memory that is no block's.
//!
//! The books here (which heap each chunk is, which blocks are registered) are kept by address
//! under one lock, never held while the tool is called, so a block freed with another context
//! current, or from another thread than the one that got it, is unregistered all the same. When
//! the tool gives no heap handle for a chunk, its blocks are not registered (the tool then sees
//! the chunk as one allocation, as without registration). A forked child starts with empty books:
//! its pools are new.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::AtomicPtr;

use crate::nvtx::{self, Heap};
use crate::process::global::{self, lock};

/// The registrations in force.
#[derive(Default)]
struct Books {
    /// Chunk start → (its end, the tool's heap; `None` when the tool gave no handle).
    heaps: BTreeMap<u64, (u64, Option<Heap>)>,
    /// Registered blocks: address → size registered.
    regions: HashMap<u64, u64>,
}

static BOOKS: AtomicPtr<Mutex<Books>> = AtomicPtr::new(std::ptr::null_mut());

fn books() -> &'static Mutex<Books> {
    global::get_or_create(&BOOKS, Mutex::default)
}

/// Bytes to ask of the sub-allocator beyond a request while the tool is attached.
#[inline]
pub fn redzone() -> u64 {
    nvtx::redzone()
}

/// A chunk `[base, base + size)` was added to a pool: its heap.
pub fn chunk_added(base: u64, size: u64) {
    // A chunk of a destroyed context at the same address, if its heap was not dropped yet.
    chunk_removed(base);
    let heap = nvtx::heap_register(base, size);
    lock(books()).heaps.insert(base, (base + size, heap));
}

/// The chunk at `base` is about to go back to the driver: its heap goes first.
pub fn chunk_removed(base: u64) {
    let heap = {
        let mut b = lock(books());
        let Some((end, heap)) = b.heaps.remove(&base) else {
            return;
        };
        b.regions.retain(|&a, _| a < base || a >= end);
        heap
    };
    if let Some(h) = heap {
        nvtx::heap_unregister(h);
    }
}

/// The chunks `ranges` (start, end) went with their context: their heaps go.
pub fn context_gone(ranges: &[(u64, u64)]) {
    for &(base, _) in ranges {
        chunk_removed(base);
    }
}

/// The pool handed out the block at `addr` for a request of `size` bytes: its region.
pub fn block_out(addr: u64, size: u64) {
    let heap = {
        let mut b = lock(books());
        let heap = match b.heaps.range(..=addr).next_back() {
            Some((_, &(end, Some(h)))) if addr < end => h,
            _ => return,
        };
        b.regions.insert(addr, size);
        heap
    };
    nvtx::region_register(heap, addr, size);
}

/// The program frees `addr`: if it is a registered block, its region goes now, before the pool
/// takes the block back.
pub fn block_in(addr: u64) {
    if lock(books()).regions.remove(&addr).is_some() {
        nvtx::region_unregister(addr);
    }
}

/// In the child of a fork: no registrations (its pools are new); the parent's books are leaked,
/// not dropped, as their lock may be held by a thread that does not exist here.
pub fn reset_after_fork() {
    if global::get(&BOOKS).is_some() {
        global::replace(&BOOKS, Mutex::default());
    }
}
