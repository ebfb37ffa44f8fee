//! The pool's growth policy: which requests share chunks, how large a chunk to ask the driver for
//! when the sub-allocator cannot serve a request, and what to give back first. Pure functions of
//! sizes; no driver calls, no state.
//!
//! # The policy, and why
//!
//! - **Small requests (< [`dedicated_threshold`](GrowthPolicy::dedicated_threshold), 2 MiB) share
//!   chunks**, carved by the TLSF sub-allocator. A new shared chunk is the larger of the request
//!   (rounded up to 2 MiB, the driver's large-page granularity) and 1/16 of the shared memory
//!   already reserved, clamped to 20 MiB ..= 1 GiB: geometric growth, so a program that keeps
//!   allocating makes O(log n) driver calls, while the last chunk never overshoots by more than
//!   about 1/16.
//! - **Large requests (≥ 2 MiB) get a dedicated chunk**: the request rounded up to 2 MiB, holding
//!   that one block. When it is freed, the chunk stays idle in the pool and serves a later request
//!   whole, provided the chunk is at most 1/8 larger than the request
//!   ([`Route::Dedicated::max_block`]). Repeating workloads (a training loop asking for the same
//!   tensor sizes every step) then never call the driver after warm-up, while small requests
//!   cannot splinter a large hole, and an idle large chunk can go back to the driver whole.
//!   Allocating exactly (to 2 MiB) costs nothing the driver would not charge: it maps large
//!   allocations in 2 MiB pages anyway. The rounding wastes under 2 MiB per chunk (as the driver
//!   would); below the threshold, requests pack densely in shared chunks instead.
//!   A block that is its chunk whole can also be exported through CUDA IPC: the driver's handle
//!   of the chunk names exactly the block (`CtxPool::export`). That is why the threshold is
//!   2 MiB and not 4: PyTorch's caching allocator exports its segments, the smallest of which are
//!   2 MiB `cudaMalloc`s. On the pattern below, 2 MiB holds as little memory as 4 MiB did (peak
//!   reserved / peak live 1.036 to 1.048 against 1.036 to 1.051 for max = 64 MiB), for about 5%
//!   more driver allocations (0.86 to 0.92 per large request against 0.81 to 0.88).
//! - **Before adding a dedicated chunk, give back idle dedicated chunks of sizes not asked for
//!   again, largest first, until at least the new chunk's size has been returned**
//!   ([`GrowthPolicy::dedicated_release`]). Without this, idle chunks of sizes nobody asks for
//!   again pile up. A chunk whose last request's exact size has been asked for more than once
//!   ([`SizeRepeats`]) is kept: a loop asks for the same tensor sizes every step, and giving
//!   those back made every step ask the driver again (PyTorch's resnet18 without its cache on
//!   the H200: 2,746 chunks, 125 GB, in 25 steps; a training loop in miniature, `growth/sim.rs`:
//!   20 to 30 chunks every step, forever). Kept chunks are bounded by the pool's keep (the trim
//!   after a free) and go under pressure, not here: a rule that also gave them back here while
//!   they held more than half the live bytes idle met every step's start (nothing live yet)
//!   the first time the keep had trimmed one chunk, and gave back every kept chunk at once, so
//!   under the shim the loop asked the driver as often as before (2026-12-03, docs/benchmarks.md
//!   run 19). Random sizes (RMM's pattern below) never repeat exactly, so they are given back as
//!   before.
//!
//! Measured on RMM's `random_allocations` pattern (sizes uniform in [1 B, max], allocate with
//! probability 0.73 else free a random live block, 16,000 MiB cap, 1,000 to 100,000 allocations,
//! 5 seeds each, see `growth/sim.rs`), peak reserved / peak live is at most 1.10 for max = 1 MiB,
//! 1.06 for 64 MiB and 1.03 for 256 MiB. The price, on that adversarial pattern only: about 0.8
//! to 0.9 driver allocations per large request, because random sizes rarely find an idle chunk
//! within 1/8. Plain in-place TLSF reuse of large blocks (a threshold of 64 MiB or more) reaches
//! 1.2 to 1.45 instead: random sizes up to 256 MiB fragment any in-place allocator (Knuth's
//! fifty-percent rule), and only giving memory back to the driver, which remaps pages, undoes it.

