//! A field added to an allocation's core is one change: this test's own copy of the core's
//! declaration (`cuguard_format::Allocation`'s list, with `lane` added) reaches the JSON, the
//! reader's fast path, the change of text and the history's replay (the history writes the
//! value beside its allocation, `Action::Field`, and a checkpoint's restatement keeps it)
//! without another line written for it.

use std::sync::Arc;

use cuguard_format::allocation::{ApiText, Fields};
use cuguard_format::read::read_core;
use cuguard_format::{Addr, Memory, Text};

cuguard_format::allocation_core! {
    /// `Allocation`'s fields, as declared in `src/allocation.rs`, and one more.
    pub struct Tagged<S> {
        pub address: Addr => addr,
        pub size: u64 => u64,
        pub requested: u64 => u64,
        #[serde(deserialize_with = "ApiText::read")]
        pub api: S => text,
        pub memory: Memory => memory,
        #[serde(with = "cuguard_format::wire::device")]
        pub device: u32 => device,
        pub context: Option<u32> => opt_u32,
        pub thread: u64 => u64,
        pub seq: u64 => u64,
        pub time_ms: u64 => u64,
        pub stack: Option<u64> => opt_u64,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "cuguard_format::allocation::opt_text"
        )]
        pub tag: Option<S> => opt_text,
        /// The field added.
        pub lane: u64 => u64,
    }
}

fn tagged() -> Tagged<Arc<str>> {
    Tagged {
        address: Addr(0x7f00_0000_0000),
        size: 4096,
        requested: 4000,
        api: Arc::from("cuMemAlloc_v2"),
        memory: Memory::Device,
        device: cuguard_format::wire::UNKNOWN_DEVICE,
        context: Some(1),
        thread: 77,
        seq: 5,
        time_ms: 12,
        stack: None,
        tag: Some(Arc::from("kv_cache")),
        lane: 42,
    }
}

#[test]
fn the_copy_has_the_cores_keys_then_the_new_one() {
    let core = <cuguard_format::Allocation<Text<'static>> as Fields>::KEYS;
    let copy = <Tagged<Text<'static>> as Fields>::KEYS;
    assert_eq!(&copy[..core.len()], core);
    assert_eq!(&copy[core.len()..], ["lane"]);
}

#[test]
fn a_new_field_reaches_the_json() {
    let text = serde_json::to_string(&tagged()).unwrap();
    assert_eq!(
        text,
        r#"{"address":"0x7f0000000000","size":4096,"requested":4000,"api":"cuMemAlloc_v2","memory":"device","device":-1,"context":1,"thread":77,"seq":5,"time_ms":12,"stack":null,"tag":"kv_cache","lane":42}"#
    );
    let back: Tagged<Arc<str>> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, tagged());
}

