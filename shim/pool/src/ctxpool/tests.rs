//! Tests of a context's pool against the fake device (`fake.rs`): a few fixed scenarios of the
//! fence rule, then model-based property tests. Random sequences of allocations and frees from
//! several arenas, GPU work on the legacy, blocking and non-blocking streams that completes
//! later, stream creation and destruction, captures, failing chunks and synchronizations, frees
//! from another context and bogus frees, under random limits and keeps, are checked after every
//! step against a shadow model and the pool's own invariants; a run may end with the context
//! killed.
//!
//! The shadow model keeps the live blocks (address, granted size, arena, record) and, for every
//! free, its mark. What it checks:
//!
//! - a freed block is never handed out again (in whole or part) before every submission up to
//!   its free's mark has completed on the fake device (unless `unsafe_reuse`);
//! - live blocks are aligned, never overlap, and lie inside chunks the device handed to the same
//!   arena of this pool;
//! - reserved bytes never exceed the limit, and match the device's count;
//! - records come back with their blocks (free, find, records);
//! - the stats add up (reserved = live + pending + free; idle = free + pending; chunks);
//! - a refusal follows a refused chunk or the limit, and says which;
//! - the pool never records an event or synchronizes during a capture, never takes a chunk or
//!   fences outside its context, and frees only chunks it holds (the fake's violations);
//! - kill returns exactly the live records, and the pool refuses everything afterwards.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::fake::{FakeDevice, chunk_set};
use super::*;
use crate::device::LEGACY_STREAM;
use crate::tcache::{MAX_CACHED_BLOCKS, MAX_CACHED_BYTES};

const MIB: u64 = 1 << 20;
/// A block that shares its chunk (under the 2 MiB dedicated threshold), larger than a thread
/// cache takes.
const BLOCK: u64 = 3 * MIB / 2;

type Pool = CtxPool<FakeDevice, u64>;

fn new_pool(capacity: u64, settings: Settings) -> Box<Pool> {
    Box::new(CtxPool::new(FakeDevice::new(capacity), settings))
}

fn fake(pool: &Pool) -> std::cell::RefMut<'_, fake::State> {
    pool.device().s.borrow_mut()
}

// ---- fixed scenarios ---------------------------------------------------------------------

