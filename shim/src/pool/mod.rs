//! The pool: cuMemAlloc_v2, cuMemAllocPitch_v2 and cuMemFree_v2 served from chunks of device
//! memory that the pool takes from the driver and carves on the host.
//!
//! - [`tlsf`]: the sub-allocator (two-level segregated fit over address ranges, O(1)).
//! - [`growth`]: how large a chunk to ask for, and which requests get a chunk of their own.
//! - [`fence`]: when a freed block may be reused without racing GPU work.
//! - [`ctxpool`]: one context's pool: allocation, free, the slow path under pressure, trimming.
//! - [`registry`]: the pool of the current context, and the owner of an address.
//! - [`settings`]: `CUGUARD_POOL_*` amounts.
//!
//! Each pool belongs to one context; when the context is destroyed the driver frees the chunks
//! and the pool forgets them. Stream-ordered, managed, VMM and pinned host memory never come
//! from the pool.

pub mod ctxpool;
pub mod fence;
pub mod growth;
pub mod registry;
pub mod settings;
pub mod tlsf;
