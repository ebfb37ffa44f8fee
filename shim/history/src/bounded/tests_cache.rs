//! A framework's cache blocks (PyTorch's tensors) in the history: they carve the allocation
//! that holds them, apart from the blocks, read from the beginning, from a checkpoint and from
//! a later segment's restatement alike.

use crate::bounded::{History, Step};
use crate::live::Follow;
use crate::replay::Replay;
use crate::{Action, Chunk, Header, Raw, VERSION, kind, write_chunk};
use cuguard_format::MemoryKind;

fn ev(tsc: u64, action: Action, memory: MemoryKind, addr: u64, size: u64) -> Raw {
    Raw {
        tsc,
        addr,
        size,
        stack: tsc as u32,
        context: 0,
        kind: kind(action, memory),
        device: 1,
        stream: 0,
    }
}

fn header(segment: u32) -> Vec<u8> {
    Header {
        version: VERSION,
        pid: 3,
        start_unix_ns: 5,
        segment,
        run: 0,
    }
    .encode()
    .to_vec()
}

fn clock(tsc: u64) -> Chunk {
    Chunk::Clock {
        tsc,
        since_start_ns: tsc,
        unix_ns: tsc,
    }
}

/// What is live at `t`: the blocks (address, size, carved) and the cache blocks (address, size,
/// tag).
type Seen = (Vec<(u64, u64, bool)>, Vec<(u64, u64, Option<String>)>);

fn seen(r: &Replay, t: u64) -> Seen {
    let mut blocks: Vec<_> = r.live_at(t).map(|b| (b.addr, b.size, b.carved)).collect();
    let mut cache: Vec<_> = r
        .cache_live_at(t)
        .map(|b| (b.addr, b.size, r.tag_of(b).map(str::to_string)))
        .collect();
    blocks.sort();
    cache.sort();
    (blocks, cache)
}

#[test]
fn cache_blocks_carve_their_segment_through_checkpoints_and_segments() {
    use MemoryKind::{CacheBlock, Device};
    let (seg, other, big) = (0x10_0000, 0x90_0000, 0x200_0000);
    // A 2 MiB segment, two tensors carved from it (the first at its base, tagged as made);
    // a plain allocation; a 4 MiB segment whose one tensor (a temporary) is freed; then a
    // checkpoint; then the first tensor freed and the second segment given back.
    let first = [
        ev(10, Action::Alloc, Device, seg, 2 << 20),
        ev(11, Action::Alloc, CacheBlock, seg, 512),
        ev(11, Action::Tag, CacheBlock, seg, 7),
        ev(12, Action::Alloc, CacheBlock, seg + 512, 1 << 20),
        ev(20, Action::Alloc, Device, other, 4096),
        ev(30, Action::Alloc, Device, big, 4 << 20),
        ev(31, Action::Alloc, CacheBlock, big, 4 << 20),
        ev(40, Action::Free, CacheBlock, big, 0),
    ];
    let second = [
        ev(60, Action::Free, CacheBlock, seg, 0),
        ev(70, Action::Free, Device, big, 0),
    ];
    let mut follow = Follow::every(1);
    let mut file = header(0);
    write_chunk(&mut file, &clock(0));
    let name = Chunk::Name {
        id: 7,
        text: "activations".into(),
    };
    write_chunk(&mut file, &name);
    let events = |e: &[Raw]| Chunk::Events {
        thread: 1,
        events: e.to_vec(),
    };
    write_chunk(&mut file, &events(&first));
    first.iter().for_each(|e| follow.follow(1, e));
    write_chunk(&mut file, &clock(50));
    write_chunk(&mut file, &follow.checkpoint());
    follow.checkpointed();
    let mut next = header(1);
    write_chunk(&mut next, &clock(50));
    write_chunk(&mut next, &name);
    write_chunk(
        &mut next,
        &Chunk::Live {
            events: follow.live(),
        },
    );
    write_chunk(&mut next, &events(&second));
    second.iter().for_each(|e| follow.follow(1, e));
    write_chunk(&mut next, &clock(100));
    write_chunk(&mut next, &Chunk::End { tsc: 100 });

    let act = Some("activations".to_string());
    let at_35 = (
        vec![
            (seg, 2 << 20, true),
            (other, 4096, false),
            (big, 4 << 20, true),
        ],
        vec![
            (seg, 512, act.clone()),
            (seg + 512, 1 << 20, None),
            (big, 4 << 20, None),
        ],
    );
    // After the temporary's free, its segment is still the cache's (idle), read from the
    // beginning, from the checkpoint and from the second segment's restatement.
    let at_45 = (at_35.0.clone(), at_35.1[..2].to_vec());
    let at_80 = (
        vec![(seg, 2 << 20, true), (other, 4096, false)],
        vec![(seg + 512, 1 << 20, None)],
    );
    let whole = History::open(vec![&file[..]]).unwrap();
    assert_eq!(seen(&whole.window(35, 35).unwrap(), 35), at_35);
    assert_eq!(seen(&whole.window(45, 45).unwrap(), 45), at_45);
    let both = History::open(vec![&file[..], &next[..]]).unwrap();
    assert_eq!(seen(&both.window(55, 55).unwrap(), 55), at_45);
    assert_eq!(seen(&both.window(80, 80).unwrap(), 80), at_80);
    let second_only = History::open(vec![&next[..]]).unwrap();
    assert_eq!(seen(&second_only.window(55, 55).unwrap(), 55), at_45);
    assert_eq!(seen(&second_only.window(80, 80).unwrap(), 80), at_80);
    // The whole replay: cache blocks apart, never among the blocks; the peak is the driver's.
    let r = both.replay().unwrap();
    assert_eq!(r.blocks.len(), 3);
    assert_eq!(r.cache_blocks.len(), 3);
    // The peak: the most driver memory, first reached as the 4 MiB segment was taken (30);
    // of those moments, the first with the most tensors (31: the temporary carved from it).
    let most = (2 << 20) + 4096 + (4 << 20);
    assert_eq!(r.peak(None), (31, most));
    assert_eq!(whole.peak(), (31, most), "the checkpoint's span");
    assert_eq!(both.peak(), (31, most));
    // The walk says when each segment became the cache's.
    let mut carved = Vec::new();
    whole
        .walk(&mut |s| {
            if let Step::Carved(b) = s {
                carved.push((b.addr, b.start_ns));
            }
        })
        .unwrap();
    assert_eq!(carved, [(seg, 10), (big, 30)]);
}

/// A segment given back with blocks still inside (its context destroyed, or a lost free)
/// takes them along.
#[test]
fn a_segments_end_ends_the_cache_blocks_inside_it() {
    use MemoryKind::{CacheBlock, Device};
    let mut file = header(0);
    write_chunk(&mut file, &clock(0));
    let e = [
        ev(10, Action::Alloc, Device, 0x1000, 0x1000),
        ev(11, Action::Alloc, CacheBlock, 0x1000, 0x100),
        ev(12, Action::Alloc, CacheBlock, 0x1800, 0x100),
        ev(20, Action::Free, Device, 0x1000, 0),
    ];
    write_chunk(
        &mut file,
        &Chunk::Events {
            thread: 1,
            events: e.to_vec(),
        },
    );
    write_chunk(&mut file, &clock(30));
    write_chunk(&mut file, &Chunk::End { tsc: 30 });
    let r = History::open(vec![&file[..]]).unwrap().replay().unwrap();
    let ends: Vec<_> = r.cache_blocks.iter().map(|b| (b.addr, b.end_ns)).collect();
    assert_eq!(ends, [(0x1000, Some(20)), (0x1800, Some(20))]);
}
