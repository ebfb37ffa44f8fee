//! A history read in bounded memory answers as one read whole: every moment's live blocks,
//! the peak, the first refusal, the span and its allocations, over random runs written as the
//! shim writes them (drains in time order, checkpoints, segments restating what is live).

use proptest::prelude::*;

use crate::bounded::History;
use crate::live::Follow;
use crate::replay::Replay;
use crate::{Action, Chunk, Header, Memory, Raw, VERSION, kind, write_chunk};

/// One random program step: (thread, what, address slot, size).
type Op = (u32, u8, u8, u16);

/// Writes `ops` as a history: one tsc tick a step, a drain (clock, then events in time order)
/// every `drain` steps, a checkpoint when due, a new segment (restating what is live) every
/// `rotate` steps (0: never); the files, oldest first, and whether the oldest was let go.
fn write(ops: &[Op], drain: usize, every: u64, rotate: usize, keep: usize) -> Vec<Vec<u8>> {
    let mut follow = Follow::every(every);
    let mut files: Vec<Vec<u8>> = Vec::new();
    let head = |segment| {
        Header {
            version: VERSION,
            pid: 3,
            start_unix_ns: 5,
            segment,
            run: 0,
        }
        .encode()
        .to_vec()
    };
    let clock = |tsc: u64| Chunk::Clock {
        tsc,
        since_start_ns: tsc * 10,
        unix_ns: tsc * 10,
    };
    let mut cur = head(0);
    write_chunk(&mut cur, &clock(0));
    let mut segment = 0;
    let mut pending: Vec<(u32, Raw)> = Vec::new();
    let mut live_addr: std::collections::HashMap<u64, u16> = Default::default();
    for (i, &(thread, what, slot, size)) in ops.iter().enumerate() {
        let tsc = i as u64 + 1;
        let addr = 0x1000 * (u64::from(slot % 24) + 1);
        let context = u16::from(slot % 2);
        let size = u64::from(size) + 1;
        let (action, memory, size, addr) = match what % 10 {
            0..=3 => (Action::Alloc, Memory::Device, size, addr),
            4..=6 => (Action::Free, Memory::Device, 0, addr),
            7 => (Action::Alloc, Memory::HostPinned, size, addr + 0x100_0000),
            8 if slot % 5 == 0 => (
                Action::ContextRelease,
                Memory::Device,
                0,
                u64::from(context),
            ),
            8 => (Action::Oom, Memory::Device, size << 20, 0),
            _ => (
                Action::SegmentAlloc,
                Memory::Device,
                size,
                addr + 0x200_0000,
            ),
        };
        if action == Action::Alloc {
            live_addr.insert(addr, context);
        }
        pending.push((
            thread % 3,
            Raw {
                tsc,
                addr,
                size,
                stack: u32::from(slot % 7),
                context,
                kind: kind(action, memory),
                device: 1,
                stream: u64::from(slot % 3) * 0x5000,
            },
        ));
        if rotate > 0 && i > 0 && i % rotate == 0 {
            files.push(std::mem::take(&mut cur));
            segment += 1;
            cur = head(segment);
            write_chunk(&mut cur, &clock(0));
            write_chunk(&mut cur, &clock(tsc - 1));
            follow.begin_segment();
            write_chunk(
                &mut cur,
                &Chunk::Live {
                    events: follow.live(),
                },
            );
        }
        if pending.len() >= drain {
            write_chunk(&mut cur, &clock(tsc));
            pending.sort_by_key(|(_, r)| r.tsc);
            for (t, r) in pending.drain(..) {
                follow.follow(t, &r);
                write_chunk(
                    &mut cur,
                    &Chunk::Events {
                        thread: t,
                        events: vec![r],
                    },
                );
            }
            if follow.due() {
                write_chunk(&mut cur, &follow.checkpoint());
                follow.checkpointed();
            }
        }
    }
    let end = ops.len() as u64 + 1;
    write_chunk(&mut cur, &clock(end));
    pending.sort_by_key(|(_, r)| r.tsc);
    for (t, r) in pending.drain(..) {
        write_chunk(
            &mut cur,
            &Chunk::Events {
                thread: t,
                events: vec![r],
            },
        );
    }
    write_chunk(&mut cur, &Chunk::End { tsc: end });
    files.push(cur);
    let n = files.len();
    files.split_off(n.saturating_sub(keep))
}

