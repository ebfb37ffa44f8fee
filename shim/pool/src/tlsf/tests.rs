//! Tests of the sub-allocator: fixed scenarios, model-based property tests (every step checked
//! against a shadow model and [`SubAllocator::check_invariants`]), and an ignored timing test.
//!
//! The shadow model knows nothing of size classes or free lists: it keeps the chunks and the live
//! blocks in ordered maps and derives the free space as the gaps between live blocks. Full
//! coalescing then means the allocator's free blocks are exactly those gaps.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

const G: u64 = 256;
const MIB: u64 = 1 << 20;

fn ok(a: &SubAllocator) {
    if let Err(e) = a.check_invariants() {
        panic!("invariant violated: {e}");
    }
}

#[test]
fn alloc_free_roundtrip_restores_one_block() {
    let mut a = SubAllocator::new(G);
    let c = a.add_chunk(0x1000_0000, 4 * MIB).unwrap();
    let g = a.alloc(1, 0).unwrap();
    assert_eq!(
        g,
        Grant {
            addr: 0x1000_0000,
            size: G,
            chunk: c
        }
    );
    let h = a.alloc(1000, 0).unwrap();
    assert_eq!((h.addr, h.size), (0x1000_0000 + G, 1024));
    ok(&a);
    assert_eq!(a.stats().free_blocks, 1);
    let f = a.free(g.addr).unwrap();
    assert_eq!(
        f,
        Freed {
            addr: g.addr,
            size: G,
            chunk: c,
            chunk_idle: false
        }
    );
    ok(&a);
    assert_eq!(a.stats().free_blocks, 2);
    assert!(a.free(h.addr).unwrap().chunk_idle);
    ok(&a);
    let s = a.stats();
    assert_eq!(
        (
            s.free_blocks,
            s.largest_free_block,
            s.live_bytes,
            s.idle_chunks
        ),
        (1, 4 * MIB, 0, 1)
    );
    let idle: Vec<_> = a.idle_chunks().collect();
    let info = ChunkInfo {
        id: c,
        base: 0x1000_0000,
        size: 4 * MIB,
        kind: ChunkKind::Shared,
        live_blocks: 0,
        last_request: 0,
    };
    assert_eq!(idle, vec![info]);
    assert_eq!(a.chunk(c), Some(info));
}

#[test]
fn granule_is_normalized() {
    assert_eq!(SubAllocator::new(0).min_align(), 1);
    assert_eq!(SubAllocator::new(200).min_align(), 256);
    assert_eq!(SubAllocator::new(u64::MAX).min_align(), MAX_MIN_ALIGN);
}

#[test]
fn request_errors() {
    let mut a = SubAllocator::new(G);
    assert_eq!(a.alloc(0, 0), Err(AllocError::ZeroSize));
    assert_eq!(a.alloc(1, 3), Err(AllocError::BadAlign));
    assert_eq!(a.alloc(u64::MAX, 0), Err(AllocError::TooLarge));
    assert_eq!(a.alloc(1, 1 << 63), Err(AllocError::NoFit));
    assert_eq!(a.alloc(1, 0), Err(AllocError::NoFit));
    assert_eq!(a.alloc_dedicated(0, 0, u64::MAX), Err(AllocError::ZeroSize));
    assert_eq!(
        a.alloc_dedicated(1, 12, u64::MAX),
        Err(AllocError::BadAlign)
    );
    assert_eq!(
        a.alloc_dedicated(u64::MAX, 0, u64::MAX),
        Err(AllocError::TooLarge)
    );
    assert_eq!(a.alloc_dedicated(1, 0, u64::MAX), Err(AllocError::NoFit));
    a.add_chunk(0, MIB).unwrap();
    assert_eq!(a.alloc(MIB + 1, 0), Err(AllocError::NoFit));
    assert_eq!(a.alloc_dedicated(1, 0, u64::MAX), Err(AllocError::NoFit));
    assert_eq!(a.alloc(MIB, 0).unwrap().size, MIB);
    assert_eq!(a.footprint(0, 0), None);
    assert_eq!(a.footprint(1, 3), None);
    assert_eq!(a.footprint(1, 4096), Some(4096));
    ok(&a);
}

#[test]
fn a_dedicated_chunk_remembers_its_last_request() {
    let mut a = SubAllocator::new(G);
    let c = a.add_dedicated_chunk(0, 4 * MIB).unwrap();
    assert_eq!(a.chunk(c).unwrap().last_request, 0);
    let g = a.alloc_dedicated(4 * MIB - 5, 0, u64::MAX).unwrap();
    assert_eq!(a.chunk(c).unwrap().last_request, 4 * MIB - 5);
    a.free(g.addr).unwrap();
    // Still known once idle, which is when the growth policy asks.
    assert_eq!(a.idle_chunks().next().unwrap().last_request, 4 * MIB - 5);
    let g = a.alloc_dedicated(3 * MIB + 1, 0, u64::MAX).unwrap();
    assert_eq!(a.chunk(c).unwrap().last_request, 3 * MIB + 1);
    a.free(g.addr).unwrap();
    let s = a.add_chunk(8 * MIB, 2 * MIB).unwrap();
    a.alloc(100, 0).unwrap();
    assert_eq!(
        a.chunk(s).unwrap().last_request,
        0,
        "shared chunks serve many"
    );
    ok(&a);
}

