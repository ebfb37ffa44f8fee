//! The shim's serving of allocations from the pool (its glue): cuMemAlloc_v2, cuMemAllocPitch_v2 and cuMemFree_v2 served from the
//! `cuguard_pool` crate's pools (sub-allocator, growth, fences, policy; no FFI), one per context.
//! What is here is about this process and its driver:
//!
//! - [`pool`]: a context's pool as the shim uses it, and the context it is over.
//! - [`cache`]: the calling thread's cache of ready blocks, bound to one pool at a time.
//! - [`driver_context`]: the pool's `Device` over the real driver, for one context.
//! - [`events`]: the driver's events and contexts as the fences use them.
//! - [`giveback`]: the give-back thread: trimmed chunks freed with `cuMemFree` off the program's
//!   threads, and pools whose frees wait for a fence tended until none wait.
//! - [`submissions`]: what the hooks see of the program's work (submissions, captures,
//!   non-blocking streams), which the pool's fences need.
//! - [`peers`]: which other contexts' work can touch a context's memory (peer access, peer
//!   copies), which its pool's fences must cover too; the relations kept in [`relations`].
//! - [`registry`]: the pool of the current context, and the owner of an address.
//! - [`regions`]: while an NVTX tool is attached (compute-sanitizer), each chunk registered as a
//!   heap and each block handed out as a region of it, with the size the program asked for.
//! - [`stream_reuse`]: a freed block whose pending work is all on one stream reused at once,
//!   other streams made to wait for that stream's work first.
//! - [`serve`]: what the hooks ask: serve an allocation or a free from the pool or the driver,
//!   find a pooled block, the pool's figures for the report.
//!
//! The `CUGUARD_POOL_*` amounts are read with the other settings ([`crate::config::amount`]).
//!
//! Each pool belongs to one context; when the context is destroyed the driver frees the chunks
//! and the pool forgets them. Stream-ordered, managed, VMM and pinned host memory never come
//! from the pool.

pub mod cache;
pub mod driver_context;
pub mod events;
pub mod giveback;
pub mod peers;
pub mod pool;
pub mod regions;
pub mod registry;
pub mod relations;
pub mod serve;
pub mod stream_reuse;
pub mod submissions;

/// In the child of a fork: the serving starts afresh, its registry first (see
/// [`registry::reset_after_fork`]), then the threads' caches, the regions, the give-back thread,
/// the relations and the stream rule.
pub fn reset_after_fork() {
    registry::reset_after_fork();
    cache::reset_after_fork();
    regions::reset_after_fork();
    giveback::reset_after_fork();
    peers::reset_after_fork();
    stream_reuse::reset_after_fork();
}
