//! The pool's sub-allocator: a two-level segregated fit (TLSF) allocator over address ranges.
//!
//! A [`SubAllocator`] hands out pieces of *chunks*, address ranges that its owner obtained
//! elsewhere (from the CUDA driver) and registered with it. It never reads or writes the memory it
//! manages: all bookkeeping lives in host-side tables indexed by plain integers, which is why this
//! module has no `unsafe` and could manage any address space.
//!
//! | operation | cost |
//! |---|---|
//! | [`alloc`](SubAllocator::alloc), [`alloc_dedicated`](SubAllocator::alloc_dedicated) | O(1): two bitmap scans, at most two new nodes, one address-map insert |
//! | [`free`](SubAllocator::free) | O(1): one address-map removal, at most two merges |
//! | [`find`](SubAllocator::find) (interior pointers too) | O(log C + log₆₄ S): C chunks, S granules in the chunk |
//! | [`add_chunk`](SubAllocator::add_chunk), [`remove_chunk`](SubAllocator::remove_chunk) | O(C), plus S/64 zeroed words for a new chunk |
//!
//! # How it works
//!
//! Every chunk is cut into *blocks* that tile it exactly; each block is live (granted) or free.
//! Free blocks sit in 64 × 32 segregated lists chosen by size: the first level is the power of
//! two, the second splits each power of two into 32 equal classes, so a class is never wider than
//! 1/32 (about 3 %) of its sizes. Two levels of bitmaps say which lists are non-empty, so a *good
//! fit* — a block from the smallest class all of whose blocks are large enough — is found with two
//! `trailing_zeros`. The grant is carved from the front of that block; the remainder stays free
//! where it is and changes list only if its size class changes. Padding for a large alignment
//! becomes a free block of its own. Freeing merges the block into its free neighbours at once.
//!
//! ```text
//!  shared chunk (base 0x7f00_0000_0000)                 dedicated chunk
//!  ┌────────┬──────────────┬──────┬──────────────────┐   ┌───────────────────────────────┐
//!  │ live A │    free      │live B│      free        │   │ one block: live, or idle      │
//!  └────────┴──────────────┴──────┴──────────────────┘   └───────────────────────────────┘
//!     ▲ prev_phys/next_phys link neighbours within a chunk; never across chunks
//!
//!  lists[Shared], lists[Dedicated]: FreeLists
//!    fl_bitmap: …0001_0100       sl_bitmap[fl]: …0010_0000
//!    heads[fl][sl] ──▶ free ⇄ free ⇄ …          (prev_free/next_free, LIFO)
//!
//!  live: AddrMap          start address → node (free(addr) in O(1))
//!  starts (per chunk):    bitset, one bit per granule where a live block starts
//!                         (find(interior addr) is a predecessor query)
//! ```
//!
//! # Two kinds of chunk
//!
//! A [`ChunkKind::Shared`] chunk is carved up as above by [`alloc`](SubAllocator::alloc). A
//! [`ChunkKind::Dedicated`] chunk holds exactly one block, granted whole by
//! [`alloc_dedicated`](SubAllocator::alloc_dedicated) and never split; an idle one waits in its own
//! free lists for a request of about its size. Keeping large requests apart stops small ones from
//! splintering the large holes, and lets an idle large chunk go back to the driver whole; the
//! growth policy (`super::growth`) says which requests take which path and how large a chunk to
//! add when an alloc fails.
//!
//! Sizes and addresses are multiples of the *granule*, `min_align` (256 bytes for CUDA).

#![deny(unsafe_code)]

mod addrmap;
mod bitset;
mod chunks;
mod error;
#[cfg(test)]
mod invariants;
#[cfg(test)]
mod tests;
mod values;

use std::fmt;

use addrmap::AddrMap;
use bitset::PredSet;
pub use error::{AddChunkError, AllocError, FreeError, RemoveError};
pub use values::{ChunkId, ChunkInfo, ChunkKind, Freed, Grant, Stats};