#[test]
fn a_block_freed_with_work_in_flight_waits_and_pressure_waits_for_a_fence() {
    let pool = new_pool(
        1 << 30,
        Settings {
            limit: Some(20 * MIB),
            ..Settings::default()
        },
    );
    let blocks: Vec<u64> = (0..12)
        .map(|i| pool.alloc(0, BLOCK, Some(i)).unwrap())
        .collect();
    assert_eq!(pool.stats().chunks, 1);
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free(0, blocks[0]), Some(Ok(Some(0))));
    // Pending: not findable, not freeable again, and not handed out while room remains.
    assert_eq!(pool.find(0, blocks[0]), None);
    assert_eq!(pool.free(0, blocks[0]), Some(Err(InvalidFree)));
    assert_eq!(pool.stats().pending_bytes, BLOCK);
    let small = pool.alloc(0, MIB, None).unwrap();
    assert!(small >= blocks[0] + BLOCK || small + MIB <= blocks[0]);
    // No room left under the limit: the pending block is worth a wait, for a fence (recorded
    // then) rather than the whole context.
    let again = pool.alloc(0, BLOCK, Some(9)).unwrap();
    assert_eq!(again, blocks[0]);
    assert!(fake(&pool).done_up_to(1));
    let s = pool.stats();
    assert_eq!(
        (s.fence_waits, s.syncs, s.pending_bytes, s.chunks),
        (1, 0, 0, 1)
    );
    assert_eq!(fake(&pool).event_waits, 1);
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn a_fence_that_cannot_be_waited_for_leaves_the_pool_to_synchronize() {
    let pool = new_pool(
        1 << 30,
        Settings {
            limit: Some(20 * MIB),
            ..Settings::default()
        },
    );
    let blocks: Vec<u64> = (0..13)
        .map(|i| pool.alloc(0, BLOCK, Some(i)).unwrap())
        .collect();
    fake(&pool).submit(LEGACY_STREAM);
    fake(&pool).wait_fails = true;
    assert_eq!(pool.free(0, blocks[0]), Some(Ok(Some(0))));
    // The room left under the limit (half a MiB) cannot serve it; the pending block can, once the
    // context is synchronized.
    assert_eq!(pool.alloc(0, BLOCK, Some(9)), Ok(blocks[0]));
    let s = pool.stats();
    assert_eq!((s.fence_waits, s.syncs, s.pending_bytes), (0, 1, 0));
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn during_a_capture_frees_wait_and_the_pool_neither_fences_nor_synchronizes() {
    let pool = new_pool(
        1 << 30,
        Settings {
            limit: Some(20 * MIB),
            ..Settings::default()
        },
    );
    let blocks: Vec<u64> = (0..13)
        .map(|_| pool.alloc(0, BLOCK, None).unwrap())
        .collect();
    fake(&pool).submit(LEGACY_STREAM);
    fake(&pool).captures = 1;
    for b in &blocks {
        assert_eq!(pool.free(0, *b), Some(Ok(None)));
    }
    let r = pool.alloc(0, BLOCK, None).unwrap_err();
    assert_eq!(r.reason, Reason::OutOfMemory);
    assert!(
        r.why
            .starts_with("CUGUARD_POOL_LIMIT of 20971520 bytes reached"),
        "{}",
        r.why
    );
    let kib = |b: u64| format!("{} KiB", b >> 10);
    assert_eq!(
        r.message(kib),
        "CUGUARD_POOL_LIMIT of 20480 KiB reached: 20480 KiB reserved, 1536 KiB more asked for"
    );
    let s = pool.stats();
    assert_eq!((s.fences, s.syncs, s.limit_refusals), (0, 0, 1));
    assert_eq!(s.pending_bytes, 13 * BLOCK);
    // The capture ends: the next request that needs them waits for a fence.
    fake(&pool).captures = 0;
    assert_eq!(pool.alloc(0, BLOCK, None), Ok(blocks[0]));
    assert_eq!((pool.stats().fence_waits, pool.stats().syncs), (1, 0));
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn work_on_a_destroyed_non_blocking_stream_holds_frees_back_until_it_completes() {
    let pool = new_pool(
        1 << 30,
        Settings {
            keep: 1 << 30,
            ..Settings::default()
        },
    );
    let blocks: Vec<u64> = (0..96)
        .map(|_| pool.alloc(0, 4096, None).unwrap())
        .collect();
    let s = fake(&pool).create_stream(true);
    fake(&pool).submit(s);
    fake(&pool).destroy_stream(s);
    // The 64th waiting free records a fence: on the legacy stream, plus the destroyed stream's
    // last event; the legacy stream is idle, the stream is not.
    for b in &blocks[..64] {
        assert_eq!(pool.free(0, *b), Some(Ok(None)));
    }
    let st = pool.stats();
    assert_eq!((st.fences, st.pending_bytes), (1, 64 * 4096));
    fake(&pool).progress(s, 1);
    // The next poll (at the 96th waiting free) sees the fence complete and releases them all.
    for b in &blocks[64..] {
        assert_eq!(pool.free(0, *b), Some(Ok(None)));
    }
    assert_eq!(pool.stats().pending_bytes, 0);
    assert_eq!(pool.stats().syncs, 0);
    assert_eq!(fake(&pool).live_events(), 0);
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn a_destroyed_streams_last_work_holds_back_the_frees_of_every_arena() {
    // Found by the model below: the arena that fenced first used to take the destroyed
    // stream's last event away, and the other arena's fence then completed without it.
    let pool = new_pool(
        1 << 30,
        Settings {
            keep: 1 << 30,
            ..Settings::default()
        },
    );
    let a = pool.alloc(0, 4096, None).unwrap();
    let b = pool.alloc(1, 4096, None).unwrap();
    let s = fake(&pool).create_stream(true);
    fake(&pool).submit(s);
    fake(&pool).destroy_stream(s);
    assert_eq!(pool.free(0, a), Some(Ok(None)));
    assert_eq!(pool.free(1, b), Some(Ok(None)));
    // A large request in each arena: its pending free cannot serve it, so each fences, then
    // grows a dedicated chunk.
    let big0 = pool.alloc(0, 6 * MIB, None).unwrap();
    let big1 = pool.alloc(1, 6 * MIB, None).unwrap();
    assert_eq!(pool.stats().fences, 2);
    // Arena 1 polls its fence on its next slow path; the stream's work still runs.
    let _ = pool.alloc(1, 6 * MIB, None).unwrap();
    assert_ne!(pool.alloc(1, 4096, None), Ok(b));
    assert_eq!(pool.stats().pending_bytes, 2 * 4096);
    // Once it completes, both arenas' fences complete and the blocks come back.
    fake(&pool).progress(s, 1);
    assert_eq!(pool.free(0, big0), Some(Ok(None)));
    assert_eq!(pool.free(1, big1), Some(Ok(None)));
    let _ = pool.alloc(1, 8 * MIB, None).unwrap();
    let _ = pool.alloc(0, 8 * MIB, None).unwrap();
    assert_eq!(pool.stats().pending_bytes, 0);
    assert_eq!(pool.alloc(1, 4096, None), Ok(b));
    assert_eq!(fake(&pool).live_events(), 0);
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn with_nothing_submitted_since_the_last_fence_a_free_is_reusable_at_once() {
    let pool = new_pool(
        1 << 30,
        Settings {
            keep: 1 << 30,
            ..Settings::default()
        },
    );
    let a = pool.alloc(3, 1000, Some(1)).unwrap();
    assert_eq!(pool.free(3, a), Some(Ok(Some(1))));
    assert_eq!(pool.alloc(3, 1000, Some(2)), Ok(a));
    assert_eq!(pool.stats().pending_bytes, 0);
}

#[test]
fn idle_chunks_beyond_the_keep_go_back_to_the_device_without_waiting() {
    let pool = new_pool(1 << 30, Settings::default());
    let a = pool.alloc(0, 8 * MIB, None).unwrap();
    assert_eq!(fake(&pool).chunks.len(), 1);
    assert_eq!(pool.free(0, a), Some(Ok(None)));
    assert!(fake(&pool).chunks.is_empty());
    let s = pool.stats();
    assert_eq!(
        (s.chunks, s.chunks_added, s.trims, s.trimmed_bytes),
        (0, 1, 1, 8 * MIB)
    );
}

#[test]
fn waiting_frees_are_told_once_and_tending_gives_their_chunk_back_when_the_work_is_done() {
    let pool = new_pool(1 << 30, Settings::default());
    let a = pool.alloc(0, 8 * MIB, None).unwrap();
    let b = pool.alloc(0, MIB, None).unwrap();
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free(0, a), Some(Ok(None)));
    assert_eq!(pool.free(0, b), Some(Ok(None)));
    // Told once, when the arena's first free began to wait; 8 MiB called for no fence yet.
    assert_eq!(fake(&pool).waiting_notes, 1);
    assert_eq!(pool.stats().fences, 0);
    // Without `fence`, tending only polls.
    assert!(pool.tend(false));
    assert_eq!(pool.stats().fences, 0);
    assert!(pool.tend(true));
    assert_eq!(pool.stats().fences, 1);
    assert!(pool.tend(true), "the fence is not complete");
    assert_eq!(pool.stats().fences, 1, "one fence in flight covers them");
    assert_eq!(fake(&pool).chunks.len(), 2);
    fake(&pool).progress(LEGACY_STREAM, 1);
    assert!(!pool.tend(true));
    assert!(fake(&pool).chunks.is_empty(), "both chunks given back");
    let s = pool.stats();
    assert_eq!((s.pending_bytes, s.trims, s.reserved_bytes), (0, 2, 0));
    // A later wait is told again.
    let c = pool.alloc(0, MIB, None).unwrap();
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free(0, c), Some(Ok(None)));
    assert_eq!(fake(&pool).waiting_notes, 2);
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn tending_fences_only_frees_whose_release_could_go_beyond_the_keep() {
    let pool = new_pool(
        1 << 30,
        Settings {
            keep: 8 * MIB,
            ..Settings::default()
        },
    );
    // Two arenas hold chunks: each keeps half of the 8 MiB.
    let other = pool.alloc(1, MIB, None).unwrap();
    let a = pool.alloc(0, MIB, None).unwrap();
    let b = pool.alloc(0, 8 * MIB, None).unwrap();
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free(0, a), Some(Ok(None)));
    assert!(pool.tend(true));
    assert_eq!(
        pool.stats().fences,
        0,
        "1 MiB pending is within the arena's 4 MiB share of the keep"
    );
    assert_eq!(pool.free(0, b), Some(Ok(None)));
    assert!(pool.tend(true));
    assert_eq!(pool.stats().fences, 1, "9 MiB pending is beyond it");
    assert_eq!(pool.free(1, other), Some(Ok(None)));
    assert!(fake(&pool).violations.is_empty());
}

/// The keep is the pool's, shared among the arenas that hold chunks: a program with one thread
/// keeps all of it (it kept 1/16 of it, and a training loop whose step frees more than that
/// gave its chunks back and asked for them again every step).
#[test]
fn one_arena_keeps_the_whole_keep() {
    let pool = new_pool(
        1 << 30,
        Settings {
            keep: 64 * MIB,
            ..Settings::default()
        },
    );
    let a = pool.alloc(0, 32 * MIB, None).unwrap();
    assert_eq!(pool.free(0, a), Some(Ok(None)));
    let s = pool.stats();
    assert_eq!(
        (s.trims, s.reserved_bytes),
        (0, 32 * MIB),
        "32 MiB idle is within 64"
    );
    let a = pool.alloc(0, 32 * MIB, None).unwrap();
    assert_eq!(
        pool.stats().chunks_added,
        1,
        "the idle chunk served it again"
    );
    let b = pool.alloc(0, 40 * MIB, None).unwrap();
    assert_eq!(pool.free(0, a), Some(Ok(None)));
    assert_eq!(pool.free(0, b), Some(Ok(None)));
    let s = pool.stats();
    assert_eq!(
        (s.trims, s.reserved_bytes),
        (1, 32 * MIB),
        "72 MiB idle is beyond it: the largest chunk goes"
    );
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn tending_neither_fences_during_a_capture_nor_touches_a_dead_pool() {
    let pool = new_pool(1 << 30, Settings::default());
    let a = pool.alloc(0, MIB, None).unwrap();
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free(0, a), Some(Ok(None)));
    fake(&pool).captures = 1;
    assert!(pool.tend(true));
    assert_eq!(pool.stats().fences, 0);
    fake(&pool).captures = 0;
    pool.kill();
    assert!(!pool.tend(true));
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn an_exported_block_is_its_own_chunk_and_its_chunk_goes_back_when_it_is_freed() {
    let pool = new_pool(
        1 << 30,
        Settings {
            keep: 1 << 30,
            ..Settings::default()
        },
    );
    let whole = pool.alloc(0, 8 * MIB, Some(1)).unwrap();
    let shared = pool.alloc(0, MIB, Some(2)).unwrap();
    let kept = pool.alloc(0, 8 * MIB, Some(3)).unwrap();
    assert_eq!(pool.export(0, whole + 100), Export::Whole { base: whole });
    assert_eq!(pool.export(0, shared), Export::Shared);
    assert_eq!(pool.export(0, 1), Export::NotLive);
    assert_eq!(fake(&pool).chunks.len(), 3);
    // Freed with nothing in flight: the exported chunk goes back at once, although the keep
    // would hold it; an unexported one stays.
    assert_eq!(pool.free(0, whole), Some(Ok(Some(1))));
    assert_eq!(pool.free(0, kept), Some(Ok(Some(3))));
    assert!(!fake(&pool).chunks.contains_key(&whole));
    assert!(fake(&pool).chunks.contains_key(&kept));
    // Freed with work in flight: back once a fence covers it.
    let again = pool.alloc(0, 8 * MIB, Some(4)).unwrap();
    assert_eq!(again, kept, "the unexported idle chunk serves it");
    assert_eq!(pool.export(0, again), Export::Whole { base: again });
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free(0, again), Some(Ok(Some(4))));
    assert!(fake(&pool).chunks.contains_key(&again));
    assert!(pool.tend(true));
    fake(&pool).progress(LEGACY_STREAM, 1);
    assert!(!pool.tend(true));
    assert!(!fake(&pool).chunks.contains_key(&again));
    assert!(fake(&pool).violations.is_empty());
    pool.check_invariants().unwrap();
}

#[test]
fn a_device_that_refuses_the_initial_reservation_says_so() {
    let pool = new_pool(MIB, Settings::default());
    let r = pool.reserve_initial(8 * MIB).unwrap_err();
    assert_eq!(r.reason, Reason::Device(DeviceError::Refused(2)));
    assert_eq!(r.why, format!("driver refused a {}-byte chunk", 8 * MIB));
    assert_eq!(
        pool.reserve_initial(1).map_err(|r| r.reason),
        Err(Reason::Device(DeviceError::Refused(2)))
    );
    let pool = new_pool(64 * MIB, Settings::default());
    assert_eq!(pool.reserve_initial(1), Ok(()));
    assert_eq!(pool.stats().reserved_bytes, 2 * MIB);
}

// ---- thread caches ---------------------------------------------------------------------

fn kept_pool() -> Box<Pool> {
    new_pool(
        1 << 30,
        Settings {
            keep: 1 << 30,
            ..Settings::default()
        },
    )
}

#[test]
fn a_free_the_stream_rule_allows_is_reusable_at_once_and_only_then() {
    let pool = kept_pool();
    let mut c = ThreadCache::new();
    // Nothing in flight: reusable by the fence rule; the stream rule is not asked.
    let a = pool.alloc(0, BLOCK, Some(1)).unwrap();
    assert_eq!(pool.free(0, a), Some(Ok(Some(1))));
    assert!(fake(&pool).stream_asks.is_empty());
    // Work in flight, and the device says no: pending, as before.
    let a = pool.alloc(0, BLOCK, Some(2)).unwrap();
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free(0, a), Some(Ok(Some(2))));
    assert_eq!(pool.stats().pending_bytes, BLOCK);
    assert_eq!(fake(&pool).stream_asks, vec![0]);
    assert_eq!(pool.stats().stream_reuses, 0);
    // It says yes: the next free is reusable at once, through the arena and the thread cache,
    // without a synchronization, while the work is still in flight.
    fake(&pool).stream_reuse = true;
    let b = pool.alloc(0, BLOCK, Some(3)).unwrap();
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free(0, b), Some(Ok(Some(3))));
    assert_eq!(pool.alloc(0, BLOCK, Some(4)), Ok(b));
    let small = pool.alloc_cached(&mut c, 0, 1000, Some(5)).unwrap();
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free_cached(&mut c, 0, small), Some(Ok(Some(5))));
    assert_eq!(pool.alloc_cached(&mut c, 0, 1000, Some(6)), Ok(small));
    assert!(!fake(&pool).done_up_to(1));
    let s = pool.stats();
    assert_eq!((s.syncs, s.stream_reuses, s.pending_bytes), (0, 2, BLOCK));
    pool.check_invariants().unwrap();
    assert!(fake(&pool).violations.is_empty());
    // With unsafe reuse (the tests' own setting) the rule is never asked.
    let unsafe_pool = new_pool(
        1 << 30,
        Settings {
            unsafe_reuse: true,
            ..Settings::default()
        },
    );
    let x = unsafe_pool.alloc(0, MIB, None).unwrap();
    fake(&unsafe_pool).submit(LEGACY_STREAM);
    unsafe_pool.free(0, x);
    assert!(fake(&unsafe_pool).stream_asks.is_empty());
}

