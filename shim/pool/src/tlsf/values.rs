//! What the sub-allocator hands out and reports: chunk ids, kinds and descriptions, grants, what
//! a free gave back, and the occupancy figures.

/// Identifies a chunk for the life of its [`SubAllocator`](super::SubAllocator). Ids are handed
/// out in increasing order and never reused, so a stale id can never name a newer chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChunkId(pub u32);

/// How a chunk is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkKind {
    /// Split among many blocks by [`SubAllocator::alloc`](super::SubAllocator::alloc).
    Shared = 0,
    /// One block, granted whole by
    /// [`SubAllocator::alloc_dedicated`](super::SubAllocator::alloc_dedicated).
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

/// A live block: what [`SubAllocator::alloc`](super::SubAllocator::alloc) grants and
/// [`SubAllocator::find`](super::SubAllocator::find) reports.
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

/// What [`SubAllocator::free`](super::SubAllocator::free) gave back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freed {
    /// The block's start (the address passed in).
    pub addr: u64,
    /// The block's size, as in its [`Grant`].
    pub size: u64,
    /// The chunk that holds it.
    pub chunk: ChunkId,
    /// Whether the chunk has no live block left (see
    /// [`SubAllocator::idle_chunks`](super::SubAllocator::idle_chunks)).
    pub chunk_idle: bool,
}

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
