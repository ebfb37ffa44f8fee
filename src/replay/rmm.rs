//! `rmm-pool`: RMM's `pool_memory_resource` over `cuda_memory_resource` (each upstream block a
//! `cudaMalloc`, rounded by the driver to 2 MiB), as RMM's sources have it
//! (`cpp/include/rmm/mr/pool_memory_resource.hpp`,
//! `cpp/include/rmm/mr/detail/stream_ordered_memory_resource.hpp`,
//! `cpp/include/rmm/mr/detail/coalescing_free_list.hpp`):
//!
//! - the pool takes `--initial-pool` bytes when it is made (default: half the capacity,
//!   aligned down to 256 bytes, what `rmm.reinitialize(pool_allocator=True)` takes of a free
//!   device); a pool that cannot take them cannot be made, and every request fails;
//! - every request is aligned up to 256 bytes (`CUDA_ALLOCATION_ALIGNMENT`);
//! - free blocks are kept per stream, each list ordered by address and coalescing: a freed
//!   block joins the free blocks it touches, but never across two upstream blocks;
//! - a request takes the best fit (the smallest block that fits, the lowest address among
//!   equals) of its stream's list; else the first other stream's list that has a fit (the
//!   remainder stays in that list); else the other lists are merged into its own one at a
//!   time, looking for a fit after each (`get_block_from_other_stream`); the block is split and
//!   the remainder kept;
//! - failing that, the pool grows (`expand_pool`, `size_to_grow`): with `--maximum-pool`, by the
//!   larger of the request and half of what is left up to it, and a request past it fails;
//!   without one (RMM's default), by the larger of the request and the pool's size (the pool
//!   doubles); either way halving the attempt down to the request when the device refuses
//!   (`try_to_expand`). Nothing goes back to the device before the pool is destroyed.
//!
//! A block is freed into the list of the stream it was made on (RMM: the stream of the free,
//! which the history does not record).

use std::collections::BTreeMap;

use super::free_list::FreeList;
use super::model::{Device, FastMap, GRANULARITY, Idle, Model, Request, round_up};

/// RMM's `CUDA_ALLOCATION_ALIGNMENT`.
pub const ALIGN: u64 = 256;

/// RMM's pool.
pub struct RmmPool {
    device: Device,
    initial: u64,
    /// `None`: no maximum (the pool doubles as it grows).
    maximum: Option<u64>,
    /// The pool was made (at the first request); `Some(false)`: it could not be.
    made: Option<bool>,
    /// Bytes taken from upstream.
    pool_size: u64,
    /// Free blocks by stream.
    lists: BTreeMap<u64, FreeList>,
    /// Each live request's block (address, size, stream), by id.
    live: FastMap<u64, (u64, u64, u64)>,
    /// Where the next upstream block goes.
    next: u64,
}

/// `n` aligned down to [`ALIGN`].
pub fn align_down(n: u64) -> u64 {
    n / ALIGN * ALIGN
}

impl RmmPool {
    /// A pool on a device of `capacity` bytes that will take `initial` bytes and grow up to
    /// `maximum`, if given (both aligned down to 256 bytes, as RMM requires them aligned).
    pub fn new(capacity: u64, initial: u64, maximum: Option<u64>) -> RmmPool {
        RmmPool {
            device: Device::new(capacity),
            initial: align_down(initial),
            maximum: maximum.map(align_down),
            made: None,
            pool_size: 0,
            lists: BTreeMap::new(),
            live: FastMap::default(),
            next: 1 << 40,
        }
    }

    /// One `cudaMalloc` of `size` bytes: its address, or `None` when the device refuses.
    fn upstream(&mut self, size: u64) -> Option<u64> {
        let taken = round_up(size, GRANULARITY);
        if size == 0 || !self.device.take(taken) {
            return None;
        }
        let addr = self.next;
        // A gap after each upstream block: blocks of two never join.
        self.next += taken + GRANULARITY;
        Some(addr)
    }