#[test]
fn a_pair_served_by_the_thread_cache_reuses_the_block_and_keeps_its_record_in_the_slot() {
    let pool = kept_pool();
    let mut c = ThreadCache::new();
    let a = pool.alloc_cached(&mut c, 0, 1000, Some(1)).unwrap();
    // Freed by its thread: lent to the cache, no longer live anywhere.
    assert_eq!(pool.free_cached(&mut c, 0, a), Some(Ok(Some(1))));
    assert_eq!(c.cached(), (1, 1024));
    assert_eq!(pool.find(0, a), None);
    assert!(pool.records().is_empty());
    let s = pool.stats();
    assert_eq!(
        (s.free_bytes, s.reserved_bytes - s.free_bytes),
        (s.reserved_bytes, 0)
    );
    // Handed out again from the cache, with the new record next to it.
    for r in 2..10 {
        assert_eq!(pool.alloc_cached(&mut c, 3, 1000, Some(r)), Ok(a));
        assert_eq!(
            pool.find(0, a + 5).map(|b| (b.addr, b.record)),
            Some((a, Some(r)))
        );
        assert_eq!(pool.records(), vec![(a, r)]);
        assert_eq!(pool.free_cached(&mut c, 3, a), Some(Ok(Some(r))));
    }
    pool.check_invariants().unwrap();
    assert_eq!(fake(&pool).syncs, 0);
}

