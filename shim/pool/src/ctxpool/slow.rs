//! The slow path: what an arena does when it cannot serve a request at once. The policy's
//! steps ([`crate::policy`]) carried out on one arena: waiting for fences, synchronizing,
//! growing by a chunk from the device, and trimming the other arenas to make room.

use std::sync::atomic::Ordering::Relaxed;

use super::{ALIGN, ARENAS, Arena, CtxPool, OverLimit, Reason, Refusal};
use crate::device::{Device, DeviceError};
use crate::policy::{self, Refused, Request, Steps};
use crate::tcache::Packed;
use crate::tlsf::Grant;

impl<D: Device, R: Packed> CtxPool<D, R> {
    /// Gives idle chunks of the other arenas back to the device (those whose lock is free now),
    /// to make room under the limit; returns the bytes given back.
    fn trim_other_arenas(&self, except: usize) -> u64 {
        let mut freed = 0;
        for (i, a) in self.arenas.iter().enumerate() {
            if i == except {
                continue;
            }
            if let Ok(mut g) = a.try_lock() {
                let before = g.trimmed_bytes;
                g.trim(0, self, true);
                freed += g.trimmed_bytes - before;
            }
        }
        freed
    }
}

impl<D: Device, R: Packed> Arena<D, R> {
    /// Waits on the host for the oldest fence in flight (first recording one for the pending
    /// blocks when none is), then releases the blocks it covers; false when the context is not
    /// current or no fence could be waited for that way.
    fn wait_oldest_fence(&mut self, pool: &CtxPool<D, R>) -> bool {
        if !pool.device.is_current() {
            return false;
        }
        if !self.fences.any_in_flight() {
            self.fence(pool);
        }
        let Some(done) = self.fences.wait_oldest(&pool.device) else {
            return false;
        };
        pool.note_completed(done);
        self.release_ready(pool);
        true
    }

    /// Waits for the context's work, then releases every pending block; false when the context
    /// is not current or the device could not synchronize.
    fn synchronize(&mut self, pool: &CtxPool<D, R>) -> bool {
        if !pool.device.is_current() {
            return false;
        }
        let Some(done) = self.fences.synchronize(&pool.device) else {
            return false;
        };
        pool.note_completed(done);
        self.release_ready(pool);
        self.since_fence_bytes = 0;
        self.since_fence_count = 0;
        true
    }

    /// The slow path: the policy's steps (see [`crate::policy`]), carried out on this arena.
    pub(super) fn alloc_slow(
        &mut self,
        size: u64,
        pool: &CtxPool<D, R>,
        arena: usize,
    ) -> Result<Grant, Refusal> {
        let Some(footprint) = self.sub.footprint(size, ALIGN) else {
            return Err(Refusal {
                reason: Reason::OutOfMemory,
                why: "request too large".into(),
                over_limit: None,
            });
        };
        let stats = self.sub.stats();
        let request = Request::new(
            &self.growth,
            size,
            footprint,
            ALIGN,
            stats.reserved_bytes,
            stats.dedicated_bytes,
        );
        let mut steps = SlowPath {
            arena: self,
            pool,
            index: arena,
            size,
            dedicated: request.dedicated,
        };
        match policy::alloc_slow(&mut steps, &request) {
            Ok(grant) => Ok(grant),
            Err(Refused::OutOfMemory) => Err(Refusal {
                reason: Reason::OutOfMemory,
                why: "device out of memory".into(),
                over_limit: None,
            }),
            Err(Refused::Limit) => {
                self.limit_refusals += 1;
                let process = pool
                    .device
                    .process_limit()
                    .filter(|_| !pool.within_process_limit(request.minimum));
                let over = match process {
                    Some((limit, held)) => OverLimit {
                        limit,
                        reserved: held,
                        asked: size,
                        process: true,
                    },
                    None => OverLimit {
                        limit: pool.settings.limit.unwrap_or(0),
                        reserved: pool.reserved.load(Relaxed),
                        asked: size,
                        process: false,
                    },
                };
                let setting = if over.process {
                    "CUGUARD_LIMIT"
                } else {
                    "CUGUARD_POOL_LIMIT"
                };
                Err(Refusal {
                    reason: Reason::OutOfMemory,
                    why: format!(
                        "{setting} of {} bytes reached: {} bytes reserved, {} more asked for",
                        over.limit, over.reserved, over.asked
                    ),
                    over_limit: Some(over),
                })
            }
        }
    }

