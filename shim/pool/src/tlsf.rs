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
#[cfg(test)]
mod tests;

use std::fmt;

use addrmap::AddrMap;
use bitset::PredSet;

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

/// Identifies a chunk for the life of its [`SubAllocator`]. Ids are handed out in increasing order
/// and never reused, so a stale id can never name a newer chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkId(pub u32);

/// How a chunk is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkKind {
    /// Split among many blocks by [`SubAllocator::alloc`].
    Shared = 0,
    /// One block, granted whole by [`SubAllocator::alloc_dedicated`].
    Dedicated = 1,
}

/// A chunk as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Its id.
    pub id: ChunkId,
    /// First byte.
    pub base: u64,
    /// Bytes.
    pub size: u64,
    /// Shared or dedicated.
    pub kind: ChunkKind,
    /// Number of live blocks in it; 0 means idle (one free block, removable).
    pub live_blocks: u64,
    /// A dedicated chunk: the exact size of the last request it served (0 for a shared one).
    pub last_request: u64,
}

/// A live block: what [`SubAllocator::alloc`] grants and [`SubAllocator::find`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// First byte; a multiple of the alignment asked for (and of the granule).
    pub addr: u64,
    /// Bytes reserved for the block, a multiple of the granule: the request rounded up to the
    /// granule in a shared chunk, the whole chunk in a dedicated one.
    pub size: u64,
    /// The chunk that holds it.
    pub chunk: ChunkId,
}

/// What [`SubAllocator::free`] gave back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freed {
    /// The block's start (the address passed in).
    pub addr: u64,
    /// The block's size, as in its [`Grant`].
    pub size: u64,
    /// The chunk that holds it.
    pub chunk: ChunkId,
    /// Whether the chunk has no live block left (see [`SubAllocator::idle_chunks`]).
    pub chunk_idle: bool,
}

/// Why an alloc granted nothing. The allocator is left unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// A request of zero bytes. (`cuMemAlloc` answers `CUDA_ERROR_INVALID_VALUE`.)
    ZeroSize,
    /// The alignment is not a power of two.
    BadAlign,
    /// The size, rounded up and padded for alignment, does not fit in a `u64`.
    TooLarge,
    /// No free block fits: add a chunk (see [`SubAllocator::footprint`]) and retry.
    NoFit,
    /// The host-side node store is full (2^32 blocks); practically unreachable.
    NoMetadata,
}

/// Why [`SubAllocator::free`] freed nothing. In every case the allocator is left unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeError {
    /// The address is in no chunk: not a pooled pointer (the shim forwards it to the driver).
    NotInPool,
    /// The address is inside the live block that starts at `start`, not at its start.
    Interior {
        /// The start of the live block that contains the address.
        start: u64,
    },
    /// The address is in a chunk but starts no live block: a double free, or never granted.
    NotLive,
}

/// Why a chunk was refused. The allocator is left unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddChunkError {
    /// A size of zero.
    Empty,
    /// The base or the size is not a multiple of the granule.
    Misaligned,
    /// `base + size` does not fit in a `u64`.
    Overflow,
    /// The range overlaps a chunk already registered.
    Overlap {
        /// The chunk it overlaps.
        with: ChunkId,
    },
    /// 2^32 − 1 chunk ids have been handed out, or the node store is full.
    Exhausted,
    /// The host could not provide the chunk's bookkeeping (its start bitset).
    NoMemory,
}

/// Why [`SubAllocator::remove_chunk`] kept a chunk. The allocator is left unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoveError {
    /// No chunk has this id (never added, or already removed).
    Unknown,
    /// The chunk still holds live blocks.
    Busy {
        /// How many.
        live_blocks: u64,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AllocError::ZeroSize => "zero-byte request",
            AllocError::BadAlign => "alignment is not a power of two",
            AllocError::TooLarge => "request too large for the address space",
            AllocError::NoFit => "no free block fits",
            AllocError::NoMetadata => "block node store is full",
        })
    }
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::NotInPool => f.write_str("address is not in the pool"),
            FreeError::Interior { start } => write!(f, "address is inside the block at {start:#x}"),
            FreeError::NotLive => f.write_str("address starts no live block (double free?)"),
        }
    }
}