/// log2 of the number of second-level classes per power of two.
const SL_LOG2: u32 = 5;
/// Number of second-level classes per power of two.
const SL_COUNT: usize = 1 << SL_LOG2;
/// Number of first-level classes; sizes in granules are < 2^64, so the first level is at most
/// `63 - SL_LOG2 + 1`.
const FL_COUNT: usize = 64;
/// "No node": the end of a list, or no neighbour.
const NIL: u32 = u32::MAX;
/// The most block nodes the store may hold (indices are `u32` and [`NIL`] is reserved).
const MAX_NODES: usize = NIL as usize;
/// The largest granule accepted by [`SubAllocator::new`].
pub const MAX_MIN_ALIGN: u64 = 1 << 32;

/// Whether a node is a block, and which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A free block, in the segregated list of its size class.
    Free,
    /// A granted block, in `live` and in its chunk's `starts`.
    Live,
    /// Not a block: the node is on the vacant stack (linked through `next_free`).
    Vacant,
}

/// One block (or a vacant node) of the node store. 40 bytes.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// First byte.
    addr: u64,
    /// Bytes; a non-zero multiple of the granule.
    size: u64,
    /// The block just below in the same chunk, or [`NIL`] for the chunk's first block.
    prev_phys: u32,
    /// The block just above in the same chunk, or [`NIL`] for the chunk's last block.
    next_phys: u32,
    /// Free-list links (meaningful when [`State::Free`]; `next_free` also links vacant nodes).
    prev_free: u32,
    next_free: u32,
    /// Slot of the owning chunk in `SubAllocator::chunks`.
    chunk: u32,
    state: State,
    /// The owning chunk's kind, which picks the free lists.
    kind: ChunkKind,
}

/// A registered chunk.
#[derive(Debug)]
struct Chunk {
    id: ChunkId,
    base: u64,
    size: u64,
    kind: ChunkKind,
    /// The node of the block that starts at `base`.
    head: u32,
    /// Number of live blocks in the chunk.
    live_blocks: u64,
    /// A dedicated chunk: the exact size of the last request it served.
    last_request: u64,
    /// Granule indices (`(addr - base) / granule`) where live blocks start.
    starts: PredSet,
}

/// One family of segregated free lists.
///
/// Invariants: bit `sl` of `sl_bitmap[fl]` is set ⇔ `heads[fl][sl] ≠ NIL`; bit `fl` of
/// `fl_bitmap` is set ⇔ `sl_bitmap[fl] ≠ 0`; every node on list `(fl, sl)` is free and has
/// `mapping(size) == (fl, sl)`. Indexed `[fl % FL_COUNT][sl % SL_COUNT]`: the indices are always
/// in range, and the modulo (a mask) lets the compiler drop the bounds checks.
struct FreeLists {
    fl_bitmap: u64,
    sl_bitmap: [u32; FL_COUNT],
    heads: [[u32; SL_COUNT]; FL_COUNT],
}

impl FreeLists {
    const EMPTY: FreeLists = FreeLists {
        fl_bitmap: 0,
        sl_bitmap: [0; FL_COUNT],
        heads: [[NIL; SL_COUNT]; FL_COUNT],
    };

    #[inline]
    fn head(&self, (fl, sl): (usize, usize)) -> u32 {
        self.heads[fl % FL_COUNT][sl % SL_COUNT]
    }

    /// The head of the first non-empty list at class `(fl, sl)` or above.
    #[inline]
    fn first_at_or_above(&self, (fl, sl): (usize, usize)) -> Option<u32> {
        let mut fl = fl % FL_COUNT;
        let mut sl_map = self.sl_bitmap[fl] & (u32::MAX << (sl % SL_COUNT));
        if sl_map == 0 {
            let fl_map = if fl + 1 >= FL_COUNT {
                0
            } else {
                self.fl_bitmap & (u64::MAX << (fl + 1))
            };
            if fl_map == 0 {
                return None;
            }
            fl = fl_map.trailing_zeros() as usize % FL_COUNT;
            sl_map = self.sl_bitmap[fl];
        }
        Some(self.heads[fl][sl_map.trailing_zeros() as usize % SL_COUNT])
    }