#![deny(unsafe_code)]

#[cfg(test)]
pub(crate) mod sim;

use crate::tlsf::ChunkInfo;
use crate::tlsf::ChunkKind;

const MIB: u64 = 1 << 20;

/// Which allocation path a request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `SubAllocator::alloc(size, align)`, in shared chunks.
    Shared,
    /// `SubAllocator::alloc_dedicated(size, align, max_block)`: a whole idle dedicated chunk of at
    /// most `max_block` bytes, else a new dedicated chunk of
    /// [`dedicated_chunk_size`](GrowthPolicy::dedicated_chunk_size).
    Dedicated {
        /// The largest idle dedicated chunk this request may take.
        max_block: u64,
    },
}

/// The growth policy's knobs. [`Default`] gives the values the module documentation justifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrowthPolicy {
    /// Chunk sizes are multiples of this (default 2 MiB, the driver's large-page granularity).
    /// Must be a power of two.
    pub granularity: u64,
    /// The smallest shared chunk (default 20 MiB).
    pub min_shared_chunk: u64,
    /// The largest shared chunk grown for geometric reasons (default 1 GiB); a request larger than
    /// this still gets a chunk it fits in.
    pub max_shared_chunk: u64,
    /// A new shared chunk is at least the shared bytes reserved / this (default 16).
    pub growth_divisor: u64,
    /// Requests of at least this many bytes take the dedicated path (default 2 MiB).
    pub dedicated_threshold: u64,
    /// An idle dedicated chunk serves a request if it exceeds the request (rounded to the
    /// granularity) by at most 1 / this (default 8).
    pub dedicated_waste_divisor: u64,
}

impl Default for GrowthPolicy {
    fn default() -> Self {
        GrowthPolicy {
            granularity: 2 * MIB,
            min_shared_chunk: 20 * MIB,
            max_shared_chunk: 1024 * MIB,
            growth_divisor: 16,
            dedicated_threshold: 2 * MIB,
            dedicated_waste_divisor: 8,
        }
    }
}

impl GrowthPolicy {
    /// The granularity actually used: a power of two, at least 1.
    fn gran(&self) -> u64 {
        self.granularity
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << 63)
    }

    /// Which path a request of `size` bytes takes.
    ///
    /// # Time Complexity
    /// O(1).
    pub fn route(&self, size: u64) -> Route {
        if size < self.dedicated_threshold {
            return Route::Shared;
        }
        let g = self.gran();
        let Some(need) = size.checked_next_multiple_of(g) else {
            return Route::Dedicated {
                max_block: u64::MAX,
            };
        };
        // need + need/8, rounded down to the granularity: chunks are multiples of it.
        let slack = need / self.dedicated_waste_divisor.max(1);
        let max_block = (need.saturating_add(slack) & !(g - 1)).max(need);
        Route::Dedicated { max_block }
    }

    /// The size of the shared chunk to add when `alloc` failed for a request whose
    /// `SubAllocator::footprint` is `footprint`, with `shared_reserved` bytes already held in
    /// shared chunks. `None` on overflow.
    ///
    /// # Time Complexity
    /// O(1).
    pub fn shared_chunk_size(&self, footprint: u64, shared_reserved: u64) -> Option<u64> {
        let g = self.gran();
        let need = footprint.checked_next_multiple_of(g)?;
        let grow = (shared_reserved / self.growth_divisor.max(1))
            .clamp(
                self.min_shared_chunk,
                self.max_shared_chunk.max(self.min_shared_chunk),
            )
            .checked_next_multiple_of(g)?;
        Some(need.max(grow))
    }

    /// The size of the dedicated chunk to add for a request of `size` bytes: the request rounded
    /// up to the granularity. `None` on overflow.
    ///
    /// # Time Complexity
    /// O(1).
    pub fn dedicated_chunk_size(&self, size: u64) -> Option<u64> {
        size.checked_next_multiple_of(self.gran())
    }

    /// The idle dedicated chunks to give back before adding a dedicated chunk of `new_chunk`
    /// bytes: those whose last request's size `repeats` has not seen asked for again, largest
    /// first, until their sizes add up to at least `new_chunk` (or all there are). Chunks of
    /// sizes asked for again stay: the pool's keep bounds them (`CtxPool`'s trim after a free),
    /// and pressure takes them. `chunks` is what `SubAllocator::idle_chunks` yields; shared
    /// chunks are ignored.
    ///
    /// # Time Complexity
    /// O(C log C) for C idle chunks.
    pub fn dedicated_release(
        &self,
        chunks: impl Iterator<Item = ChunkInfo>,
        new_chunk: u64,
        repeats: &SizeRepeats,
    ) -> Vec<ChunkInfo> {
        let mut idle: Vec<ChunkInfo> = chunks
            .filter(|c| c.kind == ChunkKind::Dedicated && c.live_blocks == 0)
            .collect();
        // Sizes not asked for again first, each group largest first.
        idle.sort_by_key(|c| (repeats.repeated(c.last_request), std::cmp::Reverse(c.size)));
        let once = idle
            .iter()
            .take_while(|c| !repeats.repeated(c.last_request))
            .count();
        let mut released = 0u64;
        idle[..once]
            .iter()
            .take_while(|c| {
                let more = released < new_chunk;
                released = released.saturating_add(c.size);
                more
            })
            .copied()
            .collect()
    }
}

