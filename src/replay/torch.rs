//! `torch`: PyTorch's caching allocator with its defaults (`c10/cuda/CUDACachingAllocator.cpp`,
//! `DeviceCachingAllocator::malloc` and what it calls), its constants cited by their names:
//!
//! - a request is rounded up to 512 bytes (`kMinBlockSize`, `round_size`);
//! - requests of at most 1 MiB (`kSmallSize`) go to the small pool, the others to the large
//!   one; a new segment (`cudaMalloc`, `get_allocation_size`) is 2 MiB for a small request
//!   (`kSmallBuffer`), 20 MiB for a large one under 10 MiB (`kLargeBuffer`, `kMinLargeAlloc`),
//!   else the request rounded up to 2 MiB (`kRoundLarge`);
//! - a request takes the best fit among the free blocks of its pool made on its stream (the
//!   smallest that fits, the lowest address among equals: `get_free_block`), else a new
//!   segment; the block is split when what is left is at least 512 bytes (small pool) or more
//!   than 1 MiB (large pool: `should_split` with `max_split_size` unlimited, the default);
//! - a freed block joins the free blocks beside it in its segment (`free_block`,
//!   `try_merge_blocks`);
//! - when `cudaMalloc` fails, every cached segment that is free whole (not split) goes back to
//!   the device and the allocation is tried once more (`release_cached_blocks`, after
//!   `release_available_cached_blocks`, which does nothing without `max_split_size`); failing
//!   that, the request fails (PyTorch's `OutOfMemoryError`).
//!
//! Replayed from a PyTorch run whose history holds its tensors, the requests are the tensors
//! (their blocks' sizes, already rounded by PyTorch) and the model makes its segments as
//! PyTorch did; without them, the requests are the cache's segments (`requests.rs`).

use std::collections::BTreeMap;

use super::free_list::FreeList;
use super::model::{Device, FastMap, GRANULARITY, Idle, MIB, Model, Request, round_up};

/// `kMinBlockSize`: every size is rounded up to it.
pub const MIN_BLOCK: u64 = 512;
/// `kSmallSize`: the largest small request.
pub const SMALL_SIZE: u64 = MIB;
/// `kSmallBuffer`: a small pool's segment.
pub const SMALL_BUFFER: u64 = 2 * MIB;
/// `kLargeBuffer`: a large pool's segment for requests under [`MIN_LARGE_ALLOC`].
pub const LARGE_BUFFER: u64 = 20 * MIB;
/// `kMinLargeAlloc`.
pub const MIN_LARGE_ALLOC: u64 = 10 * MIB;
/// `kRoundLarge`: larger segments are rounded up to it.
pub const ROUND_LARGE: u64 = 2 * MIB;

/// `round_size`: `size` rounded up to [`MIN_BLOCK`].
pub fn round_size(size: u64) -> u64 {
    round_up(size.max(1), MIN_BLOCK)
}

/// `get_allocation_size`: the segment made for a request of `size` (rounded) bytes.
pub fn allocation_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        round_up(size, ROUND_LARGE)
    }
}

/// The free blocks of one pool (small or large), by stream.
type Pool = BTreeMap<u64, FreeList>;

/// A live block: address, size, stream, small pool.
type Live = (u64, u64, u64, bool);

/// PyTorch's caching allocator.
pub struct Torch {
    device: Device,
    /// The small pool's free blocks and the large pool's.
    small: Pool,
    large: Pool,
    /// Segments by base: a free block that is a segment whole is unsplit.
    segments: BTreeMap<u64, u64>,
    live: FastMap<u64, Live>,
    next: u64,
}

impl Torch {
    pub fn new(capacity: u64) -> Torch {
        Torch {
            device: Device::new(capacity),
            small: Pool::new(),
            large: Pool::new(),
            segments: BTreeMap::new(),
            live: FastMap::default(),
            next: 1 << 40,
        }
    }

    /// A new segment of `size` bytes (`cudaMalloc`): its base, or `None` when the device
    /// refuses.
    fn segment(&mut self, size: u64) -> Option<u64> {
        if !self.device.take(size) {
            return None;
        }
        let base = self.next;
        // A gap after each segment: blocks of two never join.
        self.next += size + GRANULARITY;
        self.segments.insert(base, size);
        Some(base)
    }

    /// `release_cached_blocks`: every free block that is a segment whole goes back.
    fn release_cached(&mut self) {
        for pool in [&mut self.small, &mut self.large] {
            for list in pool.values_mut() {
                let whole: Vec<u64> = list
                    .iter()
                    .filter(|&(a, s)| self.segments.get(&a) == Some(&s))
                    .map(|(a, _)| a)
                    .collect();
                for a in whole {
                    if let Some(s) = list.remove(a) {
                        self.segments.remove(&a);
                        self.device.give(s);
                    }
                }
            }
        }
    }
}