    #[inline]
    fn push(&mut self, nodes: &mut [Block], idx: u32, (fl, sl): (usize, usize)) {
        let (fl, sl) = (fl % FL_COUNT, sl % SL_COUNT);
        let head = self.heads[fl][sl];
        let node = &mut nodes[idx as usize];
        node.prev_free = NIL;
        node.next_free = head;
        if head != NIL {
            nodes[head as usize].prev_free = idx;
        }
        self.heads[fl][sl] = idx;
        self.sl_bitmap[fl] |= 1 << sl;
        self.fl_bitmap |= 1 << fl;
    }

    #[inline]
    fn unlink(&mut self, nodes: &mut [Block], idx: u32, (fl, sl): (usize, usize)) {
        let (fl, sl) = (fl % FL_COUNT, sl % SL_COUNT);
        let Block {
            prev_free,
            next_free,
            ..
        } = nodes[idx as usize];
        if prev_free != NIL {
            nodes[prev_free as usize].next_free = next_free;
        } else {
            self.heads[fl][sl] = next_free;
            if next_free == NIL {
                self.sl_bitmap[fl] &= !(1 << sl);
                if self.sl_bitmap[fl] == 0 {
                    self.fl_bitmap &= !(1 << fl);
                }
            }
        }
        if next_free != NIL {
            nodes[next_free as usize].prev_free = prev_free;
        }
    }

    /// The size of the largest block on these lists (0 if none): a scan of the top class.
    fn largest(&self, nodes: &[Block]) -> u64 {
        if self.fl_bitmap == 0 {
            return 0;
        }
        let fl = 63 - self.fl_bitmap.leading_zeros() as usize;
        let sl = 31 - self.sl_bitmap[fl].leading_zeros() as usize;
        let (mut best, mut i) = (0, self.heads[fl][sl]);
        while i != NIL {
            best = best.max(nodes[i as usize].size);
            i = nodes[i as usize].next_free;
        }
        best
    }
}

/// A TLSF sub-allocator over registered chunks of address space. Not thread-safe by itself
/// (it is `Send`; wrap it in a `Mutex` to share it).
///
/// # Invariants
/// (checked by `check_invariants`, a test-build method, after every step of the property tests)
///
/// Chunks and blocks:
/// 1. Chunks never overlap; `by_base` lists every chunk once, sorted by base.
/// 2. The blocks of a chunk, linked by `prev_phys`/`next_phys` from its `head`, tile it exactly:
///    the first starts at `base`, each starts where the previous ends, the last ends at
///    `base + size`. Every block's address and size are multiples of the granule, size > 0.
/// 3. **Full coalescing**: no two neighbouring blocks are both free. So an idle chunk (no live
///    block) is exactly one free block.
/// 4. A dedicated chunk has exactly one block.
///
/// Structures:
/// 5. Every node is in exactly one place: a free block on the list of its size class in the
///    lists of its chunk's kind (`lists[kind]`), a live block in `live` (by address) and in its
///    chunk's `starts`, a vacant node on the vacant stack.
/// 6. Each [`FreeLists`] satisfies its own invariants (bitmaps match the lists).
///
/// Accounting:
/// 7. `reserved` = Σ chunk sizes = `live_bytes` + Σ free block sizes; `live_count`,
///    `free_count`, the idle and dedicated counters and each chunk's `live_blocks` match the
///    blocks.
pub struct SubAllocator {
    /// log2 of the granule (`min_align`).
    shift: u32,
    /// Free lists, indexed by `ChunkKind as usize` (boxed: 17 KiB).
    lists: Box<[FreeLists; 2]>,
    /// The node store; a block's index is stable while the block exists.
    nodes: Vec<Block>,
    /// Top of the stack of vacant nodes (linked by `next_free`), or [`NIL`].
    vacant: u32,
    /// Live blocks by start address.
    live: AddrMap,
    /// Chunk slots (`None` = removed; slots are reused, ids are not).
    chunks: Vec<Option<Chunk>>,
    /// Vacant chunk slots.
    vacant_slots: Vec<u32>,
    /// `(base, slot)` of every chunk, sorted by base.
    by_base: Vec<(u64, u32)>,
    /// The id the next chunk gets.
    next_id: u32,
    reserved: u64,
    live_bytes: u64,
    live_count: u64,
    free_count: u64,
    idle_chunks: u64,
    idle_bytes: u64,
    dedicated_chunks: u64,
    dedicated_bytes: u64,
    dedicated_idle_bytes: u64,
}

