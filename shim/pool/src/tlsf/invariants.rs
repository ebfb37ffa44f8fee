//! The sub-allocator's invariant checker, for the tests: every invariant listed on
//! [`SubAllocator`], walked over the whole structure.

use super::{Chunk, ChunkKind, FL_COUNT, FreeLists, NIL, SL_COUNT, State, SubAllocator, mapping};

impl SubAllocator {
    /// Checks every invariant listed on [`SubAllocator`] and returns the first violation found.
    /// Test builds only (the pool's own stress tests may call it too).
    ///
    /// # Time Complexity
    /// O(N + C·S/64): every node, every free list, every chunk's start bitset.
    pub fn check_invariants(&self) -> Result<(), String> {
        let granule = self.min_align();
        let mut seen = vec![false; self.nodes.len()];
        let mut counted = Counted::default();
        let mut prev_end: Option<u64> = None;
        let mut ids = std::collections::BTreeSet::new();
        let in_use = self.chunks.iter().filter(|c| c.is_some()).count();
        if in_use != self.by_base.len() {
            return Err(format!(
                "{in_use} chunk slots in use, {} in by_base",
                self.by_base.len()
            ));
        }
        for &(base, slot) in &self.by_base {
            let Some(c) = self.chunks.get(slot as usize).and_then(|c| c.as_ref()) else {
                return Err(format!("by_base names empty slot {slot}"));
            };
            if c.base != base {
                return Err(format!(
                    "by_base base {base:#x} != chunk base {:#x}",
                    c.base
                ));
            }
            if !ids.insert(c.id) || c.id.0 >= self.next_id {
                return Err(format!(
                    "chunk id {:?} duplicated or not yet handed out",
                    c.id
                ));
            }
            if prev_end.is_some_and(|e| base < e) {
                return Err(format!(
                    "chunk at {base:#x} overlaps its predecessor or is out of order"
                ));
            }
            prev_end = Some(base + c.size);
            if c.starts.len() != c.size >> self.shift {
                return Err("start bitset has the wrong length".into());
            }
            c.starts.check()?;
            self.check_chunk(slot, c, granule, &mut seen, &mut counted)?;
        }
        let mut listed = 0u64;
        for (k, lists) in self.lists.iter().enumerate() {
            listed += self.check_lists(k, lists, counted.free)?;
        }
        if listed != counted.free {
            return Err(format!(
                "{listed} blocks on free lists, {} free blocks in chunks",
                counted.free
            ));
        }
        let mut i = self.vacant;
        while i != NIL {
            let Some(b) = self.nodes.get(i as usize) else {
                return Err(format!("vacant node {i} out of range"));
            };
            if b.state != State::Vacant || std::mem::replace(&mut seen[i as usize], true) {
                return Err(format!(
                    "vacant stack holds node {i} twice, or a node in use"
                ));
            }
            i = b.next_free;
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(format!("node {i} is leaked (in no chunk, not vacant)"));
        }
        self.live.check()?;
        let counters = [
            ("reserved", self.reserved, counted.reserved),
            ("live_bytes", self.live_bytes, counted.live_bytes),
            ("live_count", self.live_count, counted.live),
            ("live map", self.live.len() as u64, counted.live),
            ("free_count", self.free_count, counted.free),
            (
                "free bytes",
                self.reserved.wrapping_sub(self.live_bytes),
                counted.free_bytes,
            ),
            ("idle_chunks", self.idle_chunks, counted.idle_chunks),
            ("idle_bytes", self.idle_bytes, counted.idle_bytes),
            (
                "dedicated_chunks",
                self.dedicated_chunks,
                counted.dedicated_chunks,
            ),
            (
                "dedicated_bytes",
                self.dedicated_bytes,
                counted.dedicated_bytes,
            ),
            (
                "dedicated_idle_bytes",
                self.dedicated_idle_bytes,
                counted.dedicated_idle_bytes,
            ),
        ];
        for (name, kept, found) in counters {
            if kept != found {
                return Err(format!("counter {name} is {kept}, the blocks say {found}"));
            }
        }
        Ok(())
    }

