//! The slow path's decisions, one scenario each: a scripted arena answers every question and
//! logs every step, and each test states the exact sequence the policy must produce.

use super::*;
use crate::chunking::GrowthPolicy;
use crate::tlsf::ChunkKind;
use std::collections::VecDeque;

const MIB: u64 = 1 << 20;

/// One step the policy took, with the scripted answer where there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Reclaim,
    Try(bool),
    Sync(bool),
    Wait(bool),
    Fence,
    ReleaseDedicated(u64),
    Grow(u64, bool),
    TrimOwn,
    TrimOthers,
}
use Act::*;

/// An arena whose answers come from a script.
#[derive(Default)]
struct Script {
    /// Answers of `try_alloc`, in order (then no).
    tries: VecDeque<bool>,
    /// Answers of `grow`, in order (then no).
    grows: VecDeque<bool>,
    /// Answer of `synchronize`; a successful one releases everything pending.
    sync_ok: bool,
    /// Answers of `wait_oldest_fence`, in order (then no): whether it waited, and the pending
    /// bytes the fence covered (released).
    waits: VecDeque<(bool, u64)>,
    pending_bytes: u64,
    limit: Option<u64>,
    reserved: u64,
    /// Bytes `trim_own` / `trim_others` give back.
    own_idle: u64,
    others_idle: u64,
    /// The device's free bytes, when it says (for `room_possible`).
    device_free: Option<u64>,
    log: Vec<Act>,
}

impl Steps for Script {
    type Grant = ();
    fn reclaim(&mut self) {
        self.log.push(Reclaim);
    }
    fn try_alloc(&mut self) -> Option<()> {
        let ok = self.tries.pop_front().unwrap_or(false);
        self.log.push(Try(ok));
        ok.then_some(())
    }
    fn pending_bytes(&self) -> u64 {
        self.pending_bytes
    }
    fn has_pending(&self) -> bool {
        self.pending_bytes > 0
    }
    fn synchronize(&mut self) -> bool {
        self.log.push(Sync(self.sync_ok));
        if self.sync_ok {
            self.pending_bytes = 0;
        }
        self.sync_ok
    }
    fn wait_oldest_fence(&mut self) -> bool {
        let (ok, released) = self.waits.pop_front().unwrap_or((false, 0));
        if ok {
            self.pending_bytes -= released;
        }
        self.log.push(Wait(ok));
        ok
    }
    fn fence(&mut self) {
        self.log.push(Fence);
    }
    fn release_idle_dedicated(&mut self, bytes: u64) {
        self.log.push(ReleaseDedicated(bytes));
    }
    fn within_limit(&self, bytes: u64) -> bool {
        self.limit.is_none_or(|l| self.reserved + bytes <= l)
    }
    fn grow(&mut self, bytes: u64) -> bool {
        let ok = self.grows.pop_front().unwrap_or(false);
        if ok {
            self.reserved += bytes;
        }
        self.log.push(Grow(bytes, ok));
        ok
    }
    fn trim_own(&mut self) {
        self.reserved -= std::mem::take(&mut self.own_idle);
        self.log.push(TrimOwn);
    }
    fn trim_others(&mut self) {
        self.reserved -= std::mem::take(&mut self.others_idle);
        self.log.push(TrimOthers);
    }
    fn room_possible(&self, bytes: u64) -> bool {
        self.device_free
            .is_none_or(|free| free + self.reserved >= bytes)
    }
}

fn shared(want: u64, minimum: u64) -> Request {
    Request {
        footprint: MIB,
        dedicated: false,
        want,
        minimum,
    }
}

fn run(s: &mut Script, r: Request) -> Result<(), Refused> {
    alloc_slow(s, &r)
}

