//! `torch-expandable`: PyTorch's caching allocator with `expandable_segments:True`
//! (`c10/cuda/CUDACachingAllocator.cpp`, "Note [Expandable Segments]",
//! `find_expandable_block`, `map_block`, `unmap_block`):
//!
//! - sizes are rounded and pooled as under `torch` (512 bytes; small up to 1 MiB, large above);
//! - each stream has one segment per pool: a range of addresses (1 1/8 the device's memory)
//!   that is mapped to memory in pages as it is used, 2 MiB pages for the small pool and
//!   20 MiB for the large one (`kSmallBuffer`, `kLargeBuffer`), so that fragmentation across
//!   segments disappears: memory is taken a page at a time, wherever in the segment it is
//!   needed;
//! - a request takes the best fit among the mapped free blocks of its pool on its stream;
//!   else the lowest place in its segment where free and unmapped ranges together hold it
//!   (`find_expandable_block`), whose unmapped pages are mapped (`map_block`); a block is split
//!   when at least 512 bytes are left, in either pool;
//! - a freed block joins the free blocks beside it;
//! - when mapping fails, every whole page of every free block is unmapped (given back:
//!   `release_cached_blocks`, `unmap_block`) and the request is tried once more.
//!
//! The replay maps a request's pages all at once or not at all (PyTorch maps them range by
//! range, and keeps what it mapped when a later range fails), and finds the best fit among
//! mapped free blocks at their mapped size (PyTorch also weighs a block at the end of its
//! segment by what it could grow to).

use super::free_list::FreeList;
use super::model::{Device, FastMap, Idle, Model, Request, round_up};
use super::torch::{LARGE_BUFFER, MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE, round_size};

/// One stream's segment of one pool: its page, its mapped free ranges, its unmapped ranges.
struct Space {
    page: u64,
    free: FreeList,
    unmapped: FreeList,
}

impl Space {
    /// The lowest address where a request of `size` bytes fits in free and unmapped ranges
    /// together: an unmapped range's start, or the free range just before it.
    fn find(&self, size: u64) -> Option<u64> {
        for (u, _) in self.unmapped.iter() {
            let start = self.free.ending_at(u).map_or(u, |(f, _)| f);
            let (mut at, mut room) = (start, 0u64);
            while room < size {
                match self.free.at(at).or_else(|| self.unmapped.at(at)) {
                    Some(s) => {
                        room += s;
                        at += s;
                    }
                    None => break,
                }
            }
            if room >= size {
                return Some(start);
            }
        }
        None
    }

    /// The unmapped bytes that mapping `[start, start + size)` takes: every page it touches.
    fn to_map(&self, start: u64, size: u64) -> Vec<(u64, u64)> {
        let end = round_up(start + size, self.page);
        let mut out = Vec::new();
        let mut at = start;
        while at < end {
            if let Some(s) = self.free.at(at) {
                at += s;
            } else if let Some(s) = self.unmapped.at(at) {
                let part = s.min(end - at);
                out.push((at, part));
                at += s;
            } else {
                break;
            }
        }
        out
    }

    /// Every whole page of every free range unmapped: the bytes given back.
    fn unmap_free(&mut self) -> u64 {
        let ranges: Vec<(u64, u64)> = self.free.iter().collect();
        let mut given = 0;
        for (a, s) in ranges {
            let lo = round_up(a, self.page);
            let hi = (a + s) / self.page * self.page;
            if hi <= lo {
                continue;
            }
            self.free.remove(a);
            if lo > a {
                self.free.insert(a, lo - a);
            }
            if a + s > hi {
                self.free.insert(hi, a + s - hi);
            }
            self.unmapped.insert(lo, hi - lo);
            given += hi - lo;
        }
        given
    }
}

/// A live block: address, size, and its space's key (stream, small pool).
type Live = (u64, u64, (u64, bool));

/// PyTorch's caching allocator, expandable segments.
pub struct TorchExpandable {
    device: Device,
    spaces: FastMap<(u64, bool), Space>,
    live: FastMap<u64, Live>,
    /// Segments made so far (each at its own base).
    segments: u64,
}

/// Pages a segment's addresses span at most (so that segments never meet).
const SEGMENT_PAGES: u64 = 1 << 26;

impl TorchExpandable {
    pub fn new(capacity: u64) -> TorchExpandable {
        TorchExpandable {
            device: Device::new(capacity),
            spaces: FastMap::default(),
            live: FastMap::default(),
            segments: 0,
        }
    }

    /// Maps what `[start, start + size)` needs in `key`'s space: false, mapping nothing, when
    /// the device has no room.
    fn map(&mut self, key: (u64, bool), start: u64, size: u64) -> bool {
        let space = self.spaces.get_mut(&key).expect("the space exists");
        let parts = space.to_map(start, size);
        let bytes: u64 = parts.iter().map(|p| p.1).sum();
        if !self.device.take(bytes) {
            return false;
        }
        for (at, part) in parts {
            let whole = space.unmapped.remove(at).unwrap_or(part);
            if whole > part {
                space.unmapped.insert(at + part, whole - part);
            }
            space.free.insert(at, part);
        }
        true
    }