    /// `try_to_expand`: `try_size` bytes from upstream, halving down to `min_size`.
    fn try_to_expand(&mut self, try_size: u64, min_size: u64) -> Option<(u64, u64)> {
        let mut size = try_size;
        while size >= min_size && size > 0 {
            if let Some(addr) = self.upstream(size) {
                self.pool_size += size;
                return Some((addr, size));
            }
            if size == min_size {
                return None;
            }
            size = min_size.max(size / 2);
        }
        None
    }

    /// `size_to_grow`: the larger of the request and half of what is left up to the maximum (0
    /// when the request does not fit under it); without a maximum, the larger of the request
    /// and the pool's size.
    fn size_to_grow(&self, size: u64) -> u64 {
        let aligned = round_up(size, ALIGN);
        let Some(maximum) = self.maximum else {
            return aligned.max(self.pool_size);
        };
        let remaining = round_up(maximum.saturating_sub(self.pool_size), ALIGN);
        if aligned <= remaining {
            aligned.max(remaining / 2)
        } else {
            0
        }
    }

    /// Makes the pool: its initial block, in the legacy stream's list.
    fn make(&mut self) -> bool {
        if self.maximum.is_some_and(|m| self.initial > m) {
            return false;
        }
        if self.initial > 0 {
            let Some((addr, size)) = self.try_to_expand(self.initial, self.initial) else {
                return false;
            };
            self.lists.entry(0).or_default().insert(addr, size);
        }
        true
    }

    /// A block of `size` bytes for `stream` from the free lists, if any fits (RMM's
    /// `get_block` before it grows the pool): the block's address.
    fn take_free(&mut self, size: u64, stream: u64) -> Option<u64> {
        if let Some(own) = self.lists.get_mut(&stream)
            && let Some(addr) = take(own, size)
        {
            return Some(addr);
        }
        for (_, other) in self.lists.iter_mut().filter(|(s, _)| **s != stream) {
            if let Some(addr) = take(other, size) {
                return Some(addr);
            }
        }
        let others: Vec<u64> = self
            .lists
            .keys()
            .copied()
            .filter(|s| *s != stream)
            .collect();
        for s in others {
            let other = self.lists.remove(&s).unwrap_or_default();
            let own = self.lists.entry(stream).or_default();
            own.append(other);
            if let Some(addr) = take(own, size) {
                return Some(addr);
            }
        }
        None
    }
}

/// The best fit for `size` bytes in `list`, taken: its remainder stays in the list.
fn take(list: &mut FreeList, size: u64) -> Option<u64> {
    let (addr, found) = list.best_fit(size)?;
    list.remove(addr);
    list.insert(addr + size, found - size);
    Some(addr)
}

impl Model for RmmPool {
    fn alloc(&mut self, r: &Request) -> bool {
        if self.made.is_none() {
            self.made = Some(self.make());
        }
        if self.made != Some(true) {
            return false;
        }
        let size = round_up(r.size.max(1), ALIGN);
        let addr = match self.take_free(size, r.stream) {
            Some(a) => a,
            None => {
                let grow = self.size_to_grow(size);
                let Some((addr, got)) = self.try_to_expand(grow, size) else {
                    return false;
                };
                self.lists
                    .entry(r.stream)
                    .or_default()
                    .insert(addr + size, got - size);
                addr
            }
        };
        self.live.insert(r.id, (addr, size, r.stream));
        true
    }

    fn free(&mut self, id: u64) {
        if let Some((addr, size, stream)) = self.live.remove(&id) {
            self.lists.entry(stream).or_default().insert(addr, size);
        }
    }

    fn peak_reserved(&self) -> u64 {
        self.device.peak
    }

