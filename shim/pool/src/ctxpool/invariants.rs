//! The pool's invariant checker, for the tests: every arena's bookkeeping, and the blocks lent
//! to thread caches.

use super::{CtxPool, lock};
use crate::device::Device;
use crate::tcache::Packed;

impl<D: Device, R: Packed> CtxPool<D, R> {
    /// Checks every arena's bookkeeping; for the tests.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        for (i, a) in self.arenas.iter().enumerate() {
            let g = lock(a);
            g.sub
                .check_invariants()
                .map_err(|e| format!("arena {i}: {e}"))?;
            if g.pending.len() != g.pending_set.len() {
                return Err(format!("arena {i}: pending list and set disagree"));
            }
            let mut bytes = 0;
            let mut last_mark = 0;
            for &(mark, addr, size) in &g.pending {
                if !g.pending_set.contains(&addr) || mark < last_mark {
                    return Err(format!("arena {i}: pending {addr:#x} out of place"));
                }
                if g.sub.find(addr).map(|b| (b.addr, b.size)) != Some((addr, size)) {
                    return Err(format!("arena {i}: pending {addr:#x} is not a live grant"));
                }
                if g.records.contains_key(&addr) {
                    return Err(format!("arena {i}: pending {addr:#x} kept its record"));
                }
                last_mark = mark;
                bytes += size;
            }
            if bytes != g.pending_bytes {
                return Err(format!(
                    "arena {i}: pending bytes {} != {bytes}",
                    g.pending_bytes
                ));
            }
            for addr in g.records.keys() {
                if g.sub.find(*addr).map(|b| b.addr) != Some(*addr) {
                    return Err(format!("arena {i}: record of {addr:#x} without its block"));
                }
                if g.lent.contains(addr) {
                    return Err(format!("arena {i}: lent {addr:#x} kept its record"));
                }
            }
            for addr in &g.lent {
                if g.sub.find(*addr).map(|b| b.addr) != Some(*addr) {
                    return Err(format!("arena {i}: lent {addr:#x} is not a live grant"));
                }
                if g.pending_set.contains(addr) {
                    return Err(format!("arena {i}: lent {addr:#x} is pending"));
                }
            }
        }
        // Every block lent is in one slot of a registered cache, and every occupied slot holds
        // a lent block of its arena.
        let lent: usize = self.arenas.iter().map(|a| lock(a).lent.len()).sum();
        let mut held = 0;
        for shared in self.registered() {
            for s in &shared.slots {
                let block = s
                    .read_live::<R>()
                    .map(|(_, b)| (b.addr, b.arena))
                    .or_else(|| (s.cached_bytes() > 0).then(|| (s.addr(), s.arena())));
                if let Some((addr, arena)) = block {
                    held += 1;
                    if !lock(&self.arenas[arena]).lent.contains(&addr) {
                        return Err(format!("cached {addr:#x} is not lent by arena {arena}"));
                    }
                }
            }
        }
        if held != lent {
            return Err(format!("{lent} blocks lent, {held} in thread caches"));
        }
        Ok(())
    }
}
