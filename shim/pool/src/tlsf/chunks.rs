//! Registering chunks with the sub-allocator, removing idle ones, and listing them.

use super::{
    AddChunkError, Block, Chunk, ChunkId, ChunkInfo, ChunkKind, MAX_NODES, NIL, PredSet,
    RemoveError, State, SubAllocator, mapping,
};

impl SubAllocator {
    /// Registers `[base, base + size)` as a shared chunk, one free block for
    /// [`alloc`](Self::alloc) to carve.
    ///
    /// `base` and `size` must be multiples of the granule (`cuMemAlloc` returns 512-byte aligned
    /// or better). The chunk costs `size / (8 × granule)` bytes of host memory for its start
    /// bitset (zeroed lazily by the OS), plus one node.
    ///
    /// # Time Complexity
    /// O(C) for the sorted chunk table, plus allocating the bitset.
    pub fn add_chunk(&mut self, base: u64, size: u64) -> Result<ChunkId, AddChunkError> {
        self.add(base, size, ChunkKind::Shared)
    }

    /// Registers `[base, base + size)` as a dedicated chunk, one free block that only
    /// [`alloc_dedicated`](Self::alloc_dedicated) grants, whole. Same rules and costs as
    /// [`add_chunk`](Self::add_chunk).
    ///
    /// # Time Complexity
    /// O(C), plus allocating the bitset.
    pub fn add_dedicated_chunk(&mut self, base: u64, size: u64) -> Result<ChunkId, AddChunkError> {
        self.add(base, size, ChunkKind::Dedicated)
    }

    fn add(&mut self, base: u64, size: u64, kind: ChunkKind) -> Result<ChunkId, AddChunkError> {
        if size == 0 {
            return Err(AddChunkError::Empty);
        }
        let mask = self.min_align() - 1;
        if base & mask != 0 || size & mask != 0 {
            return Err(AddChunkError::Misaligned);
        }
        let end = base.checked_add(size).ok_or(AddChunkError::Overflow)?;
        let pos = self.by_base.partition_point(|&(b, _)| b < base);
        if pos > 0 {
            let c = self.chunk_ref(self.by_base[pos - 1].1);
            if c.base + c.size > base {
                return Err(AddChunkError::Overlap { with: c.id });
            }
        }
        if let Some(&(next_base, slot)) = self.by_base.get(pos)
            && next_base < end
        {
            return Err(AddChunkError::Overlap {
                with: self.chunk_ref(slot).id,
            });
        }
        if self.next_id == u32::MAX || (self.vacant == NIL && self.nodes.len() >= MAX_NODES) {
            return Err(AddChunkError::Exhausted);
        }
        let starts = PredSet::new(size >> self.shift).ok_or(AddChunkError::NoMemory)?;
        let slot = match self.vacant_slots.pop() {
            Some(s) => s,
            None => {
                self.chunks.push(None);
                (self.chunks.len() - 1) as u32
            }
        };
        let head = self.new_node(Block {
            addr: base,
            size,
            prev_phys: NIL,
            next_phys: NIL,
            prev_free: NIL,
            next_free: NIL,
            chunk: slot,
            state: State::Free,
            kind,
        });
        let id = ChunkId(self.next_id);
        self.next_id += 1;
        self.chunks[slot as usize] = Some(Chunk {
            id,
            base,
            size,
            kind,
            head,
            live_blocks: 0,
            last_request: 0,
            starts,
        });
        self.by_base.insert(pos, (base, slot));
        self.link_free(head);
        self.reserved += size;
        self.idle_chunks += 1;
        self.idle_bytes += size;
        if kind == ChunkKind::Dedicated {
            self.dedicated_chunks += 1;
            self.dedicated_bytes += size;
            self.dedicated_idle_bytes += size;
        }
        Ok(id)
    }

    /// Removes an idle chunk and returns its `(base, size)`, for the owner to give back.
    ///
    /// # Time Complexity
    /// O(C).
    pub fn remove_chunk(&mut self, id: ChunkId) -> Result<(u64, u64), RemoveError> {
        let slot = self.slot_of(id).ok_or(RemoveError::Unknown)?;
        let chunk = self.chunk_ref(slot);
        if chunk.live_blocks != 0 {
            return Err(RemoveError::Busy {
                live_blocks: chunk.live_blocks,
            });
        }
        let (base, size, head, kind) = (chunk.base, chunk.size, chunk.head, chunk.kind);
        // Idle ⇒ one free block covering the chunk (invariant 3).
        debug_assert_eq!(self.nodes[head as usize].size, size);
        self.unlink_free(head, mapping(size >> self.shift));
        self.release_node(head);
        if let Ok(pos) = self.by_base.binary_search_by_key(&base, |&(b, _)| b) {
            self.by_base.remove(pos);
        }
        self.chunks[slot as usize] = None;
        self.vacant_slots.push(slot);
        self.reserved -= size;
        self.idle_chunks -= 1;
        self.idle_bytes -= size;
        if kind == ChunkKind::Dedicated {
            self.dedicated_chunks -= 1;
            self.dedicated_bytes -= size;
            self.dedicated_idle_bytes -= size;
        }
        Ok((base, size))
    }

    /// All chunks, in address order.
    ///
    /// # Time Complexity
    /// O(C) for the whole iteration.
    pub fn chunks(&self) -> impl Iterator<Item = ChunkInfo> + '_ {
        self.by_base.iter().map(|&(_, slot)| self.info(slot))
    }

    /// The chunks with no live block, in address order: those [`remove_chunk`](Self::remove_chunk)
    /// accepts.
    ///
    /// # Time Complexity
    /// O(C) for the whole iteration.
    pub fn idle_chunks(&self) -> impl Iterator<Item = ChunkInfo> + '_ {
        self.chunks().filter(|c| c.live_blocks == 0)
    }

    /// The chunk with this id.
    ///
    /// # Time Complexity
    /// O(C).
    #[cfg_attr(not(test), allow(dead_code))] // API for the pool's owner; used by tests so far
    pub fn chunk(&self, id: ChunkId) -> Option<ChunkInfo> {
        self.slot_of(id).map(|slot| self.info(slot))
    }

    /// The chunk that contains `addr`: whether a pointer belongs to the pool.
    ///
    /// # Time Complexity
    /// O(log C).
    pub fn chunk_containing(&self, addr: u64) -> Option<ChunkInfo> {
        self.slot_containing(addr).map(|slot| self.info(slot))
    }
}