#[test]
fn chunk_errors() {
    let mut a = SubAllocator::new(G);
    assert_eq!(a.add_chunk(0, 0), Err(AddChunkError::Empty));
    assert_eq!(a.add_chunk(1, G), Err(AddChunkError::Misaligned));
    assert_eq!(
        a.add_dedicated_chunk(0, G + 1),
        Err(AddChunkError::Misaligned)
    );
    assert_eq!(
        a.add_chunk(u64::MAX - G + 1, G),
        Err(AddChunkError::Overflow)
    );
    let c0 = a.add_chunk(10 * G, 10 * G).unwrap();
    assert_eq!(
        a.add_chunk(19 * G, 2 * G),
        Err(AddChunkError::Overlap { with: c0 })
    );
    assert_eq!(
        a.add_dedicated_chunk(5 * G, 6 * G),
        Err(AddChunkError::Overlap { with: c0 })
    );
    assert_eq!(
        a.add_chunk(0, 100 * G),
        Err(AddChunkError::Overlap { with: c0 })
    );
    // Touching is fine, and neighbouring chunks never merge.
    let c1 = a.add_chunk(20 * G, 10 * G).unwrap();
    let c2 = a.add_chunk(0, 10 * G).unwrap();
    ok(&a);
    assert_eq!(a.stats().largest_free_block, 10 * G);
    assert_eq!(a.alloc(11 * G, 0), Err(AllocError::NoFit));
    let g = a.alloc(G, 0).unwrap();
    assert_eq!(
        a.remove_chunk(g.chunk),
        Err(RemoveError::Busy { live_blocks: 1 })
    );
    a.free(g.addr).unwrap();
    assert_eq!(a.remove_chunk(c1), Ok((20 * G, 10 * G)));
    assert_eq!(a.remove_chunk(c1), Err(RemoveError::Unknown));
    assert_eq!(a.chunk(c1), None);
    // Ids are not reused.
    let c3 = a.add_chunk(20 * G, 10 * G).unwrap();
    assert!(c3 > c2 && c3 != c1);
    ok(&a);
}

#[test]
fn free_errors_leave_state_alone() {
    let mut a = SubAllocator::new(G);
    a.add_chunk(MIB, MIB).unwrap();
    let g = a.alloc(3 * G, 0).unwrap();
    let before = a.stats();
    assert_eq!(a.free(0), Err(FreeError::NotInPool));
    assert_eq!(a.free(2 * MIB), Err(FreeError::NotInPool));
    assert_eq!(a.free(u64::MAX), Err(FreeError::NotInPool));
    assert_eq!(
        a.free(g.addr + 1),
        Err(FreeError::Interior { start: g.addr })
    );
    assert_eq!(a.free(g.addr + 3 * G), Err(FreeError::NotLive));
    assert_eq!(a.stats(), before);
    a.free(g.addr).unwrap();
    let after = a.stats();
    assert_eq!(a.free(g.addr), Err(FreeError::NotLive));
    assert_eq!(a.stats(), after);
    ok(&a);
}

#[test]
fn find_interior_pointers() {
    let mut a = SubAllocator::new(G);
    a.add_chunk(64 * MIB, 64 * MIB).unwrap();
    let x = a.alloc(5000, 0).unwrap();
    let y = a.alloc(MIB, 0).unwrap();
    let z = a.alloc(1, 0).unwrap();
    a.free(y.addr).unwrap();
    assert_eq!(a.find(x.addr), Some(x));
    assert_eq!(a.find(x.addr + 4999), Some(x));
    assert_eq!(a.find(x.addr + x.size - 1), Some(x));
    assert_eq!(a.find(y.addr), None);
    assert_eq!(a.find(y.addr + 17), None);
    assert_eq!(a.find(z.addr + 255), Some(z));
    assert_eq!(a.find(z.addr + 256), None);
    assert_eq!(a.find(0), None);
    assert_eq!(a.find(u64::MAX), None);
}

#[test]
fn large_alignment_pads_and_coalesces_back() {
    let mut a = SubAllocator::new(G);
    a.add_chunk(G, 8 * MIB).unwrap(); // base only granule-aligned
    let g = a.alloc(100, 2 * MIB).unwrap();
    assert_eq!(g.addr % (2 * MIB), 0);
    assert_eq!(g.size, G);
    ok(&a);
    assert_eq!(a.stats().free_blocks, 2); // the padding below and the tail above
    a.free(g.addr).unwrap();
    ok(&a);
    assert_eq!(a.stats().free_blocks, 1);
}

