//! A field added to an allocation's core is one change: this test's own copy of the core's
//! declaration (`cuguard_format::Allocation`'s list, with `lane` added) reaches the JSON, the
//! reader's fast path and the change of text without another line written for it.

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
