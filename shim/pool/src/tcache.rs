//! Per-thread caches of ready blocks, in front of a pool's arenas: a cuMemAlloc/cuMemFree pair
//! that the calling thread's cache can serve touches no lock and no hash map.
//!
//! # What a cache holds
//!
//! A [`ThreadCache`] belongs to one thread and, at a time, to one pool. It has [`SLOTS`] slots;
//! each slot holds one block *lent* to the cache by an arena (the arena still counts it granted,
//! and remembers it in its `lent` set):
//!
//! - **cached**: freed by this thread, with the free's *mark* (the submission count then, as
//!   for any pooled free, see `reuse.rs`); handed out again only once the pool's completed mark
//!   covers it, so a cached block is exactly as safe to reuse as a pooled one;
//! - **live**: handed out from the cache, with the caller's record kept in the slot (packed
//!   into [`RECORD_WORDS`] words, [`Packed`]), next to the block's address and size.
//!
//! Bounds, per thread and pool: at most [`MAX_CACHED_BLOCKS`] cached blocks and
//! [`MAX_CACHED_BYTES`] cached bytes; blocks larger than [`MAX_CACHED_BLOCK`] are never cached;
//! [`SLOTS`] slots for cached and live blocks together (a live slot is handed over to its arena,
//! record and all, when a new block needs its slot).
//!
//! # Who touches a slot
//!
//! The owner thread alone occupies slots and moves them between cached and live. Other threads
//! only *read* live slots (a report, a pointer query: a seqlock read of the state word, the
//! fields, the state word again) and *claim* slots, with one compare-and-swap of the state word
//! to vacant: a free of a live block by another thread, a pool under pressure taking cached
//! blocks back, the adoption of an exited thread's cache. The owner notices a claimed slot when
//! its own compare-and-swap fails, and forgets it. Every state change bumps the word's
//! generation, so a reader never mistakes a slot reused in between for the one it read.
//!
//! # When a cache goes
//!
//! - Its thread exits: [`crate::CtxPool::orphan_cache`] marks it orphaned (two atomic stores: no
//!   lock, no allocation in a dying thread); the next slow-path allocation of the pool adopts it,
//!   giving cached blocks back to their arenas and live ones, with their records, to theirs.
//! - Its context is destroyed: the pool bumps its cache generation; each owner sees the change
//!   on its next use and forgets its slots without touching the dead pool's arenas. The pool's
//!   `kill` reads the live slots' records (lost with the context) before it lets the caches go.
//! - A fork: the child's caller forgets the cache ([`ThreadCache::forget`]) when it sees the
//!   process's generation changed; nothing of the parent's pool is touched.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};

/// Slots per cache (cached and live blocks together).
pub const SLOTS: usize = 64;
/// The most cached (free) blocks a cache keeps.
pub const MAX_CACHED_BLOCKS: usize = 32;
/// The most cached (free) bytes a cache keeps.
pub const MAX_CACHED_BYTES: u64 = 8 << 20;
/// Larger blocks are never cached.
pub const MAX_CACHED_BLOCK: u64 = 1 << 20;
/// Words a record is packed into.
pub const RECORD_WORDS: usize = 8;

/// A record that a cache slot can keep: packed into plain words, so that other threads can read
/// it with atomic loads while its owner may be writing it.
pub trait Packed: Copy {
    /// The record as words.
    fn pack(&self) -> [u64; RECORD_WORDS];
    /// The record [`pack`](Packed::pack) made these words from.
    fn unpack(words: &[u64; RECORD_WORDS]) -> Self;
}

impl Packed for u64 {
    fn pack(&self) -> [u64; RECORD_WORDS] {
        let mut w = [0; RECORD_WORDS];
        w[0] = *self;
        w
    }
    fn unpack(words: &[u64; RECORD_WORDS]) -> Self {
        words[0]
    }
}

// The state word: a generation above the kind (its low 3 bits).
const VACANT: u64 = 0;
const CACHED: u64 = 1;
const WRITING: u64 = 2;
/// Live, with a record.
const LIVE: u64 = 3;
/// Live, without a record.
const LIVE_BARE: u64 = 4;
const KIND: u64 = 7;
const STEP: u64 = 8;

#[inline]
fn kind(state: u64) -> u64 {
    state & KIND
}

/// The next state word: the generation bumped, the kind `k`.
#[inline]
fn next(state: u64, k: u64) -> u64 {
    ((state & !KIND) + STEP) | k
}

