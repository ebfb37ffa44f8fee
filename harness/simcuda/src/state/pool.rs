//! The pool family's operations on the state: memory pools and stream-ordered allocation, and
//! what frees and synchronisations give back.
//!
//! An async allocation takes a cached block that fits or makes a new one (charged to the device;
//! under pressure every pool of the device first gives back what it caches). Every other
//! allocation of device memory takes the cached blocks whose frees a synchronization observed
//! ([`State::charge_device`]). `cuMemFreeAsync`
//! unlinks the allocation at once (the address is dead to the program) and issues an operation on
//! the stream that gives the block back to the pool when the stream gets there
//! ([`State::block_returned`]). Cached blocks go back to the host when the pool is trimmed: by
//! `cuMemPoolTrimTo`, or down to the pool's release threshold (default 0) after any stream, event
//! or context synchronisation, as the real driver does.
//!
//! `cuMemFreeAsync` also takes synchronous allocations (`cuMemAlloc_v2`, pitched, managed). Their
//! address dies at once too, but their memory stays taken (in `cuMemGetInfo_v2`, NVML and
//! `cusimGetUsage`) after the stream reaches the free, until a synchronization with the stream
//! of the free releases it ([`State::stream_synchronized`]: `cuStreamSynchronize` of that stream,
//! or of the legacy stream when the free was on the legacy stream or a blocking one;
//! `cuEventSynchronize` of an event recorded on such a stream; [`State::synchronized`]:
//! `cuCtxSynchronize`), or the context goes. Measured on the H200
//! (docs/gpu-runs/2026-12-02-run1/giveback.md): 3 GiB freed this way on the legacy stream stayed
//! taken in every 100 ms sample for a second, after a stream query, an event query, an allocation
//! under pressure, synchronizing another, non-blocking stream and a `cuMemFree_v2` of another
//! allocation (which waits for the device's work, yet releases nothing); it came back at the
//! legacy stream's synchronize, an event's synchronize and `cuCtxSynchronize`.
//!
//! Every device has a default pool. Pools made with `cuMemPoolCreate` belong to the context that
//! was current when they were made (if any) and go away with it.

use std::sync::Arc;

use super::State;
use crate::errors::Fault;
use crate::ffi::consts::CU_MEM_HANDLE_TYPE_NONE;
use crate::hostmem;
use crate::model::context::CtxRef;
use crate::model::memory::{Alloc, AllocKind};
use crate::model::pool::{Block, Held, Pool};
use crate::model::stream::{Stream, StreamKind};

impl State {
    /// Makes the default pool of device `dev`; returns its handle.
    pub fn new_default_pool(&mut self, dev: i32) -> usize {
        let handle = self.new_handle();
        self.pools.insert(
            handle,
            Pool::new(handle, dev, true, None, CU_MEM_HANDLE_TYPE_NONE),
        );
        handle
    }

    /// The live pool with handle `h`.
    pub fn live_pool(&self, h: usize) -> Result<&Pool, Fault> {
        self.pools
            .get(&h)
            .filter(|p| !p.destroyed)
            .ok_or(Fault::BadPool)
    }

    /// Gives a block back to the host.
    fn release_block(&mut self, device: i32, b: Block) {
        if let Ok(d) = self.device_mut(device) {
            d.mem.uncharge(b.cap);
        }
        // SAFETY: the block is in no allocation and no cache anymore; nothing refers to it.
        unsafe { hostmem::unmap(b.base, b.map_len) };
    }

    /// Releases cached blocks of pool `h` until it holds at most `keep` bytes (or has no cached
    /// block left). Largest blocks go first.
    pub fn trim_pool(&mut self, h: usize, keep: u64) {
        let Some(p) = self.pools.get_mut(&h) else {
            return;
        };
        p.cached.sort_by_key(|b| b.cap);
        let device = p.device;
        let mut freed = Vec::new();
        while p.reserved > keep {
            let Some(b) = p.cached.pop() else { break };
            p.reserved -= b.cap;
            freed.push(b);
        }
        let gone = p.destroyed && p.reserved == 0;
        for b in freed {
            self.release_block(device, b);
        }
        if gone {
            self.pools.remove(&h);
        }
    }

    /// What a whole-device synchronisation (`cuCtxSynchronize`) does on device `dev`:
    /// synchronous allocations freed with `cuMemFreeAsync` (whose stream reached the free) are
    /// released, and each pool releases cached memory above its release threshold.
    pub fn synchronized(&mut self, dev: i32) {
        self.release_held(|h| h.alloc.ctx.device == dev);
        self.trim_pools(dev);
        self.observe_cached(dev);
    }

