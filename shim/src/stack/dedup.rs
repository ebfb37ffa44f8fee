//! The stack table: whole stacks deduplicated by content, each given a small dense id.
//!
//! ```text
//!   INDEX ──► Index { mask, slots: [AtomicU64] }     open addressing, linear probing
//!                          slot = (hash >> 32) << 32 | (id + 1)      0 = empty
//!   CHUNKS[id / CHUNK][id % CHUNK] ──► Rec { ips: Box<[u64]>, flags }
//! ```
//!
//! - Lookups take no lock: load the index, probe, compare the ips of the record a matching slot
//!   names. Records and index tables are never freed or mutated after they are published (a
//!   record's `flags` aside), so a reader holding a stale index only misses entries, and a miss
//!   is settled under the insert lock.
//! - Inserts (a stack never seen before: rare once a program is warm) take `INSERT_LOCK`,
//!   re-probe, assign the next id, publish the record and then its slot. The index doubles when
//!   half full; the old table is leaked (geometric sizes: the leak is at most the live size).
//! - Bounded: at most [`MAX_STACKS`] stacks; past that, inserts fail and capture returns `None`.
//!
//! Fork: `INSERT_LOCK` is held only across the insert's few stores and, when the index grows,
//! one allocation. A fork at that moment leaves it locked in the child; [`reset_after_fork`]
//! clears it, and without that call the lock's bounded spin makes the child's new stacks fail
//! instead of deadlocking.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, Ordering};

/// The most distinct stacks kept (ids are `0..MAX_STACKS`).
pub(crate) const MAX_STACKS: usize = 1 << 20;
const CHUNK_BITS: usize = 10;
const CHUNK: usize = 1 << CHUNK_BITS;
const CHUNKS: usize = MAX_STACKS / CHUNK;
const INITIAL_SLOTS: usize = 4096;

/// Record flag: some ip of the stack fell in no module the unwinder knew when it was captured,
/// so the unwind may have gone wrong there; a later hit re-checks the module list.
pub(crate) const FLAG_UNKNOWN_MODULE: u8 = 1;

pub(crate) struct Rec {
    pub(crate) ips: Box<[u64]>,
    pub(crate) flags: AtomicU8,
}

type Chunk = [AtomicPtr<Rec>; CHUNK];

struct Index {
    mask: usize,
    slots: Box<[AtomicU64]>,
}

static INDEX: AtomicPtr<Index> = AtomicPtr::new(std::ptr::null_mut());
static RECS: [AtomicPtr<Chunk>; CHUNKS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNKS];
/// Number of published records; ids `0..COUNT` are all present.
static COUNT: AtomicU32 = AtomicU32::new(0);
static INSERT_LOCK: SpinLock = SpinLock::new();

/// A try-lock with a bounded spin: it never blocks forever, so a lock left held by a thread that
/// no longer exists (after fork) costs failed operations, not a hang.
pub(crate) struct SpinLock(AtomicBool);

