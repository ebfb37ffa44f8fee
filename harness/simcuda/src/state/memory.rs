//! The memory family's operations on the state: the map of live allocations and the device
//! accounting that goes with it, and giving an allocation's memory back (to its pool or to the
//! host), including everything a destroyed context held.
//!
//! An allocation leaves the map when it is freed (its address is dead to the program) and is
//! taken out of the program's live count then, or later for a held stream-ordered free
//! (`state/pool.rs`); [`State::reclaim`] returns its memory.

use super::State;
use crate::errors::Fault;
use crate::hostmem;
use crate::model::context::CtxRef;
use crate::model::memory::{Alloc, AllocKind};
use crate::model::pool::Block;

impl State {
    /// The live allocation containing `ptr`.
    pub fn containing(&self, ptr: u64) -> Option<&Alloc> {
        self.allocs
            .range(..=ptr)
            .next_back()
            .map(|(_, a)| a)
            .filter(|a| ptr < a.base + a.size.max(1))
    }

    /// Checks that `ptr` is the start of a live allocation that `accepts` the free; returns it.
    pub fn check_free(
        &self,
        ptr: u64,
        accepts: impl Fn(AllocKind) -> bool,
        wrong: Fault,
    ) -> Result<&Alloc, Fault> {
        match self.allocs.get(&ptr) {
            Some(a) if accepts(a.kind) => Ok(a),
            Some(_) => Err(wrong),
            None if self.containing(ptr).is_some() => Err(Fault::InteriorPointer),
            None => Err(Fault::UnknownPointer),
        }
    }

    /// Records a new allocation and counts it.
    pub fn insert_alloc(&mut self, a: Alloc) {
        if a.kind.counted_live()
            && let Ok(d) = self.device_mut(a.ctx.device)
        {
            d.mem.add_live(a.size);
        }
        self.allocs.insert(a.base, a);
    }

    /// Removes the allocation at `base` from the map and from the program's live count; its
    /// memory is not returned yet (see [`State::reclaim`]).
    pub fn unlink_alloc(&mut self, base: u64) -> Option<Alloc> {
        let a = self.detach_alloc(base)?;
        self.drop_live(&a);
        Some(a)
    }

    /// Removes the allocation at `base` from the map only: its address is dead, but it still
    /// counts as live (a held stream-ordered free, `state/pool.rs`) until [`State::drop_live`].
    pub fn detach_alloc(&mut self, base: u64) -> Option<Alloc> {
        self.allocs.remove(&base)
    }

    /// Takes a detached allocation out of the program's live count.
    pub fn drop_live(&mut self, a: &Alloc) {
        if a.kind.counted_live()
            && let Ok(d) = self.device_mut(a.ctx.device)
        {
            d.mem.drop_live(a.size);
        }
    }

    /// Returns an unlinked allocation's memory: to its pool (async blocks, unless
    /// `context_gone`, which releases them), or to the host.
    pub fn reclaim(&mut self, a: Alloc, context_gone: bool) {
        if let Some(fd) = a.ipc_fd {
            hostmem::close(fd);
        }
        match a.kind {
            AllocKind::Async { pool, cap } => {
                let block = Block {
                    base: a.base,
                    cap,
                    map_len: a.map_len,
                    observed: false,
                };
                self.block_returned(pool, a.ctx.device, block, a.size, context_gone);
            }
            kind => {
                if kind.charged()
                    && let Ok(d) = self.device_mut(a.ctx.device)
                {
                    d.mem.uncharge(a.size);
                }
                // SAFETY: the allocation is out of the map; nothing in the driver refers to it,
                // and a program touching it after its free is at fault (as on a real GPU).
                unsafe { hostmem::unmap(a.base, a.map_len) };
            }
        }
    }

    /// Frees every allocation of a destroyed context.
    pub fn release_context_allocs(&mut self, ctx_id: u64) {
        let bases: Vec<u64> = self
            .allocs
            .values()
            .filter(|a| a.ctx.id == ctx_id)
            .map(|a| a.base)
            .collect();
        for base in bases {
            if let Some(a) = self.unlink_alloc(base) {
                self.reclaim(a, true);
            }
        }
    }

    /// Allocates `size` bytes of simulated device (or managed) memory in context `ctx`.
    pub fn alloc_device(&mut self, ctx: CtxRef, size: u64, kind: AllocKind) -> Result<u64, Fault> {
        self.charge_device(ctx.device, size)?;
        let (base, map_len) = match usize::try_from(size)
            .map_err(|_| Fault::OutOfMemory)
            .and_then(hostmem::map_anon)
        {
            Ok(m) => m,
            Err(f) => {
                self.device_mut(ctx.device)?.mem.uncharge(size);
                return Err(f);
            }
        };
        let buffer_id = self.new_id();
        self.insert_alloc(Alloc {
            base,
            size,
            map_len,
            kind,
            ctx,
            buffer_id,
            ipc_fd: None,
        });
        Ok(base)
    }
}
