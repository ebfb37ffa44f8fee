//! A history read in bounded memory answers as one read whole: every moment's live blocks,
//! the peak, the first refusal, the span and its allocations, over random runs written as the
//! shim writes them (drains in time order, checkpoints, segments restating what is live).

use proptest::prelude::*;

use crate::bounded::History;
use crate::live::Follow;
use crate::replay::Replay;
use crate::{Action, Chunk, Header, Raw, VERSION, kind, write_chunk};
use cuguard_format::MemoryKind;
use reference::read as read_whole;

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
            0..=3 => (Action::Alloc, MemoryKind::Device, size, addr),
            4..=6 => (Action::Free, MemoryKind::Device, 0, addr),
            7 => (
                Action::Alloc,
                MemoryKind::HostPinned,
                size,
                addr + 0x100_0000,
            ),
            8 if slot % 5 == 0 => (
                Action::ContextRelease,
                MemoryKind::Device,
                0,
                u64::from(context),
            ),
            8 => (Action::Oom, MemoryKind::Device, size << 20, 0),
            _ => (
                Action::SegmentAlloc,
                MemoryKind::Device,
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
        let whole = read_whole(&refs).unwrap();
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
    let whole = read_whole(&[&file[..]]).unwrap();
    let h = History::open(vec![&file[..]]).unwrap();
    assert!(h.checkpoints() > 3, "{}", h.checkpoints());
    // Flip a byte inside the last checkpoint's live set.
    let at = last_checkpoint(&file);
    file[at + 9 + crate::CHECKPOINT_HEAD + 2] ^= 0x40;
    let h = History::open(vec![&file[..]]).unwrap();
    let t = whole.ends_ns - 1;
    assert_eq!(live(&h.window(t, t).unwrap(), t), live(&whole, t));
    // Said once, though both the walk at opening and the window read past it.
    let notes = h.notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
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
    let whole = read_whole(&[&file[..]]).unwrap();
    let h = History::open(vec![&file[..]]).unwrap();
    assert_eq!(h.checkpoints(), 0);
    assert_eq!(h.allocations(), 71);
    assert_eq!(h.peak(), whole.peak(None));
    assert_eq!(h.peak().1, 512 << 20);
    assert!(whole.blocks.iter().all(|b| b.stream == 0));
}

/// The reference: every event of every file read into memory, sorted by time, and replayed
/// (how histories were read before the bounded reader, which applies them drain by drain).
mod reference {
    use std::collections::{HashMap, HashSet};

    use crate::replay::{Block, Clock, Lost, Module, Oom, Replay};
    use crate::{Action, Chunk, Error, Header, Raw, Reader};

    /// One event with its thread, as read.
    #[derive(Clone, Copy)]
    struct Ev {
        raw: Raw,
        thread: u32,
    }