    /// A context or stream synchronization on device `dev` observed the frees whose blocks its
    /// pools cache: the driver may now give those blocks to any allocation (measured after
    /// `cuCtxSynchronize` and `cuStreamSynchronize`; after `cuEventSynchronize` or a query it was
    /// not, and the simulator keeps them from plain allocations, as the H200 run of CuPy's
    /// `test_free_all_blocks_large_chunk` under the pool suggests: docs/compatibility.md).
    fn observe_cached(&mut self, dev: i32) {
        for p in self.pools.values_mut().filter(|p| p.device == dev) {
            for b in &mut p.cached {
                b.observed = true;
            }
        }
    }

    /// What synchronizing with stream `s` does (`cuStreamSynchronize`, `observe`; or
    /// `cuEventSynchronize` of an event recorded on it): the held allocations freed on `s` are released (on the
    /// legacy stream, also those freed on the blocking streams it waits for), and each pool of
    /// the device releases cached memory above its release threshold.
    pub fn stream_synchronized(&mut self, s: &Arc<Stream>, observe: bool) {
        let legacy = s.kind == StreamKind::Legacy;
        self.release_held(|h| {
            Arc::ptr_eq(&h.stream, s)
                || (legacy
                    && h.stream.ctx_id == s.ctx_id
                    && h.stream.kind != StreamKind::NonBlocking)
        });
        self.trim_pools(s.device);
        if observe {
            self.observe_cached(s.device);
        }
    }

    /// Releases the held allocations (see the module documentation) that `which` picks.
    pub fn release_held(&mut self, which: impl Fn(&Held) -> bool) {
        if self.held.is_empty() {
            return;
        }
        let (go, stay): (Vec<Held>, Vec<Held>) =
            std::mem::take(&mut self.held).into_iter().partition(which);
        self.held = stay;
        for h in go {
            self.drop_live(&h.alloc);
            self.reclaim(h.alloc, false);
        }
    }

    /// Each pool of device `dev` releases cached memory above its release threshold.
    fn trim_pools(&mut self, dev: i32) {
        let pools: Vec<(usize, u64)> = self
            .pools
            .values()
            .filter(|p| p.device == dev)
            .map(|p| (p.handle, p.release_threshold))
            .collect();
        for (h, threshold) in pools {
            self.trim_pool(h, threshold);
        }
    }

    /// `cuMemFreeAsync` of `size` bytes of pool `pool` was enqueued: the pool no longer counts
    /// them used (`CU_MEMPOOL_ATTR_USED_MEM_CURRENT`), though the block is not reusable until the
    /// free completes ([`State::freed_block_returned`]). Measured on the H100
    /// (docs/gpu-runs/2026-12-06-run29): right after the free, with no synchronization, used was
    /// 0 and reserved unchanged, and a `cuMemAlloc` needing the memory was refused until a
    /// synchronization.
    pub fn pool_block_freed(&mut self, pool: usize, size: u64) {
        if let Some(p) = self.pools.get_mut(&pool) {
            p.used = p.used.saturating_sub(size);
        }
    }

    /// The free of `a` (an allocation of a pool, already counted out of the pool's used bytes by
    /// [`State::pool_block_freed`]) completed: its block goes back to the pool's cache.
    pub fn freed_block_returned(&mut self, a: Alloc) {
        let AllocKind::Async { pool, cap } = a.kind else {
            self.reclaim(a, false);
            return;
        };
        let block = Block {
            base: a.base,
            cap,
            map_len: a.map_len,
            observed: false,
        };
        self.block_returned(pool, a.ctx.device, block, 0, false);
    }

    /// A block of pool `pool` on device `device` comes back from an allocation of which `size`
    /// bytes were still counted used (0 when its free already uncounted them): into the cache,
    /// or to the host if the pool is destroyed or `release` is set.
    pub fn block_returned(&mut self, pool: usize, device: i32, b: Block, size: u64, release: bool) {
        let Some(p) = self.pools.get_mut(&pool) else {
            self.release_block(device, b);
            return;
        };
        p.used = p.used.saturating_sub(size);
        if release || p.destroyed {
            p.reserved = p.reserved.saturating_sub(b.cap);
            let gone = p.destroyed && p.reserved == 0;
            let device = p.device;
            self.release_block(device, b);
            if gone {
                self.pools.remove(&pool);
            }
        } else {
            p.cached.push(b);
        }
    }