#[test]
fn a_cached_block_whose_fence_has_not_completed_is_not_handed_out() {
    let pool = kept_pool();
    let mut c = ThreadCache::new();
    let a = pool.alloc_cached(&mut c, 0, 4096, None).unwrap();
    assert_eq!(pool.free_cached(&mut c, 0, a), Some(Ok(None)));
    // Work after the free does not matter; work before it does.
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.alloc_cached(&mut c, 0, 4096, None), Ok(a));
    assert_eq!(pool.free_cached(&mut c, 0, a), Some(Ok(None)));
    let b = pool.alloc_cached(&mut c, 0, 4096, None).unwrap();
    assert_ne!(a, b, "handed out while work before its free may run");
    // The waiting block went back to its arena, where it waits for a fence.
    assert_eq!(c.cached(), (0, 0));
    assert_eq!(pool.stats().pending_bytes, 4096);
    pool.check_invariants().unwrap();
    fake(&pool).progress(LEGACY_STREAM, 1);
    // Once fenced and complete, it comes back.
    let mut arena = pool.arenas[0].lock().unwrap();
    arena.fence(&pool);
    drop(arena);
    let mut arena = pool.arenas[0].lock().unwrap();
    let done = arena.fences.poll(pool.device());
    drop(arena);
    pool.note_completed(done);
    assert_eq!(pool.alloc(0, 4096, None), Ok(a));
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn a_cached_block_is_handed_out_once_its_fence_completes() {
    let pool = kept_pool();
    let mut c = ThreadCache::new();
    let a = pool.alloc_cached(&mut c, 0, 4096, None).unwrap();
    let other = pool.alloc(0, 4096, None).unwrap();
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free_cached(&mut c, 0, a), Some(Ok(None)));
    assert_eq!(c.cached(), (1, 4096));
    // Another free fences (as a batch would), the work completes, a poll sees it.
    let mut g = pool.arenas[0].lock().unwrap();
    g.fence(&pool);
    drop(g);
    fake(&pool).progress(LEGACY_STREAM, 1);
    let mut g = pool.arenas[0].lock().unwrap();
    let done = g.fences.poll(pool.device());
    drop(g);
    pool.note_completed(done);
    assert_eq!(pool.alloc_cached(&mut c, 0, 4096, None), Ok(a));
    assert_eq!(pool.free(0, other), Some(Ok(None)));
    assert!(fake(&pool).violations.is_empty());
}

#[test]
fn an_allocation_says_whether_the_threads_own_cache_held_its_block() {
    let pool = kept_pool();
    let (mut c1, mut c2) = (ThreadCache::new(), ThreadCache::new());
    // The first block comes from the arena.
    let (a, hit) = pool.alloc_cached_hit(&mut c1, 0, 4096, Some(1)).unwrap();
    assert!(!hit);
    // Freed by this thread, it is served from its cache again.
    assert_eq!(pool.free_cached(&mut c1, 0, a), Some(Ok(Some(1))));
    assert_eq!(
        pool.alloc_cached_hit(&mut c1, 0, 4096, Some(2)),
        Ok((a, true))
    );
    // Freed by another thread, it is no longer the first thread's cache's to hand out.
    assert_eq!(pool.free_cached(&mut c2, 0, a), Some(Ok(Some(2))));
    assert_ne!(
        pool.alloc_cached_hit(&mut c1, 0, 4096, Some(3)),
        Ok((a, true))
    );
    pool.check_invariants().unwrap();
}

#[test]
fn a_block_live_in_one_threads_cache_can_be_freed_by_another_thread() {
    let pool = kept_pool();
    let (mut c1, mut c2) = (ThreadCache::new(), ThreadCache::new());
    let a = pool.alloc_cached(&mut c1, 0, 4096, Some(1)).unwrap();
    assert_eq!(pool.free_cached(&mut c1, 0, a), Some(Ok(Some(1))));
    assert_eq!(pool.alloc_cached(&mut c1, 0, 4096, Some(2)), Ok(a));
    // Thread 2 frees it (its own cache does not hold it): the slot is claimed.
    // (Asked of the wrong arena first, as the shim does before it looks the owner up.)
    assert_eq!(pool.free_cached(&mut c2, 5, a), None);
    assert_eq!(pool.free_cached(&mut c2, 0, a), Some(Ok(Some(2))));
    // Freed twice: refused, and thread 1's cache forgets the slot on its own next free.
    assert_eq!(pool.free(0, a), Some(Err(InvalidFree)));
    assert_eq!(pool.free_cached(&mut c1, 0, a), Some(Err(InvalidFree)));
    pool.check_invariants().unwrap();
}

#[test]
fn an_exited_threads_cache_is_adopted_with_its_live_records() {
    let pool = kept_pool();
    let mut c = ThreadCache::new();
    let a = pool.alloc_cached(&mut c, 0, 4096, Some(1)).unwrap();
    let b = pool.alloc_cached(&mut c, 0, 8192, Some(2)).unwrap();
    assert_eq!(pool.free_cached(&mut c, 0, a), Some(Ok(Some(1))));
    assert_eq!(pool.free_cached(&mut c, 0, b), Some(Ok(Some(2))));
    assert_eq!(pool.alloc_cached(&mut c, 0, 8192, Some(3)), Ok(b));
    // The thread exits: only atomic stores now; the next allocation adopts the cache.
    pool.orphan_cache(&mut c);
    assert!(!c.is_bound());
    assert_eq!(pool.records(), vec![(b, 3)]);
    let _ = pool.alloc(1, 256, None).unwrap();
    assert!(pool.registered().is_empty());
    assert_eq!(pool.records(), vec![(b, 3)]);
    assert_eq!(pool.find(0, b).map(|x| x.record), Some(Some(3)));
    assert_eq!(pool.free(0, b), Some(Ok(Some(3))));
    assert_eq!(pool.alloc(0, 4096, None), Ok(a));
    pool.check_invariants().unwrap();
}