impl fmt::Debug for SubAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubAllocator")
            .field("min_align", &self.min_align())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// `x` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
#[inline]
fn round_up(x: u64, align: u64) -> Option<u64> {
    Some(x.checked_add(align - 1)? & !(align - 1))
}

/// The size class of a free block of `units` granules (`units ≥ 1`).
///
/// Classes below `SL_COUNT` granules are exact (fl 0, sl = units); above, first level
/// `floor(log2(units)) - SL_LOG2 + 1` and the next `SL_LOG2` bits as the second level.
#[inline]
fn mapping(units: u64) -> (usize, usize) {
    if units < SL_COUNT as u64 {
        (0, units as usize)
    } else {
        let f = 63 - units.leading_zeros();
        let fl = (f - SL_LOG2 + 1) as usize;
        let sl = ((units >> (f - SL_LOG2)) as usize) & (SL_COUNT - 1);
        (fl, sl)
    }
}

/// The smallest class all of whose blocks hold `units` granules: `units` rounded up to the next
/// class boundary, then mapped. `None` when rounding overflows.
#[inline]
fn mapping_search(units: u64) -> Option<(usize, usize)> {
    if units < SL_COUNT as u64 {
        return Some(mapping(units));
    }
    let f = 63 - units.leading_zeros();
    let rounded = units.checked_add((1u64 << (f - SL_LOG2)) - 1)?;
    Some(mapping(rounded))
}

impl SubAllocator {
    /// An empty allocator whose granule is `min_align`: every grant is aligned to it and every size
    /// rounded up to it. `min_align` is rounded up to a power of two and clamped to
    /// `1..=`[`MAX_MIN_ALIGN`]; CUDA's is 256.
    ///
    /// # Time Complexity
    /// O(1).
    pub fn new(min_align: u64) -> Self {
        Self::with_capacity(min_align, 0)
    }

    /// Like [`new`](Self::new), with room for `blocks` blocks before the alloc/free path needs to
    /// grow any host allocation.
    ///
    /// # Time Complexity
    /// O(blocks).
    pub fn with_capacity(min_align: u64, blocks: usize) -> Self {
        let granule = min_align
            .clamp(1, MAX_MIN_ALIGN)
            .checked_next_power_of_two()
            .unwrap_or(MAX_MIN_ALIGN)
            .min(MAX_MIN_ALIGN);
        SubAllocator {
            shift: granule.trailing_zeros(),
            lists: Box::new([FreeLists::EMPTY, FreeLists::EMPTY]),
            nodes: Vec::with_capacity(blocks),
            vacant: NIL,
            live: AddrMap::with_capacity(blocks),
            chunks: Vec::new(),
            vacant_slots: Vec::new(),
            by_base: Vec::new(),
            next_id: 0,
            reserved: 0,
            live_bytes: 0,
            live_count: 0,
            free_count: 0,
            idle_chunks: 0,
            idle_bytes: 0,
            dedicated_chunks: 0,
            dedicated_bytes: 0,
            dedicated_idle_bytes: 0,
        }
    }

    /// The granule: every grant's alignment and size unit.
    ///
    /// # Time Complexity
    /// O(1).
    pub fn min_align(&self) -> u64 {
        1u64 << self.shift
    }

    /// The smallest shared chunk that is sure to serve `alloc(size, align)` once added, whatever
    /// its (granule-aligned) base: the size rounded up to the granule, plus `align - granule` of
    /// padding when `align` exceeds the granule. (A dedicated chunk needs only the rounded size,
    /// at a base aligned to `align`.) `None` for a request every alloc rejects outright (zero
    /// size, bad alignment, overflow).
    ///
    /// # Time Complexity
    /// O(1).
    pub fn footprint(&self, size: u64, align: u64) -> Option<u64> {
        if size == 0 {
            return None;
        }
        let align = self.effective_align(align).ok()?;
        round_up(size, self.min_align())?.checked_add(align - self.min_align())
    }

    /// `align` raised to the granule (0 and 1 mean "the granule"); `BadAlign` if it is not a
    /// power of two.
    #[inline]
    fn effective_align(&self, align: u64) -> Result<u64, AllocError> {
        if align > 1 && !align.is_power_of_two() {
            return Err(AllocError::BadAlign);
        }
        Ok(align.max(self.min_align()))
    }