#[test]
fn reclaimed_frees_serve_first() {
    let mut s = Script {
        tries: [true].into(),
        pending_bytes: 8 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(s.log, [Reclaim, Try(true)]);
}

#[test]
fn pending_frees_large_enough_are_waited_for_rather_than_grown() {
    let mut s = Script {
        tries: [false, true].into(),
        sync_ok: true,
        pending_bytes: MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [Reclaim, Try(false), Wait(false), Sync(true), Try(true)]
    );
}

#[test]
fn the_oldest_fence_is_waited_for_before_any_synchronization() {
    // The oldest fence covers enough: served after one wait, no synchronization.
    let mut s = Script {
        tries: [false, true].into(),
        waits: [(true, MIB)].into(),
        sync_ok: true,
        pending_bytes: 3 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(s.log, [Reclaim, Try(false), Wait(true), Try(true)]);
    // It does not: the next oldest, then a synchronization when no fence can be waited for.
    let mut s = Script {
        tries: [false, false, false, true].into(),
        waits: [(true, MIB), (true, MIB)].into(),
        sync_ok: true,
        pending_bytes: 3 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Wait(true),
            Try(false),
            Wait(true),
            Try(false),
            Wait(false),
            Sync(true),
            Try(true)
        ]
    );
}

#[test]
fn fence_waits_that_release_everything_without_serving_go_on_to_grow() {
    let mut s = Script {
        tries: [false, false, true].into(),
        grows: [true].into(),
        waits: [(true, 2 * MIB)].into(),
        sync_ok: true,
        pending_bytes: 2 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Wait(true),
            Try(false),
            Grow(20 * MIB, true),
            Try(true)
        ]
    );
}

#[test]
fn at_most_a_few_fences_are_waited_for_before_synchronizing() {
    let mut s = Script {
        tries: [false; 1 + MAX_FENCE_WAITS as usize]
            .into_iter()
            .chain([true])
            .collect(),
        waits: std::iter::repeat_n((true, 1), MAX_FENCE_WAITS as usize + 4).collect(),
        sync_ok: true,
        pending_bytes: 64 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    let waits = s.log.iter().filter(|a| **a == Wait(true)).count();
    assert_eq!(waits, MAX_FENCE_WAITS as usize);
    assert_eq!(s.log[s.log.len() - 2..], [Sync(true), Try(true)]);
}

#[test]
fn pending_frees_too_small_get_a_fence_and_the_arena_grows() {
    let mut s = Script {
        tries: [false, true].into(),
        grows: [true].into(),
        sync_ok: true,
        pending_bytes: MIB - 256,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [Reclaim, Try(false), Fence, Grow(20 * MIB, true), Try(true)]
    );
}

#[test]
fn a_synchronize_that_fails_falls_back_to_a_fence_and_growth() {
    let mut s = Script {
        tries: [false, true].into(),
        grows: [true].into(),
        sync_ok: false,
        pending_bytes: 4 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Wait(false),
            Sync(false),
            Fence,
            Grow(20 * MIB, true),
            Try(true)
        ]
    );
}

#[test]
fn a_synchronize_that_does_not_serve_still_goes_on_to_grow_without_a_fence() {
    let mut s = Script {
        tries: [false, false, true].into(),
        grows: [true].into(),
        sync_ok: true,
        pending_bytes: 4 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Wait(false),
            Sync(true),
            Try(false),
            Grow(20 * MIB, true),
            Try(true)
        ]
    );
}

#[test]
fn nothing_pending_means_no_fence_and_no_synchronize() {
    let mut s = Script::default();
    assert_eq!(
        run(&mut s, shared(20 * MIB, 2 * MIB)),
        Err(Refused::OutOfMemory)
    );
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Grow(20 * MIB, false),
            Grow(2 * MIB, false),
            Try(false),
            TrimOwn,
            Grow(2 * MIB, false)
        ]
    );
}

#[test]
fn a_refused_wanted_chunk_falls_back_to_the_minimum() {
    let mut s = Script {
        tries: [false, true].into(),
        grows: [false, true].into(),
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Grow(20 * MIB, false),
            Grow(2 * MIB, true),
            Try(true)
        ]
    );
}

