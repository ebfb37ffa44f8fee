//! The pool family's model: a memory pool, the blocks it holds, and a synchronous allocation
//! held after a stream-ordered free.
//!
//! A pool holds blocks: each is a host mapping charged to the device for `cap` bytes. An async
//! allocation takes a cached block that fits (at least the size, at most twice it: [`Pool::fit`])
//! or makes a new one. What frees return, and when cached blocks go back to the host, is
//! `state/pool.rs`.

use std::ffi::c_int;
use std::sync::Arc;

use crate::model::memory::Alloc;
use crate::model::stream::Stream;

/// A block of pool memory.
#[derive(Debug, Clone, Copy)]
pub struct Block {
    pub base: u64,
    /// Bytes charged to the device for this block.
    pub cap: u64,
    pub map_len: usize,
    /// Cached since a context or stream synchronization observed its free complete: the driver
    /// then gives it to any allocation of the device that needs the memory
    /// ([`crate::state::State::charge_device`]).
    pub observed: bool,
}

/// A memory pool.
pub struct Pool {
    pub handle: usize,
    pub device: i32,
    pub is_default: bool,
    /// The context that made the pool (created pools only).
    pub owner_ctx: Option<u64>,
    pub destroyed: bool,
    pub handle_types: u32,
    /// `CU_MEMPOOL_ATTR_REUSE_*` (attributes 1 to 3), stored and reported.
    pub reuse: [c_int; 3],
    pub release_threshold: u64,
    /// Blocks free for reuse.
    pub cached: Vec<Block>,
    /// Bytes of all blocks (in use, pending a free, cached).
    pub reserved: u64,
    pub reserved_high: u64,
    /// Bytes of live allocations.
    pub used: u64,
    pub used_high: u64,
}

impl Pool {
    pub fn new(
        handle: usize,
        device: i32,
        is_default: bool,
        owner_ctx: Option<u64>,
        handle_types: u32,
    ) -> Pool {
        Pool {
            handle,
            device,
            is_default,
            owner_ctx,
            destroyed: false,
            handle_types,
            reuse: [1, 1, 1],
            release_threshold: 0,
            cached: Vec::new(),
            reserved: 0,
            reserved_high: 0,
            used: 0,
            used_high: 0,
        }
    }

    /// Takes the smallest cached block that fits `size` bytes (at least the size, at most twice
    /// it), if any.
    pub fn fit(&mut self, size: u64) -> Option<Block> {
        let i = self
            .cached
            .iter()
            .enumerate()
            .filter(|(_, b)| b.cap >= size && b.cap / 2 <= size)
            .min_by_key(|(_, b)| b.cap)
            .map(|(i, _)| i)?;
        Some(self.cached.swap_remove(i))
    }
}

/// A synchronous allocation freed with `cuMemFreeAsync` whose stream reached the free: its
/// memory is still taken until a synchronization with `stream` (see the module documentation).
pub struct Held {
    pub alloc: Alloc,
    /// The stream the free was issued on.
    pub stream: Arc<Stream>,
}

/// `CUmemPool_attribute` values.
pub const ATTR_REUSE_FIRST: c_int = 1;
pub const ATTR_REUSE_LAST: c_int = 3;
pub const ATTR_RELEASE_THRESHOLD: c_int = 4;
pub const ATTR_RESERVED_MEM_CURRENT: c_int = 5;
pub const ATTR_RESERVED_MEM_HIGH: c_int = 6;
pub const ATTR_USED_MEM_CURRENT: c_int = 7;
pub const ATTR_USED_MEM_HIGH: c_int = 8;