#[test]
fn a_destroyed_context_takes_the_caches_records_and_every_cache_forgets_it() {
    let pool = kept_pool();
    let (mut c1, mut c2) = (ThreadCache::new(), ThreadCache::new());
    let a = pool.alloc_cached(&mut c1, 0, 4096, Some(1)).unwrap();
    assert_eq!(pool.free_cached(&mut c1, 0, a), Some(Ok(Some(1))));
    assert_eq!(pool.alloc_cached(&mut c1, 0, 4096, Some(2)), Ok(a));
    let b = pool.alloc_cached(&mut c2, 1, 4096, Some(3)).unwrap();
    assert_eq!(pool.free_cached(&mut c2, 1, b), Some(Ok(Some(3))));
    let mut gone = pool.kill();
    gone.sort();
    assert_eq!(gone, vec![(a, 2)]);
    fake(&pool).context_destroyed();
    // Each thread sees the generation changed on its next use; nothing reaches the arenas.
    let r = pool
        .alloc_cached(&mut c2, 1, 4096, None)
        .map_err(|r| r.reason);
    assert_eq!(r, Err(Reason::ContextDestroyed));
    assert_eq!(pool.free_cached(&mut c1, 0, a), None);
    assert!(!c1.is_bound() && !c2.is_bound());
    assert_eq!(c2.cached(), (0, 0));
    assert!(pool.records().is_empty());
    assert_eq!(pool.idle_bytes(), 0);
}

#[test]
fn a_forked_child_forgets_its_cache_without_touching_the_pool() {
    let pool = kept_pool();
    let mut c = ThreadCache::new();
    let a = pool.alloc_cached(&mut c, 0, 4096, Some(1)).unwrap();
    assert_eq!(pool.free_cached(&mut c, 0, a), Some(Ok(Some(1))));
    // The child's caller forgets the cache: it is empty and unbound, and a new pool (the
    // child's) binds it afresh.
    c.forget();
    assert_eq!((c.is_bound(), c.cached()), (false, (0, 0)));
    let child = kept_pool();
    let x = child.alloc_cached(&mut c, 0, 4096, None).unwrap();
    assert_eq!(child.free_cached(&mut c, 0, x), Some(Ok(None)));
    assert_eq!(child.alloc_cached(&mut c, 0, 4096, None), Ok(x));
    child.check_invariants().unwrap();
}

#[test]
fn a_cache_keeps_at_most_its_bounds_and_gives_back_under_pressure() {
    let pool = new_pool(
        1 << 30,
        Settings {
            keep: 1 << 30,
            limit: Some(32 * MIB),
            ..Settings::default()
        },
    );
    let mut c = ThreadCache::new();
    let blocks: Vec<u64> = (0..40)
        .map(|_| pool.alloc_cached(&mut c, 0, 64 << 10, None).unwrap())
        .collect();
    for b in &blocks {
        assert_eq!(pool.free_cached(&mut c, 0, *b), Some(Ok(None)));
    }
    assert_eq!(
        c.cached(),
        (MAX_CACHED_BLOCKS, MAX_CACHED_BLOCKS as u64 * (64 << 10))
    );
    let big: Vec<u64> = (0..9)
        .map(|_| pool.alloc_cached(&mut c, 1, MIB, None).unwrap())
        .collect();
    for b in &big {
        assert_eq!(pool.free_cached(&mut c, 1, *b), Some(Ok(None)));
    }
    assert!(c.cached().1 <= MAX_CACHED_BYTES);
    assert!(c.cached().0 <= MAX_CACHED_BLOCKS);
    pool.check_invariants().unwrap();
    // Arena 0 under its limit's pressure takes its cached blocks back rather than refuse.
    let huge = pool.alloc(0, 30 * MIB, None);
    assert!(huge.is_ok(), "{huge:?}");
    pool.check_invariants().unwrap();
}

// ---- the model -------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        arena: usize,
        size: u64,
        tracked: bool,
    },
    Free {
        pick: usize,
        elsewhere_first: bool,
        from_other_context: bool,
    },
    FreeInterior {
        pick: usize,
        offset: u64,
    },
    FreeAgain {
        pick: usize,
    },
    Find {
        pick: usize,
        offset: u64,
    },
    Submit {
        stream: usize,
    },
    Progress {
        stream: usize,
        n: usize,
    },
    CreateStream {
        non_blocking: bool,
    },
    DestroyStream {
        pick: usize,
    },
    Capture {
        begin: bool,
    },
    FailChunks(u32),
    SyncFails(bool),
    /// An allocation through thread cache `cache` (one of [`CACHES`] threads).
    CacheAlloc {
        cache: usize,
        arena: usize,
        size: u64,
        tracked: bool,
    },
    /// A free through thread cache `cache`.
    CacheFree {
        cache: usize,
        pick: usize,
    },
    /// Thread `cache` exits (its cache is orphaned), or moves to another pool (flushed).
    CacheExit {
        cache: usize,
        flush: bool,
    },
}

/// Threads with a cache in the model.
const CACHES: usize = 3;

fn cache_size() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => prop::sample::select(vec![256u64, 1000, 4096, 65536, MIB]),
        2 => 1..=4096u64,
        1 => 4097..=2 * MIB,
    ]
}

fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1..=4096u64,
        3 => 4097..=MIB,
        2 => MIB..4 * MIB,
        2 => 4 * MIB..12 * MIB,
        1 => Just(0u64),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..5usize, size(), any::<bool>()).prop_map(|(a, size, tracked)| Op::Alloc {
            // Arena numbers wrap: ARENAS + 1 is arena 1.
            arena: if a == 4 { ARENAS + 1 } else { a },
            size,
            tracked,
        }),
        9 => (any::<usize>(), any::<bool>(), prop::bool::weighted(0.1)).prop_map(
            |(pick, elsewhere_first, from_other_context)| Op::Free {
                pick,
                elsewhere_first,
                from_other_context,
            }
        ),
        1 => (any::<usize>(), 1..(8 * MIB)).prop_map(|(pick, offset)| Op::FreeInterior { pick, offset }),
        1 => any::<usize>().prop_map(|pick| Op::FreeAgain { pick }),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(pick, offset)| Op::Find { pick, offset }),
        6 => any::<usize>().prop_map(|stream| Op::Submit { stream }),
        6 => (any::<usize>(), 1..8usize).prop_map(|(stream, n)| Op::Progress { stream, n }),
        1 => any::<bool>().prop_map(|non_blocking| Op::CreateStream { non_blocking }),
        1 => any::<usize>().prop_map(|pick| Op::DestroyStream { pick }),
        1 => any::<bool>().prop_map(|begin| Op::Capture { begin }),
        1 => (1..3u32).prop_map(Op::FailChunks),
        1 => prop::bool::weighted(0.3).prop_map(Op::SyncFails),
        10 => (0..CACHES, 0..5usize, cache_size(), any::<bool>()).prop_map(
            |(cache, arena, size, tracked)| Op::CacheAlloc { cache, arena, size, tracked }
        ),
        8 => (0..CACHES, any::<usize>()).prop_map(|(cache, pick)| Op::CacheFree { cache, pick }),
        1 => (0..CACHES, any::<bool>()).prop_map(|(cache, flush)| Op::CacheExit { cache, flush }),
    ]
}

fn settings() -> impl Strategy<Value = (u64, Settings)> {
    (
        48 * MIB..256 * MIB,
        prop::option::weighted(0.5, 24 * MIB..160 * MIB),
        prop_oneof![Just(0u64), 0..128 * MIB, Just(1u64 << 40)],
    )
        .prop_map(|(capacity, limit, keep)| {
            (
                capacity,
                Settings {
                    limit,
                    keep,
                    unsafe_reuse: false,
                },
            )
        })
}

#[derive(Debug, Clone, Copy)]
struct Live {
    granted: u64,
    arena: usize,
    record: Option<u64>,
}

/// The shadow model.
struct Model {
    pool: Box<Pool>,
    /// The pool's address, as the device is told it.
    pool_addr: usize,
    settings: Settings,
    live: BTreeMap<u64, Live>,
    /// Frees whose earlier work may not all have completed: (address, granted, mark).
    unsettled: Vec<(u64, u64, u64)>,
    /// Some freed addresses, for double frees.
    freed: Vec<u64>,
    next_record: u64,
    /// Every synchronize fails, whatever the ops say.
    never_sync: bool,
    /// One cache per simulated thread.
    caches: Vec<ThreadCache>,
}

fn overlaps(a: u64, a_len: u64, b: u64, b_len: u64) -> bool {
    a < b + b_len && b < a + a_len
}

impl Model {
    fn new(capacity: u64, settings: Settings) -> Model {
        let pool = new_pool(capacity, settings);
        let pool_addr = std::ptr::from_ref::<Pool>(&pool) as usize;
        Model {
            pool,
            pool_addr,
            settings,
            live: BTreeMap::new(),
            unsettled: Vec::new(),
            freed: Vec::new(),
            next_record: 0,
            never_sync: false,
            caches: (0..CACHES).map(|_| ThreadCache::new()).collect(),
        }
    }