#[test]
fn the_minimum_is_not_asked_twice_when_it_is_what_is_wanted() {
    let mut s = Script::default();
    assert_eq!(
        run(&mut s, shared(2 * MIB, 2 * MIB)),
        Err(Refused::OutOfMemory)
    );
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Grow(2 * MIB, false),
            Try(false),
            TrimOwn,
            Grow(2 * MIB, false)
        ]
    );
}

#[test]
fn a_wanted_chunk_over_the_limit_is_skipped_for_the_minimum() {
    let mut s = Script {
        tries: [false, true].into(),
        grows: [true].into(),
        limit: Some(10 * MIB),
        reserved: 4 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(s.log, [Reclaim, Try(false), Grow(2 * MIB, true), Try(true)]);
}

#[test]
fn dedicated_requests_give_idle_dedicated_chunks_back_before_growing() {
    let mut s = Script {
        tries: [false, true].into(),
        grows: [true].into(),
        ..Script::default()
    };
    let r = Request {
        footprint: 6 * MIB,
        dedicated: true,
        want: 6 * MIB,
        minimum: 6 * MIB,
    };
    assert_eq!(run(&mut s, r), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            ReleaseDedicated(6 * MIB),
            Grow(6 * MIB, true),
            Try(true)
        ]
    );
}

#[test]
fn under_pressure_the_arena_synchronizes_and_retries_before_trimming() {
    // The device refuses both chunks; pending frees then serve after a synchronize.
    let mut s = Script {
        tries: [false, true].into(),
        sync_ok: false,
        pending_bytes: 256,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Fence,
            Grow(20 * MIB, false),
            Grow(2 * MIB, false),
            Sync(false),
            Try(true)
        ]
    );
}

#[test]
fn under_pressure_no_synchronization_when_only_memory_held_for_others_could_serve() {
    // The device has 512 KiB free and the pool 256 KiB of its own: a 1 MiB request cannot be
    // served by anything of the pool's, so its pending free is not synchronized for (that would
    // release what the driver holds for another allocator); the arena still trims and asks
    // once more, as the driver would answer without the pool.
    let mut s = Script {
        pending_bytes: 256,
        reserved: 256 * 1024,
        device_free: Some(512 * 1024),
        sync_ok: true,
        ..Script::default()
    };
    assert_eq!(
        run(&mut s, shared(20 * MIB, 2 * MIB)),
        Err(Refused::OutOfMemory)
    );
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Fence,
            Grow(20 * MIB, false),
            Grow(2 * MIB, false),
            Try(false),
            TrimOwn,
            Grow(2 * MIB, false)
        ]
    );
    // With room for it among its own chunks and the device's free memory, it synchronizes.
    let mut s = Script {
        tries: [false, true].into(),
        pending_bytes: 256,
        reserved: 512 * 1024,
        device_free: Some(512 * 1024),
        sync_ok: true,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(s.log[s.log.len() - 2..], [Sync(true), Try(true)]);
}

#[test]
fn within_the_limit_other_arenas_are_left_alone_and_the_device_is_asked_once_more() {
    let mut s = Script {
        tries: [false, false, true].into(),
        grows: [false, false, true].into(),
        limit: Some(64 * MIB),
        own_idle: 0,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Grow(20 * MIB, false),
            Grow(2 * MIB, false),
            Try(false),
            TrimOwn,
            Grow(2 * MIB, true),
            Try(true)
        ]
    );
}

#[test]
fn over_the_limit_the_other_arenas_trim_and_their_room_is_used() {
    let mut s = Script {
        tries: [false, false, true].into(),
        grows: [true].into(),
        limit: Some(40 * MIB),
        reserved: 40 * MIB,
        own_idle: 0,
        others_idle: 20 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Try(false),
            TrimOwn,
            TrimOthers,
            Grow(2 * MIB, true),
            Try(true)
        ]
    );
}

