//! Tests of a context's pool against the fake device (`fake.rs`): fixed scenarios of the fence
//! rule, each checking what the pool hands out, what it keeps pending, and the fake's record of
//! what the pool must never do.

use super::fake::FakeDevice;
use super::*;
use crate::device::LEGACY_STREAM;

const MIB: u64 = 1 << 20;

type Pool = CtxPool<FakeDevice, u64>;

fn new_pool(capacity: u64, settings: Settings) -> Box<Pool> {
    Box::new(CtxPool::new(FakeDevice::new(capacity), settings))
}

fn fake(pool: &Pool) -> std::cell::RefMut<'_, fake::State> {
    pool.device().s.borrow_mut()
}

// ---- fixed scenarios ---------------------------------------------------------------------

#[test]
fn a_block_freed_with_work_in_flight_waits_and_pressure_synchronizes() {
    let pool = new_pool(
        1 << 30,
        Settings {
            limit: Some(20 * MIB),
            ..Settings::default()
        },
    );
    let blocks: Vec<u64> = (0..6)
        .map(|i| pool.alloc(0, 3 * MIB, Some(i)).unwrap())
        .collect();
    assert_eq!(pool.stats().chunks, 1);
    fake(&pool).submit(LEGACY_STREAM);
    assert_eq!(pool.free(0, blocks[0]), Some(Ok(Some(0))));
    // Pending: not findable, not freeable again, and not handed out while room remains.
    assert_eq!(pool.find(0, blocks[0]), None);
    assert_eq!(pool.free(0, blocks[0]), Some(Err(InvalidFree)));
    assert_eq!(pool.stats().pending_bytes, 3 * MIB);
    let small = pool.alloc(0, MIB, None).unwrap();
    assert!(small >= blocks[0] + 3 * MIB || small + MIB <= blocks[0]);
    // No room left under the limit: the pending block is worth a synchronize.
    let again = pool.alloc(0, 3 * MIB, Some(9)).unwrap();
    assert_eq!(again, blocks[0]);
    assert!(fake(&pool).done_up_to(1));
    let s = pool.stats();
    assert_eq!((s.syncs, s.pending_bytes, s.chunks), (1, 0, 1));
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
    let blocks: Vec<u64> = (0..6)
        .map(|_| pool.alloc(0, 3 * MIB, None).unwrap())
        .collect();
    fake(&pool).submit(LEGACY_STREAM);
    fake(&pool).captures = 1;
    for b in &blocks {
        assert_eq!(pool.free(0, *b), Some(Ok(None)));
    }
    let r = pool.alloc(0, 3 * MIB, None).unwrap_err();
    assert_eq!(r.reason, Reason::OutOfMemory);
    assert!(
        r.why
            .starts_with("CUGUARD_POOL_LIMIT of 20971520 bytes reached"),
        "{}",
        r.why
    );
    let s = pool.stats();
    assert_eq!((s.fences, s.syncs, s.limit_refusals), (0, 0, 1));
    assert_eq!(s.pending_bytes, 18 * MIB);
    // The capture ends: the next request that needs them synchronizes.
    fake(&pool).captures = 0;
    assert_eq!(pool.alloc(0, 3 * MIB, None), Ok(blocks[0]));
    assert_eq!(pool.stats().syncs, 1);
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
