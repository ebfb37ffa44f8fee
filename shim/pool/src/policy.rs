//! The pool's policy: when an arena waits for the GPU, fences, grows, synchronizes, trims or
//! refuses. Decisions only: the arena carries them out through [`Steps`], so the order is
//! written once, here, and tested without a device (the tests at the end script each answer).
//!
//! # The slow path
//!
//! When the sub-allocator cannot serve a request at once, [`alloc_slow`] goes through these
//! steps in order, retrying the sub-allocator after each one that may have made room and
//! stopping as soon as it serves the request:
//!
//! 1. **Reclaim**: retire the fences that completed since, and release the frees they cover.
//! 2. **Wait for pending frees that could serve it**: when the frees still waiting for the GPU
//!    add up to the request's footprint, wait rather than grow: on the host, for the oldest
//!    fence in flight (one is recorded first when none is), retrying after each, up to
//!    [`MAX_FENCE_WAITS`] fences while frees still wait; work submitted after a fence keeps
//!    running. Only when a fence cannot be waited for that way, synchronize (which releases
//!    them all).
//!    Measured on resnet18 training (docs/benchmarks.md): growing instead makes the pool ask the
//!    driver for a chunk of nearly every new size, as slow as no pool at all, because the
//!    same-size block from the previous step is still pending. Then, if frees still wait,
//!    record a fence for them.
//! 3. **Grow**: for a dedicated request, first give back idle dedicated chunks (the growth
//!    policy's `dedicated_release`), so reserved memory tracks live memory. Then add a chunk of
//!    the size the growth policy wants, and if the limit or the device refuses it, one of the
//!    minimum that serves the request (skipped when it is the same size).
//! 4. **Under pressure**: take this arena's blocks back from the thread caches
//!    (`tcache.rs`); wait until chunks given back earlier without waiting are free on the
//!    device ([`Device::settle_returns`](crate::Device::settle_returns)); synchronize (if frees
//!    wait, and the device's free memory with the pool's own chunks could hold the request:
//!    a synchronization also releases what the driver holds for other allocators, such as its
//!    stream-ordered pool's frees, which the program would not have got without the pool;
//!    measured on the H200 with CuPy's `test_free_all_blocks_large_chunk`); give every idle
//!    chunk of this arena back,
//!    waiting for the device; when the minimum chunk is still over the limit, also those of the
//!    other arenas whose locks are free. Then, if the limit allows the minimum chunk, add it;
//!    else refuse, saying it is the limit.
//!
//! # Trimming and batching
//!
//! - After blocks went back to the sub-allocator, an arena holding more idle bytes than its
//!   share of the keep ([`trim_due`]) gives idle chunks back, largest first, until no more than
//!   that share is idle ([`to_trim`]), without waiting for the device (the shim's give-back
//!   thread frees them).
//! - A free that must wait for a fence joins a batch; a fence is recorded once [`FENCE_BYTES`]
//!   bytes or [`FENCE_COUNT`] blocks wait ([`fence_due`]), and the fences in flight are polled
//!   every [`POLL_EVERY`] such frees ([`poll_due`]).

use crate::chunking::{GrowthPolicy, Route};
use crate::tlsf::{ChunkId, ChunkInfo};

/// A fence is recorded once this many bytes, or [`FENCE_COUNT`] blocks, wait for one.
pub const FENCE_BYTES: u64 = 64 << 20;
/// See [`FENCE_BYTES`].
pub const FENCE_COUNT: u32 = 64;
/// Frees (that wait for a fence) between polls of the fences in flight.
pub const POLL_EVERY: u32 = 32;
/// Fences the slow path waits for, oldest first, before it synchronizes instead.
pub const MAX_FENCE_WAITS: u32 = 8;

/// A request the sub-allocator could not serve at once, with the chunk sizes that would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// Bytes the request takes from a free block, padding included.
    pub footprint: u64,
    /// Whether it takes a dedicated chunk.
    pub dedicated: bool,
    /// The chunk the growth policy would add.
    pub want: u64,
    /// The smallest chunk that serves it.
    pub minimum: u64,
}

impl Request {
    /// The request for `size` bytes whose footprint is `footprint`, in an arena holding
    /// `reserved` bytes of chunks, `dedicated_reserved` of them dedicated; chunk sizes are
    /// multiples of `align` and of the growth policy's granularity.
    pub fn new(
        growth: &GrowthPolicy,
        size: u64,
        footprint: u64,
        align: u64,
        reserved: u64,
        dedicated_reserved: u64,
    ) -> Request {
        let dedicated = matches!(growth.route(size), Route::Dedicated { .. });
        let want = if dedicated {
            growth.dedicated_chunk_size(size).unwrap_or(footprint)
        } else {
            growth
                .shared_chunk_size(footprint, reserved - dedicated_reserved)
                .unwrap_or(footprint)
        };
        Request {
            footprint,
            dedicated,
            want,
            minimum: footprint.next_multiple_of(growth.granularity.max(align)),
        }
    }
}

/// Why [`alloc_slow`] gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The limit allowed a chunk, but the device gave none (or the request still did not fit).
    OutOfMemory,
    /// Even after trimming, a chunk that serves the request would exceed the limit.
    Limit,
}