    /// Where a request of `size` bytes goes in `key`'s space when no mapped free block fits:
    /// found in its segments, else a new segment.
    fn place(&mut self, key: (u64, bool), size: u64) -> u64 {
        let span = self
            .device
            .capacity
            .saturating_add(self.device.capacity / 8);
        let space = self.spaces.get_mut(&key).expect("the space exists");
        if let Some(start) = space.find(size) {
            return start;
        }
        self.segments += 1;
        let base = self.segments * SEGMENT_PAGES * space.page;
        let length =
            (span / space.page).clamp(size.div_ceil(space.page), SEGMENT_PAGES - 1) * space.page;
        space.unmapped.insert(base, length);
        base
    }

    /// Maps a place for `size` bytes in `key`'s space: its start, or `None` when the device
    /// has no room.
    fn expand(&mut self, key: (u64, bool), size: u64) -> Option<u64> {
        let start = self.place(key, size);
        self.map(key, start, size).then_some(start)
    }
}

impl Model for TorchExpandable {
    fn alloc(&mut self, r: &Request) -> bool {
        let size = round_size(r.size);
        let small = size <= SMALL_SIZE;
        let key = (r.stream, small);
        let space = self.spaces.entry(key).or_insert_with(|| Space {
            page: if small { SMALL_BUFFER } else { LARGE_BUFFER },
            free: FreeList::default(),
            unmapped: FreeList::default(),
        });
        let addr = match space.free.best_fit(size) {
            Some((a, _)) => a,
            None => match self.expand(key, size) {
                Some(a) => a,
                None => {
                    let given: u64 = self.spaces.values_mut().map(Space::unmap_free).sum();
                    self.device.give(given);
                    match self.expand(key, size) {
                        Some(a) => a,
                        None => return false,
                    }
                }
            },
        };
        let space = self.spaces.get_mut(&key).expect("the space exists");
        let block = space
            .free
            .remove(addr)
            .expect("a free block at the place found");
        let rest = block - size;
        let taken = if rest >= MIN_BLOCK {
            space.free.insert(addr + size, rest);
            size
        } else {
            block
        };
        self.live.insert(r.id, (addr, taken, key));
        true
    }

    fn free(&mut self, id: u64) {
        if let Some((addr, size, key)) = self.live.remove(&id)
            && let Some(space) = self.spaces.get_mut(&key)
        {
            space.free.insert(addr, size);
        }
    }

    fn peak_reserved(&self) -> u64 {
        self.device.peak
    }

    fn idle(&self) -> Idle {
        let mut idle = Idle::default();
        for space in self.spaces.values() {
            idle.join(space.free.idle());
        }
        idle
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
            stream: 0,
            thread: 1,
        }
    }

    #[test]
    fn memory_is_mapped_a_page_at_a_time() {
        let mut t = TorchExpandable::new(1024 * MIB);
        assert!(t.alloc(&req(1, 30 * MIB)));
        // Two 20 MiB pages of the large pool; 10 MiB left free in the second.
        assert_eq!(t.peak_reserved(), 40 * MIB);
        assert!(t.alloc(&req(2, 10 * MIB)));
        assert_eq!(t.peak_reserved(), 40 * MIB, "it fits what the page left");
        assert!(t.alloc(&req(3, 1000)));
        assert_eq!(
            t.peak_reserved(),
            42 * MIB,
            "a 2 MiB page of the small pool"
        );
    }

    #[test]
    fn a_segment_grows_from_its_free_end() {
        let mut t = TorchExpandable::new(1024 * MIB);
        assert!(t.alloc(&req(1, 30 * MIB)));
        // 25 MiB: 10 free at the end of the mapped pages, 15 more mapped as one page.
        assert!(t.alloc(&req(2, 25 * MIB)));
        assert_eq!(t.peak_reserved(), 60 * MIB);
        assert_eq!(t.live[&2].0, t.live[&1].0 + 30 * MIB);
    }

    #[test]
    fn freed_pages_are_unmapped_when_memory_runs_out() {
        let mut t = TorchExpandable::new(100 * MIB);
        assert!(t.alloc(&req(1, 40 * MIB)));
        assert!(t.alloc(&req(2, 40 * MIB)));
        t.free(1);
        // 60 MiB: no free block holds it, and no place in the segment does (the live block is
        // in the way), so a new segment is begun; mapping 60 MiB there fails (80 MiB are
        // mapped), so the free block's pages are unmapped and the second try maps them there.
        assert!(t.alloc(&req(3, 60 * MIB)));
        assert_eq!(t.idle().bytes, 0);
        assert_eq!(t.device.used, 100 * MIB);
        t.free(2);
        t.free(3);
        // The 60 MiB went to a second segment: the freed blocks stay two pieces.
        let idle = t.idle();
        assert_eq!(
            (idle.bytes, idle.pieces, idle.largest),
            (100 * MIB, 2, 60 * MIB)
        );
    }
}
