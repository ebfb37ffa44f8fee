//! `cuguard`: cuguard's own pool as shipped, the `cuguard-pool` crate itself (`shim/pool`), run
//! over a device of the capacity asked: its size classes, its chunks (small requests share
//! chunks of 20 MiB to 1 GiB growing by 1/16 of what is shared; requests of 2 MiB and more get a
//! chunk of their own, rounded to 2 MiB, reused whole by a request at most 1/8 smaller), its 16
//! arenas (a thread's own, given in turn as threads first allocate, as the shim gives them), its
//! threads' caches of blocks up to 1 MiB, its keep (`CUGUARD_POOL_KEEP`'s default: idle memory
//! up to 10% of the device kept, the rest given back) and what it does under pressure (gives
//! back idle chunks, then refuses). Every request goes through it, as `cuMemAlloc` does under
//! the shim (`CUGUARD_POOL=1`, the default).
//!
//! What the replay does not have: the program's GPU work. A freed block waits for no fence
//! here (no work is in flight), so it is reusable at once, as it is for a program whose work
//! completed. A free is made on the thread that made the block (the history names that one).

use std::cell::{Cell, RefCell};

use cuguard_pool::{ARENAS, CtxPool, Device as PoolDevice, DeviceError, Settings, ThreadCache};

use super::model::{Device, FastMap, Idle, Model, Request};

/// The share of the device the pool keeps idle by default (`CUGUARD_POOL_KEEP`: 10%).
const KEEP_PERCENT: u64 = 10;

/// The device under the pool: chunks taken and given back against a capacity, at addresses
/// that never touch.
struct Chunks {
    device: Cell<Device>,
    next: Cell<u64>,
    sizes: RefCell<FastMap<u64, u64>>,
}

/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OUT_OF_MEMORY: u32 = 2;

impl PoolDevice for Chunks {
    type Event = ();
    fn alloc_chunk(&self, bytes: u64) -> Result<u64, DeviceError> {
        let mut d = self.device.get();
        if !d.take(bytes) {
            return Err(DeviceError::Refused(OUT_OF_MEMORY));
        }
        self.device.set(d);
        let base = self.next.get();
        // A gap of a page after each chunk, on a 2 MiB boundary.
        self.next
            .set(base + bytes.next_multiple_of(super::model::GRANULARITY) + (2 << 20));
        self.sizes.borrow_mut().insert(base, bytes);
        Ok(base)
    }
    fn free_chunk(&self, base: u64, _wait: bool) {
        if let Some(bytes) = self.sizes.borrow_mut().remove(&base) {
            let mut d = self.device.get();
            d.give(bytes);
            self.device.set(d);
        }
    }
    fn is_current(&self) -> bool {
        true
    }
    fn submissions(&self) -> u64 {
        0
    }
    fn capturing(&self) -> bool {
        false
    }
    fn record_event(&self, _stream: u64) -> Option<()> {
        Some(())
    }
    fn with_side_streams<T>(&self, f: impl FnOnce(&[u64], u64) -> T) -> T {
        f(&[], 0)
    }
    fn destroyed_streams_done(&self, _count: u64) -> bool {
        true
    }
    fn event_done(&self, _: &()) -> bool {
        true
    }
    fn destroy_event(&self, _: ()) {}
    fn synchronize(&self) -> bool {
        true
    }
    fn free_bytes(&self) -> Option<u64> {
        let d = self.device.get();
        Some(d.capacity.saturating_sub(d.used))
    }
}

/// A thread as the pool sees it: its arena and its cache.
struct Thread {
    arena: usize,
    cache: ThreadCache,
}

/// cuguard's pool.
pub struct Cuguard {
    pool: CtxPool<Chunks, u64>,
    threads: FastMap<u32, Thread>,
    /// Each live request's block and thread, by id.
    live: FastMap<u64, (u64, u32)>,
}