/// What the slow path can make an arena do. Implemented by the pool's arena (`ctxpool.rs`), and
/// by a script in the tests.
pub(crate) trait Steps {
    /// What a successful allocation gives.
    type Grant;
    /// Retires completed fences and releases the frees they cover.
    fn reclaim(&mut self);
    /// Asks the sub-allocator for the request.
    fn try_alloc(&mut self) -> Option<Self::Grant>;
    /// Bytes of frees waiting for a fence.
    fn pending_bytes(&self) -> u64;
    /// Whether any free waits for a fence.
    fn has_pending(&self) -> bool;
    /// Waits for the context's work and releases every pending free; false when it could not
    /// (another context is current, a capture is in progress, or the device failed).
    fn synchronize(&mut self) -> bool;
    /// Waits on the host for the oldest fence in flight (recording one for the pending frees
    /// first when none is) and releases the frees it covers; false when it could not (as for
    /// [`synchronize`](Steps::synchronize), or an event the device cannot wait for).
    fn wait_oldest_fence(&mut self) -> bool;
    /// Records a fence for what is pending (when the context is current).
    fn fence(&mut self);
    /// Gives back idle dedicated chunks before a dedicated chunk of `bytes` is added.
    fn release_idle_dedicated(&mut self, bytes: u64);
    /// Whether `bytes` more may be reserved under the limit.
    fn within_limit(&self, bytes: u64) -> bool;
    /// Adds a chunk of `bytes` from the device; false when it gave none.
    fn grow(&mut self, bytes: u64) -> bool;
    /// Gives every idle chunk of this arena back, waiting for the device.
    fn trim_own(&mut self);
    /// Gives the idle chunks of the other arenas back (those not busy now).
    fn trim_others(&mut self);
    /// Takes this arena's blocks cached in thread caches back (under pressure).
    fn drain_caches(&mut self) {}
    /// Waits until chunks given back earlier without waiting are free on the device (under
    /// pressure).
    fn settle_returns(&mut self) {}
    /// Whether the device's free memory and the pool's own chunks could together hold `bytes`
    /// (true when the device cannot say). When they could not, a synchronization would serve the
    /// request only with memory another allocator gave back and the driver still holds for it
    /// until a synchronizing call (its stream-ordered pool's), which the driver would not have
    /// given the program either.
    fn room_possible(&self, _bytes: u64) -> bool {
        true
    }
}

/// The slow path (see the module documentation): the grant, or why there is none.
pub(crate) fn alloc_slow<S: Steps>(s: &mut S, r: &Request) -> Result<S::Grant, Refused> {
    // 1. Fences that completed since.
    s.reclaim();
    if let Some(g) = s.try_alloc() {
        return Ok(g);
    }
    // 2. Frees still waiting for the GPU that could serve this request: wait rather than grow;
    //    for the oldest fence first, one fence at a time, so that work submitted after it keeps
    //    running; a synchronization only when a fence cannot be waited for.
    if s.pending_bytes() >= r.footprint && s.has_pending() {
        for _ in 0..MAX_FENCE_WAITS {
            if !s.wait_oldest_fence() {
                break;
            }
            if let Some(g) = s.try_alloc() {
                return Ok(g);
            }
            if !s.has_pending() {
                break;
            }
        }
        if s.has_pending()
            && s.synchronize()
            && let Some(g) = s.try_alloc()
        {
            return Ok(g);
        }
    }
    if s.has_pending() {
        s.fence();
    }
    // 3. Grow: the chunk the growth policy wants, then the minimum.
    if r.dedicated {
        s.release_idle_dedicated(r.want);
    }
    for chunk in [r.want, r.minimum] {
        if s.within_limit(chunk)
            && s.grow(chunk)
            && let Some(g) = s.try_alloc()
        {
            return Ok(g);
        }
        if chunk == r.minimum {
            break;
        }
    }
    // 4. Under pressure: take cached blocks back, synchronize, reclaim, give idle chunks back,
    //    retry.
    s.drain_caches();
    s.settle_returns();
    if s.has_pending() && s.room_possible(r.footprint) {
        s.synchronize();
    }
    if let Some(g) = s.try_alloc() {
        return Ok(g);
    }
    s.trim_own();
    if !s.within_limit(r.minimum) {
        s.trim_others();
    }
    if s.within_limit(r.minimum) {
        if s.grow(r.minimum)
            && let Some(g) = s.try_alloc()
        {
            return Ok(g);
        }
        return Err(Refused::OutOfMemory);
    }
    Err(Refused::Limit)
}

/// Whether an arena holding `idle_bytes` in idle chunks, keeping `keep`, should trim.
#[inline]
pub(crate) fn trim_due(idle_bytes: u64, keep: u64) -> bool {
    idle_bytes > keep
}

/// The idle chunks to give back so that at most `keep` idle bytes remain: largest first.
pub(crate) fn to_trim(idle: impl Iterator<Item = ChunkInfo>, keep: u64) -> Vec<ChunkId> {
    let mut idle: Vec<_> = idle.collect();
    idle.sort_by_key(|c| std::cmp::Reverse(c.size));
    let mut idle_bytes: u64 = idle.iter().map(|c| c.size).sum();
    let mut release = Vec::new();
    for c in idle {
        if idle_bytes <= keep {
            break;
        }
        idle_bytes -= c.size;
        release.push(c.id);
    }
    release
}

/// Whether the frees waiting since the last fence (`bytes` in `count` blocks) call for one.
#[inline]
pub(crate) fn fence_due(bytes: u64, count: u32) -> bool {
    bytes >= FENCE_BYTES || count >= FENCE_COUNT
}

/// Whether the `frees`-th free that waits for a fence should poll the fences in flight.
#[inline]
pub(crate) fn poll_due(frees: u32) -> bool {
    frees.is_multiple_of(POLL_EVERY)
}

#[cfg(test)]
mod tests;
