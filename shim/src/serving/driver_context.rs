//! The pool's device: [`DriverContext`] implements `cuguard_pool::Device` over the real driver
//! for one context (chunks from cuMemAlloc_v2, given back with cuMemFree: by the give-back
//! thread ([`super::giveback`]) unless under pressure, or with cuMemFreeAsync when no thread
//! can take them,
//! events, cuCtxSynchronize), reading the submission count, captures and streams that
//! [`super::submissions`] keeps, and telling the registry where chunks are. A fence also covers the
//! contexts [`super::peers`] says can reach this one: it records events on their streams, each
//! made current for that ([`FenceEvent`]).

use std::ffi::c_void;

use cuguard_pool::{Device, DeviceError, Reason};

use super::events::{destroy_event, event_done, record_event, synchronize_current, with_current};
use super::pool::{DriverContext, FenceEvent};
use super::{giveback, regions, registry, relations, stream_reuse, submissions};
use crate::driver::{current_context, real};
use crate::ffi::*;
use crate::tracker::limit;

impl DriverContext {
    /// The tracker's id of this context, or `NONE`.
    fn context_id(&self) -> u32 {
        crate::tracker::if_any()
            .and_then(|t| t.contexts.lookup(self.handle))
            .map_or(crate::tracker::NONE, |(id, _)| id)
    }
}

impl Device for DriverContext {
    type Event = FenceEvent;

    fn alloc_chunk(&self, bytes: u64) -> Result<u64, DeviceError> {
        let Some(alloc) = real::cuMemAlloc_v2() else {
            return Err(DeviceError::Unavailable);
        };
        // The process's limit counts the pool's chunks whole (its idle memory included): the
        // chunk is held against it from here until it goes back (`chunk_removed`).
        let Ok(grant) = limit::admit(self.ordinal, bytes) else {
            return Err(DeviceError::Refused(CUDA_ERROR_OUT_OF_MEMORY));
        };
        let mut base: CUdeviceptr = 0;
        let start = crate::process::clock::monotonic_ns();
        // SAFETY: valid out-parameter; the pool's context is current.
        let r = unsafe { alloc(&mut base, bytes as usize) };
        if r != CUDA_SUCCESS {
            grant.done();
            return Err(DeviceError::Refused(r));
        }
        grant.keep();
        // The driver's time for the chunk, in the bill's `pool_growth` (not in the hooks').
        let ns = crate::process::clock::monotonic_ns().saturating_sub(start);
        crate::process::cost::tally(crate::process::cost::Tally::Chunks, &[1, bytes, ns]);
        Ok(base)
    }

    fn free_chunk(&self, base: u64, wait: bool) {
        // Without waiting: the give-back thread's cuMemFree, which waits for the context's work
        // (a block reused early by the stream rule included).
        if !wait && giveback::push(self.handle, base) {
            return;
        }
        // A block of the chunk may have been reused early: its stream's work first.
        stream_reuse::chunk_freeing(wait);
        if wait {
            free_chunk(base);
        } else {
            free_chunk_async(base, self.ordinal);
        }
    }

    fn settle_returns(&self) {
        giveback::settle(self.handle);
    }

    fn frees_waiting(&self, pool: usize) {
        giveback::watch(pool);
    }

    fn chunk_added(&self, base: u64, size: u64, pool: usize, arena: usize) {
        registry::chunk_added(base, size, pool, arena);
        crate::recorder::chunk(true, base, size, self.context_id(), self.ordinal);
        if crate::nvtx::on() {
            regions::chunk_added(base, size);
        }
    }

    fn chunk_unused(&self, base: u64, size: u64) {
        limit::credit(self.ordinal, size);
        self.free_chunk(base, true);
    }

    fn process_limit(&self) -> Option<(u64, u64)> {
        if !limit::on() {
            return None;
        }
        limit::limit(self.ordinal).map(|l| (l, limit::held(self.ordinal)))
    }

    fn chunk_removed(&self, base: u64) {
        if crate::nvtx::on() {
            regions::chunk_removed(base);
        }
        if let Some(size) = registry::chunk_removed(base) {
            limit::credit(self.ordinal, size);
        }
        crate::recorder::chunk(false, base, 0, self.context_id(), self.ordinal);
    }

    fn is_current(&self) -> bool {
        current_context() == Some(self.handle)
    }

    #[inline]
    fn submissions(&self) -> u64 {
        submissions::mark()
    }

    fn capturing(&self) -> bool {
        submissions::capturing()
    }

    fn record_event(&self, stream: u64) -> Option<FenceEvent> {
        record_event(stream).map(FenceEvent::Recorded)
    }

    fn with_side_streams<T>(&self, f: impl FnOnce(&[u64], u64) -> T) -> T {
        submissions::with_side_streams(self.handle, f)
    }

    fn destroyed_streams_done(&self, count: u64) -> bool {
        submissions::destroyed_streams_done(self.handle, count)
    }

    fn event_done(&self, event: &FenceEvent) -> bool {
        match *event {
            FenceEvent::Recorded(ev) => event_done(ev),
            FenceEvent::DestroyedStreams { ctx, count } => {
                submissions::destroyed_streams_done(ctx, count)
            }
        }
    }

