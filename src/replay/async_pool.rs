//! `async`: the driver's stream-ordered memory pool (`cuMemAllocAsync`, the device's default
//! pool), with every request going through it, as the simulated driver models it
//! (`harness/simcuda/src/model/pool.rs`, `harness/simcuda/src/state/pool.rs`):
//!
//! - a request is rounded up to the driver's granularity (2 MiB); it takes the smallest idle
//!   block of the pool that fits it, at least its size and at most twice it (a larger one is
//!   left for a larger request), else a new block of its size from the device;
//! - a freed block becomes idle in the pool, for any stream: the pool's default reuse flags
//!   (`CU_MEMPOOL_ATTR_REUSE_*`, all on) let a block freed on one stream serve another once
//!   the free is reached, which a replay, without the program's GPU work, takes as at once;
//! - the release threshold (`--release-threshold`, `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`,
//!   default 0) is what the pool keeps reserved at a synchronization: past it idle blocks go
//!   back to the device, the largest first. The history does not record synchronizations, so
//!   the replay takes one after every free; `--release-threshold max` keeps every idle block;
//! - under pressure (the device has no room for a new block) the pool gives back all it keeps
//!   idle and tries once more, as the driver does before it refuses.

use std::collections::BTreeSet;

use super::model::{Device, FastMap, GRANULARITY, Idle, Model, Request, round_up};

/// The driver's pool.
pub struct AsyncPool {
    device: Device,
    /// Reserved bytes kept at a synchronization.
    threshold: u64,
    /// Idle blocks: (size, a number that tells equal sizes apart).
    idle: BTreeSet<(u64, u64)>,
    idle_bytes: u64,
    /// The block each live request holds, by id.
    live: FastMap<u64, u64>,
    next: u64,
}

impl AsyncPool {
    pub fn new(capacity: u64, threshold: u64) -> AsyncPool {
        AsyncPool {
            device: Device::new(capacity),
            threshold,
            idle: BTreeSet::new(),
            idle_bytes: 0,
            live: FastMap::default(),
            next: 0,
        }
    }

    /// Gives idle blocks back, the largest first, until the pool holds at most `keep` bytes or
    /// none is idle.
    fn trim(&mut self, keep: u64) {
        while self.device.used > keep {
            let Some(block) = self.idle.pop_last() else {
                break;
            };
            self.idle_bytes -= block.0;
            self.device.give(block.0);
        }
    }

    /// The smallest idle block of at least `size` bytes and at most twice that, taken.
    fn fit(&mut self, size: u64) -> Option<u64> {
        let &(block, n) = self.idle.range((size, 0)..).next()?;
        if block / 2 > size {
            return None;
        }
        self.idle.remove(&(block, n));
        self.idle_bytes -= block;
        Some(block)
    }
}

impl Model for AsyncPool {
    fn alloc(&mut self, r: &Request) -> bool {
        let size = round_up(r.size.max(1), GRANULARITY);
        let block = match self.fit(size) {
            Some(b) => b,
            None => {
                if !self.device.take(size) {
                    self.trim(0);
                    if !self.device.take(size) {
                        return false;
                    }
                }
                size
            }
        };
        self.live.insert(r.id, block);
        true
    }

    fn free(&mut self, id: u64) {
        let Some(block) = self.live.remove(&id) else {
            return;
        };
        self.next += 1;
        self.idle.insert((block, self.next));
        self.idle_bytes += block;
        self.trim(self.threshold);
    }

    fn peak_reserved(&self) -> u64 {
        self.device.peak
    }

    fn idle(&self) -> Idle {
        Idle {
            bytes: self.idle_bytes,
            pieces: self.idle.len() as u64,
            largest: self.idle.last().map_or(0, |b| b.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::model::MIB;

    fn req(id: u64, size: u64) -> Request {
        Request {
            id,
            size,
            stream: id % 2,
            thread: 1,
        }
    }

    #[test]
    fn a_threshold_of_zero_gives_every_freed_block_back() {
        let mut p = AsyncPool::new(100 * MIB, 0);
        assert!(p.alloc(&req(1, 3 * MIB)));
        assert_eq!(p.peak_reserved(), 4 * MIB, "rounded to 2 MiB");
        p.free(1);
        assert_eq!(p.idle(), Idle::default());
        assert_eq!(p.device.used, 0);
    }

    #[test]
    fn kept_blocks_serve_requests_of_half_their_size_or_more_on_any_stream() {
        let mut p = AsyncPool::new(100 * MIB, u64::MAX);
        assert!(p.alloc(&req(1, 40 * MIB)));
        p.free(1);
        assert_eq!(p.idle().bytes, 40 * MIB);
        // 10 MiB is less than half: a new block.
        assert!(p.alloc(&req(2, 10 * MIB)));
        assert_eq!(p.device.used, 50 * MIB);
        // 20 MiB, on the other stream, takes the kept 40 MiB block.
        assert!(p.alloc(&req(3, 20 * MIB)));
        assert_eq!((p.device.used, p.idle().bytes), (50 * MIB, 0));
    }

    #[test]
    fn under_pressure_idle_blocks_go_back_before_a_refusal() {
        let mut p = AsyncPool::new(100 * MIB, u64::MAX);
        assert!(p.alloc(&req(1, 30 * MIB)));
        assert!(p.alloc(&req(2, 30 * MIB)));
        p.free(1);
        // 70 MiB: the kept 30 MiB is too small and there is no room beside it; it goes back.
        assert!(p.alloc(&req(3, 70 * MIB)));
        assert_eq!((p.device.used, p.idle().bytes), (100 * MIB, 0));
        assert!(!p.alloc(&req(4, 2 * MIB)), "full: refused");
    }

    #[test]
    fn the_threshold_keeps_reserved_memory_up_to_it() {
        let mut p = AsyncPool::new(100 * MIB, 20 * MIB);
        assert!(p.alloc(&req(1, 10 * MIB)));
        assert!(p.alloc(&req(2, 16 * MIB)));
        p.free(1);
        // 26 MiB reserved is over 20: the idle 10 MiB goes.
        assert_eq!(p.idle(), Idle::default());
        p.free(2);
        // 16 MiB reserved, within the threshold: kept.
        assert_eq!(p.idle().bytes, 16 * MIB);
    }
}