    fn fake(&self) -> std::cell::RefMut<'_, fake::State> {
        fake(&self.pool)
    }

    fn pick_live(&self, pick: usize) -> Option<(u64, Live)> {
        if self.live.is_empty() {
            return None;
        }
        self.live
            .iter()
            .nth(pick % self.live.len())
            .map(|(a, l)| (*a, *l))
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Alloc {
                arena,
                size,
                tracked,
            } => self.alloc(arena, size, tracked)?,
            Op::Free {
                pick,
                elsewhere_first,
                from_other_context,
            } => {
                let Some((addr, l)) = self.pick_live(pick) else {
                    return Ok(());
                };
                if elsewhere_first {
                    prop_assert_eq!(self.pool.free(l.arena + 1, addr), None);
                }
                self.fake().current = !from_other_context;
                let mark = self.pool.device().submissions();
                let r = self.pool.free(l.arena, addr);
                self.fake().current = true;
                prop_assert_eq!(r, Some(Ok(l.record)));
                self.live.remove(&addr);
                self.unsettled.push((addr, l.granted, mark));
                if self.freed.len() < 64 {
                    self.freed.push(addr);
                }
            }
            Op::FreeInterior { pick, offset } => {
                let Some((addr, l)) = self.pick_live(pick) else {
                    return Ok(());
                };
                let inside = addr + 1 + offset % (l.granted - 1);
                prop_assert_eq!(self.pool.free(l.arena, inside), Some(Err(InvalidFree)));
                let found = self.pool.find(l.arena, addr).map(|b| b.addr);
                prop_assert_eq!(found, Some(addr));
            }
            Op::FreeAgain { pick } => {
                if self.freed.is_empty() {
                    return Ok(());
                }
                let addr = self.freed[pick % self.freed.len()];
                if self.live.contains_key(&addr) {
                    return Ok(());
                }
                let owner = {
                    let s = self.fake();
                    s.chunks
                        .range(..=addr)
                        .next_back()
                        .filter(|(b, c)| addr < *b + c.size)
                        .and_then(|(_, c)| c.owner)
                };
                match owner {
                    Some((_, arena)) => {
                        prop_assert_eq!(self.pool.free(arena, addr), Some(Err(InvalidFree)))
                    }
                    None => prop_assert_eq!(self.pool.free(0, addr), None),
                }
            }
            Op::Find { pick, offset } => {
                let Some((addr, l)) = self.pick_live(pick) else {
                    return Ok(());
                };
                let found = self.pool.find(l.arena, addr + offset % l.granted);
                prop_assert_eq!(
                    found,
                    Some(Block {
                        addr,
                        granted: l.granted,
                        record: l.record
                    })
                );
            }
            Op::Submit { stream } => {
                let mut s = self.fake();
                let streams = s.live_streams();
                s.submit(streams[stream % streams.len()]);
            }
            Op::Progress { stream, n } => {
                let mut s = self.fake();
                let mut all: Vec<u64> = vec![LEGACY_STREAM];
                all.extend(s.streams.keys().copied());
                s.progress(all[stream % all.len()], n);
            }
            Op::CreateStream { non_blocking } => {
                self.fake().create_stream(non_blocking);
            }
            Op::DestroyStream { pick } => {
                let mut s = self.fake();
                let streams = s.live_streams();
                if streams.len() > 1 {
                    s.destroy_stream(streams[1 + pick % (streams.len() - 1)]);
                }
            }
            Op::Capture { begin } => {
                let mut s = self.fake();
                s.captures = if begin {
                    s.captures + 1
                } else {
                    s.captures.saturating_sub(1)
                };
            }
            Op::CacheAlloc {
                cache,
                arena,
                size,
                tracked,
            } => self.alloc_via(Some(cache), arena, size, tracked)?,
            Op::CacheFree { cache, pick } => {
                let Some((addr, l)) = self.pick_live(pick) else {
                    return Ok(());
                };
                let mark = self.pool.device().submissions();
                let mut c = std::mem::take(&mut self.caches[cache]);
                let r = self.pool.free_cached(&mut c, l.arena, addr);
                self.caches[cache] = c;
                prop_assert_eq!(r, Some(Ok(l.record)));
                self.live.remove(&addr);
                self.unsettled.push((addr, l.granted, mark));
                if self.freed.len() < 64 {
                    self.freed.push(addr);
                }
            }
            Op::CacheExit { cache, flush } => {
                let mut c = std::mem::take(&mut self.caches[cache]);
                if flush {
                    self.pool.flush_cache(&mut c);
                } else {
                    self.pool.orphan_cache(&mut c);
                }
            }
            Op::FailChunks(n) => self.fake().fail_chunks = n,
            Op::SyncFails(f) => {
                if !self.never_sync {
                    self.fake().sync_fails = f;
                }
            }
        }
        // Frees whose earlier work has all completed can never be unsafe again.
        let s = self.pool.device().s.borrow();
        self.unsettled.retain(|&(_, _, mark)| !s.done_up_to(mark));
        Ok(())
    }

    fn alloc(&mut self, arena: usize, size: u64, tracked: bool) -> Result<(), TestCaseError> {
        self.alloc_via(None, arena, size, tracked)
    }

    /// The arena whose chunk holds `addr`, as the device was told.
    fn arena_of(&self, addr: u64) -> Option<usize> {
        let s = self.fake();
        s.chunks
            .range(..=addr)
            .next_back()
            .filter(|(b, c)| addr < *b + c.size)
            .and_then(|(_, c)| c.owner)
            .map(|(_, arena)| arena)
    }

    fn alloc_via(
        &mut self,
        cache: Option<usize>,
        arena: usize,
        size: u64,
        tracked: bool,
    ) -> Result<(), TestCaseError> {
        let record = tracked.then(|| {
            self.next_record += 1;
            self.next_record
        });
        let refused_before = self.fake().refused_chunks;
        let limit_before = self.pool.stats().limit_refusals;
        let result = match cache {
            Some(c) => {
                let mut tc = std::mem::take(&mut self.caches[c]);
                let r = self.pool.alloc_cached(&mut tc, arena, size, record);
                self.caches[c] = tc;
                r
            }
            None => self.pool.alloc(arena, size, record),
        };
        match result {
            Ok(addr) => {
                prop_assert!(size > 0);
                prop_assert_eq!(addr % ALIGN, 0);
                let arena = self.arena_of(addr);
                prop_assert!(arena.is_some(), "{:#x} in no chunk", addr);
                let arena = arena.unwrap();
                let b = self.pool.find(arena, addr);
                prop_assert!(b.is_some(), "{:#x} not found", addr);
                let b = b.unwrap();
                prop_assert_eq!((b.addr, b.record), (addr, record));
                prop_assert!(b.granted >= size);
                if let Some((&prev, p)) = self.live.range(..addr).next_back() {
                    prop_assert!(prev + p.granted <= addr, "{:#x} overlaps {:#x}", addr, prev);
                }
                if let Some((&next, _)) = self.live.range(addr..).next() {
                    prop_assert!(addr + b.granted <= next, "{:#x} overlaps {:#x}", addr, next);
                }
                if !self.settings.unsafe_reuse {
                    let s = self.pool.device().s.borrow();
                    for &(f, len, mark) in &self.unsettled {
                        prop_assert!(
                            !overlaps(addr, b.granted, f, len) || s.done_up_to(mark),
                            "{:#x} handed out again while work before its free (mark {}) runs",
                            f,
                            mark
                        );
                    }
                }
                self.live.insert(
                    addr,
                    Live {
                        granted: b.granted,
                        arena,
                        record,
                    },
                );
            }
            Err(r) => {
                if size == 0 {
                    prop_assert_eq!(r.reason, Reason::ZeroSize);
                    return Ok(());
                }
                prop_assert_eq!(r.reason, Reason::OutOfMemory);
                let by_limit = self.pool.stats().limit_refusals > limit_before;
                let by_device = self.fake().refused_chunks > refused_before;
                prop_assert!(by_limit || by_device, "refused without cause: {}", r.why);
                prop_assert_eq!(by_limit, r.why.starts_with("CUGUARD_POOL_LIMIT of"));
            }
        }
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        let violations = self.fake().violations.clone();
        prop_assert!(violations.is_empty(), "{:?}", violations);
        if let Err(e) = self.pool.check_invariants() {
            return Err(TestCaseError::fail(e));
        }
        for (i, c) in self.caches.iter().enumerate() {
            if let Err(e) = c.check() {
                return Err(TestCaseError::fail(format!("cache {i}: {e}")));
            }
        }
        let s = self.pool.stats();
        let dev = self.pool.device().s.borrow();
        // Live blocks lie in chunks of their own arena (they cannot overlap: see alloc).
        for (&addr, l) in &self.live {
            let chunk = dev.chunks.range(..=addr).next_back();
            prop_assert!(chunk.is_some());
            let (&base, c) = chunk.unwrap();
            prop_assert!(
                addr + l.granted <= base + c.size,
                "{:#x} outside its chunk",
                addr
            );
            prop_assert_eq!(c.owner, Some((self.pool_addr, l.arena)));
        }
        prop_assert!(dev.chunks.values().all(|c| c.owner.is_some()));
        let ranges: BTreeSet<(u64, u64)> = self.pool.chunk_ranges().into_iter().collect();
        prop_assert_eq!(ranges, chunk_set(&dev));
        // Reserved bytes: the device's count, within the limit.
        prop_assert_eq!(s.reserved_bytes, dev.used);
        if let Some(limit) = self.settings.limit {
            prop_assert!(s.reserved_bytes <= limit);
        }
        prop_assert!(s.peak_reserved_bytes >= s.reserved_bytes);
        let live: u64 = self.live.values().map(|l| l.granted).sum();
        prop_assert_eq!(s.reserved_bytes, live + s.pending_bytes + s.free_bytes);
        prop_assert_eq!(self.pool.idle_bytes(), s.free_bytes + s.pending_bytes);
        prop_assert_eq!(s.chunks, dev.chunks.len() as u64);
        prop_assert_eq!(s.chunks_added - s.trims, s.chunks);
        prop_assert!(s.largest_free_block <= s.free_bytes);
        prop_assert_eq!(s.syncs, dev.syncs);
        // Records: exactly those of the live tracked blocks.
        let records: BTreeSet<(u64, u64)> = self.pool.records().into_iter().collect();
        prop_assert_eq!(records, self.tracked());
        Ok(())
    }

    fn tracked(&self) -> BTreeSet<(u64, u64)> {
        self.live
            .iter()
            .filter_map(|(a, l)| l.record.map(|r| (*a, r)))
            .collect()
    }

    /// Kills the context and checks the pool forgot everything.
    fn kill(&mut self) -> Result<(), TestCaseError> {
        let gone: BTreeSet<(u64, u64)> = self.pool.kill().into_iter().collect();
        prop_assert_eq!(gone, self.tracked());
        self.fake().context_destroyed();
        let r = self.pool.alloc(0, 4096, Some(0)).map_err(|r| r.reason);
        prop_assert_eq!(r, Err(Reason::ContextDestroyed));
        for (&addr, l) in &self.live {
            prop_assert_eq!(self.pool.free(l.arena, addr), None);
            prop_assert_eq!(self.pool.find(l.arena, addr), None);
        }
        prop_assert_eq!(self.pool.idle_bytes(), 0);
        prop_assert!(self.pool.records().is_empty());
        prop_assert!(self.pool.chunk_ranges().is_empty());
        prop_assert_eq!(self.pool.stats().reserved_bytes, 0);
        let violations = self.fake().violations.clone();
        prop_assert!(violations.is_empty(), "{:?}", violations);
        Ok(())
    }
}