    /// Walks one chunk's blocks (invariants 2–5 for them).
    fn check_chunk(
        &self,
        slot: u32,
        c: &Chunk,
        granule: u64,
        seen: &mut [bool],
        counted: &mut Counted,
    ) -> Result<(), String> {
        let (mut at, mut prev, mut i) = (c.base, NIL, c.head);
        let (mut live, mut blocks, mut prev_free) = (0u64, 0u64, false);
        while i != NIL {
            let Some(b) = self.nodes.get(i as usize) else {
                return Err(format!("node {i} out of range"));
            };
            if std::mem::replace(&mut seen[i as usize], true) {
                return Err(format!("node {i} reached twice"));
            }
            if b.chunk != slot || b.kind != c.kind || b.prev_phys != prev || b.addr != at {
                return Err(format!(
                    "node {i} ({b:?}) breaks the tiling of chunk {:?} at {at:#x}",
                    c.id
                ));
            }
            if b.size == 0 || b.size % granule != 0 || b.addr % granule != 0 {
                return Err(format!("node {i} has a bad size or address: {b:?}"));
            }
            let g = (b.addr - c.base) >> self.shift;
            match b.state {
                State::Free => {
                    if prev_free {
                        return Err(format!("node {i} and its lower neighbour are both free"));
                    }
                    if c.starts.contains(g) {
                        return Err(format!("free node {i} is marked as a live start"));
                    }
                    counted.free += 1;
                    counted.free_bytes += b.size;
                }
                State::Live => {
                    if self.live.get(b.addr) != Some(i) {
                        return Err(format!("live node {i} missing from the live map"));
                    }
                    if !c.starts.contains(g) {
                        return Err(format!("live node {i} missing from the start bitset"));
                    }
                    live += 1;
                    counted.live_bytes += b.size;
                }
                State::Vacant => {
                    return Err(format!("vacant node {i} linked into chunk {:?}", c.id));
                }
            }
            prev_free = b.state == State::Free;
            at = b.addr + b.size;
            prev = i;
            i = b.next_phys;
            blocks += 1;
        }
        if at != c.base + c.size {
            return Err(format!(
                "blocks of chunk {:?} end at {at:#x}, not at its end",
                c.id
            ));
        }
        if live != c.live_blocks || c.starts.count() != live {
            return Err(format!(
                "chunk {:?} counts {} live blocks, holds {live}",
                c.id, c.live_blocks
            ));
        }
        if c.kind == ChunkKind::Dedicated && blocks != 1 {
            return Err(format!("dedicated chunk {:?} holds {blocks} blocks", c.id));
        }
        counted.reserved += c.size;
        counted.live += live;
        if live == 0 {
            counted.idle_chunks += 1;
            counted.idle_bytes += c.size;
        }
        if c.kind == ChunkKind::Dedicated {
            counted.dedicated_chunks += 1;
            counted.dedicated_bytes += c.size;
            if live == 0 {
                counted.dedicated_idle_bytes += c.size;
            }
        }
        Ok(())
    }

    /// Checks one family of free lists; returns how many blocks it holds.
    fn check_lists(&self, kind: usize, lists: &FreeLists, free_blocks: u64) -> Result<u64, String> {
        let mut listed = 0u64;
        for fl in 0..FL_COUNT {
            if (lists.fl_bitmap >> fl & 1 == 1) != (lists.sl_bitmap[fl] != 0) {
                return Err(format!(
                    "lists {kind}: fl_bitmap bit {fl} disagrees with sl_bitmap"
                ));
            }
            for sl in 0..SL_COUNT {
                let head = lists.heads[fl][sl];
                if (lists.sl_bitmap[fl] >> sl & 1 == 1) != (head != NIL) {
                    return Err(format!("lists {kind}: sl_bitmap[{fl}] bit {sl} disagrees"));
                }
                let (mut i, mut prev) = (head, NIL);
                while i != NIL {
                    let Some(b) = self.nodes.get(i as usize) else {
                        return Err(format!("lists {kind}: node {i} out of range"));
                    };
                    if b.state != State::Free || b.prev_free != prev || b.kind as usize != kind {
                        return Err(format!(
                            "lists {kind} ({fl},{sl}) hold a bad node {i}: {b:?}"
                        ));
                    }
                    if mapping(b.size >> self.shift) != (fl, sl) {
                        return Err(format!("node {i} of size {} is on the wrong list", b.size));
                    }
                    listed += 1;
                    if listed > free_blocks {
                        return Err("free lists hold more nodes than there are free blocks".into());
                    }
                    prev = i;
                    i = b.next_free;
                }
            }
        }
        Ok(listed)
    }
}

/// What `SubAllocator::check_invariants` counts while walking the chunks.
#[derive(Default)]
struct Counted {
    reserved: u64,
    live: u64,
    live_bytes: u64,
    free: u64,
    free_bytes: u64,
    idle_chunks: u64,
    idle_bytes: u64,
    dedicated_chunks: u64,
    dedicated_bytes: u64,
    dedicated_idle_bytes: u64,
}
