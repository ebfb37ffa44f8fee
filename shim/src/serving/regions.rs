//! What the pool tells the process's NVTX tool ([`crate::nvtx`]: compute-sanitizer's, when it
//! runs the program) while one is attached, so that its memcheck sees each pooled block as the
//! allocation it stands for:
//!
//! - each chunk is a heap of a sub-allocator (`nvtxMemHeapRegister`) once the driver gave it,
//!   and goes (`nvtxMemHeapUnregister`, after the regions still in it) while its memory is still
//!   allocated: before the chunk goes back to the driver (a trim, a dedicated chunk's block
//!   freed, the give-back thread's `cuMemFree` later) or before its context is destroyed
//!   (`cuCtxDestroy`, `cuDevicePrimaryCtxReset`). A heap whose memory went without that (the
//!   last `cuDevicePrimaryCtxRelease`) is forgotten without a call: compute-sanitizer drops a
//!   pool whose allocation is freed, and refuses its unregistration afterwards;
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
    // A chunk of a destroyed context at the same address, if its books were not dropped yet:
    // its memory went with the context, and the tool with it.
    forget(base);
    let heap = nvtx::heap_register(base, size);
    lock(books()).heaps.insert(base, (base + size, heap));
}

/// Takes the chunk at `base` out of the books: its heap (if the tool gave one) and the blocks
/// still registered in it.
fn take(base: u64) -> Option<(Option<Heap>, Vec<u64>)> {
    let mut b = lock(books());
    let (end, heap) = b.heaps.remove(&base)?;
    let mut inside = Vec::new();
    b.regions.retain(|&a, _| {
        let keep = a < base || a >= end;
        if !keep {
            inside.push(a);
        }
        keep
    });
    inside.sort_unstable();
    Some((heap, inside))
}

/// The chunk at `base` is about to go back to the driver, its memory still allocated: its
/// heap goes first, after the regions still registered in it (none when the pool trims an idle
/// chunk; a live block's before its context is destroyed). The guide has a pool unregistered
/// before its allocation is freed; NVTX's header lets the heap take its regions with it, but
/// the shim does not ask that of the tool.
pub fn chunk_removed(base: u64) {
    let Some((heap, inside)) = take(base) else {
        return;
    };
    if let Some(h) = heap {
        nvtx::regions_unregister(&inside);
        nvtx::heap_unregister(h, base);
    }
}

/// The chunk at `base` is gone already (its context was destroyed, and the driver freed it): its
/// books are dropped without a call. compute-sanitizer unregisters a pool itself when its
/// allocation is freed; unregistering it again is refused ("Call to nvtxMemHeapUnregister
/// failed: One or more of the parameters is invalid").
fn forget(base: u64) {
    if let Some((heap, _)) = take(base) {
        nvtx::heap_dropped(heap, base);
    }
}

/// The context of the chunks `ranges` (start, end) is about to be destroyed: their heaps go now,
/// while their memory is still allocated. If the destroy then fails, the chunks stay in the pool
/// without a heap (the tool sees each as one allocation).
pub fn context_closing(ranges: &[(u64, u64)]) {
    for &(base, end) in ranges {
        chunk_removed(base);
        lock(books()).heaps.insert(base, (end, None));
    }
}

/// The chunks `ranges` (start, end) went with their context: their books are dropped, with no
/// call (see [`forget`]). Where the shim could not unregister them first (the last
/// `cuDevicePrimaryCtxRelease`, which cannot be told from another before it returns), the tool
/// dropped them with the memory.
pub fn context_gone(ranges: &[(u64, u64)]) {
    for &(base, _) in ranges {
        forget(base);
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
        nvtx::regions_unregister(&[addr]);
    }
}

/// In the child of a fork: no registrations (its pools are new); the parent's books are leaked,
/// not dropped, as their lock may be held by a thread that does not exist here.
pub fn reset_after_fork() {
    if global::get(&BOOKS).is_some() {
        global::replace(&BOOKS, Mutex::default());
    }
}