    pub fn read(files: &[&[u8]]) -> Result<Replay, Error> {
        let mut out = Replay::default();
        let mut clocks: Vec<(u64, u64)> = Vec::new();
        let mut events: Vec<Ev> = Vec::new();
        let mut drops: Vec<(u64, u64, u64)> = Vec::new();
        let mut modules_seen: HashSet<(u64, u64, String)> = HashSet::new();
        let mut end_tsc = None;
        let mut header: Option<Header> = None;
        // The oldest kept segment's beginning: its last clock before anything else.
        let mut segment_began = 0u64;
        let mut before_content = true;
        for (i, bytes) in files.iter().enumerate() {
            let mut reader = Reader::new(bytes)?;
            let h = reader.header();
            match header {
                None => {
                    out.pid = h.pid;
                    out.run = h.run;
                    out.start_unix_ns = h.start_unix_ns;
                    out.first_segment = h.segment;
                }
                Some(first) if first.pid != h.pid || first.start_unix_ns != h.start_unix_ns => {
                    return Err(Error::Corrupt {
                        at: 0,
                        why: "the segments are of different processes",
                    });
                }
                Some(_) => {}
            }
            header = Some(h);
            for chunk in reader.by_ref() {
                let chunk = match chunk {
                    Ok(c) => c,
                    Err(e) => {
                        out.cut = Some(e);
                        break;
                    }
                };
                if i == 0 {
                    match &chunk {
                        Chunk::Clock { since_start_ns, .. } if before_content => {
                            segment_began = segment_began.max(*since_start_ns)
                        }
                        Chunk::Events { .. } | Chunk::Live { .. } | Chunk::End { .. } => {
                            before_content = false
                        }
                        _ => {}
                    }
                }
                match chunk {
                    Chunk::Events { thread, events: e } => {
                        events.extend(e.into_iter().map(|raw| Ev { raw, thread }))
                    }
                    Chunk::Stack { id, frames } => {
                        out.stacks.insert(id, frames);
                    }
                    Chunk::Clock {
                        tsc,
                        since_start_ns,
                        ..
                    } => clocks.push((tsc, since_start_ns)),
                    Chunk::Dropped {
                        count,
                        first_tsc,
                        last_tsc,
                    } => drops.push((count, first_tsc, last_tsc)),
                    // Only the oldest segment's: a later one restates what the older one's
                    // events already say.
                    // (Sorted with the events: a free of an older block at the same address may
                    // come after it in the file and before it in time.)
                    Chunk::Live { events: e } if i == 0 => {
                        events.extend(e.into_iter().map(|(thread, raw)| Ev { raw, thread }))
                    }
                    Chunk::Live { .. } => {}
                    Chunk::Module {
                        start,
                        end,
                        bias,
                        path,
                        build_id,
                    } => {
                        if modules_seen.insert((start, end, path.clone())) {
                            out.modules.push(Module {
                                start,
                                end,
                                bias,
                                path,
                                build_id: (!build_id.is_empty()).then_some(build_id),
                            });
                        }
                    }
                    Chunk::Code { id, file, function } => {
                        out.codes.insert(id, (file, function));
                    }
                    Chunk::End { tsc } => end_tsc = Some(tsc),
                    // What the events before it said already.
                    Chunk::Checkpoint(_) => {}
                    // Phases: not this oracle's question.
                    Chunk::Name { .. } | Chunk::Phases { .. } => {}
                }
            }
            if out.cut.is_some() {
                break;
            }
        }
        out.whole = end_tsc.is_some() && out.cut.is_none();
        let clock = Clock::new(clocks);
        events.sort_by_key(|e| e.raw.tsc);
        out.begins_ns = if out.first_segment == 0 {
            0
        } else {
            segment_began
        };
        let mut last_tsc = end_tsc.unwrap_or(0);
        if let Some(e) = events.last() {
            last_tsc = last_tsc.max(e.raw.tsc);
        }
        out.ends_ns = clock.ns(last_tsc).max(clock.last_ns());

        let mut open = Open::default();
        let mut open_segments = Open::default();
        for e in &events {
            let r = e.raw;
            let (Some(action), Some(memory)) = (Action::of(r.kind), crate::memory_of(r.kind))
            else {
                continue;
            };
            let t = clock.ns(r.tsc);
            let block = Block {
                start_ns: t,
                end_ns: None,
                addr: r.addr,
                size: r.size,
                stack: r.stack,
                thread: e.thread,
                memory,
                device: r.ordinal(),
                context: r.context,
                released: false,
                stream: r.stream,
                tag: crate::NONE,
                carved: false,
            };
            match action {
                Action::Alloc => open.made(&mut out.blocks, block),
                Action::SegmentAlloc => open_segments.made(&mut out.segments, block),
                Action::Free => {
                    if !open.freed(&mut out.blocks, r.addr, t) {
                        out.unmatched_frees += 1;
                    }
                }
                Action::SegmentFree => {
                    if !open_segments.freed(&mut out.segments, r.addr, t) {
                        out.unmatched_frees += 1;
                    }
                }
                Action::Oom => out.ooms.push(Oom {
                    time_ns: t,
                    size: r.size,
                    stack: r.stack,
                    thread: e.thread,
                    device: r.ordinal(),
                }),
                // The reference knows no tags nor fields (the random runs make none).
                Action::PhaseBegin
                | Action::PhaseEnd
                | Action::Tag
                | Action::Carve
                | Action::Field => {}
                Action::ContextRelease => {
                    let ctx = r.addr as u16;
                    open.released(&mut out.blocks, ctx, t);
                    open_segments.released(&mut out.segments, ctx, t);
                }
            }
        }
        out.lost = drops
            .into_iter()
            .map(|(count, a, b)| Lost {
                count,
                from_ns: clock.ns(a),
                to_ns: clock.ns(b),
            })
            .collect();
        Ok(out)
    }

    /// The blocks not yet ended, by address and by context: a free finds its block, and a context's
    /// release ends its blocks, each in time proportional to what it ends (a release of a context
    /// with nothing live costs nothing, however many blocks other contexts hold).
    #[derive(Default)]
    pub(crate) struct Open {
        /// Address to index in the list.
        by_addr: HashMap<u64, usize>,
        /// Context to the addresses open in it.
        by_context: HashMap<u16, HashSet<u64>>,
    }

    impl Open {
        /// `block` made: a block still open at its address ends now (its free was never seen).
        pub(crate) fn made(&mut self, list: &mut Vec<Block>, block: Block) {
            if let Some(old) = self.by_addr.insert(block.addr, list.len()) {
                list[old].end_ns = Some(block.start_ns);
                self.forget(list[old].context, block.addr);
            }
            self.by_context
                .entry(block.context)
                .or_default()
                .insert(block.addr);
            list.push(block);
        }

        /// The block at `addr` freed at `t`; false when none is open there.
        pub(crate) fn freed(&mut self, list: &mut [Block], addr: u64, t: u64) -> bool {
            let Some(i) = self.by_addr.remove(&addr) else {
                return false;
            };
            list[i].end_ns = Some(t);
            self.forget(list[i].context, addr);
            true
        }