impl Cuguard {
    pub fn new(capacity: u64) -> Cuguard {
        let chunks = Chunks {
            device: Cell::new(Device::new(capacity)),
            next: Cell::new(1 << 40),
            sizes: RefCell::new(FastMap::default()),
        };
        let settings = Settings {
            limit: None,
            keep: capacity / 100 * KEEP_PERCENT,
            unsafe_reuse: false,
        };
        Cuguard {
            pool: CtxPool::new(chunks, settings),
            threads: FastMap::default(),
            live: FastMap::default(),
        }
    }
}

impl Model for Cuguard {
    fn alloc(&mut self, r: &Request) -> bool {
        let n = self.threads.len();
        let t = self.threads.entry(r.thread).or_insert_with(|| Thread {
            arena: n % ARENAS,
            cache: ThreadCache::new(),
        });
        match self
            .pool
            .alloc_cached(&mut t.cache, t.arena, r.size.max(1), None)
        {
            Ok(addr) => {
                self.live.insert(r.id, (addr, r.thread));
                true
            }
            Err(_) => false,
        }
    }

    fn free(&mut self, id: u64) {
        let Some((addr, thread)) = self.live.remove(&id) else {
            return;
        };
        let Some(t) = self.threads.get_mut(&thread) else {
            return;
        };
        let _ = self.pool.free_cached(&mut t.cache, t.arena, addr);
    }

    fn peak_reserved(&self) -> u64 {
        self.pool.device().device.get().peak
    }

    /// The chunks less the live blocks: what is free in the arenas and in the threads' caches.
    fn idle(&self) -> Idle {
        let mut blocks: Vec<(u64, u64)> = self
            .live
            .values()
            .filter_map(|&(addr, thread)| {
                let arena = self.threads.get(&thread)?.arena;
                let b = self.pool.find(arena, addr)?;
                Some((b.addr, b.addr + b.granted))
            })
            .collect();
        blocks.sort_unstable();
        let mut chunks = self.pool.chunk_ranges();
        chunks.sort_unstable();
        let mut idle = Idle::default();
        let mut i = 0;
        for (start, end) in chunks {
            let mut at = start;
            while i < blocks.len() && blocks[i].0 < end {
                let (b, e) = blocks[i];
                if b >= at {
                    idle.add(b - at);
                }
                at = at.max(e);
                i += 1;
            }
            idle.add(end.saturating_sub(at));
        }
        idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::model::MIB;

    fn req(id: u64, size: u64, thread: u32) -> Request {
        Request {
            id,
            size,
            stream: 0,
            thread,
        }
    }

    #[test]
    fn small_requests_share_a_chunk_of_twenty_mib() {
        let mut p = Cuguard::new(1024 * MIB);
        for id in 1..=10 {
            assert!(p.alloc(&req(id, 64 << 10, 7)));
        }
        assert_eq!(p.peak_reserved(), 20 * MIB, "one shared chunk");
        let idle = p.idle();
        assert_eq!(idle.bytes, 20 * MIB - 640 * 1024);
        assert_eq!(idle.pieces, 1);
    }

    #[test]
    fn a_large_request_gets_its_own_chunk_reused_whole_after_its_free() {
        let mut p = Cuguard::new(1024 * MIB);
        assert!(p.alloc(&req(1, 99 * MIB, 7)));
        assert_eq!(p.peak_reserved(), 100 * MIB, "rounded to 2 MiB");
        p.free(1);
        // Kept (within 10% of the device) and reused by a request at most 1/8 smaller.
        assert!(p.alloc(&req(2, 90 * MIB, 7)));
        assert_eq!(p.peak_reserved(), 100 * MIB);
        assert_eq!(p.idle().bytes, 0, "the chunk is the block's whole");
    }

    #[test]
    fn idle_chunks_go_back_before_a_refusal() {
        let mut p = Cuguard::new(200 * MIB);
        assert!(p.alloc(&req(1, 120 * MIB, 7)));
        p.free(1);
        // 150 MiB does not fit beside the idle 120 MiB chunk: it goes back first.
        assert!(p.alloc(&req(2, 150 * MIB, 8)));
        assert!(!p.alloc(&req(3, 60 * MIB, 8)), "150 + 60 > 200: refused");
    }
}
