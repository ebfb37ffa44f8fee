//! Live device memory per stack: bytes and allocations for every (stack, device), kept up to date
//! on each allocation and free whose stack is known, so that what was live at a moment (a
//! device's peak, an out-of-memory, a timeline tick) can be read without walking the allocations.
//!
//! Counters are atomics in chunks of [`CHUNK`] stacks, made on first use per device (a device
//! that no stack allocated on costs nothing), in [`super::stack_cells`]; a change is counted
//! through [`super::counters::add`]. An allocation without a stack (capture off, or the stack
//! table full) is counted under no stack: [`NO_STACK`].
//!
//! Cost on the allocation path: a thread's changes to the stack it last used are kept in its own
//! delta ([`super::counters::stack_change`]) and folded into the shared atomics when it moves to
//! another stack or exits, so threads allocating from one stack do not meet on its cache line.
//! Reading ([`snapshot`]) walks the chunks made so far and adds the running threads' deltas.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;

use super::record::NONE;
use super::stack_cells::{CHUNK, DEVICES_, NO_STACK, slot};

/// What is live on `device` by stack now, most bytes first: `(stack or NONE, bytes,
/// allocations)`, stacks with nothing live left out.
pub fn snapshot(device: i32) -> Vec<(u32, u64, u64)> {
    let d = &DEVICES_[slot(device)];
    // (bytes, allocations) by stack index: the shared counters, plus the running threads'
    // deltas (whose chunk may not even exist yet).
    let mut live: BTreeMap<usize, (i64, i64)> = BTreeMap::new();
    for (k, c) in d.chunks.iter().enumerate() {
        let p = c.load(std::sync::atomic::Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: as in `stack_cells::cell`.
        let chunk = unsafe { &*p };
        for (j, cell) in chunk.iter().enumerate() {
            let bytes = cell.bytes.load(Relaxed);
            let allocations = cell.allocations.load(Relaxed);
            if bytes != 0 || allocations != 0 {
                live.insert(k * CHUNK + j, (bytes, allocations));
            }
        }
    }
    for (i, bytes, allocations) in super::threads::stack_deltas(slot(device)) {
        let e = live.entry(i).or_default();
        e.0 += bytes;
        e.1 += allocations;
    }
    let mut out: Vec<(u32, u64, u64)> = live
        .into_iter()
        .filter(|(_, (bytes, _))| *bytes > 0)
        .map(|(i, (bytes, allocations))| {
            let id = if i >= NO_STACK { NONE } else { i as u32 };
            (id, bytes as u64, allocations.max(0) as u64)
        })
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// In the child of a fork: nothing is live (the parent's allocations are not the child's).
pub fn reset_after_fork() {
    for d in &DEVICES_ {
        for c in &d.chunks {
            let p = c.load(std::sync::atomic::Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: as in `stack_cells::cell`; only this thread runs in the child.
                for cell in unsafe { &*p }.iter() {
                    cell.bytes.store(0, Relaxed);
                    cell.allocations.store(0, Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::counters::add;

    #[test]
    fn counts_by_stack_and_device() {
        // Device slot 15 (the last) is used by no other test of this process.
        add(3, 15, 100, 1);
        add(3, 15, 50, 1);
        add(NONE, 15, 7, 1);
        add(3, 14, 1, 1);
        add(3, 15, -50, -1);
        let s = snapshot(15);
        assert!(s.contains(&(3, 100, 1)), "{s:?}");
        assert!(s.contains(&(NONE, 7, 1)), "{s:?}");
        assert_eq!(s[0].0, 3, "most bytes first");
        add(3, 15, -100, -1);
        add(NONE, 15, -7, -1);
        assert!(snapshot(15).is_empty());
    }
}