#[test]
fn a_new_field_reaches_the_fast_path() {
    let text = serde_json::to_string(&tagged()).unwrap();
    let read: Tagged<Text<'_>> = read_core(&text).expect("the fast path reads it");
    assert_eq!(read.lane, 42);
    assert_eq!(read.tag.as_ref().map(|t| &*t.0), Some("kv_cache"));
    assert!(
        matches!(read.api.0, std::borrow::Cow::Borrowed(_)),
        "borrowed"
    );
    assert_eq!(read.map_text(|t| Arc::from(&*t.0)), tagged());
    // Without the new field the fast path gives the text back, as it does for a leak lacking
    // one of its fields.
    let without = text.replace(r#","lane":42"#, "");
    assert_eq!(read_core::<Tagged<Text<'_>>>(&without), None);
}

#[test]
fn an_optional_text_field_may_be_absent_for_the_fast_path() {
    let mut untagged = tagged();
    untagged.tag = None;
    let text = serde_json::to_string(&untagged).unwrap();
    assert!(!text.contains("tag"), "{text}");
    let read: Tagged<Text<'_>> = read_core(&text).expect("the fast path reads it");
    assert_eq!(read.map_text(|t| Arc::from(&*t.0)), untagged);
    let back: Tagged<Arc<str>> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, untagged);
}

mod history {
    use super::*;
    use cuguard_history::live::Follow;
    use cuguard_history::replay::Replay;
    use cuguard_history::{Action, Chunk, Header, MemoryKind, Raw, kind, write_chunk};

    const LANE: u32 = 3;
    const KV: u32 = 4;

    /// A history of one allocation with its tag and its `lane` written beside it, and another
    /// without either, made at 2 ms and 3 ms.
    fn events() -> Vec<Raw> {
        let ev = |tsc, action, addr, size, stack| Raw {
            tsc,
            addr,
            size,
            stack,
            context: 1,
            kind: kind(action, MemoryKind::Device),
            device: 1,
            stream: 0,
        };
        vec![
            ev(2_000_000, Action::Alloc, 0x7f00_0000_0000, 4096, 9),
            ev(
                2_000_000,
                Action::Tag,
                0x7f00_0000_0000,
                u64::from(KV),
                u32::MAX,
            ),
            ev(2_000_000, Action::Field, 0x7f00_0000_0000, 42, LANE),
            ev(3_000_000, Action::Alloc, 0x7f00_0001_0000, 512, u32::MAX),
        ]
    }

    /// The history's file: its names, the clock (1 tick = 1 ns), then `events` as one drain.
    fn file(events: Vec<Raw>) -> Vec<u8> {
        let mut file = Header {
            version: cuguard_history::VERSION,
            pid: 7,
            start_unix_ns: 0,
            segment: 0,
            run: 0,
        }
        .encode()
        .to_vec();
        for (id, text) in [(LANE, "lane"), (KV, "kv_cache")] {
            write_chunk(
                &mut file,
                &Chunk::Name {
                    id,
                    text: text.into(),
                },
            );
        }
        write_chunk(
            &mut file,
            &Chunk::Clock {
                tsc: 0,
                since_start_ns: 0,
                unix_ns: 0,
            },
        );
        write_chunk(
            &mut file,
            &Chunk::Clock {
                tsc: 10_000_000,
                since_start_ns: 10_000_000,
                unix_ns: 10_000_000,
            },
        );
        write_chunk(&mut file, &Chunk::Events { thread: 77, events });
        write_chunk(&mut file, &Chunk::End { tsc: 10_000_000 });
        file
    }

    /// The cores the replay of `file` builds from its blocks.
    fn cores(file: &[u8]) -> Vec<Tagged<Arc<str>>> {
        let replay = Replay::read(&[file]).unwrap();
        replay
            .blocks
            .iter()
            .map(|b| Tagged::from_history(&replay.facts(b)).map_text(|t| Arc::from(&*t.0)))
            .collect()
    }

    fn expected() -> [Tagged<Arc<str>>; 2] {
        let made = |address, size, time_ms| Tagged {
            address: Addr(address),
            size,
            requested: size,
            api: Arc::from(""),
            memory: Memory::Device,
            device: 0,
            context: Some(1),
            thread: 77,
            seq: 0,
            time_ms,
            stack: None,
            tag: None,
            lane: 0,
        };
        [
            Tagged {
                stack: Some(9),
                tag: Some(Arc::from("kv_cache")),
                lane: 42,
                ..made(0x7f00_0000_0000, 4096, 2)
            },
            made(0x7f00_0001_0000, 512, 3),
        ]
    }

    #[test]
    fn a_new_field_reaches_the_replay() {
        // Each field from the block where it holds it, `lane` from the value written beside
        // it; what the history does not hold (the entry, the report's order) is the default,
        // and what the program asked for is what it received.
        assert_eq!(cores(&file(events())), expected());
        let replay = Replay::read(&[&file(events())]).unwrap();
        assert_eq!(replay.field(&replay.blocks[0], "lane"), Some(42));
        assert_eq!(replay.field(&replay.blocks[1], "lane"), None);
    }

    #[test]
    fn a_restatement_of_what_is_live_keeps_the_new_field() {
        // What a checkpoint or a new segment restates: the writer's live set, the values
        // beside each allocation after it.
        let mut follow = Follow::default();
        for e in events() {
            follow.follow(77, &e);
        }
        let restated: Vec<Raw> = follow.live().into_iter().map(|(_, r)| r).collect();
        assert_eq!(restated, events());
        assert_eq!(cores(&file(restated)), expected());
    }
}