    /// Grants a block of at least `size` bytes aligned to `align` from a shared chunk. `align` is
    /// a power of two; 0, or anything below the granule, means the granule. The grant's size is
    /// `size` rounded up to the granule.
    ///
    /// The block comes from the smallest size class all of whose blocks fit the request (a *good
    /// fit*); failing that, from the head of the request's own class if that one fits, which makes
    /// a shared chunk of [`footprint`](Self::footprint) bytes, just added, always usable.
    ///
    /// # Time Complexity
    /// O(1): two bitmap scans, at most two new nodes, one address-map insert (expected O(1),
    /// amortized when the map or the node store doubles; [`with_capacity`](Self::with_capacity)
    /// pre-sizes both), and marking the start in the chunk's bitset (one word write, rarely up to
    /// log₆₄ S ≤ 10).
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<Grant, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        let align = self.effective_align(align)?;
        let granule = self.min_align();
        let size = round_up(size, granule).ok_or(AllocError::TooLarge)?;
        let search = size
            .checked_add(align - granule)
            .ok_or(AllocError::TooLarge)?;
        // A split needs at most two new nodes; refuse before touching anything.
        if self.nodes.len() > MAX_NODES - 2 {
            return Err(AllocError::NoMetadata);
        }
        let found = self
            .find_fit(search, size, align)
            .ok_or(AllocError::NoFit)?;
        let block = self.nodes[found as usize];
        let listed_as = mapping(block.size >> self.shift);
        // Cannot overflow: find_fit checked that the aligned request fits below the block's end.
        let start = (block.addr + (align - 1)) & !(align - 1);
        let slot = block.chunk;
        let mut new_head = None;