    fn destroy_event(&self, event: FenceEvent) {
        if let FenceEvent::Recorded(ev) = event {
            destroy_event(ev);
        }
    }

    fn wait_event(&self, event: &FenceEvent) -> bool {
        match *event {
            FenceEvent::Recorded(ev) => real::cuEventSynchronize().is_some_and(|sync| {
                // SAFETY: ev is a live event this module created and recorded.
                (unsafe { sync(ev as *mut c_void) }) == CUDA_SUCCESS
            }),
            // Destroyed streams' last events are waited for by a synchronization only.
            FenceEvent::DestroyedStreams { .. } => false,
        }
    }

    fn synchronize(&self) -> bool {
        let Some(sync) = real::cuCtxSynchronize() else {
            return false;
        };
        // SAFETY: no arguments; the pool's context is current.
        let done = (unsafe { sync() }) == CUDA_SUCCESS;
        if done {
            crate::tracker::given_back::synchronized(self.ordinal);
        }
        done
    }

    fn free_bytes(&self) -> Option<u64> {
        let get = real::cuMemGetInfo_v2()?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-parameters; the pool's context is current (the slow path checks).
        (unsafe { get(&mut free, &mut total) } == CUDA_SUCCESS).then_some(free as u64)
    }

    fn reuse_on_stream(&self, completed: u64) -> bool {
        stream_reuse::arm(self.handle, self.ordinal, completed)
    }

    fn record_peer_events(&self, completed: u64, events: &mut Vec<FenceEvent>) -> u64 {
        let peers = relations::reaching(self.handle, completed);
        for &peer in &peers {
            with_current(peer, || record_all_streams(peer, events));
        }
        peers.len() as u64
    }

    fn synchronize_peers(&self, completed: u64) -> Option<u64> {
        let peers = relations::reaching(self.handle, completed);
        for &peer in &peers {
            // A peer that cannot be made current is gone, and its work with it.
            if !with_current(peer, synchronize_current).unwrap_or(true) {
                return None;
            }
        }
        Some(peers.len() as u64)
    }
}

/// Records, on the current context `ctx` (a peer of a pool's context), an event on its legacy
/// stream and on each of its known non-blocking streams, and adds the last events of its
/// destroyed ones. Where an event cannot be recorded, waits for the context instead.
fn record_all_streams(ctx: u64, events: &mut Vec<FenceEvent>) {
    let Some(legacy) = record_event(0) else {
        synchronize_current();
        return;
    };
    events.push(FenceEvent::Recorded(legacy));
    let (all, destroyed) = submissions::with_side_streams(ctx, |streams, destroyed| {
        let before = events.len();
        for &stream in streams {
            if let Some(ev) = record_event(stream) {
                events.push(FenceEvent::Recorded(ev));
            }
        }
        (events.len() - before == streams.len(), destroyed)
    });
    if !all {
        synchronize_current();
    }
    if destroyed > 0 {
        events.push(FenceEvent::DestroyedStreams {
            ctx,
            count: destroyed,
        });
    }
}

/// The driver's answer for a refused allocation.
pub fn result_of(reason: Reason) -> CUresult {
    match reason {
        Reason::ZeroSize => CUDA_ERROR_INVALID_VALUE,
        Reason::ContextDestroyed => CUDA_ERROR_CONTEXT_IS_DESTROYED,
        Reason::OutOfMemory => CUDA_ERROR_OUT_OF_MEMORY,
        Reason::Device(DeviceError::Unavailable) => CUDA_ERROR_NOT_INITIALIZED,
        Reason::Device(DeviceError::Refused(code)) => code,
    }
}

fn free_chunk(base: u64) {
    if let Some(f) = real::cuMemFree_v2() {
        // SAFETY: base is a chunk this pool allocated and no block of it is live.
        unsafe { f(base) };
    }
}

/// Gives a chunk back without waiting, when the give-back thread cannot take it (it could not
/// start, or the process is exiting): cuMemFree would wait for all work on the device, which
/// stalls a program whose CPU runs ahead of its kernels. No block of the chunk is live or
/// pending, so no work can still touch it; the driver takes it back in legacy-stream order, and
/// holds the memory until a synchronizing call (measured on the H200): counted as given back
/// and maybe not yet returned (`tracker::given_back`), for the report's reconciliation.
fn free_chunk_async(base: u64, ordinal: i32) {
    if let Some(f) = real::cuMemFreeAsync() {
        let size = chunk_size(base);
        // SAFETY: base is a chunk this pool allocated with cuMemAlloc and no block of it is live
        // or waiting for a fence; a null stream is the legacy default stream.
        if unsafe { f(base, std::ptr::null_mut()) } == CUDA_SUCCESS {
            crate::tracker::given_back::freed_async(ordinal, size);
            return;
        }
    }
    free_chunk(base);
}

/// The size of the driver's allocation at `base` (a chunk), 0 if the driver does not say.
fn chunk_size(base: u64) -> u64 {
    let Some(range) = real::cuMemGetAddressRange_v2() else {
        return 0;
    };
    let (mut start, mut size): (CUdeviceptr, usize) = (0, 0);
    // SAFETY: valid out-parameters; base is a live allocation of this pool's context.
    let r = unsafe { range(&mut start, &mut size, base) };
    if r == CUDA_SUCCESS { size as u64 } else { 0 }
}