/// The exact sizes of recent dedicated requests, counted, in a fixed table (2-way set
/// associative, [`SizeRepeats::SETS`] sets, made at the first request): whether a size has been
/// asked for more than once. A size pushed out by others is forgotten (its count starts again),
/// so the table never grows and a stream of distinct sizes costs nothing but its own slots.
#[derive(Debug, Clone, Default)]
pub struct SizeRepeats {
    /// (size, times asked) per way; size 0 is an empty slot. Empty until the first request.
    sets: Vec<[(u64, u32); 2]>,
}

impl SizeRepeats {
    /// Sets in the table (1,024 sizes in all, 16 KiB).
    pub const SETS: usize = 512;

    fn set_of(size: u64) -> usize {
        // The sizes differ in their low bits as often as in their high ones.
        let h = size.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 32) as usize % Self::SETS
    }

    /// Counts one request of `size` bytes.
    ///
    /// # Time Complexity
    /// O(1).
    pub fn note(&mut self, size: u64) {
        if size == 0 {
            return;
        }
        if self.sets.is_empty() {
            self.sets = vec![[(0, 0); 2]; Self::SETS];
        }
        let set = &mut self.sets[Self::set_of(size)];
        if let Some(slot) = set.iter_mut().find(|(s, _)| *s == size) {
            slot.1 = slot.1.saturating_add(1);
            return;
        }
        // The way asked for fewer times gives way.
        let victim = usize::from(set[1].1 < set[0].1);
        set[victim] = (size, 1);
    }

    /// Whether `size` has been asked for more than once (as far as the table remembers).
    ///
    /// # Time Complexity
    /// O(1).
    pub fn repeated(&self, size: u64) -> bool {
        size != 0
            && self
                .sets
                .get(Self::set_of(size))
                .is_some_and(|set| set.iter().any(|&(s, n)| s == size && n >= 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tlsf::ChunkId;

    #[test]
    fn routes() {
        let p = GrowthPolicy::default();
        assert_eq!(p.route(1), Route::Shared);
        assert_eq!(p.route(2 * MIB - 1), Route::Shared);
        assert_eq!(p.route(2 * MIB), Route::Dedicated { max_block: 2 * MIB });
        assert_eq!(p.route(3 * MIB), Route::Dedicated { max_block: 4 * MIB });
        assert_eq!(p.route(4 * MIB), Route::Dedicated { max_block: 4 * MIB });
        assert_eq!(
            p.route(16 * MIB),
            Route::Dedicated {
                max_block: 18 * MIB
            }
        );
        assert_eq!(
            p.route(64 * MIB + 1),
            Route::Dedicated {
                max_block: 74 * MIB
            }
        );
        assert_eq!(
            p.route(u64::MAX),
            Route::Dedicated {
                max_block: u64::MAX
            }
        );
    }

    #[test]
    fn chunk_sizes() {
        let p = GrowthPolicy::default();
        assert_eq!(p.shared_chunk_size(256, 0), Some(20 * MIB));
        assert_eq!(p.shared_chunk_size(21 * MIB, 0), Some(22 * MIB));
        assert_eq!(p.shared_chunk_size(256, 1600 * MIB), Some(100 * MIB));
        assert_eq!(p.shared_chunk_size(256, 1 << 40), Some(1024 * MIB));
        assert_eq!(p.shared_chunk_size(u64::MAX, 0), None);
        assert_eq!(p.dedicated_chunk_size(5 * MIB), Some(6 * MIB));
        assert_eq!(p.dedicated_chunk_size(u64::MAX), None);
        // Odd settings do not panic.
        let odd = GrowthPolicy {
            granularity: 0,
            growth_divisor: 0,
            dedicated_waste_divisor: 0,
            ..p
        };
        assert_eq!(odd.shared_chunk_size(3, 0), Some(20 * MIB));
        assert!(matches!(odd.route(5 * MIB), Route::Dedicated { .. }));
    }

    #[test]
    fn releases_largest_idle_dedicated_first() {
        let p = GrowthPolicy::default();
        let c = |id, size, kind, live_blocks| ChunkInfo {
            id: ChunkId(id),
            base: 0,
            size,
            kind,
            live_blocks,
            last_request: size - 1,
        };
        let chunks = [
            c(0, 8 * MIB, ChunkKind::Dedicated, 0),
            c(1, 64 * MIB, ChunkKind::Shared, 0),
            c(2, 30 * MIB, ChunkKind::Dedicated, 1),
            c(3, 6 * MIB, ChunkKind::Dedicated, 0),
            c(4, 10 * MIB, ChunkKind::Dedicated, 0),
        ];
        let ids = |v: Vec<ChunkInfo>| v.iter().map(|c| c.id.0).collect::<Vec<_>>();
        let none = SizeRepeats::default();
        let release =
            |new, repeats: &SizeRepeats| ids(p.dedicated_release(chunks.into_iter(), new, repeats));
        assert_eq!(release(12 * MIB, &none), vec![4, 0]);
        assert_eq!(release(10 * MIB, &none), vec![4]);
        assert_eq!(release(100 * MIB, &none), vec![4, 0, 3]);
        assert_eq!(release(0, &none), Vec::<u32>::new());

        // The 10 MiB chunk's last size was asked for twice: it is kept, the others go first...
        let mut twice = SizeRepeats::default();
        twice.note(10 * MIB - 1);
        twice.note(10 * MIB - 1);
        twice.note(8 * MIB - 1);
        assert_eq!(release(12 * MIB, &twice), vec![0, 3]);
        assert_eq!(release(100 * MIB, &twice), vec![0, 3]);
        // ...even with nothing live (a step's start): the keep bounds it, not this.
        assert_eq!(release(1, &twice), vec![0]);
    }

    #[test]
    fn sizes_asked_for_again_are_remembered_in_a_fixed_table() {
        let mut r = SizeRepeats::default();
        assert!(!r.repeated(5 * MIB));
        r.note(5 * MIB);
        assert!(!r.repeated(5 * MIB), "once is not again");
        r.note(5 * MIB);
        assert!(r.repeated(5 * MIB));
        assert!(!r.repeated(5 * MIB + 1), "exact sizes only");
        assert!(!r.repeated(0));
        // A million distinct sizes later the table is no larger; a size asked for every so
        // often among them is still known.
        for i in 0..1_000_000u64 {
            r.note(3 * MIB + i * 7);
            if i % 100 == 0 {
                r.note(5 * MIB);
            }
        }
        assert!(r.repeated(5 * MIB));
        assert!(!r.repeated(3 * MIB + 7 * 999_999 + 1));
    }
}