/// One slot, shared with other threads (see the module documentation for who does what).
pub(crate) struct Slot {
    state: AtomicU64,
    addr: AtomicU64,
    granted: AtomicU64,
    arena: AtomicU64,
    /// A cached block's mark.
    mark: AtomicU64,
    words: [AtomicU64; RECORD_WORDS],
}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: AtomicU64::new(VACANT),
            addr: AtomicU64::new(0),
            granted: AtomicU64::new(0),
            arena: AtomicU64::new(0),
            mark: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// The block's address, as last written (meaningful while the slot is occupied).
    #[inline]
    pub(crate) fn addr(&self) -> u64 {
        self.addr.load(Ordering::Relaxed)
    }

    /// The block's arena, as last written.
    #[cfg(test)]
    pub(crate) fn arena(&self) -> usize {
        self.arena.load(Ordering::Relaxed) as usize
    }

    /// A consistent read of a live slot: (state, address, granted, arena, record).
    pub(crate) fn read_live<R: Packed>(&self) -> Option<(u64, LiveBlock<R>)> {
        let mut spins = 0u32;
        loop {
            let s1 = self.state.load(Ordering::Acquire);
            if kind(s1) != LIVE && kind(s1) != LIVE_BARE {
                if kind(s1) == WRITING {
                    // The owner is between two stores of its allocation; it may have been
                    // descheduled there.
                    spins += 1;
                    if spins < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                    continue;
                }
                return None;
            }
            let addr = self.addr.load(Ordering::Relaxed);
            let granted = self.granted.load(Ordering::Relaxed);
            let arena = self.arena.load(Ordering::Relaxed) as usize;
            let words: [u64; RECORD_WORDS] =
                std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if self.state.load(Ordering::Relaxed) == s1 {
                let record = (kind(s1) == LIVE).then(|| R::unpack(&words));
                return Some((
                    s1,
                    LiveBlock {
                        addr,
                        granted,
                        arena,
                        record,
                    },
                ));
            }
        }
    }

    /// Takes a live block at `addr` out of the slot (the slot becomes vacant).
    pub(crate) fn claim_live<R: Packed>(&self, addr: u64) -> Option<LiveBlock<R>> {
        loop {
            let (s, block) = self.read_live::<R>()?;
            if block.addr != addr {
                return None;
            }
            if self
                .state
                .compare_exchange(s, next(s, VACANT), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Some(block);
            }
        }
    }

    /// A cached block: (state, address, granted, arena, mark).
    fn read_cached(&self) -> Option<(u64, CachedBlock)> {
        let s = self.state.load(Ordering::Acquire);
        if kind(s) != CACHED {
            return None;
        }
        Some((
            s,
            CachedBlock {
                addr: self.addr.load(Ordering::Relaxed),
                granted: self.granted.load(Ordering::Relaxed),
                arena: self.arena.load(Ordering::Relaxed) as usize,
                mark: self.mark.load(Ordering::Relaxed),
            },
        ))
    }

    /// Takes a cached block out of the slot (the slot becomes vacant); with `arena`, only a
    /// block of that arena.
    pub(crate) fn claim_cached(&self, arena: Option<usize>) -> Option<CachedBlock> {
        let (s, block) = self.read_cached()?;
        if arena.is_some_and(|a| a != block.arena) {
            return None;
        }
        self.state
            .compare_exchange(s, next(s, VACANT), Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| block)
    }

    /// The bytes of a cached block, if the slot holds one.
    pub(crate) fn cached_bytes(&self) -> u64 {
        self.read_cached().map_or(0, |(_, b)| b.granted)
    }
}

/// A live block read from, or claimed out of, a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LiveBlock<R> {
    pub addr: u64,
    pub granted: u64,
    pub arena: usize,
    pub record: Option<R>,
}

/// A cached block claimed out of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CachedBlock {
    pub addr: u64,
    pub granted: u64,
    pub arena: usize,
    pub mark: u64,
}

/// The part of a cache other threads see (registered with the pool).
pub(crate) struct Shared {
    pub slots: [Slot; SLOTS],
    /// Its thread has exited: the pool adopts it.
    pub orphaned: AtomicBool,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            slots: std::array::from_fn(|_| Slot::new()),
            orphaned: AtomicBool::new(false),
        }
    }
}