    /// Destroys the pools a dead context made, and releases what the device's other pools cache.
    pub fn release_context_pools(&mut self, ctx_id: u64, dev: i32) {
        let owned: Vec<usize> = self
            .pools
            .values()
            .filter(|p| p.owner_ctx == Some(ctx_id))
            .map(|p| p.handle)
            .collect();
        for h in owned {
            self.destroy_pool(h);
        }
        let on_device: Vec<usize> = self
            .pools
            .values()
            .filter(|p| p.device == dev)
            .map(|p| p.handle)
            .collect();
        for h in on_device {
            self.trim_pool(h, 0);
        }
        self.release_held(|h| h.alloc.ctx.id == ctx_id);
    }

    /// Marks pool `h` destroyed: cached blocks go at once, blocks still allocated when their
    /// frees run.
    pub fn destroy_pool(&mut self, h: usize) {
        let Some(p) = self.pools.get_mut(&h) else {
            return;
        };
        p.destroyed = true;
        let device = p.device;
        if let Ok(d) = self.device_mut(device)
            && d.current_pool == h
        {
            d.current_pool = d.default_pool;
        }
        self.trim_pool(h, 0);
    }

    /// Takes `size` bytes from pool `h` for context `ctx`.
    pub fn pool_alloc(&mut self, h: usize, size: u64, ctx: CtxRef) -> Result<u64, Fault> {
        let p = self
            .pools
            .get_mut(&h)
            .filter(|p| !p.destroyed)
            .ok_or(Fault::BadPool)?;
        let device = p.device;
        let block = match p.fit(size) {
            Some(b) => b,
            None => {
                let len = usize::try_from(size).map_err(|_| Fault::OutOfMemory)?;
                if self.device_mut(device)?.mem.charge(size).is_err() {
                    // Under pressure, give back what every pool of the device caches, then retry.
                    self.trim_device(device);
                    self.device_mut(device)?.mem.charge(size)?;
                }
                let (base, map_len) = match hostmem::map_anon(len) {
                    Ok(m) => m,
                    Err(f) => {
                        self.device_mut(device)?.mem.uncharge(size);
                        return Err(f);
                    }
                };
                let p = self.pools.get_mut(&h).ok_or(Fault::Internal)?;
                p.reserved += size;
                p.reserved_high = p.reserved_high.max(p.reserved);
                Block {
                    base,
                    cap: size,
                    map_len,
                    observed: false,
                }
            }
        };
        let p = self.pools.get_mut(&h).ok_or(Fault::Internal)?;
        p.used += size;
        p.used_high = p.used_high.max(p.used);
        let buffer_id = self.new_id();
        self.insert_alloc(Alloc {
            base: block.base,
            size,
            map_len: block.map_len,
            kind: AllocKind::Async {
                pool: h,
                cap: block.cap,
            },
            ctx,
            buffer_id,
            ipc_fd: None,
        });
        Ok(block.base)
    }

    /// Charges `size` bytes to device `dev`; under pressure every pool of the device first
    /// gives back the blocks it caches from frees a synchronization observed, then the charge is
    /// tried again.
    /// Every allocation of device memory does so, plain ones too: measured on the H100
    /// (docs/gpu-runs/2026-12-06-run28): with the default pool's release threshold unlimited and
    /// 47.8 GB of completed frees cached, a `cuMemAlloc` of 40.8 GB with 24.6 GB free was served,
    /// and the pool's memory was gone from the device after it; a created pool likewise. Frees
    /// no synchronization observed stay taken (run29: refused until `cuCtxSynchronize`).
    pub fn charge_device(&mut self, dev: i32, size: u64) -> Result<(), Fault> {
        if self.device_mut(dev)?.mem.charge(size).is_ok() {
            return Ok(());
        }
        let pools: Vec<usize> = self
            .pools
            .values()
            .filter(|p| p.device == dev)
            .map(|p| p.handle)
            .collect();
        for h in pools {
            self.release_observed(h);
        }
        self.device_mut(dev)?.mem.charge(size)
    }

    /// Gives back every cached block of pool `h` whose free a synchronization observed.
    fn release_observed(&mut self, h: usize) {
        let Some(p) = self.pools.get_mut(&h) else {
            return;
        };
        let device = p.device;
        let (go, stay): (Vec<Block>, Vec<Block>) = std::mem::take(&mut p.cached)
            .into_iter()
            .partition(|b| b.observed);
        p.cached = stay;
        for b in &go {
            p.reserved -= b.cap;
        }
        for b in go {
            self.release_block(device, b);
        }
    }

    /// Every pool of device `dev` gives back all it caches.
    fn trim_device(&mut self, dev: i32) {
        let pools: Vec<usize> = self
            .pools
            .values()
            .filter(|p| p.device == dev)
            .map(|p| p.handle)
            .collect();
        for h in pools {
            self.trim_pool(h, 0);
        }
    }
}