impl SpinLock {
    pub(crate) const fn new() -> Self {
        SpinLock(AtomicBool::new(false))
    }
    /// Tries for a bounded time (about 1e5 spins, with yields: well under a second).
    pub(crate) fn lock_bounded(&self) -> bool {
        for i in 0..100_000u32 {
            if self.try_lock() {
                return true;
            }
            if i % 64 == 63 {
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            } else {
                std::hint::spin_loop();
            }
        }
        false
    }
    pub(crate) fn try_lock(&self) -> bool {
        !self.0.load(Ordering::Relaxed)
            && self
                .0
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }
    pub(crate) fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Hash of an ip list. Each ip is mixed with its position and multiplied independently of the
/// others (the multiplies pipeline instead of forming one long chain: this runs on every
/// capture), then the sum gets a final avalanche. Never 0.
#[inline]
pub(crate) fn hash(ips: &[u64]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    const P: u64 = 0xc2b2_ae3d_27d4_eb4f;
    let mut h = (ips.len() as u64).wrapping_mul(P);
    for (i, &ip) in ips.iter().enumerate() {
        h = h.wrapping_add(
            (ip ^ (i as u64).wrapping_mul(P))
                .wrapping_mul(K)
                .rotate_left(29),
        );
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h | 1 << 63
}

#[inline]
fn rec(id: u32) -> Option<&'static Rec> {
    let chunk = RECS.get(id as usize >> CHUNK_BITS)?.load(Ordering::Acquire);
    if chunk.is_null() {
        return None;
    }
    // SAFETY: chunks are allocated once, published with Release and never freed.
    let chunk = unsafe { &*chunk };
    let p = chunk[id as usize & (CHUNK - 1)].load(Ordering::Acquire);
    // SAFETY: records are published with Release after being fully built and are never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Finds the id of a stack already in the table. Lock-free.
#[inline]
pub(crate) fn lookup(h: u64, ips: &[u64]) -> Option<(u32, &'static Rec)> {
    let index = INDEX.load(Ordering::Acquire);
    if index.is_null() {
        return None;
    }
    // SAFETY: index tables are published with Release once built and never freed.
    let index = unsafe { &*index };
    probe(index, h, ips)
}

#[inline]
fn probe(index: &Index, h: u64, ips: &[u64]) -> Option<(u32, &'static Rec)> {
    let tag = h >> 32;
    let mut i = h as usize & index.mask;
    loop {
        let v = index.slots[i].load(Ordering::Acquire);
        if v == 0 {
            return None;
        }
        if v >> 32 == tag {
            let id = (v as u32).wrapping_sub(1);
            if let Some(r) = rec(id)
                && *r.ips == *ips
            {
                return Some((id, r));
            }
        }
        i = (i + 1) & index.mask;
    }
}

fn new_index(slots: usize) -> Box<Index> {
    Box::new(Index {
        mask: slots - 1,
        slots: (0..slots).map(|_| AtomicU64::new(0)).collect(),
    })
}

fn put(index: &Index, h: u64, id: u32) {
    let mut i = h as usize & index.mask;
    while index.slots[i].load(Ordering::Relaxed) != 0 {
        i = (i + 1) & index.mask;
    }
    index.slots[i].store((h >> 32) << 32 | u64::from(id + 1), Ordering::Release);
}

/// Inserts a stack (or finds it, when another thread inserted it first). `None` when the table
/// is full or the insert lock could not be had.
pub(crate) fn insert(h: u64, ips: &[u64], flags: u8) -> Option<u32> {
    // Allocate before taking the lock.
    let record = Box::new(Rec {
        ips: ips.into(),
        flags: AtomicU8::new(flags),
    });
    if !INSERT_LOCK.lock_bounded() {
        return None;
    }
    let result = insert_locked(h, ips, record);
    INSERT_LOCK.unlock();
    result
}

fn insert_locked(h: u64, ips: &[u64], record: Box<Rec>) -> Option<u32> {
    let mut index = INDEX.load(Ordering::Acquire);
    if index.is_null() {
        index = Box::into_raw(new_index(INITIAL_SLOTS));
        INDEX.store(index, Ordering::Release);
    }
    // SAFETY: published tables are never freed; only this (locked) thread changes INDEX.
    let mut idx = unsafe { &*index };
    if let Some((id, _)) = probe(idx, h, ips) {
        return Some(id);
    }
    let id = COUNT.load(Ordering::Relaxed);
    if id as usize >= MAX_STACKS {
        return None;
    }
    if (id as usize + 1) * 2 > idx.slots.len() {
        let bigger = new_index(idx.slots.len() * 2);
        for n in 0..id {
            let r = rec(n)?;
            put(&bigger, hash(&r.ips), n);
        }
        let bigger = Box::into_raw(bigger);
        INDEX.store(bigger, Ordering::Release);
        // The old table is leaked on purpose: lock-free readers may still be probing it.
        // SAFETY: just published; never freed.
        idx = unsafe { &*bigger };
    }
    let slot = &RECS[id as usize >> CHUNK_BITS];
    if slot.load(Ordering::Acquire).is_null() {
        let chunk: Box<Chunk> = Box::new([const { AtomicPtr::new(std::ptr::null_mut()) }; CHUNK]);
        slot.store(Box::into_raw(chunk), Ordering::Release);
    }
    // SAFETY: the chunk was published above or earlier and is never freed.
    let chunk = unsafe { &*slot.load(Ordering::Acquire) };
    chunk[id as usize & (CHUNK - 1)].store(Box::into_raw(record), Ordering::Release);
    COUNT.store(id + 1, Ordering::Release);
    put(idx, h, id);
    Some(id)
}

/// Every stack in the table, by id.
pub(crate) fn all() -> Vec<(u32, Vec<u64>)> {
    let n = COUNT.load(Ordering::Acquire);
    (0..n)
        .filter_map(|id| rec(id).map(|r| (id, r.ips.to_vec())))
        .collect()
}

/// The stacks with ids `from..` published so far (the history writes each once).
pub(crate) fn since(from: u32) -> Vec<(u32, Vec<u64>)> {
    let n = COUNT.load(Ordering::Acquire);
    (from..n)
        .filter_map(|id| rec(id).map(|r| (id, r.ips.to_vec())))
        .collect()
}

/// The words of stack `id`, when it exists.
pub(crate) fn words(id: u32) -> Option<Vec<u64>> {
    (id < COUNT.load(Ordering::Acquire))
        .then(|| rec(id).map(|r| r.ips.to_vec()))
        .flatten()
}

/// Clears the insert lock in a forked child (where the thread that held it does not exist).
pub(crate) fn reset_after_fork() {
    INSERT_LOCK.unlock();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`insert`], tried again while it gives up: its lock is bounded, so on a loaded machine
    /// (other tests' threads inserting, a rehash descheduled) an insert may answer `None`.
    fn insert_retrying(h: u64, ips: &[u64]) -> u32 {
        for _ in 0..1000 {
            if let Some(id) = insert(h, ips, 0) {
                return id;
            }
            std::thread::yield_now();
        }
        panic!("the table's lock was never free");
    }

    #[test]
    fn insert_and_lookup_dedup() {
        // The table is process-global; use ips no other test produces.
        let base = 0xdead_0000_0000u64;
        let mut ids = Vec::new();
        for n in 0..5000u64 {
            let ips = [base + n, base + 1, base + 2];
            let h = hash(&ips);
            let id = insert_retrying(h, &ips);
            ids.push(id);
            assert_eq!(lookup(h, &ips).map(|x| x.0), Some(id));
        }
        for n in 0..5000u64 {
            let ips = [base + n, base + 1, base + 2];
            let h = hash(&ips);
            assert_eq!(lookup(h, &ips).map(|x| x.0), Some(ids[n as usize]));
            assert_eq!(insert_retrying(h, &ips), ids[n as usize]);
        }
        let all = all();
        for (n, id) in ids.iter().enumerate() {
            let (got_id, ips) = &all[*id as usize];
            assert_eq!(got_id, id);
            assert_eq!(ips[0], base + n as u64);
        }
    }

    #[test]
    fn concurrent_inserts_give_one_id_per_stack() {
        let base = 0xbeef_0000_0000u64;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    (0..2000u64)
                        .map(|n| {
                            let ips = [base + n, n];
                            let h = hash(&ips);
                            lookup(h, &ips)
                                .map(|x| x.0)
                                .unwrap_or_else(|| insert_retrying(h, &ips))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<Vec<u32>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for r in &results[1..] {
            assert_eq!(r, &results[0]);
        }
    }

    #[test]
    fn hash_differs_on_order_and_length() {
        assert_ne!(hash(&[1, 2]), hash(&[2, 1]));
        assert_ne!(hash(&[1]), hash(&[1, 0]));
        assert_ne!(hash(&[]), 0);
    }
}