    /// Adds a chunk of `size` bytes from the device.
    pub(super) fn grow(
        &mut self,
        size: u64,
        dedicated: bool,
        pool: &CtxPool<D, R>,
        arena: usize,
    ) -> Result<(), Refusal> {
        let base = pool.device.alloc_chunk(size).map_err(|e| Refusal {
            reason: Reason::Device(e),
            why: match e {
                DeviceError::Unavailable => "no driver".into(),
                DeviceError::Refused(_) => format!("driver refused a {size}-byte chunk"),
            },
            over_limit: None,
        })?;
        let added = if dedicated {
            self.sub.add_dedicated_chunk(base, size)
        } else {
            self.sub.add_chunk(base, size)
        };
        if added.is_err() {
            pool.device.chunk_unused(base, size);
            return Err(Refusal {
                reason: Reason::OutOfMemory,
                why: "chunk refused by the sub-allocator".into(),
                over_limit: None,
            });
        }
        self.chunks_added += 1;
        let bit = 1u32 << (arena % ARENAS);
        if pool.arenas_used.load(Relaxed) & bit == 0 {
            pool.arenas_used.fetch_or(bit, Relaxed);
        }
        let reserved = pool.reserved.fetch_add(size, Relaxed) + size;
        pool.peak_reserved.fetch_max(reserved, Relaxed);
        let pool_addr = std::ptr::from_ref(pool) as usize;
        pool.device.chunk_added(base, size, pool_addr, arena);
        Ok(())
    }
}

/// The slow path's view of one arena: what [`policy::alloc_slow`] asks it to do.
struct SlowPath<'a, D: Device, R> {
    arena: &'a mut Arena<D, R>,
    pool: &'a CtxPool<D, R>,
    /// The arena's index in the pool.
    index: usize,
    /// The request's size.
    size: u64,
    /// Whether it takes a dedicated chunk.
    dedicated: bool,
}

impl<D: Device, R: Packed> Steps for SlowPath<'_, D, R> {
    type Grant = Grant;

    fn reclaim(&mut self) {
        let done = self.arena.fences.poll(&self.pool.device);
        self.pool.note_completed(done);
        self.arena.release_ready(self.pool);
    }

    fn drain_caches(&mut self) {
        for shared in self.pool.registered() {
            for s in &shared.slots {
                if let Some(b) = s.claim_cached(Some(self.index)) {
                    self.arena.lent.remove(&b.addr);
                    self.arena.release(self.pool, b.addr, b.granted, b.mark);
                }
            }
        }
        // The other arenas' cached blocks too, where their lock is free now (their chunks may
        // then become idle, for `trim_others`).
        for (i, a) in self.pool.arenas.iter().enumerate() {
            if i == self.index {
                continue;
            }
            let Ok(mut g) = a.try_lock() else { continue };
            for shared in self.pool.registered() {
                for s in &shared.slots {
                    if let Some(b) = s.claim_cached(Some(i)) {
                        g.lent.remove(&b.addr);
                        g.release(self.pool, b.addr, b.granted, b.mark);
                    }
                }
            }
        }
    }

    fn try_alloc(&mut self) -> Option<Grant> {
        self.arena.try_alloc(self.size)
    }

    fn pending_bytes(&self) -> u64 {
        self.arena.pending_bytes
    }

    fn has_pending(&self) -> bool {
        !self.arena.pending.is_empty()
    }

    fn synchronize(&mut self) -> bool {
        self.arena.synchronize(self.pool)
    }

    fn wait_oldest_fence(&mut self) -> bool {
        self.arena.wait_oldest_fence(self.pool)
    }

    fn fence(&mut self) {
        self.arena.fence(self.pool);
    }

    fn release_idle_dedicated(&mut self, bytes: u64) {
        let a = &mut *self.arena;
        let release = a
            .growth
            .dedicated_release(a.sub.idle_chunks(), bytes, &a.repeats);
        a.release_chunks(release.iter().map(|c| c.id), self.pool, false);
    }

    fn within_limit(&self, bytes: u64) -> bool {
        self.pool.within_limit(bytes)
    }

    fn grow(&mut self, bytes: u64) -> bool {
        self.arena
            .grow(bytes, self.dedicated, self.pool, self.index)
            .is_ok()
    }

    fn trim_own(&mut self) {
        self.arena.trim(0, self.pool, true);
    }

    fn settle_returns(&mut self) {
        self.pool.device.settle_returns();
    }

    fn room_possible(&self, bytes: u64) -> bool {
        self.pool
            .device
            .free_bytes()
            .is_none_or(|free| free.saturating_add(self.pool.reserved.load(Relaxed)) >= bytes)
    }

    fn trim_others(&mut self) {
        self.pool.trim_other_arenas(self.index);
    }
}