#[test]
fn footprint_chunk_always_serves_its_request() {
    // Exact-size chunks whose size is not a class boundary: good fit alone would miss them.
    for (i, size) in [33 * G + 1, 1000 * G + 7, 123_457 * G, 64 * MIB + 3]
        .into_iter()
        .enumerate()
    {
        for align in [0, 512, 4096, 1 << 21] {
            let mut a = SubAllocator::new(G);
            // Something already in the same class, too small to serve the request.
            let base = (i as u64 + 1) << 40;
            a.add_chunk(base, round_up(size, G).unwrap() - G).unwrap();
            let fp = a.footprint(size, align).unwrap();
            a.add_chunk(base + (1 << 38) + G, fp).unwrap();
            let g = a
                .alloc(size, align)
                .unwrap_or_else(|e| panic!("size {size} align {align}: {e}"));
            assert_eq!(g.addr % align.max(G), 0);
            ok(&a);
        }
    }
}

#[test]
fn dedicated_chunks_are_granted_whole_and_kept_apart() {
    let mut a = SubAllocator::new(G);
    let shared = a.add_chunk(1 << 30, 64 * MIB).unwrap();
    let d = a.add_dedicated_chunk(1 << 32, 10 * MIB).unwrap();
    ok(&a);
    // Shared allocs never touch the dedicated chunk, even when it alone would fit.
    assert_eq!(a.alloc(65 * MIB, 0), Err(AllocError::NoFit));
    let s = a.alloc(MIB, 0).unwrap();
    assert_eq!(s.chunk, shared);
    // Too much waste for the caller's bound: refused.
    assert_eq!(
        a.alloc_dedicated(5 * MIB, 0, 9 * MIB),
        Err(AllocError::NoFit)
    );
    // Too small: refused.
    assert_eq!(
        a.alloc_dedicated(10 * MIB + 1, 0, u64::MAX),
        Err(AllocError::NoFit)
    );
    let g = a.alloc_dedicated(9 * MIB + 5, 0, 11 * MIB).unwrap();
    assert_eq!(
        g,
        Grant {
            addr: 1 << 32,
            size: 10 * MIB,
            chunk: d
        }
    );
    assert_eq!(a.find((1 << 32) + 10 * MIB - 1), Some(g));
    assert_eq!(
        a.alloc_dedicated(9 * MIB, 0, u64::MAX),
        Err(AllocError::NoFit)
    );
    let st = a.stats();
    assert_eq!(
        (
            st.dedicated_chunks,
            st.dedicated_bytes,
            st.dedicated_idle_bytes
        ),
        (1, 10 * MIB, 0)
    );
    assert_eq!(a.remove_chunk(d), Err(RemoveError::Busy { live_blocks: 1 }));
    assert!(a.free(g.addr).unwrap().chunk_idle);
    assert_eq!(a.stats().dedicated_idle_bytes, 10 * MIB);
    ok(&a);
    // Alignment: the whole chunk must start aligned.
    assert_eq!(
        a.alloc_dedicated(MIB, 1 << 40, u64::MAX),
        Err(AllocError::NoFit)
    );
    assert_eq!(a.alloc_dedicated(MIB, 1 << 32, u64::MAX).unwrap().chunk, d);
    a.free(1 << 32).unwrap();
    assert_eq!(a.remove_chunk(d), Ok((1 << 32, 10 * MIB)));
    ok(&a);
    assert_eq!(a.stats().dedicated_chunks, 0);
}

#[test]
fn dedicated_prefers_the_tightest_chunk() {
    let mut a = SubAllocator::new(G);
    // A bigger idle chunk in a higher class, and one of exactly the request in its own class.
    a.add_dedicated_chunk(1 << 32, 300 * MIB).unwrap();
    let exact = a.add_dedicated_chunk(1 << 33, 100 * MIB + 4 * G).unwrap();
    let g = a
        .alloc_dedicated(100 * MIB + 3 * G + 1, 0, 110 * MIB)
        .unwrap();
    assert_eq!(g.chunk, exact);
    ok(&a);
}

#[test]
fn node_store_is_recycled() {
    let mut a = SubAllocator::with_capacity(G, 64);
    a.add_chunk(0, 64 * MIB).unwrap();
    for _ in 0..10_000 {
        let x = a.alloc(4096, 0).unwrap();
        let y = a.alloc(G, 0).unwrap();
        a.free(x.addr).unwrap();
        a.free(y.addr).unwrap();
    }
    assert!(a.nodes.len() <= 4, "{} nodes", a.nodes.len());
    ok(&a);
}

// ---- model-based property tests -----------------------------------------------------------