impl fmt::Display for AddChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddChunkError::Empty => f.write_str("empty chunk"),
            AddChunkError::Misaligned => {
                f.write_str("chunk base or size is not a multiple of the granule")
            }
            AddChunkError::Overflow => f.write_str("chunk end overflows the address space"),
            AddChunkError::Overlap { with } => write!(f, "chunk overlaps chunk {}", with.0),
            AddChunkError::Exhausted => f.write_str("chunk ids or block nodes exhausted"),
            AddChunkError::NoMemory => f.write_str("no host memory for the chunk's bookkeeping"),
        }
    }
}

impl fmt::Display for RemoveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoveError::Unknown => f.write_str("no such chunk"),
            RemoveError::Busy { live_blocks } => {
                write!(f, "chunk still holds {live_blocks} live blocks")
            }
        }
    }
}

impl std::error::Error for AllocError {}
impl std::error::Error for FreeError {}
impl std::error::Error for AddChunkError {}
impl std::error::Error for RemoveError {}

/// Occupancy figures, all maintained incrementally.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Sum of the chunks' sizes.
    pub reserved_bytes: u64,
    /// Sum of the live blocks' sizes (as granted).
    pub live_bytes: u64,
    /// `reserved_bytes - live_bytes`: every byte of a chunk is in exactly one block.
    pub free_bytes: u64,
    /// The largest free block of either kind (0 when none). `largest_free_block / free_bytes` is
    /// the pool's fragmentation figure: 1 means all free memory is one block.
    pub largest_free_block: u64,
    /// Number of chunks.
    pub chunks: u64,
    /// Number of live blocks.
    pub live_blocks: u64,
    /// Number of free blocks.
    pub free_blocks: u64,
    /// Chunks with no live block (each is then a single free block).
    pub idle_chunks: u64,
    /// Sum of the idle chunks' sizes: memory that could go back to the driver right now.
    pub idle_bytes: u64,
    /// Number of dedicated chunks (included in `chunks`).
    pub dedicated_chunks: u64,
    /// Sum of the dedicated chunks' sizes (included in `reserved_bytes`).
    pub dedicated_bytes: u64,
    /// Sum of the idle dedicated chunks' sizes (included in `idle_bytes`).
    pub dedicated_idle_bytes: u64,
}

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

    /// Registers `[base, base + size)` as a shared chunk, one free block for
    /// [`alloc`](Self::alloc) to carve.
    ///
    /// `base` and `size` must be multiples of the granule (`cuMemAlloc` returns 512-byte aligned
    /// or better). The chunk costs `size / (8 × granule)` bytes of host memory for its start
    /// bitset (zeroed lazily by the OS), plus one node.
    ///
    /// # Time Complexity
    /// O(C) for the sorted chunk table, plus allocating the bitset.
    pub fn add_chunk(&mut self, base: u64, size: u64) -> Result<ChunkId, AddChunkError> {
        self.add(base, size, ChunkKind::Shared)
    }

    /// Registers `[base, base + size)` as a dedicated chunk, one free block that only
    /// [`alloc_dedicated`](Self::alloc_dedicated) grants, whole. Same rules and costs as
    /// [`add_chunk`](Self::add_chunk).
    ///
    /// # Time Complexity
    /// O(C), plus allocating the bitset.
    pub fn add_dedicated_chunk(&mut self, base: u64, size: u64) -> Result<ChunkId, AddChunkError> {
        self.add(base, size, ChunkKind::Dedicated)
    }

    fn add(&mut self, base: u64, size: u64, kind: ChunkKind) -> Result<ChunkId, AddChunkError> {
        if size == 0 {
            return Err(AddChunkError::Empty);
        }
        let mask = self.min_align() - 1;
        if base & mask != 0 || size & mask != 0 {
            return Err(AddChunkError::Misaligned);
        }
        let end = base.checked_add(size).ok_or(AddChunkError::Overflow)?;
        let pos = self.by_base.partition_point(|&(b, _)| b < base);
        if pos > 0 {
            let c = self.chunk_ref(self.by_base[pos - 1].1);
            if c.base + c.size > base {
                return Err(AddChunkError::Overlap { with: c.id });
            }
        }
        if let Some(&(next_base, slot)) = self.by_base.get(pos)
            && next_base < end
        {
            return Err(AddChunkError::Overlap {
                with: self.chunk_ref(slot).id,
            });
        }
        if self.next_id == u32::MAX || (self.vacant == NIL && self.nodes.len() >= MAX_NODES) {
            return Err(AddChunkError::Exhausted);
        }
        let starts = PredSet::new(size >> self.shift).ok_or(AddChunkError::NoMemory)?;
        let slot = match self.vacant_slots.pop() {
            Some(s) => s,
            None => {
                self.chunks.push(None);
                (self.chunks.len() - 1) as u32
            }
        };
        let head = self.new_node(Block {
            addr: base,
            size,
            prev_phys: NIL,
            next_phys: NIL,
            prev_free: NIL,
            next_free: NIL,
            chunk: slot,
            state: State::Free,
            kind,
        });
        let id = ChunkId(self.next_id);
        self.next_id += 1;
        self.chunks[slot as usize] = Some(Chunk {
            id,
            base,
            size,
            kind,
            head,
            live_blocks: 0,
            last_request: 0,
            starts,
        });
        self.by_base.insert(pos, (base, slot));
        self.link_free(head);
        self.reserved += size;
        self.idle_chunks += 1;
        self.idle_bytes += size;
        if kind == ChunkKind::Dedicated {
            self.dedicated_chunks += 1;
            self.dedicated_bytes += size;
            self.dedicated_idle_bytes += size;
        }
        Ok(id)
    }

    /// Removes an idle chunk and returns its `(base, size)`, for the owner to give back.
    ///
    /// # Time Complexity
    /// O(C).
    pub fn remove_chunk(&mut self, id: ChunkId) -> Result<(u64, u64), RemoveError> {
        let slot = self.slot_of(id).ok_or(RemoveError::Unknown)?;
        let chunk = self.chunk_ref(slot);
        if chunk.live_blocks != 0 {
            return Err(RemoveError::Busy {
                live_blocks: chunk.live_blocks,
            });
        }
        let (base, size, head, kind) = (chunk.base, chunk.size, chunk.head, chunk.kind);
        // Idle ⇒ one free block covering the chunk (invariant 3).
        debug_assert_eq!(self.nodes[head as usize].size, size);
        self.unlink_free(head, mapping(size >> self.shift));
        self.release_node(head);
        if let Ok(pos) = self.by_base.binary_search_by_key(&base, |&(b, _)| b) {
            self.by_base.remove(pos);
        }
        self.chunks[slot as usize] = None;
        self.vacant_slots.push(slot);
        self.reserved -= size;
        self.idle_chunks -= 1;
        self.idle_bytes -= size;
        if kind == ChunkKind::Dedicated {
            self.dedicated_chunks -= 1;
            self.dedicated_bytes -= size;
            self.dedicated_idle_bytes -= size;
        }
        Ok((base, size))
    }

    /// All chunks, in address order.
    ///
    /// # Time Complexity
    /// O(C) for the whole iteration.
    pub fn chunks(&self) -> impl Iterator<Item = ChunkInfo> + '_ {
        self.by_base.iter().map(|&(_, slot)| self.info(slot))
    }

    /// The chunks with no live block, in address order: those [`remove_chunk`](Self::remove_chunk)
    /// accepts.
    ///
    /// # Time Complexity
    /// O(C) for the whole iteration.
    pub fn idle_chunks(&self) -> impl Iterator<Item = ChunkInfo> + '_ {
        self.chunks().filter(|c| c.live_blocks == 0)
    }

    /// The chunk with this id.
    ///
    /// # Time Complexity
    /// O(C).
    #[cfg_attr(not(test), allow(dead_code))] // API for the pool's owner; used by tests so far
    pub fn chunk(&self, id: ChunkId) -> Option<ChunkInfo> {
        self.slot_of(id).map(|slot| self.info(slot))
    }

    /// The chunk that contains `addr`: whether a pointer belongs to the pool.
    ///
    /// # Time Complexity
    /// O(log C).
    pub fn chunk_containing(&self, addr: u64) -> Option<ChunkInfo> {
        self.slot_containing(addr).map(|slot| self.info(slot))
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

    /// Checks every invariant listed on [`SubAllocator`] and returns the first violation found.
    /// Test builds only (the pool's own stress tests may call it too).
    ///
    /// # Time Complexity
    /// O(N + C·S/64): every node, every free list, every chunk's start bitset.
    #[cfg(test)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let granule = self.min_align();
        let mut seen = vec![false; self.nodes.len()];
        let mut counted = Counted::default();
        let mut prev_end: Option<u64> = None;
        let mut ids = std::collections::BTreeSet::new();
        let in_use = self.chunks.iter().filter(|c| c.is_some()).count();
        if in_use != self.by_base.len() {
            return Err(format!(
                "{in_use} chunk slots in use, {} in by_base",
                self.by_base.len()
            ));
        }
        for &(base, slot) in &self.by_base {
            let Some(c) = self.chunks.get(slot as usize).and_then(|c| c.as_ref()) else {
                return Err(format!("by_base names empty slot {slot}"));
            };
            if c.base != base {
                return Err(format!(
                    "by_base base {base:#x} != chunk base {:#x}",
                    c.base
                ));
            }
            if !ids.insert(c.id) || c.id.0 >= self.next_id {
                return Err(format!(
                    "chunk id {:?} duplicated or not yet handed out",
                    c.id
                ));
            }
            if prev_end.is_some_and(|e| base < e) {
                return Err(format!(
                    "chunk at {base:#x} overlaps its predecessor or is out of order"
                ));
            }
            prev_end = Some(base + c.size);
            if c.starts.len() != c.size >> self.shift {
                return Err("start bitset has the wrong length".into());
            }
            c.starts.check()?;
            self.check_chunk(slot, c, granule, &mut seen, &mut counted)?;
        }
        let mut listed = 0u64;
        for (k, lists) in self.lists.iter().enumerate() {
            listed += self.check_lists(k, lists, counted.free)?;
        }
        if listed != counted.free {
            return Err(format!(
                "{listed} blocks on free lists, {} free blocks in chunks",
                counted.free
            ));
        }
        let mut i = self.vacant;
        while i != NIL {
            let Some(b) = self.nodes.get(i as usize) else {
                return Err(format!("vacant node {i} out of range"));
            };
            if b.state != State::Vacant || std::mem::replace(&mut seen[i as usize], true) {
                return Err(format!(
                    "vacant stack holds node {i} twice, or a node in use"
                ));
            }
            i = b.next_free;
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(format!("node {i} is leaked (in no chunk, not vacant)"));
        }
        self.live.check()?;
        let counters = [
            ("reserved", self.reserved, counted.reserved),
            ("live_bytes", self.live_bytes, counted.live_bytes),
            ("live_count", self.live_count, counted.live),
            ("live map", self.live.len() as u64, counted.live),
            ("free_count", self.free_count, counted.free),
            (
                "free bytes",
                self.reserved.wrapping_sub(self.live_bytes),
                counted.free_bytes,
            ),
            ("idle_chunks", self.idle_chunks, counted.idle_chunks),
            ("idle_bytes", self.idle_bytes, counted.idle_bytes),
            (
                "dedicated_chunks",
                self.dedicated_chunks,
                counted.dedicated_chunks,
            ),
            (
                "dedicated_bytes",
                self.dedicated_bytes,
                counted.dedicated_bytes,
            ),
            (
                "dedicated_idle_bytes",
                self.dedicated_idle_bytes,
                counted.dedicated_idle_bytes,
            ),
        ];
        for (name, kept, found) in counters {
            if kept != found {
                return Err(format!("counter {name} is {kept}, the blocks say {found}"));
            }
        }
        Ok(())
    }

    /// Walks one chunk's blocks (invariants 2–5 for them).
    #[cfg(test)]
    fn check_chunk(
        &self,
        slot: u32,
        c: &Chunk,
        granule: u64,
        seen: &mut [bool],
        counted: &mut Counted,
    ) -> Result<(), String> {
        let (mut at, mut prev, mut i) = (c.base, NIL, c.head);
        let (mut live, mut blocks, mut prev_free) = (0u64, 0u64, false);
        while i != NIL {
            let Some(b) = self.nodes.get(i as usize) else {
                return Err(format!("node {i} out of range"));
            };
            if std::mem::replace(&mut seen[i as usize], true) {
                return Err(format!("node {i} reached twice"));
            }
            if b.chunk != slot || b.kind != c.kind || b.prev_phys != prev || b.addr != at {
                return Err(format!(
                    "node {i} ({b:?}) breaks the tiling of chunk {:?} at {at:#x}",
                    c.id
                ));
            }
            if b.size == 0 || b.size % granule != 0 || b.addr % granule != 0 {
                return Err(format!("node {i} has a bad size or address: {b:?}"));
            }
            let g = (b.addr - c.base) >> self.shift;
            match b.state {
                State::Free => {
                    if prev_free {
                        return Err(format!("node {i} and its lower neighbour are both free"));
                    }
                    if c.starts.contains(g) {
                        return Err(format!("free node {i} is marked as a live start"));
                    }
                    counted.free += 1;
                    counted.free_bytes += b.size;
                }
                State::Live => {
                    if self.live.get(b.addr) != Some(i) {
                        return Err(format!("live node {i} missing from the live map"));
                    }
                    if !c.starts.contains(g) {
                        return Err(format!("live node {i} missing from the start bitset"));
                    }
                    live += 1;
                    counted.live_bytes += b.size;
                }
                State::Vacant => {
                    return Err(format!("vacant node {i} linked into chunk {:?}", c.id));
                }
            }
            prev_free = b.state == State::Free;
            at = b.addr + b.size;
            prev = i;
            i = b.next_phys;
            blocks += 1;
        }
        if at != c.base + c.size {
            return Err(format!(
                "blocks of chunk {:?} end at {at:#x}, not at its end",
                c.id
            ));
        }
        if live != c.live_blocks || c.starts.count() != live {
            return Err(format!(
                "chunk {:?} counts {} live blocks, holds {live}",
                c.id, c.live_blocks
            ));
        }
        if c.kind == ChunkKind::Dedicated && blocks != 1 {
            return Err(format!("dedicated chunk {:?} holds {blocks} blocks", c.id));
        }
        counted.reserved += c.size;
        counted.live += live;
        if live == 0 {
            counted.idle_chunks += 1;
            counted.idle_bytes += c.size;
        }
        if c.kind == ChunkKind::Dedicated {
            counted.dedicated_chunks += 1;
            counted.dedicated_bytes += c.size;
            if live == 0 {
                counted.dedicated_idle_bytes += c.size;
            }
        }
        Ok(())
    }

    /// Checks one family of free lists; returns how many blocks it holds.
    #[cfg(test)]
    fn check_lists(&self, kind: usize, lists: &FreeLists, free_blocks: u64) -> Result<u64, String> {
        let mut listed = 0u64;
        for fl in 0..FL_COUNT {
            if (lists.fl_bitmap >> fl & 1 == 1) != (lists.sl_bitmap[fl] != 0) {
                return Err(format!(
                    "lists {kind}: fl_bitmap bit {fl} disagrees with sl_bitmap"
                ));
            }
            for sl in 0..SL_COUNT {
                let head = lists.heads[fl][sl];
                if (lists.sl_bitmap[fl] >> sl & 1 == 1) != (head != NIL) {
                    return Err(format!("lists {kind}: sl_bitmap[{fl}] bit {sl} disagrees"));
                }
                let (mut i, mut prev) = (head, NIL);
                while i != NIL {
                    let Some(b) = self.nodes.get(i as usize) else {
                        return Err(format!("lists {kind}: node {i} out of range"));
                    };
                    if b.state != State::Free || b.prev_free != prev || b.kind as usize != kind {
                        return Err(format!(
                            "lists {kind} ({fl},{sl}) hold a bad node {i}: {b:?}"
                        ));
                    }
                    if mapping(b.size >> self.shift) != (fl, sl) {
                        return Err(format!("node {i} of size {} is on the wrong list", b.size));
                    }
                    listed += 1;
                    if listed > free_blocks {
                        return Err("free lists hold more nodes than there are free blocks".into());
                    }
                    prev = i;
                    i = b.next_free;
                }
            }
        }
        Ok(listed)
    }
}

/// What `SubAllocator::check_invariants` counts while walking the chunks.
#[cfg(test)]
#[derive(Default)]
struct Counted {
    reserved: u64,
    live: u64,
    live_bytes: u64,
    free: u64,
    free_bytes: u64,
    idle_chunks: u64,
    idle_bytes: u64,
    dedicated_chunks: u64,
    dedicated_bytes: u64,
    dedicated_idle_bytes: u64,
}