        /// Every block open in `context` ended at `t` with it.
        pub(crate) fn released(&mut self, list: &mut [Block], context: u16, t: u64) {
            for addr in self.by_context.remove(&context).unwrap_or_default() {
                if let Some(i) = self.by_addr.remove(&addr) {
                    list[i].end_ns = Some(t);
                    list[i].released = true;
                }
            }
        }

        fn forget(&mut self, context: u16, addr: u64) {
            if let Some(set) = self.by_context.get_mut(&context) {
                set.remove(&addr);
                if set.is_empty() {
                    self.by_context.remove(&context);
                }
            }
        }
    }
}

/// Tags given as memory is made and after the fact reach the blocks: read from the beginning,
/// from a checkpoint that restates them, and from a segment whose `Live` chunk does.
#[test]
fn tags_reach_the_blocks_through_checkpoints_and_segments() {
    let ev = |tsc, action, addr, size| Raw {
        tsc,
        addr,
        size,
        stack: 0,
        context: 0,
        kind: kind(action, MemoryKind::Device),
        device: 1,
        stream: 0,
    };
    let header = |segment| {
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
        since_start_ns: tsc,
        unix_ns: tsc,
    };
    let (a, b, c) = (0x1000, 0x2000, 0x3000);
    // A tagged as made (tag 7), B made plain and tagged later (tag 8), C plain; then a
    // checkpoint; then B freed and made again plain at its address (its old tag gone).
    let first = [
        ev(10, Action::Alloc, a, 64),
        ev(10, Action::Tag, a, 7),
        ev(20, Action::Alloc, b, 32),
        ev(30, Action::Alloc, c, 16),
        ev(40, Action::Tag, b, 8),
    ];
    let second = [ev(60, Action::Free, b, 0), ev(70, Action::Alloc, b, 48)];
    let mut follow = Follow::every(1);
    let mut file = header(0);
    write_chunk(&mut file, &clock(0));
    write_chunk(
        &mut file,
        &Chunk::Name {
            id: 7,
            text: "kv_cache".into(),
        },
    );
    write_chunk(
        &mut file,
        &Chunk::Name {
            id: 8,
            text: "weights".into(),
        },
    );
    write_chunk(
        &mut file,
        &Chunk::Events {
            thread: 1,
            events: first.to_vec(),
        },
    );
    first.iter().for_each(|e| follow.follow(1, e));
    write_chunk(&mut file, &clock(50));
    write_chunk(&mut file, &follow.checkpoint());
    follow.checkpointed();
    // A second segment that restates what is live.
    let mut next = header(1);
    write_chunk(&mut next, &clock(50));
    write_chunk(
        &mut next,
        &Chunk::Name {
            id: 7,
            text: "kv_cache".into(),
        },
    );
    write_chunk(
        &mut next,
        &Chunk::Name {
            id: 8,
            text: "weights".into(),
        },
    );
    write_chunk(
        &mut next,
        &Chunk::Live {
            events: follow.live(),
        },
    );
    write_chunk(
        &mut next,
        &Chunk::Events {
            thread: 1,
            events: second.to_vec(),
        },
    );
    second.iter().for_each(|e| follow.follow(1, e));
    write_chunk(&mut next, &clock(100));
    write_chunk(&mut next, &Chunk::End { tsc: 100 });

    let tags = |r: &Replay, t: u64| -> Vec<(u64, Option<String>)> {
        let mut v: Vec<_> = r
            .live_at(t)
            .map(|b| (b.addr, r.tag_of(b).map(str::to_string)))
            .collect();
        v.sort();
        v
    };
    let kv = Some("kv_cache".to_string());
    let w = Some("weights".to_string());
    let whole = History::open(vec![&file[..]]).unwrap();
    assert_eq!(
        tags(&whole.window(35, 35).unwrap(), 35),
        [(a, kv.clone()), (b, None), (c, None)]
    );
    assert_eq!(
        tags(&whole.window(45, 45).unwrap(), 45),
        [(a, kv.clone()), (b, w.clone()), (c, None)]
    );
    // The walk says when B was named.
    let mut named = Vec::new();
    whole
        .walk(&mut |s| {
            if let crate::bounded::Step::Tagged(blk) = s {
                named.push((blk.addr, blk.tag, blk.start_ns));
            }
        })
        .unwrap();
    assert_eq!(named, [(b, 8, 20)]);
    // Both segments: read from the second's restatement and from the checkpoint.
    let both = History::open(vec![&file[..], &next[..]]).unwrap();
    assert_eq!(
        tags(&both.window(55, 55).unwrap(), 55),
        [(a, kv.clone()), (b, w.clone()), (c, None)]
    );
    assert_eq!(
        tags(&both.window(80, 80).unwrap(), 80),
        [(a, kv.clone()), (b, None), (c, None)]
    );
    let second_only = History::open(vec![&next[..]]).unwrap();
    assert_eq!(
        tags(&second_only.window(55, 55).unwrap(), 55),
        [(a, kv), (b, w), (c, None)]
    );
}