        // Carve from the front of the free block: the padding (if any), then the grant. The free
        // block keeps what is left above, in place: when its size class does not change (the usual
        // case for a large block) no list is touched at all.
        if start != block.addr {
            // Its lower neighbour is live or absent (the block was fully coalesced), so the
            // padding is a proper free block.
            let pad = self.new_node(Block {
                addr: block.addr,
                size: start - block.addr,
                prev_phys: block.prev_phys,
                next_phys: found,
                prev_free: NIL,
                next_free: NIL,
                chunk: slot,
                state: State::Free,
                kind: ChunkKind::Shared,
            });
            self.link_before(pad, block.prev_phys, &mut new_head);
            let b = &mut self.nodes[found as usize];
            b.prev_phys = pad;
            b.addr = start;
            b.size -= start - block.addr;
            self.link_free(pad);
        }
        let idx = if self.nodes[found as usize].size == size {
            self.unlink_free(found, listed_as);
            self.nodes[found as usize].state = State::Live;
            found
        } else {
            let prev = self.nodes[found as usize].prev_phys;
            let idx = self.new_node(Block {
                addr: start,
                size,
                prev_phys: prev,
                next_phys: found,
                prev_free: NIL,
                next_free: NIL,
                chunk: slot,
                state: State::Live,
                kind: ChunkKind::Shared,
            });
            self.link_before(idx, prev, &mut new_head);
            let b = &mut self.nodes[found as usize];
            b.prev_phys = idx;
            b.addr += size;
            b.size -= size;
            self.relist(found, listed_as);
            idx
        };
        Ok(self.mark_live(idx, start, size, slot, new_head))
    }

    /// Grants a whole idle dedicated chunk for a request of `size` bytes at alignment `align`
    /// (as for [`alloc`](Self::alloc)), provided the chunk is no larger than `max_block` bytes:
    /// the caller's bound on the waste it accepts. The grant's size is the chunk's.
    ///
    /// The candidate is the head of the request's own size class if it is large enough, else a
    /// good fit from the classes above; it must also start at a multiple of `align`. So a
    /// dedicated chunk of the request's size rounded up to the granule, just added at such a base,
    /// always serves it (given `max_block` ≥ its size).
    ///
    /// # Time Complexity
    /// O(1): two bitmap scans, one address-map insert, one bit set.
    pub fn alloc_dedicated(
        &mut self,
        size: u64,
        align: u64,
        max_block: u64,
    ) -> Result<Grant, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        let align = self.effective_align(align)?;
        let need = round_up(size, self.min_align()).ok_or(AllocError::TooLarge)?;
        let units = need >> self.shift;
        let lists = &self.lists[ChunkKind::Dedicated as usize];
        // The head of the request's own class is the tightest candidate when it is large enough;
        // otherwise the good fit from the classes above.
        let own = lists.head(mapping(units));
        let candidate = if own != NIL && self.nodes[own as usize].size >= need {
            own
        } else {
            match mapping_search(units).and_then(|c| lists.first_at_or_above(c)) {
                Some(idx) => idx,
                None => return Err(AllocError::NoFit),
            }
        };
        let block = self.nodes[candidate as usize];
        if block.size < need || block.size > max_block || block.addr & (align - 1) != 0 {
            return Err(AllocError::NoFit);
        }
        self.unlink_free(candidate, mapping(block.size >> self.shift));
        self.nodes[candidate as usize].state = State::Live;
        self.chunk_mut(block.chunk).last_request = size;
        Ok(self.mark_live(candidate, block.addr, block.size, block.chunk, None))
    }

    /// The bookkeeping common to both allocs once node `idx` is a live block at `start`.
    #[inline]
    fn mark_live(
        &mut self,
        idx: u32,
        start: u64,
        size: u64,
        slot: u32,
        new_head: Option<u32>,
    ) -> Grant {
        self.live.insert(start, idx);
        let shift = self.shift;
        let chunk = self.chunk_mut(slot);
        if let Some(h) = new_head {
            chunk.head = h;
        }
        chunk.starts.insert((start - chunk.base) >> shift);
        chunk.live_blocks += 1;
        let (id, became_busy, chunk_size, kind) =
            (chunk.id, chunk.live_blocks == 1, chunk.size, chunk.kind);
        if became_busy {
            self.idle_chunks -= 1;
            self.idle_bytes -= chunk_size;
            if kind == ChunkKind::Dedicated {
                self.dedicated_idle_bytes -= chunk_size;
            }
        }
        self.live_bytes += size;
        self.live_count += 1;
        Grant {
            addr: start,
            size,
            chunk: id,
        }
    }

    /// Frees the live block that starts at `addr` and merges it with its free neighbours.
    ///
    /// Errors (the allocator is then unchanged): `NotInPool` for an address in no chunk,
    /// `Interior` for an address inside a live block, `NotLive` for a double free or an address
    /// never granted.
    ///
    /// # Time Complexity
    /// O(1) on success: one address-map removal (expected O(1)), at most two merges, clearing the
    /// start bit (one word write, rarely up to log₆₄ S ≤ 10). O(log C + log₆₄ S) to classify an
    /// error.
    pub fn free(&mut self, addr: u64) -> Result<Freed, FreeError> {
        let Some(idx) = self.live.remove(addr) else {
            return Err(self.classify_bad_free(addr));
        };
        let node = self.nodes[idx as usize];
        let (size, slot, prev, next) = (node.size, node.chunk, node.prev_phys, node.next_phys);
        let prev_free = prev != NIL && self.nodes[prev as usize].state == State::Free;
        let next_free = next != NIL && self.nodes[next as usize].state == State::Free;

        let shift = self.shift;
        let chunk = self.chunk_mut(slot);
        chunk.starts.remove((addr - chunk.base) >> shift);
        chunk.live_blocks -= 1;
        if !prev_free && next_free && prev == NIL {
            chunk.head = next; // the upper neighbour grows down to the chunk's base
        }
        let (id, idle, chunk_size, kind) =
            (chunk.id, chunk.live_blocks == 0, chunk.size, chunk.kind);
        if idle {
            self.idle_chunks += 1;
            self.idle_bytes += chunk_size;
            if kind == ChunkKind::Dedicated {
                self.dedicated_idle_bytes += chunk_size;
            }
        }
        self.live_bytes -= size;
        self.live_count -= 1;

        // Merge into a free neighbour, in place; the neighbour changes list only when its size
        // class changes.
        match (prev_free, next_free) {
            (false, false) => {
                self.nodes[idx as usize].state = State::Free;
                self.link_free(idx);
            }
            (false, true) => {
                let n = &mut self.nodes[next as usize];
                let listed_as = mapping(n.size >> shift);
                n.addr = addr;
                n.size += size;
                n.prev_phys = prev;
                if prev != NIL {
                    self.nodes[prev as usize].next_phys = next;
                }
                self.release_node(idx);
                self.relist(next, listed_as);
            }
            (true, false) => {
                let p = &mut self.nodes[prev as usize];
                let listed_as = mapping(p.size >> shift);
                p.size += size;
                p.next_phys = next;
                if next != NIL {
                    self.nodes[next as usize].prev_phys = prev;
                }
                self.release_node(idx);
                self.relist(prev, listed_as);
            }
            (true, true) => {
                let n = self.nodes[next as usize];
                self.unlink_free(next, mapping(n.size >> shift));
                let p = &mut self.nodes[prev as usize];
                let listed_as = mapping(p.size >> shift);
                p.size += size + n.size;
                p.next_phys = n.next_phys;
                if n.next_phys != NIL {
                    self.nodes[n.next_phys as usize].prev_phys = prev;
                }
                self.release_node(idx);
                self.release_node(next);
                self.relist(prev, listed_as);
            }
        }
        Ok(Freed {
            addr,
            size,
            chunk: id,
            chunk_idle: idle,
        })
    }

    /// The size granted to the live block that starts at `addr`.
    ///
    /// # Time Complexity
    /// O(1): one address-map lookup.
    #[inline]
    pub fn granted(&self, addr: u64) -> Option<u64> {
        self.live.get(addr).map(|n| self.nodes[n as usize].size)
    }

    /// The live block that contains `addr` (its start or any interior byte), as granted.
    ///
    /// # Time Complexity
    /// O(log C + log₆₄ S): a binary search over chunks, a predecessor query on the chunk's start
    /// bitset (S granules), one address-map lookup.
    pub fn find(&self, addr: u64) -> Option<Grant> {
        let slot = self.slot_containing(addr)?;
        let chunk = self.chunk_ref(slot);
        let granule = chunk.starts.pred((addr - chunk.base) >> self.shift)?;
        let start = chunk.base + (granule << self.shift);
        let block = &self.nodes[self.live.get(start)? as usize];
        (addr - block.addr < block.size).then_some(Grant {
            addr: block.addr,
            size: block.size,
            chunk: chunk.id,
        })
    }

    /// Occupancy figures.
    ///
    /// # Time Complexity
    /// O(1), except `largest_free_block`, which scans the largest non-empty size class of each
    /// kind: O(m) for the m free blocks there (usually very few).
    pub fn stats(&self) -> Stats {
        Stats {
            reserved_bytes: self.reserved,
            live_bytes: self.live_bytes,
            free_bytes: self.reserved - self.live_bytes,
            largest_free_block: self.lists[0]
                .largest(&self.nodes)
                .max(self.lists[1].largest(&self.nodes)),
            chunks: self.by_base.len() as u64,
            live_blocks: self.live_count,
            free_blocks: self.free_count,
            idle_chunks: self.idle_chunks,
            idle_bytes: self.idle_bytes,
            dedicated_chunks: self.dedicated_chunks,
            dedicated_bytes: self.dedicated_bytes,
            dedicated_idle_bytes: self.dedicated_idle_bytes,
        }
    }

    // ---- internals -------------------------------------------------------------------------

    /// A free shared block that can hold `size` bytes at alignment `align`, `search` being
    /// `size + align - granule`; see [`alloc`](Self::alloc).
    #[inline]
    fn find_fit(&self, search: u64, size: u64, align: u64) -> Option<u32> {
        let units = search >> self.shift;
        let lists = &self.lists[ChunkKind::Shared as usize];
        if let Some(idx) = mapping_search(units).and_then(|c| lists.first_at_or_above(c)) {
            return Some(idx);
        }
        // Good fit failed: the request's own class may still hold a block large enough. Only its
        // head is examined, to stay O(1).
        let head = lists.head(mapping(units));
        (head != NIL && self.fits(head, size, align)).then_some(head)
    }

    /// Whether free block `idx` holds `size` bytes at alignment `align`.
    #[inline]
    fn fits(&self, idx: u32, size: u64, align: u64) -> bool {
        let b = &self.nodes[idx as usize];
        match round_up(b.addr, align).and_then(|s| s.checked_add(size)) {
            Some(end) => end <= b.addr + b.size,
            None => false,
        }
    }

    /// Pushes free block `idx` on the list of its size class; counts it as a free block.
    #[inline]
    fn link_free(&mut self, idx: u32) {
        let node = &self.nodes[idx as usize];
        let (kind, class) = (node.kind as usize, mapping(node.size >> self.shift));
        self.lists[kind].push(&mut self.nodes, idx, class);
        self.free_count += 1;
    }

    /// Unlinks free block `idx` from list `class`, where it is listed; it is a free block no more.
    #[inline]
    fn unlink_free(&mut self, idx: u32, class: (usize, usize)) {
        let kind = self.nodes[idx as usize].kind as usize;
        self.lists[kind].unlink(&mut self.nodes, idx, class);
        self.free_count -= 1;
    }

    /// Moves free block `idx`, listed in `class`, to the list of its current size if that differs.
    #[inline]
    fn relist(&mut self, idx: u32, class: (usize, usize)) {
        let node = &self.nodes[idx as usize];
        let (kind, now) = (node.kind as usize, mapping(node.size >> self.shift));
        if now != class {
            self.lists[kind].unlink(&mut self.nodes, idx, class);
            self.lists[kind].push(&mut self.nodes, idx, now);
        }
    }

    /// Points `prev`'s `next_phys` at the new node `idx`, or, when `prev` is [`NIL`], notes that
    /// `idx` becomes its chunk's first block.
    #[inline]
    fn link_before(&mut self, idx: u32, prev: u32, new_head: &mut Option<u32>) {
        if prev != NIL {
            self.nodes[prev as usize].next_phys = idx;
        } else {
            *new_head = Some(idx);
        }
    }

    /// Takes a node from the vacant stack, or grows the store. Callers check capacity first.
    #[inline]
    fn new_node(&mut self, block: Block) -> u32 {
        if self.vacant != NIL {
            let idx = self.vacant;
            self.vacant = self.nodes[idx as usize].next_free;
            self.nodes[idx as usize] = block;
            idx
        } else {
            self.nodes.push(block);
            (self.nodes.len() - 1) as u32
        }
    }

    /// Returns a node to the vacant stack.
    #[inline]
    fn release_node(&mut self, idx: u32) {
        let node = &mut self.nodes[idx as usize];
        node.state = State::Vacant;
        node.next_free = self.vacant;
        self.vacant = idx;
    }

    fn chunk_ref(&self, slot: u32) -> &Chunk {
        match &self.chunks[slot as usize] {
            Some(c) => c,
            None => unreachable!("cuguard pool: a block or index names a removed chunk slot"),
        }
    }

    #[inline]
    fn chunk_mut(&mut self, slot: u32) -> &mut Chunk {
        match &mut self.chunks[slot as usize] {
            Some(c) => c,
            None => unreachable!("cuguard pool: a block names a removed chunk slot"),
        }
    }

    fn info(&self, slot: u32) -> ChunkInfo {
        let c = self.chunk_ref(slot);
        ChunkInfo {
            id: c.id,
            base: c.base,
            size: c.size,
            kind: c.kind,
            live_blocks: c.live_blocks,
            last_request: c.last_request,
        }
    }

    fn slot_of(&self, id: ChunkId) -> Option<u32> {
        self.by_base
            .iter()
            .map(|&(_, slot)| slot)
            .find(|&slot| self.chunk_ref(slot).id == id)
    }

    fn slot_containing(&self, addr: u64) -> Option<u32> {
        let pos = self.by_base.partition_point(|&(b, _)| b <= addr);
        let (_, slot) = *self.by_base.get(pos.checked_sub(1)?)?;
        let c = self.chunk_ref(slot);
        (addr - c.base < c.size).then_some(slot)
    }

    #[cold]
    fn classify_bad_free(&self, addr: u64) -> FreeError {
        if self.slot_containing(addr).is_none() {
            return FreeError::NotInPool;
        }
        match self.find(addr) {
            Some(g) => FreeError::Interior { start: g.addr },
            None => FreeError::NotLive,
        }
    }
}