/// Size classes of cached blocks: 4 per power of two, from [`crate::ALIGN`] granules.
const CLASSES: usize = 48;
/// "No slot" in the owner's lists and index.
const NO: u8 = u8::MAX;
/// Entries of the owner's address index (a power of two, twice [`SLOTS`]).
const INDEX: usize = 2 * SLOTS;

/// The class of a block of `granted` bytes (a multiple of 256, at most [`MAX_CACHED_BLOCK`]).
#[inline]
fn class_of(granted: u64) -> usize {
    let g = granted >> 8;
    if g < 8 {
        return g.saturating_sub(1) as usize;
    }
    let fl = 63 - g.leading_zeros() as u64;
    let sl = (g >> (fl - 2)) & 3;
    (8 + (fl - 3) * 4 + sl) as usize
}

#[inline]
fn home(addr: u64) -> usize {
    ((addr >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 57) as usize & (INDEX - 1)
}

/// What [`ThreadCache::take`] found.
pub(crate) enum Take {
    /// A ready block of the class, now live.
    Hit(u64),
    /// None; `unready` says whether cached blocks of the class wait for their fence.
    Miss { unready: bool },
}

/// What [`ThreadCache::release`] did with a live block of the cache being freed.
pub(crate) enum Release<R> {
    /// Kept, cached, with its record handed back.
    Cached(Option<R>),
    /// The cache is full: the slot is vacant, and the block goes back to its arena.
    ToArena(LiveBlock<R>),
    /// The slot no longer held it live (another thread claimed it).
    Gone,
}

/// One thread's cache for one pool at a time (see the module documentation).
///
/// Plain data, kept by the caller per thread (in the shim, a thread-local); every operation on
/// it goes through the pool it is bound to ([`crate::CtxPool::alloc_cached`],
/// [`crate::CtxPool::free_cached`], [`crate::CtxPool::flush_cache`],
/// [`crate::CtxPool::orphan_cache`]).
pub struct ThreadCache {
    pub(crate) shared: Option<Arc<Shared>>,
    /// The pool it is bound to (its address), 0 when unbound.
    pub(crate) pool: usize,
    /// The pool's cache generation when it was bound.
    pub(crate) generation: u64,
    /// Slots the owner holds (cached, live): one bit each.
    used: u64,
    /// Of those, the ones in its lists of cached blocks.
    listed: u64,
    /// Address → slot, linear probing.
    index: [u8; INDEX],
    /// Cached slots by class, newest first; `next` links them.
    heads: [u8; CLASSES],
    next: [u8; SLOTS],
    /// The owner's copies of each held slot's address, size and (cached) mark.
    addr: [u64; SLOTS],
    granted: [u64; SLOTS],
    mark: [u64; SLOTS],
    cached_blocks: usize,
    cached_bytes: u64,
    /// Where to look for a live slot to hand over when every slot is held.
    cursor: usize,
}

impl Default for ThreadCache {
    fn default() -> Self {
        ThreadCache::new()
    }
}

impl ThreadCache {
    /// An empty cache, bound to no pool.
    pub const fn new() -> ThreadCache {
        ThreadCache {
            shared: None,
            pool: 0,
            generation: 0,
            used: 0,
            listed: 0,
            index: [NO; INDEX],
            heads: [NO; CLASSES],
            next: [NO; SLOTS],
            addr: [0; SLOTS],
            granted: [0; SLOTS],
            mark: [0; SLOTS],
            cached_blocks: 0,
            cached_bytes: 0,
            cursor: 0,
        }
    }

    /// Whether it is bound to a pool (it may hold blocks of it).
    pub fn is_bound(&self) -> bool {
        self.pool != 0
    }

    /// The address of the pool it is bound to (0: none).
    pub fn bound_pool(&self) -> usize {
        self.pool
    }

    /// Cached (free) blocks and bytes it holds, as the owner counts them.
    pub fn cached(&self) -> (usize, u64) {
        (self.cached_blocks, self.cached_bytes)
    }

    /// Forgets everything without touching any pool: after a fork (the parent's pool belongs to
    /// a context the child cannot use) or once its pool's context is gone.
    pub fn forget(&mut self) {
        *self = ThreadCache::new();
    }

    /// Binds it to the pool at `pool` (generation `generation`), empty; returns the part to
    /// register with the pool.
    pub(crate) fn bind(&mut self, pool: usize, generation: u64) -> Arc<Shared> {
        let shared = match self.shared.take() {
            Some(s) if Arc::strong_count(&s) == 1 && self.used == 0 => s,
            _ => Arc::new(Shared::new()),
        };
        *self = ThreadCache::new();
        self.shared = Some(shared.clone());
        self.pool = pool;
        self.generation = generation;
        shared
    }

    /// Unbinds it (after its blocks went back), keeping its slots for the next pool.
    pub(crate) fn unbind(&mut self) {
        let shared = self.shared.take();
        *self = ThreadCache::new();
        self.shared = shared;
    }

    #[inline]
    fn slots(&self) -> &[Slot; SLOTS] {
        &self.shared.as_ref().expect("a bound cache has slots").slots
    }

    /// The slot holding `addr`, as the owner knows it.
    #[inline]
    pub(crate) fn lookup(&self, addr: u64) -> Option<usize> {
        let mut i = home(addr);
        loop {
            let s = self.index[i];
            if s == NO {
                return None;
            }
            if self.addr[s as usize] == addr {
                return Some(s as usize);
            }
            i = (i + 1) & (INDEX - 1);
        }
    }

    fn index_insert(&mut self, addr: u64, slot: usize) {
        let mut i = home(addr);
        while self.index[i] != NO {
            i = (i + 1) & (INDEX - 1);
        }
        self.index[i] = slot as u8;
    }

    /// Removes `slot`'s entry from the index (backward-shift deletion).
    fn index_remove(&mut self, slot: usize) {
        let mut i = home(self.addr[slot]);
        loop {
            let s = self.index[i];
            if s == NO {
                return;
            }
            if s as usize == slot {
                break;
            }
            i = (i + 1) & (INDEX - 1);
        }
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & (INDEX - 1);
            let s = self.index[j];
            if s == NO {
                break;
            }
            let h = home(self.addr[s as usize]);
            // Move the entry at j into the hole unless its home lies cyclically in (hole, j].
            let in_range = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !in_range {
                self.index[hole] = s;
                hole = j;
            }
        }
        self.index[hole] = NO;
    }

    /// Takes a cached slot out of the owner's lists and counts.
    fn unlist(&mut self, slot: usize) {
        if self.listed & (1 << slot) == 0 {
            return;
        }
        self.listed &= !(1 << slot);
        self.cached_blocks -= 1;
        self.cached_bytes -= self.granted[slot];
        self.unlink(slot);
    }

    fn unlink(&mut self, slot: usize) {
        let c = class_of(self.granted[slot]);
        let mut p = self.heads[c];
        if p as usize == slot {
            self.heads[c] = self.next[slot];
            return;
        }
        while p != NO {
            let n = self.next[p as usize];
            if n as usize == slot {
                self.next[p as usize] = self.next[slot];
                return;
            }
            p = n;
        }
    }

    /// The owner lets go of a slot it held (vacant now, whoever made it so).
    fn drop_slot(&mut self, slot: usize) {
        self.unlist(slot);
        self.index_remove(slot);
        self.used &= !(1 << slot);
    }

    /// Hands out a ready cached block of at least `rounded` bytes (a multiple of 256, at most
    /// [`MAX_CACHED_BLOCK`]), keeping `record` with it. `ready`: marks up to this are covered
    /// by a completed fence.
    #[inline]
    pub(crate) fn take<R: Packed>(&mut self, rounded: u64, ready: u64, record: Option<R>) -> Take {
        let c = class_of(rounded);
        let mut unready = false;
        for class in [c, c + 1] {
            if class >= CLASSES {
                break;
            }
            let mut p = self.heads[class];
            while p != NO {
                let slot = p as usize;
                p = self.next[slot];
                if self.granted[slot] < rounded {
                    continue;
                }
                if self.mark[slot] > ready {
                    unready = true;
                    continue;
                }
                self.unlist(slot);
                let s = &self.slots()[slot];
                let cur = s.state.load(Ordering::Relaxed);
                let writing = next(cur, WRITING);
                if kind(cur) != CACHED
                    || s.state
                        .compare_exchange(cur, writing, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                {
                    // Claimed by another thread (a pool under pressure, or a kill).
                    self.drop_slot(slot);
                    continue;
                }
                fence(Ordering::Release);
                let live = match record {
                    Some(r) => {
                        for (w, v) in s.words.iter().zip(r.pack()) {
                            w.store(v, Ordering::Relaxed);
                        }
                        LIVE
                    }
                    None => LIVE_BARE,
                };
                s.state.store(next(writing, live), Ordering::Release);
                return Take::Hit(self.addr[slot]);
            }
        }
        Take::Miss { unready }
    }

    /// Whether the cache may keep one more cached block of `granted` bytes.
    #[inline]
    fn room(&self, granted: u64) -> bool {
        granted <= MAX_CACHED_BLOCK
            && self.cached_blocks < MAX_CACHED_BLOCKS
            && self.cached_bytes + granted <= MAX_CACHED_BYTES
    }

    /// The owner frees the live block in `slot` with mark `mark`: cached if there is room, else
    /// out of the cache.
    #[inline]
    pub(crate) fn release<R: Packed>(&mut self, slot: usize, mark: u64) -> Release<R> {
        let granted = self.granted[slot];
        let keep = self.room(granted);
        let s = &self.slots()[slot];
        let cur = s.state.load(Ordering::Relaxed);
        if kind(cur) != LIVE && kind(cur) != LIVE_BARE {
            if kind(cur) == VACANT {
                self.drop_slot(slot);
            }
            return Release::Gone;
        }
        let record = (kind(cur) == LIVE)
            .then(|| R::unpack(&std::array::from_fn(|i| s.words[i].load(Ordering::Relaxed))));
        let to = if keep { CACHED } else { VACANT };
        if keep {
            s.mark.store(mark, Ordering::Relaxed);
        }
        if s.state
            .compare_exchange(cur, next(cur, to), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            // Another thread freed it first (the program freed it twice, at once).
            self.drop_slot(slot);
            return Release::Gone;
        }
        if keep {
            self.mark[slot] = mark;
            self.push_cached(slot);
            Release::Cached(record)
        } else {
            let arena = s.arena.load(Ordering::Relaxed) as usize;
            let addr = self.addr[slot];
            self.drop_slot(slot);
            Release::ToArena(LiveBlock {
                addr,
                granted,
                arena,
                record,
            })
        }
    }

    fn push_cached(&mut self, slot: usize) {
        self.listed |= 1 << slot;
        let c = class_of(self.granted[slot]);
        self.next[slot] = self.heads[c];
        self.heads[c] = slot as u8;
        self.cached_blocks += 1;
        self.cached_bytes += self.granted[slot];
    }

    /// Whether a freed block of `granted` bytes can be lent to the cache now (a slot to put it
    /// in is found by [`free_slot`](Self::free_slot)).
    #[inline]
    pub(crate) fn wants(&self, granted: u64) -> bool {
        self.is_bound() && self.room(granted)
    }

    /// A slot the owner may fill: a vacant one it holds no more, or, when all are held, one
    /// whose live block is to be handed over to its arena (returned with it).
    #[inline]
    pub(crate) fn free_slot<R: Packed>(&mut self) -> Option<(usize, Option<LiveBlock<R>>)> {
        if self.used != u64::MAX {
            let slot = (!self.used).trailing_zeros() as usize;
            return Some((slot, None));
        }
        // Every slot held: forget those claimed by others, else hand a live one over.
        for slot in 0..SLOTS {
            if kind(self.slots()[slot].state.load(Ordering::Acquire)) == VACANT {
                self.drop_slot(slot);
                return Some((slot, None));
            }
        }
        for _ in 0..SLOTS {
            let slot = self.cursor % SLOTS;
            self.cursor = self.cursor.wrapping_add(1);
            let addr = self.addr[slot];
            if let Some(block) = self.slots()[slot].claim_live::<R>(addr) {
                self.drop_slot(slot);
                return Some((slot, Some(block)));
            }
        }
        None
    }

    /// Puts a block just lent by arena `arena` into `slot` (from [`free_slot`](Self::free_slot)),
    /// cached with mark `mark`.
    pub(crate) fn put_cached(
        &mut self,
        slot: usize,
        addr: u64,
        granted: u64,
        arena: usize,
        mark: u64,
    ) {
        // A slot that still names this address was claimed by another thread (the block was
        // lent again, so it is no longer there): forget it first.
        if let Some(stale) = self.lookup(addr) {
            self.drop_slot(stale);
        }
        let s = &self.slots()[slot];
        s.addr.store(addr, Ordering::Relaxed);
        s.granted.store(granted, Ordering::Relaxed);
        s.arena.store(arena as u64, Ordering::Relaxed);
        s.mark.store(mark, Ordering::Relaxed);
        let cur = s.state.load(Ordering::Relaxed);
        s.state.store(next(cur, CACHED), Ordering::Release);
        self.addr[slot] = addr;
        self.granted[slot] = granted;
        self.mark[slot] = mark;
        self.used |= 1 << slot;
        self.index_insert(addr, slot);
        self.push_cached(slot);
    }

    /// The cached blocks of the class of `rounded` (and the next) that wait for their fence,
    /// taken out of the cache (to go back to their arenas, where fences are kept).
    pub(crate) fn take_unready(&mut self, rounded: u64, ready: u64) -> Vec<CachedBlock> {
        let c = class_of(rounded);
        let mut out = Vec::new();
        for class in [c, (c + 1).min(CLASSES - 1)] {
            let mut p = self.heads[class];
            while p != NO {
                let slot = p as usize;
                p = self.next[slot];
                if self.mark[slot] <= ready {
                    continue;
                }
                self.unlist(slot);
                if let Some(b) = self.slots()[slot].claim_cached(None) {
                    out.push(b);
                }
                self.drop_slot(slot);
            }
        }
        out
    }

    /// Every block the owner holds, taken out of its slots: cached ones, then live ones.
    pub(crate) fn take_all<R: Packed>(&mut self) -> (Vec<CachedBlock>, Vec<LiveBlock<R>>) {
        let mut cached = Vec::new();
        let mut live = Vec::new();
        if let Some(shared) = self.shared.clone() {
            drain(&shared, &mut cached, &mut live);
        }
        self.unbind();
        (cached, live)
    }
}

impl ThreadCache {
    /// Checks the owner's bookkeeping: every held slot is indexed once under its address, and
    /// nothing else is; the cached counts match the lists. For the tests.
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let entries = self.index.iter().filter(|&&s| s != NO).count();
        if entries != self.used.count_ones() as usize {
            return Err(format!(
                "{entries} index entries, {} slots held",
                self.used.count_ones()
            ));
        }
        for slot in 0..SLOTS {
            if self.used & (1 << slot) != 0 && self.lookup(self.addr[slot]) != Some(slot) {
                return Err(format!("slot {slot} ({:#x}) not found", self.addr[slot]));
            }
        }
        let (mut blocks, mut bytes) = (0, 0);
        for &head in &self.heads {
            let mut p = head;
            while p != NO {
                blocks += 1;
                bytes += self.granted[p as usize];
                p = self.next[p as usize];
            }
        }
        if (blocks, bytes) != (self.cached_blocks, self.cached_bytes) {
            return Err(format!(
                "lists hold {blocks} blocks, {bytes} bytes; counted {:?}",
                self.cached()
            ));
        }
        if blocks > MAX_CACHED_BLOCKS || bytes > MAX_CACHED_BYTES {
            return Err(format!("over the bounds: {blocks} blocks, {bytes} bytes"));
        }
        Ok(())
    }
}