/// Runs `ops` on a pool whose device starts with one blocking and two non-blocking streams;
/// with `never_sync`, every synchronize fails, so that freed blocks come back through fences
/// only.
fn run(
    capacity: u64,
    settings: Settings,
    ops: &[Op],
    never_sync: bool,
    kill: bool,
) -> Result<(), TestCaseError> {
    let mut m = Model::new(capacity, settings);
    {
        let mut s = m.fake();
        s.create_stream(false);
        s.create_stream(true);
        s.create_stream(true);
        s.sync_fails = never_sync;
    }
    m.never_sync = never_sync;
    for op in ops {
        m.step(op)?;
        m.check()?;
    }
    if kill {
        m.kill()?;
    }
    Ok(())
}

// 256 cases each by default; more with PROPTEST_CASES.
proptest! {
    #[test]
    fn random_use_keeps_every_invariant(
        (capacity, settings) in settings(),
        ops in prop::collection::vec(op(), 1..160),
        never_sync in any::<bool>(),
        kill in any::<bool>(),
    ) {
        run(capacity, settings, &ops, never_sync, kill)?;
    }

    #[test]
    fn unsafe_reuse_keeps_every_other_invariant(
        (capacity, settings) in settings(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        run(capacity, Settings { unsafe_reuse: true, ..settings }, &ops, false, true)?;
    }
}

/// A pool that ignored marks would be caught: with `unsafe_reuse` the same checks fail.
#[test]
fn the_reuse_check_catches_a_pool_that_ignores_fences() {
    let mut m = Model::new(
        1 << 30,
        Settings {
            keep: 1 << 30,
            ..Settings::default()
        },
    );
    m.alloc(0, 4096, false).unwrap();
    let a = *m.live.keys().next().unwrap();
    m.fake().submit(LEGACY_STREAM);
    m.step(&Op::Free {
        pick: 0,
        elsewhere_first: false,
        from_other_context: false,
    })
    .unwrap();
    // Safe pool: the pending block is not handed out.
    m.alloc(0, 4096, false).unwrap();
    assert!(!m.live.contains_key(&a));

    let mut m = Model::new(
        1 << 30,
        Settings {
            keep: 1 << 30,
            unsafe_reuse: true,
            ..Settings::default()
        },
    );
    m.alloc(0, 4096, false).unwrap();
    m.fake().submit(LEGACY_STREAM);
    m.step(&Op::Free {
        pick: 0,
        elsewhere_first: false,
        from_other_context: false,
    })
    .unwrap();
    m.settings.unsafe_reuse = false; // check as if it were the safe pool
    assert!(m.alloc(0, 4096, false).is_err());
}

/// A training loop through the whole pool (the arena, its slow path, the keep), not the growth
/// policy alone: with a keep that holds its idle memory it asks the device for nothing after a
/// few steps; with a keep a little under it, for what the keep trimmed at the step's end, and
/// no more (a rule that gave kept chunks back at a step's start, when nothing was live, made it
/// ask for every chunk again: 2026-12-03, docs/benchmarks.md run 19).
#[test]
fn a_repeating_loop_through_the_pool_stops_asking_the_device() {
    for keep in [u64::MAX, 2 << 30] {
        for seed in 0..4u64 {
            let pool = new_pool(
                64 << 30,
                Settings {
                    keep,
                    ..Settings::default()
                },
            );
            let (added, trimmed) = repeating_loop(&pool, seed);
            // What the keep trims at a step's end: what is reserved beyond it, give or take a
            // chunk. Giving kept chunks back at the step's start gave back 2-3× that.
            let beyond = pool.stats().peak_reserved_bytes.saturating_sub(keep) + 42 * MIB;
            for step in 3..added.len() {
                assert!(
                    trimmed[step] <= beyond,
                    "keep {keep}, seed {seed}: chunks added per step {added:?}, bytes given back \
                     {trimmed:?}, over {beyond}"
                );
            }
            if keep == u64::MAX {
                assert_eq!(added[3..], [0; 7], "seed {seed}: {added:?}");
            }
        }
    }
}

/// Ten steps of the growth simulation's loop ([`crate::chunking::sim::loop_plan`], sizes in
/// [2 MiB, 42 MiB)), everything freed at each step's end: the chunks the pool added in each
/// step, and the bytes it gave back.
fn repeating_loop(pool: &Pool, seed: u64) -> (Vec<u64>, Vec<u64>) {
    let plan = crate::chunking::sim::loop_plan(seed, 200, 40 * MIB);
    let (mut added, mut trimmed) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        let before = pool.stats();
        let mut live: Vec<(u64, usize)> = Vec::new();
        for (i, &(size, life)) in plan.iter().enumerate() {
            live.retain(|&(addr, until)| {
                let keep = until > i;
                if !keep {
                    assert_eq!(pool.free(0, addr), Some(Ok(None)));
                }
                keep
            });
            let addr = pool.alloc(0, size, None).unwrap();
            live.push((addr, i.saturating_add(life)));
        }
        for (addr, _) in live.into_iter().rev() {
            assert_eq!(pool.free(0, addr), Some(Ok(None)));
        }
        let after = pool.stats();
        added.push(after.chunks_added - before.chunks_added);
        trimmed.push(after.trimmed_bytes - before.trimmed_bytes);
    }
    (added, trimmed)
}