#[test]
fn own_idle_chunks_can_make_room_without_touching_other_arenas() {
    let mut s = Script {
        tries: [false, false, true].into(),
        grows: [true].into(),
        limit: Some(40 * MIB),
        reserved: 40 * MIB,
        own_idle: 20 * MIB,
        others_idle: 20 * MIB,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Ok(()));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Try(false),
            TrimOwn,
            Grow(2 * MIB, true),
            Try(true)
        ]
    );
}

#[test]
fn still_over_the_limit_after_trimming_is_refused_as_the_limit_without_asking_the_device() {
    let mut s = Script {
        limit: Some(40 * MIB),
        reserved: 40 * MIB,
        own_idle: MIB,
        others_idle: 0,
        pending_bytes: 512,
        sync_ok: true,
        ..Script::default()
    };
    assert_eq!(run(&mut s, shared(20 * MIB, 2 * MIB)), Err(Refused::Limit));
    assert_eq!(
        s.log,
        [
            Reclaim,
            Try(false),
            Fence,
            Sync(true),
            Try(false),
            TrimOwn,
            TrimOthers
        ]
    );
}

#[test]
fn a_device_refusal_within_the_limit_is_out_of_memory() {
    let mut s = Script {
        limit: Some(400 * MIB),
        ..Script::default()
    };
    assert_eq!(
        run(&mut s, shared(20 * MIB, 2 * MIB)),
        Err(Refused::OutOfMemory)
    );
    assert_eq!(s.log.last(), Some(&Grow(2 * MIB, false)));
    assert!(!s.log.contains(&TrimOthers));
}

#[test]
fn requests_take_their_chunk_sizes_from_the_growth_policy() {
    let g = GrowthPolicy::default();
    // Small: a shared chunk, at least 20 MiB, 1/16 of the shared bytes reserved.
    let r = Request::new(&g, 1000, 1024, 256, 0, 0);
    assert_eq!(
        r,
        Request {
            footprint: 1024,
            dedicated: false,
            want: 20 * MIB,
            minimum: 2 * MIB
        }
    );
    let r = Request::new(&g, 1000, 1024, 256, 1024 * MIB + 64 * MIB, 64 * MIB);
    assert_eq!(r.want, 64 * MIB);
    // Large: a dedicated chunk of the request rounded to 2 MiB.
    let r = Request::new(&g, 5 * MIB + 1, 5 * MIB + 256, 256, 0, 0);
    assert_eq!(
        r,
        Request {
            footprint: 5 * MIB + 256,
            dedicated: true,
            want: 6 * MIB,
            minimum: 6 * MIB
        }
    );
}

fn chunk(id: u32, size: u64) -> ChunkInfo {
    ChunkInfo {
        id: ChunkId(id),
        base: u64::from(id) << 40,
        size,
        kind: ChunkKind::Shared,
        live_blocks: 0,
        last_request: 0,
    }
}

#[test]
fn trimming_gives_back_the_largest_idle_chunks_until_the_keep_is_met() {
    let idle = [chunk(0, 20 * MIB), chunk(1, 64 * MIB), chunk(2, 32 * MIB)];
    assert_eq!(
        to_trim(idle.into_iter(), 0),
        [ChunkId(1), ChunkId(2), ChunkId(0)]
    );
    assert_eq!(to_trim(idle.into_iter(), 52 * MIB), [ChunkId(1)]);
    assert_eq!(
        to_trim(idle.into_iter(), 51 * MIB),
        [ChunkId(1), ChunkId(2)]
    );
    assert_eq!(to_trim(idle.into_iter(), 116 * MIB), []);
    assert!(trim_due(116 * MIB + 1, 116 * MIB));
    assert!(!trim_due(116 * MIB, 116 * MIB));
}

#[test]
fn frees_are_fenced_in_batches_and_polled_every_few() {
    assert!(!fence_due(FENCE_BYTES - 1, FENCE_COUNT - 1));
    assert!(fence_due(FENCE_BYTES, 1));
    assert!(fence_due(0, FENCE_COUNT));
    assert!(poll_due(POLL_EVERY) && poll_due(0));
    assert!(!poll_due(POLL_EVERY + 1));
}