impl Model for Torch {
    fn alloc(&mut self, r: &Request) -> bool {
        let size = round_size(r.size);
        let small = size <= SMALL_SIZE;
        let pool = if small {
            &mut self.small
        } else {
            &mut self.large
        };
        let found = pool
            .get_mut(&r.stream)
            .and_then(|l| l.best_fit(size).map(|(a, s)| (l.remove(a), a, s)));
        let (addr, block) = match found {
            Some((_, a, s)) => (a, s),
            None => {
                let want = allocation_size(size);
                let base = match self.segment(want) {
                    Some(b) => b,
                    None => {
                        self.release_cached();
                        match self.segment(want) {
                            Some(b) => b,
                            None => return false,
                        }
                    }
                };
                (base, want)
            }
        };
        let rest = block - size;
        let split = if small {
            rest >= MIN_BLOCK
        } else {
            rest > SMALL_SIZE
        };
        let taken = if split {
            let pool = if small {
                &mut self.small
            } else {
                &mut self.large
            };
            pool.entry(r.stream).or_default().insert(addr + size, rest);
            size
        } else {
            block
        };
        self.live.insert(r.id, (addr, taken, r.stream, small));
        true
    }

    fn free(&mut self, id: u64) {
        let Some((addr, size, stream, small)) = self.live.remove(&id) else {
            return;
        };
        let pool = if small {
            &mut self.small
        } else {
            &mut self.large
        };
        pool.entry(stream).or_default().insert(addr, size);
    }

    fn peak_reserved(&self) -> u64 {
        self.device.peak
    }

    fn idle(&self) -> Idle {
        let mut idle = Idle::default();
        for list in self.small.values().chain(self.large.values()) {
            idle.join(list.idle());
        }
        idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: u64, size: u64, stream: u64) -> Request {
        Request {
            id,
            size,
            stream,
            thread: 1,
        }
    }

    #[test]
    fn sizes_and_segments_as_pytorch_rounds_them() {
        assert_eq!(round_size(1), 512);
        assert_eq!(round_size(513), 1024);
        assert_eq!(allocation_size(MIB), SMALL_BUFFER);
        assert_eq!(allocation_size(MIB + 512), LARGE_BUFFER);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(11 * MIB + 1), 12 * MIB);
    }

    #[test]
    fn small_requests_split_a_two_mib_segment() {
        let mut t = Torch::new(100 * MIB);
        for id in 1..=4 {
            assert!(t.alloc(&req(id, 500 << 10, 0)));
        }
        // 4 × 500 KiB fit one 2 MiB segment; the fifth needs another.
        assert_eq!(t.peak_reserved(), 2 * MIB);
        assert!(t.alloc(&req(5, 500 << 10, 0)));
        assert_eq!(t.peak_reserved(), 4 * MIB);
    }

    #[test]
    fn large_blocks_split_only_past_one_mib_and_coalesce_on_free() {
        let mut t = Torch::new(100 * MIB);
        // 5 MiB takes a 20 MiB segment and splits it (15 MiB left).
        assert!(t.alloc(&req(1, 5 * MIB, 0)));
        assert!(t.alloc(&req(2, 5 * MIB, 0)));
        assert_eq!(t.peak_reserved(), 20 * MIB);
        // 9.5 MiB of the 10 left: 0.5 MiB is not more than 1 MiB, so the block is taken whole.
        assert!(t.alloc(&req(3, 9 * MIB + MIB / 2, 0)));
        assert_eq!(t.live[&3].1, 10 * MIB);
        t.free(1);
        t.free(2);
        assert_eq!(t.idle().pieces, 1, "the two 5 MiB blocks joined");
        assert_eq!(t.idle().largest, 10 * MIB);
        // Another stream does not see them.
        assert!(t.alloc(&req(4, 5 * MIB, 9)));
        assert_eq!(t.peak_reserved(), 40 * MIB);
    }

    #[test]
    fn a_failed_cuda_malloc_frees_unsplit_cached_segments_and_retries_once() {
        let mut t = Torch::new(60 * MIB);
        assert!(t.alloc(&req(1, 30 * MIB, 0)));
        assert!(t.alloc(&req(2, 20 * MIB, 0)));
        t.free(1);
        // 32 MiB: the cached 30 MiB is too small and 50 + 32 > 60: the unsplit 30 MiB segment
        // goes back, and the second try fits.
        assert!(t.alloc(&req(3, 32 * MIB, 0)));
        assert_eq!((t.device.used, t.idle().bytes), (52 * MIB, 0));
        assert!(
            !t.alloc(&req(4, 2 * MIB, 0)),
            "a 20 MiB segment: no room, nothing to free"
        );
        assert_eq!(t.peak_reserved(), 52 * MIB);
    }
}