/// Where the property tests put chunks: 16 slots of `granule << 16` bytes from 2^40 (chunks may
/// straddle slots and overlap: then they must be refused), and fresh far-apart slots from
/// 2^40 + 2^38 for the chunks a test needs to succeed.
const ARENA: u64 = 1 << 40;

#[derive(Debug, Clone)]
enum Op {
    /// Add a chunk at `slot` (possibly overlapping an existing one: then it must be refused).
    AddChunk {
        slot: u8,
        offset_granules: u16,
        granules: u32,
        dedicated: bool,
    },
    /// Add a shared chunk of exactly `footprint(size, align)` at a fresh, granule-aligned base,
    /// then allocate that request: it must succeed.
    AddChunkFor {
        size: u64,
        align_log: u8,
    },
    /// Add a dedicated chunk of exactly the rounded request, then allocate it: it must succeed.
    AddDedicatedFor {
        size: u64,
    },
    Alloc {
        size: u64,
        align_log: u8,
    },
    /// `alloc_dedicated` with `max_block` = rounded size + `slack` granules (`u16::MAX`: no bound).
    AllocDedicated {
        size: u64,
        align_log: u8,
        slack: u16,
    },
    /// Free the `pick`-th live block.
    Free {
        pick: usize,
    },
    /// Free something that must be refused: a freed address, an interior pointer, an address
    /// outside every chunk.
    BadFree {
        pick: usize,
        kind: u8,
        salt: u64,
    },
    /// Remove the `pick`-th chunk (idle or not), or an id never handed out.
    Remove {
        pick: usize,
        unknown: bool,
    },
    /// Look up an address in or near a chunk.
    Find {
        pick: usize,
        offset: u64,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let size = prop_oneof![
        4 => 1u64..=4 * G,
        4 => 1u64..=64 * G,
        2 => 1u64..=4096 * G,
        1 => Just(0u64),
    ];
    let align_log = prop_oneof![6 => Just(0u8), 2 => 0u8..=13, 1 => Just(20u8), 1 => Just(255u8)];
    let chunk_granules = prop_oneof![1u32..64, 1u32..8192, Just(65536)];
    prop_oneof![
        3 => (0u8..16, 0u16..8, chunk_granules, prop::bool::weighted(0.3)).prop_map(
            |(slot, offset_granules, granules, dedicated)| Op::AddChunk {
                slot,
                offset_granules,
                granules,
                dedicated
            }
        ),
        1 => (1u64..=8192 * G, 0u8..=16)
            .prop_map(|(size, align_log)| Op::AddChunkFor { size, align_log }),
        1 => (1u64..=8192 * G).prop_map(|size| Op::AddDedicatedFor { size }),
        12 => (size.clone(), align_log.clone())
            .prop_map(|(size, align_log)| Op::Alloc { size, align_log }),
        4 => (size, align_log, prop_oneof![Just(0u16), 0u16..64, Just(u16::MAX)])
            .prop_map(|(size, align_log, slack)| Op::AllocDedicated { size, align_log, slack }),
        8 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => (any::<usize>(), 0u8..3, any::<u64>())
            .prop_map(|(pick, kind, salt)| Op::BadFree { pick, kind, salt }),
        2 => (any::<usize>(), prop::bool::weighted(0.1))
            .prop_map(|(pick, unknown)| Op::Remove { pick, unknown }),
        3 => (any::<usize>(), any::<u64>()).prop_map(|(pick, offset)| Op::Find { pick, offset }),
    ]
}

/// `align_log` 255 encodes a non-power-of-two alignment.
fn align_of(align_log: u8) -> u64 {
    if align_log == 255 {
        3 * 1024
    } else {
        1u64 << align_log
    }
}

/// The shadow model: chunks and live blocks in ordered maps, nothing else.
#[derive(Default)]
struct Model {
    granule: u64,
    /// base → (id, size, kind)
    chunks: BTreeMap<u64, (ChunkId, u64, ChunkKind)>,
    /// addr → (size, chunk)
    live: BTreeMap<u64, (u64, ChunkId)>,
    /// Addresses freed and not granted again since.
    freed: Vec<u64>,
    next_fresh_slot: u64,
}

impl Model {
    fn chunk_at(&self, addr: u64) -> Option<(u64, ChunkId, u64, ChunkKind)> {
        let (&base, &(id, size, kind)) = self.chunks.range(..=addr).next_back()?;
        (addr < base + size).then_some((base, id, size, kind))
    }
    fn live_at(&self, addr: u64) -> Option<Grant> {
        let (&a, &(size, chunk)) = self.live.range(..=addr).next_back()?;
        (addr < a + size).then_some(Grant {
            addr: a,
            size,
            chunk,
        })
    }
    fn live_in(&self, base: u64, size: u64) -> u64 {
        self.live.range(base..base + size).count() as u64
    }
    fn fresh_base(&mut self) -> u64 {
        self.next_fresh_slot += 1;
        ARENA + (1 << 38) + self.next_fresh_slot * (1 << 32) + self.granule
    }
    /// The maximal free ranges (gaps between live blocks), as (size, kind), chunk by chunk.
    fn gaps(&self) -> Vec<(u64, ChunkKind)> {
        let mut gaps = Vec::new();
        for (&base, &(_, size, kind)) in &self.chunks {
            let mut at = base;
            for (&a, &(s, _)) in self.live.range(base..base + size) {
                if a > at {
                    gaps.push((a - at, kind));
                }
                at = a + s;
            }
            if base + size > at {
                gaps.push((base + size - at, kind));
            }
        }
        gaps
    }
    /// Checks a grant against the model; returns the kind of its chunk.
    fn grant_ok(&self, g: &Grant, size: u64, align: u64) -> Result<ChunkKind, TestCaseError> {
        let align = align.max(self.granule);
        let rounded = size.div_ceil(self.granule) * self.granule;
        prop_assert_eq!(g.addr % align, 0, "grant {:?} not aligned to {}", g, align);
        let Some((base, id, csize, kind)) = self.chunk_at(g.addr) else {
            return Err(TestCaseError::fail("grant outside chunks"));
        };
        prop_assert_eq!(id, g.chunk);
        prop_assert!(
            g.addr + g.size <= base + csize,
            "grant {:?} runs past its chunk",
            g
        );
        match kind {
            ChunkKind::Shared => prop_assert_eq!(g.size, rounded),
            ChunkKind::Dedicated => {
                prop_assert!(
                    g.addr == base && g.size == csize && csize >= rounded,
                    "{:?}",
                    g
                );
            }
        }
        if let Some((&a, &(s, _))) = self.live.range(..g.addr + g.size).next_back() {
            prop_assert!(
                a + s <= g.addr,
                "grant {:?} overlaps live block at {:#x}+{}",
                g,
                a,
                s
            );
        }
        Ok(kind)
    }
    fn add_grant(&mut self, g: Grant) {
        self.live.insert(g.addr, (g.size, g.chunk));
        self.freed.retain(|&f| f != g.addr);
    }
}

fn check_against_model(a: &SubAllocator, m: &Model) -> Result<(), TestCaseError> {
    if let Err(e) = a.check_invariants() {
        return Err(TestCaseError::fail(format!("invariant: {e}")));
    }
    let s = a.stats();
    let reserved: u64 = m.chunks.values().map(|c| c.1).sum();
    let live: u64 = m.live.values().map(|l| l.0).sum();
    let gaps = m.gaps();
    let infos: Vec<ChunkInfo> = m
        .chunks
        .iter()
        .map(|(&base, &(id, size, kind))| ChunkInfo {
            id,
            base,
            size,
            kind,
            live_blocks: m.live_in(base, size),
            // Not modelled: checked on its own (a_dedicated_chunk_remembers_its_last_request).
            last_request: a.chunk(id).map_or(0, |c| c.last_request),
        })
        .collect();
    let idle: Vec<ChunkInfo> = infos
        .iter()
        .copied()
        .filter(|c| c.live_blocks == 0)
        .collect();
    let dedicated = || infos.iter().filter(|c| c.kind == ChunkKind::Dedicated);
    prop_assert_eq!(s.reserved_bytes, reserved);
    prop_assert_eq!(s.live_bytes, live);
    prop_assert_eq!(s.free_bytes, reserved - live);
    prop_assert_eq!(s.live_blocks, m.live.len() as u64);
    prop_assert_eq!(s.chunks, m.chunks.len() as u64);
    // Full coalescing, seen from outside: the free blocks are exactly the maximal gaps.
    prop_assert_eq!(s.free_blocks, gaps.len() as u64);
    prop_assert_eq!(
        s.largest_free_block,
        gaps.iter().map(|g| g.0).max().unwrap_or(0)
    );
    prop_assert_eq!(s.idle_chunks, idle.len() as u64);
    prop_assert_eq!(s.idle_bytes, idle.iter().map(|c| c.size).sum::<u64>());
    prop_assert_eq!(s.dedicated_chunks, dedicated().count() as u64);
    prop_assert_eq!(s.dedicated_bytes, dedicated().map(|c| c.size).sum::<u64>());
    prop_assert_eq!(
        s.dedicated_idle_bytes,
        dedicated()
            .filter(|c| c.live_blocks == 0)
            .map(|c| c.size)
            .sum::<u64>()
    );
    prop_assert_eq!(a.chunks().collect::<Vec<_>>(), infos);
    prop_assert_eq!(a.idle_chunks().collect::<Vec<_>>(), idle);
    Ok(())
}

fn run_ops(granule: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut a = SubAllocator::new(granule);
    let mut m = Model {
        granule,
        ..Model::default()
    };
    let slot_span = granule << 16;
    for op in ops {
        match op {
            Op::AddChunk {
                slot,
                offset_granules,
                granules,
                dedicated,
            } => {
                let base =
                    ARENA + u64::from(slot) * slot_span + u64::from(offset_granules) * granule;
                let size = u64::from(granules) * granule;
                let overlaps = m
                    .chunks
                    .iter()
                    .any(|(&b, c)| b < base + size && base < b + c.1);
                let r = if dedicated {
                    a.add_dedicated_chunk(base, size)
                } else {
                    a.add_chunk(base, size)
                };
                match r {
                    Ok(id) => {
                        prop_assert!(!overlaps, "overlapping chunk accepted");
                        prop_assert!(m.chunks.values().all(|c| c.0 < id), "chunk id reused");
                        let kind = if dedicated {
                            ChunkKind::Dedicated
                        } else {
                            ChunkKind::Shared
                        };
                        m.chunks.insert(base, (id, size, kind));
                    }
                    Err(AddChunkError::Overlap { with }) => {
                        prop_assert!(overlaps);
                        prop_assert!(m.chunks.values().any(|c| c.0 == with));
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("add_chunk refused: {e}"))),
                }
            }
            Op::AddChunkFor { size, align_log } => {
                let align = align_of(align_log);
                let fp = a.footprint(size, align).unwrap();
                let rounded = size.div_ceil(granule) * granule;
                prop_assert_eq!(fp, rounded + align.max(granule) - granule);
                let base = m.fresh_base();
                let id = a.add_chunk(base, fp).unwrap();
                m.chunks.insert(base, (id, fp, ChunkKind::Shared));
                let g = a.alloc(size, align).map_err(|e| {
                    TestCaseError::fail(format!(
                        "fresh footprint chunk refused {size}/{align}: {e}"
                    ))
                })?;
                prop_assert_eq!(m.grant_ok(&g, size, align)?, ChunkKind::Shared);
                m.add_grant(g);
            }
            Op::AddDedicatedFor { size } => {
                let rounded = size.div_ceil(granule) * granule;
                let base = m.fresh_base();
                let id = a.add_dedicated_chunk(base, rounded).unwrap();
                m.chunks.insert(base, (id, rounded, ChunkKind::Dedicated));
                let g = a.alloc_dedicated(size, 0, rounded).map_err(|e| {
                    TestCaseError::fail(format!("fresh dedicated chunk refused {size}: {e}"))
                })?;
                prop_assert_eq!(m.grant_ok(&g, size, 0)?, ChunkKind::Dedicated);
                m.add_grant(g);
            }
            Op::Alloc { size, align_log } => {
                let align = align_of(align_log);
                match a.alloc(size, align) {
                    Ok(g) => {
                        prop_assert!(size > 0 && align.is_power_of_two());
                        prop_assert_eq!(m.grant_ok(&g, size, align)?, ChunkKind::Shared);
                        m.add_grant(g);
                    }
                    Err(AllocError::ZeroSize) => prop_assert_eq!(size, 0),
                    Err(AllocError::BadAlign) => prop_assert!(size > 0 && !align.is_power_of_two()),
                    Err(AllocError::NoFit) => {
                        // Good fit is exact at class granularity: no shared gap may reach the
                        // class that every request of this size searches.
                        let want =
                            mapping_search(a.footprint(size, align).unwrap() / granule).unwrap();
                        for (gap, kind) in m.gaps() {
                            prop_assert!(
                                kind == ChunkKind::Dedicated || mapping(gap / granule) < want,
                                "NoFit with a gap of {} for {}/{}",
                                gap,
                                size,
                                align
                            );
                        }
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("alloc: {e}"))),
                }
            }
            Op::AllocDedicated {
                size,
                align_log,
                slack,
            } => {
                let align = align_of(align_log);
                let rounded = size.div_ceil(granule) * granule;
                let max_block = if slack == u16::MAX {
                    u64::MAX
                } else {
                    rounded.saturating_add(u64::from(slack) * granule)
                };
                match a.alloc_dedicated(size, align, max_block) {
                    Ok(g) => {
                        prop_assert!(size > 0 && align.is_power_of_two());
                        prop_assert_eq!(m.grant_ok(&g, size, align)?, ChunkKind::Dedicated);
                        prop_assert!(g.size <= max_block);
                        m.add_grant(g);
                    }
                    Err(AllocError::ZeroSize) => prop_assert_eq!(size, 0),
                    Err(AllocError::BadAlign) => prop_assert!(size > 0 && !align.is_power_of_two()),
                    Err(AllocError::NoFit) => {
                        if max_block == u64::MAX && align <= granule {
                            // Then good fit is exact at class granularity, as for shared chunks.
                            let want = mapping_search(rounded / granule).unwrap();
                            for (gap, kind) in m.gaps() {
                                prop_assert!(
                                    kind == ChunkKind::Shared || mapping(gap / granule) < want,
                                    "dedicated NoFit with an idle chunk of {} for {}",
                                    gap,
                                    size
                                );
                            }
                        }
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("alloc_dedicated: {e}"))),
                }
            }
            Op::Free { pick } => {
                if m.live.is_empty() {
                    continue;
                }
                let (&addr, &(size, chunk)) = m.live.iter().nth(pick % m.live.len()).unwrap();
                let f = a
                    .free(addr)
                    .map_err(|e| TestCaseError::fail(format!("free: {e}")))?;
                m.live.remove(&addr);
                let (base, _, csize, _) = m.chunk_at(addr).unwrap();
                let idle = m.live_in(base, csize) == 0;
                prop_assert_eq!(
                    f,
                    Freed {
                        addr,
                        size,
                        chunk,
                        chunk_idle: idle
                    }
                );
                m.freed.push(addr);
            }
            Op::BadFree { pick, kind, salt } => {
                let addr = match kind {
                    0 if !m.freed.is_empty() => m.freed[pick % m.freed.len()],
                    1 if !m.live.is_empty() => {
                        let (&a0, &(s, _)) = m.live.iter().nth(pick % m.live.len()).unwrap();
                        if s == 1 {
                            continue;
                        }
                        a0 + 1 + salt % (s - 1)
                    }
                    _ => salt,
                };
                if m.live.contains_key(&addr) {
                    continue; // a real block: not a bad free
                }
                let before = a.stats();
                let expect = match (m.chunk_at(addr), m.live_at(addr)) {
                    (None, _) => FreeError::NotInPool,
                    (Some(_), Some(g)) => FreeError::Interior { start: g.addr },
                    (Some(_), None) => FreeError::NotLive,
                };
                prop_assert_eq!(a.free(addr), Err(expect));
                prop_assert_eq!(a.stats(), before);
            }
            Op::Remove { pick, unknown } => {
                if unknown || m.chunks.is_empty() {
                    prop_assert_eq!(
                        a.remove_chunk(ChunkId(u32::MAX - 1)),
                        Err(RemoveError::Unknown)
                    );
                    continue;
                }
                let (&base, &(id, size, _)) = m.chunks.iter().nth(pick % m.chunks.len()).unwrap();
                let busy = m.live_in(base, size);
                let r = a.remove_chunk(id);
                if busy == 0 {
                    prop_assert_eq!(r, Ok((base, size)));
                    m.chunks.remove(&base);
                    m.freed.retain(|&f| f < base || f >= base + size);
                    prop_assert_eq!(a.remove_chunk(id), Err(RemoveError::Unknown));
                } else {
                    prop_assert_eq!(r, Err(RemoveError::Busy { live_blocks: busy }));
                }
            }
            Op::Find { pick, offset } => {
                let addr = if m.chunks.is_empty() {
                    offset
                } else {
                    let (&base, c) = m.chunks.iter().nth(pick % m.chunks.len()).unwrap();
                    // Mostly inside the chunk, sometimes just past either end.
                    base.wrapping_sub(granule)
                        .wrapping_add(offset % (c.1 + 2 * granule))
                };
                prop_assert_eq!(a.find(addr), m.live_at(addr), "find({:#x})", addr);
                prop_assert_eq!(
                    a.chunk_containing(addr).map(|c| c.id),
                    m.chunk_at(addr).map(|c| c.1)
                );
            }
        }
        check_against_model(&a, &m)?;
    }
    // Free everything: every chunk must end up idle, one block each, and removable.
    let addrs: Vec<u64> = m.live.keys().copied().collect();
    for addr in addrs {
        a.free(addr)
            .map_err(|e| TestCaseError::fail(format!("final free: {e}")))?;
        m.live.remove(&addr);
    }
    check_against_model(&a, &m)?;
    prop_assert_eq!(a.stats().free_blocks, m.chunks.len() as u64);
    let ids: Vec<ChunkId> = a.idle_chunks().map(|c| c.id).collect();
    prop_assert_eq!(ids.len(), m.chunks.len());
    for id in ids {
        prop_assert!(a.remove_chunk(id).is_ok());
    }
    prop_assert_eq!(a.stats(), Stats::default());
    if let Err(e) = a.check_invariants() {
        return Err(TestCaseError::fail(format!("invariant at the end: {e}")));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn model_granule_256(ops in prop::collection::vec(op_strategy(), 1..300)) {
        run_ops(256, ops)?;
    }

    #[test]
    fn model_granule_1(ops in prop::collection::vec(op_strategy(), 1..200)) {
        run_ops(1, ops)?;
    }

    #[test]
    fn model_granule_4096(ops in prop::collection::vec(op_strategy(), 1..200)) {
        run_ops(4096, ops)?;
    }

    /// Many operations on one chunk: deep churn, long free lists.
    #[test]
    fn churn_in_one_chunk(
        seq in prop::collection::vec((any::<bool>(), 1u64..=200_000, any::<usize>()), 1..2000)
    ) {
        let mut a = SubAllocator::new(G);
        a.add_chunk(ARENA, 64 * MIB).unwrap();
        let mut m = Model { granule: G, ..Model::default() };
        m.chunks.insert(ARENA, (ChunkId(0), 64 * MIB, ChunkKind::Shared));
        for (i, (alloc, size, pick)) in seq.into_iter().enumerate() {
            if alloc || m.live.is_empty() {
                if let Ok(g) = a.alloc(size, 0) {
                    m.grant_ok(&g, size, 0)?;
                    m.add_grant(g);
                }
            } else {
                let addr = *m.live.keys().nth(pick % m.live.len()).unwrap();
                a.free(addr).map_err(|e| TestCaseError::fail(e.to_string()))?;
                m.live.remove(&addr);
            }
            if i % 16 == 0 {
                check_against_model(&a, &m)?;
            }
        }
        check_against_model(&a, &m)?;
    }
}

