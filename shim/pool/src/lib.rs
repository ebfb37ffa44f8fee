//! The device-memory pool behind `libcuguard.so`: allocations served from chunks of device memory
//! that the pool takes from the device and carves on the host, with freed blocks held back until
//! no GPU work issued before their free can still touch them.
//!
//! The pool never reads or writes the memory it manages and makes no foreign call: it sees the
//! device only through the [`Device`] trait (take and return chunks, count submissions, record
//! and query events, synchronize), so it has no `unsafe` code, and every decision it takes can
//! be tested against a fake device. The shim implements [`Device`] over the real driver, and
//! keeps the parts that are about the process: which pool serves the current context, the
//! owner of an address, `CUGUARD_POOL_*` parsing.
//!
//! How the pieces fit:
//!
//! - [`CtxPool`] (`ctxpool.rs`): one context's pool, split into [`ARENAS`] arenas, each with
//!   its own lock; allocation, free, lookup, trimming, the report's [`PoolStats`]. Each block
//!   carries a record of the caller's type `R` (in the shim, the tracker's record).
//! - `tlsf.rs`: the sub-allocator, a two-level segregated fit over address ranges, O(1).
//! - `chunking.rs`: how large a chunk to ask for, and which requests get a chunk of their own.
//! - `reuse.rs`: the rule for when a freed block may be reused without racing GPU work.
//! - `tcache.rs`: [`ThreadCache`], a thread's cache of ready blocks in front of the arenas, so
//!   that a pair it serves takes no lock; the caller's record lives in the cache slot, with
//!   the block.
//! - `policy.rs`: what an arena does when it cannot serve a request at once (reclaim, wait for
//!   pending frees, fence, grow, synchronize, trim, refuse), and when it trims and fences.
//! - [`Device`] (`device.rs`): what the pool needs from the device.
//!
//! # Example
//!
//! A device with no GPU work ever in flight, whose chunks are plain address ranges:
//!
//! ```
//! use std::cell::Cell;
//! use cuguard_pool::{CtxPool, Device, DeviceError, Settings};
//!
//! struct Idle {
//!     next: Cell<u64>,
//! }
//!
//! impl Device for Idle {
//!     type Event = ();
//!     fn alloc_chunk(&self, bytes: u64) -> Result<u64, DeviceError> {
//!         let base = self.next.get();
//!         self.next.set(base + bytes);
//!         Ok(base)
//!     }
//!     fn free_chunk(&self, _base: u64, _wait: bool) {}
//!     fn is_current(&self) -> bool { true }
//!     fn submissions(&self) -> u64 { 0 }
//!     fn capturing(&self) -> bool { false }
//!     fn record_event(&self, _stream: u64) -> Option<()> { Some(()) }
//!     fn with_side_streams<T>(&self, f: impl FnOnce(&[u64], u64) -> T) -> T {
//!         f(&[], 0)
//!     }
//!     fn destroyed_streams_done(&self, _count: u64) -> bool { true }
//!     fn event_done(&self, _: &()) -> bool { true }
//!     fn destroy_event(&self, _: ()) {}
//!     fn synchronize(&self) -> bool { true }
//! }
//!
//! let settings = Settings { keep: 1 << 30, ..Settings::default() };
//! let pool: CtxPool<Idle, u64> = CtxPool::new(Idle { next: Cell::new(1 << 40) }, settings);
//!
//! let a = pool.alloc(0, 1000, Some(7)).unwrap();
//! assert_eq!(a % 256, 0);
//! let block = pool.find(0, a + 10).unwrap();
//! assert_eq!((block.addr, block.granted, block.record), (a, 1024, Some(7)));
//! assert_eq!(pool.free(0, a), Some(Ok(Some(7))));
//!
//! // Nothing was submitted since the last fence, so the block is reusable at once, and the
//! // idle chunk stays (it is within what is kept).
//! assert_eq!(pool.alloc(0, 1000, None), Ok(a));
//! assert_eq!(pool.stats().chunks, 1);
//! ```

#![deny(unsafe_code)]

mod addr_hash;
mod chunking;
mod ctxpool;
mod device;
mod policy;
mod reuse;
mod tcache;
mod tlsf;

pub use ctxpool::{
    ALIGN, ARENAS, Block, CtxPool, Export, InvalidFree, PoolStats, Reason, Refusal, Settings,
};
pub use device::{Device, DeviceError, LEGACY_STREAM};
pub use tcache::{
    MAX_CACHED_BLOCK, MAX_CACHED_BLOCKS, MAX_CACHED_BYTES, Packed, RECORD_WORDS, SLOTS, ThreadCache,
};