fn live(r: &Replay, t: u64) -> Vec<(u64, u64, u64, u64)> {
    let mut v: Vec<_> = r
        .live_at(t)
        .map(|b| (b.addr, b.start_ns, b.size, b.stream))
        .collect();
    v.sort_unstable();
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn a_window_answers_as_the_whole_history_does(
        ops in proptest::collection::vec((0u32..3, 0u8..10, any::<u8>(), any::<u16>()), 1..300),
        drain in 1usize..20,
        every in 1u64..50,
        rotate in prop_oneof![Just(0usize), 20usize..200],
        moments in proptest::collection::vec(0u64..3200, 1..8),
    ) {
        let files = write(&ops, drain, every, rotate, 2);
        let refs: Vec<&[u8]> = files.iter().map(|f| &f[..]).collect();
        let whole = Replay::read(&refs).unwrap();
        let h = History::open(refs.clone()).unwrap();
        prop_assert!(h.notes().is_empty());
        prop_assert_eq!(h.meta().ends_ns, whole.ends_ns);
        prop_assert_eq!(h.meta().begins_ns, whole.begins_ns);
        prop_assert_eq!(h.meta().whole, whole.whole);
        prop_assert_eq!(h.allocations(), whole.blocks.len() as u64);
        prop_assert_eq!(h.peak(), whole.peak(None));
        prop_assert_eq!(h.first_oom_ns(), whole.first_oom_ns());
        for &t in &moments {
            let w = h.window(t, t).unwrap();
            prop_assert_eq!(live(&w, t), live(&whole, t), "at {}", t);
        }
        let (from, to) = (moments[0].min(*moments.last().unwrap()), moments[0].max(*moments.last().unwrap()));
        let kept = |r: &Replay| {
            let mut v: Vec<_> = r.kept_between(from, to).map(|b| (b.addr, b.start_ns, b.size)).collect();
            v.sort_unstable();
            v
        };
        prop_assert_eq!(kept(&h.window(from, to).unwrap()), kept(&whole));
        let all = h.replay().unwrap();
        prop_assert_eq!(all.blocks.len(), whole.blocks.len());
        let mut walked = 0u64;
        h.walk(&mut |s| if let crate::bounded::Step::Made(_) | crate::bounded::Step::Restated(_) = s { walked += 1 }).unwrap();
        prop_assert_eq!(walked, whole.blocks.len() as u64);
    }
}

#[test]
fn a_damaged_checkpoint_is_read_past_and_said() {
    let ops: Vec<Op> = (0..400)
        .map(|i| (i % 3, (i % 7) as u8, (i * 7 % 251) as u8, 100))
        .collect();
    let mut file = write(&ops, 4, 20, 0, 1).remove(0);
    let whole = Replay::read(&[&file[..]]).unwrap();
    let h = History::open(vec![&file[..]]).unwrap();
    assert!(h.checkpoints() > 3, "{}", h.checkpoints());
    // Flip a byte inside the last checkpoint's live set.
    let at = last_checkpoint(&file);
    file[at + 9 + crate::CHECKPOINT_HEAD + 2] ^= 0x40;
    let h = History::open(vec![&file[..]]).unwrap();
    let t = whole.ends_ns - 1;
    assert_eq!(live(&h.window(t, t).unwrap(), t), live(&whole, t));
    let notes = h.notes();
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes[0].starts_with(&format!("a checkpoint at byte {at} is damaged")),
        "{notes:?}"
    );
}

fn last_checkpoint(file: &[u8]) -> usize {
    let mut at = crate::HEADER_LEN;
    let mut last = 0;
    while at < file.len() {
        let len = u32::from_le_bytes(file[at + 1..at + 5].try_into().unwrap()) as usize;
        if file[at] == crate::CHECKPOINT {
            last = at;
        }
        at += 9 + len;
    }
    last
}

#[test]
fn a_history_of_layout_1_reads_as_before() {
    // Written by the layout-1 writer (cuguard at 94323a1): no streams, no checkpoints.
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/history-v1"
    );
    let file = std::fs::read(format!("{dir}/spike.history")).unwrap();
    assert_eq!(crate::Header::decode(&file).unwrap().version, 1);
    let whole = Replay::read(&[&file[..]]).unwrap();
    let h = History::open(vec![&file[..]]).unwrap();
    assert_eq!(h.checkpoints(), 0);
    assert_eq!(h.allocations(), 71);
    assert_eq!(h.peak(), whole.peak(None));
    assert_eq!(h.peak().1, 512 << 20);
    assert!(whole.blocks.iter().all(|b| b.stream == 0));
}