    fn idle(&self) -> Idle {
        let mut idle = Idle::default();
        for list in self.lists.values() {
            idle.join(list.idle());
        }
        idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::model::MIB;

    fn req(id: u64, size: u64, stream: u64) -> Request {
        Request {
            id,
            size,
            stream,
            thread: 1,
        }
    }

    #[test]
    fn the_pool_starts_at_its_initial_size_and_aligns_to_256_bytes() {
        let mut p = RmmPool::new(1024 * MIB, 512 * MIB, Some(1024 * MIB));
        assert!(p.alloc(&req(1, 1, 0)));
        assert_eq!(p.peak_reserved(), 512 * MIB);
        assert_eq!(p.idle().bytes, 512 * MIB - 256);
        assert!(p.alloc(&req(2, 1000, 0)));
        assert_eq!(
            p.live[&2].0,
            (1 << 40) + 256,
            "after the first block, aligned"
        );
    }

    #[test]
    fn growth_takes_half_of_what_is_left_and_halves_when_refused() {
        let mut p = RmmPool::new(1024 * MIB, 0, Some(1024 * MIB));
        assert!(p.alloc(&req(1, 10 * MIB, 0)));
        // max(10 MiB, 1024 MiB / 2)
        assert_eq!(p.pool_size, 512 * MIB);
        // 600 MiB is more than the 512 MiB left under the maximum: refused.
        assert!(!p.alloc(&req(2, 600 * MIB, 0)));
        // 510 MiB is more than the 502 MiB free: the pool grows by max(510 MiB, 512 MiB / 2).
        assert!(p.alloc(&req(3, 510 * MIB, 0)));
        assert_eq!(p.pool_size, 1022 * MIB);
        let mut q = RmmPool::new(1024 * MIB, 0, Some(4096 * MIB));
        // Half of 4 GiB does not fit the device: halved to 1 GiB, which does.
        assert!(q.alloc(&req(1, 1, 0)));
        assert_eq!(q.pool_size, 1024 * MIB);
    }

    #[test]
    fn without_a_maximum_the_pool_doubles_and_halves_when_refused() {
        let mut p = RmmPool::new(900 * MIB, 100 * MIB, None);
        assert!(p.alloc(&req(1, 90 * MIB, 0)));
        assert_eq!(p.pool_size, 100 * MIB);
        // 20 MiB does not fit the 10 MiB free: the pool grows by max(20 MiB, 100 MiB).
        assert!(p.alloc(&req(2, 20 * MIB, 0)));
        assert_eq!(p.pool_size, 200 * MIB);
        // 300 MiB: by max(300 MiB, 200 MiB).
        assert!(p.alloc(&req(3, 300 * MIB, 0)));
        assert_eq!(p.pool_size, 500 * MIB);
        // 120 MiB: the free pieces are 100 MiB and 80 MiB; max(120 MiB, 500 MiB) is more than
        // the device's 400 MiB left: halved to 250 MiB, which fits.
        p.free(1);
        assert!(p.alloc(&req(4, 120 * MIB, 0)));
        assert_eq!(p.pool_size, 750 * MIB);
        assert_eq!(p.peak_reserved(), 750 * MIB);
    }

    #[test]
    fn freed_blocks_coalesce_within_an_upstream_block_only() {
        let mut p = RmmPool::new(1024 * MIB, 0, Some(1024 * MIB));
        assert!(p.alloc(&req(1, 300 * MIB, 0)));
        assert!(p.alloc(&req(2, 300 * MIB, 0)));
        // The second did not fit the 212 MiB left of the first block: a second upstream block.
        assert_eq!(p.pool_size, 512 * MIB + 300 * MIB);
        p.free(1);
        p.free(2);
        let idle = p.idle();
        assert_eq!(
            (idle.bytes, idle.pieces),
            (812 * MIB, 2),
            "two upstream blocks"
        );
        assert!(
            !p.alloc(&req(3, 600 * MIB, 0)),
            "no piece of 600 MiB, no room to grow"
        );
    }

    #[test]
    fn other_streams_blocks_are_taken_then_merged() {
        let base = 1u64 << 40;
        let mut p = RmmPool::new(1024 * MIB, 512 * MIB, Some(512 * MIB));
        // The initial block sits in the legacy stream's list: stream 5 takes from it.
        assert!(p.alloc(&req(1, 100 * MIB, 5)));
        assert_eq!(p.live[&1].0, base);
        p.free(1);
        // Stream 5's 100 MiB and the legacy list's 412 MiB touch, in two lists: neither fits
        // 450 MiB alone; merged into stream 7's list they join and do.
        assert!(p.alloc(&req(2, 450 * MIB, 7)));
        assert_eq!(p.live[&2].0, base);
        assert_eq!(p.peak_reserved(), 512 * MIB);
        assert_eq!(p.lists.keys().copied().collect::<Vec<_>>(), vec![7]);
    }
}