/// Claims every cached and live block of a cache's slots (its owner gone, or giving them back).
pub(crate) fn drain<R: Packed>(
    shared: &Shared,
    cached: &mut Vec<CachedBlock>,
    live: &mut Vec<LiveBlock<R>>,
) {
    for s in &shared.slots {
        if let Some(b) = s.claim_cached(None) {
            cached.push(b);
        } else if let Some(b) = s.claim_live::<R>(s.addr()) {
            live.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_cached_size_in_order() {
        let mut last = 0;
        for g in 1..=(MAX_CACHED_BLOCK >> 8) {
            let c = class_of(g << 8);
            assert!(c >= last && c < CLASSES, "{g}: {c}");
            last = c;
        }
    }

    #[test]
    fn the_index_finds_what_it_holds_after_removals() {
        let mut c = ThreadCache::new();
        let addrs: Vec<u64> = (0..SLOTS as u64).map(|i| (1 << 40) + i * 4096).collect();
        for (i, &a) in addrs.iter().enumerate() {
            c.addr[i] = a;
            c.index_insert(a, i);
        }
        for (i, &a) in addrs.iter().enumerate() {
            assert_eq!(c.lookup(a), Some(i));
        }
        for (i, _) in addrs.iter().enumerate().step_by(3) {
            c.index_remove(i);
        }
        for (i, &a) in addrs.iter().enumerate() {
            let want = (i % 3 != 0).then_some(i);
            assert_eq!(c.lookup(a), want, "{i}");
        }
    }
}