// ---- timing ---------------------------------------------------------------------------------

/// ns per alloc+free pair, cycling through `sizes`, best of 5 runs of `pairs` pairs.
fn time_pairs(a: &mut SubAllocator, sizes: &[u64], pairs: usize, dedicated: bool) -> f64 {
    use std::hint::black_box;
    use std::time::Instant;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for i in 0..pairs {
            let size = black_box(sizes[i % sizes.len()]);
            let g = if dedicated {
                a.alloc_dedicated(size, 0, size + size / 8)
            } else {
                a.alloc(size, 0)
            };
            black_box(a.free(black_box(g.unwrap().addr)).unwrap());
        }
        best = best.min(t.elapsed().as_nanos() as f64 / pairs as f64);
    }
    best
}

/// Times 10^6 alloc+free pairs on a warm allocator, alone and beside 1,000 live blocks of mixed
/// sizes. Run with `cargo test -p cuguard-shim --release -- --ignored --nocapture pair_latency`.
#[test]
#[ignore = "timing; run in release mode"]
fn pair_latency() {
    // CUGUARD_POOL_BENCH_PAIRS shortens the run (e.g. under callgrind).
    let pairs: usize = std::env::var("CUGUARD_POOL_BENCH_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let cases: [(&str, &[u64], bool); 7] = [
        ("256 B", &[256], false),
        ("4 KiB", &[4096], false),
        ("1 MiB", &[MIB], false),
        ("64 MiB", &[64 * MIB], false),
        (
            "mixed",
            &[256, 4096, 100_000, MIB, 3 * MIB + 5, 64 * MIB, 777, 50_000],
            false,
        ),
        ("64 MiB dedicated", &[64 * MIB], true),
        (
            "mixed dedicated",
            &[8 * MIB, 64 * MIB, 200 * MIB, 20 * MIB + 5],
            true,
        ),
    ];
    let mut rng = 0x1234_5678_9abc_def0_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut worst_ratio: f64 = 0.0;
    for (name, sizes, dedicated) in cases {
        // A warm pool: a shared chunk of 4 GiB, and (for the dedicated cases) one idle dedicated
        // chunk per size.
        let warm = |a: &mut SubAllocator| {
            a.add_chunk(1 << 40, 4096 * MIB).unwrap();
            if dedicated {
                for (i, &s) in sizes.iter().enumerate() {
                    a.add_dedicated_chunk((2 + i as u64) << 40, s.next_multiple_of(2 * MIB))
                        .unwrap();
                }
            }
        };
        let mut single = SubAllocator::with_capacity(G, 4096);
        warm(&mut single);
        let alone = time_pairs(&mut single, sizes, pairs, dedicated);

        // 1,000 live blocks of mixed sizes (256 B .. 8 MiB, log-uniform) with holes between
        // them: allocate 2,000, free every other one.
        let mut busy = SubAllocator::with_capacity(G, 4096);
        warm(&mut busy);
        let mut grants = Vec::new();
        for _ in 0..2000 {
            let size = 256u64 << (next() % 15);
            grants.push(busy.alloc(size + next() % size, 0).unwrap());
        }
        for g in grants.iter().skip(1).step_by(2) {
            busy.free(g.addr).unwrap();
        }
        assert_eq!(busy.stats().live_blocks, 1000);
        let beside = time_pairs(&mut busy, sizes, pairs, dedicated);
        let ratio = beside / alone;
        worst_ratio = worst_ratio.max(ratio);
        println!(
            "pair {name:>16}: {alone:6.1} ns alone, {beside:6.1} ns beside 1,000 live blocks ({ratio:.2}x)"
        );
    }
    println!("worst ratio {worst_ratio:.2}");
}
