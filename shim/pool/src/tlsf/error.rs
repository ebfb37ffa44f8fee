//! Why a call of the sub-allocator failed: the error of each operation, with its message.

use std::fmt;

use super::values::ChunkId;

/// Why an alloc granted nothing. The allocator is left unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocError {
    /// A request of zero bytes. (`cuMemAlloc` answers `CUDA_ERROR_INVALID_VALUE`.)
    ZeroSize,
    /// The alignment is not a power of two.
    BadAlign,
    /// The size, rounded up and padded for alignment, does not fit in a `u64`.
    TooLarge,
    /// No free block fits: add a chunk (see
    /// [`SubAllocator::footprint`](super::SubAllocator::footprint)) and retry.
    NoFit,
    /// The host-side node store is full (2^32 blocks); practically unreachable.
    NoMetadata,
}

/// Why [`SubAllocator::free`](super::SubAllocator::free) freed nothing. In every case the
/// allocator is left unchanged.
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

/// Why [`SubAllocator::remove_chunk`](super::SubAllocator::remove_chunk) kept a chunk. The
/// allocator is left unchanged.
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
