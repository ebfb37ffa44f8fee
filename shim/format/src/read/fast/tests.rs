//! The fast path against serde_json: on generated `leaks[]` and `stacks[]` (odd spellings,
//! escapes, unicode, big numbers, nulls, reordered, unknown, repeated and missing keys,
//! whitespace), on the fixtures and on fixtures with bytes changed, whatever the fast path
//! returns is what serde_json gives, into `Report::leaks` and into a [`LeakFold`]; and where
//! serde_json refuses, the fast path gives up without touching the fold. serde_json's own pass
//! when folding (the leaks parsed apart from the rest) gives serde_json's report and error too.

use proptest::prelude::*;

use super::{GaveUp, Name, header, report};
use crate::Report;
use crate::read::{Header, LeakFold, Leaks, slow};

fn fixture_text(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    std::fs::read_to_string(path.join(name)).unwrap()
}

/// Checks the fast path against serde_json on `text`; gives whether the fast path read it.
fn agrees(text: &str) -> Result<bool, TestCaseError> {
    let whole: Result<Report, _> = serde_json::from_str(text);
    let fast = report(text, Leaks::Keep);
    if fast == Err(GaveUp::NoLeaks) {
        prop_assert!(whole.is_err(), "no leaks, yet serde_json reads a report");
    }
    let fast = fast.ok();
    match (&whole, &fast) {
        (Ok(w), Some(f)) => prop_assert_eq!(w, f),
        (Err(e), Some(_)) => {
            prop_assert!(false, "serde_json refuses ({e}) what the fast path read")
        }
        (_, None) => {}
    }
    for keep in [0, 2, usize::MAX] {
        let reference = whole.as_ref().ok().map(|w| LeakFold::of(&w.leaks, keep));
        let without_leaks = whole.as_ref().ok().map(|w| Report {
            leaks: Vec::new(),
            ..w.clone()
        });
        let mut fold = LeakFold::new(keep);
        match (&without_leaks, report(text, Leaks::Fold(&mut fold)).ok()) {
            (Some(w), Some(f)) => {
                prop_assert_eq!(w, &f);
                same(&fold, reference.as_ref().unwrap())?;
            }
            (None, Some(_)) => prop_assert!(false, "serde_json refuses what the fast path read"),
            (_, None) => {
                prop_assert_eq!(
                    fold.count(),
                    0,
                    "the fold is emptied when the fast path gives up"
                );
                prop_assert_eq!(fold.groups().len(), 0);
                prop_assert_eq!(fold.largest().len(), 0);
            }
        }
        let mut fold = LeakFold::new(keep);
        match (&whole, slow(text.as_bytes(), Leaks::Fold(&mut fold))) {
            (Ok(_), Ok(s)) => {
                prop_assert_eq!(without_leaks.as_ref().unwrap(), &s);
                same(&fold, reference.as_ref().unwrap())?;
            }
            (Err(w), Err(s)) => prop_assert_eq!(w.to_string(), s.to_string()),
            (w, s) => prop_assert!(
                false,
                "serde_json: {:?}; its pass folding: {:?}",
                w.as_ref().err(),
                s.err()
            ),
        }
    }
    Ok(fast.is_some())
}

/// Whether two folds hold the same.
fn same(a: &LeakFold, b: &LeakFold) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.groups(), b.groups());
    prop_assert_eq!(a.count(), b.count());
    prop_assert_eq!(a.largest(), b.largest());
    Ok(())
}

/// A member: its key and its value, as JSON text.
type Member = (String, String);

/// Whitespace between tokens: mostly none, as the shim writes.
fn ws() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just(String::new()),
        1 => Just(" ".to_string()),
        1 => Just("\n  ".to_string()),
        1 => Just("\t\r\n".to_string()),
    ]
}

/// An object from its members: each kept, dropped, repeated or joined by an unknown one, in
/// the order given or shuffled, with whitespace between the tokens.
fn object(members: Vec<Member>, odd: bool) -> impl Strategy<Value = String> {
    let n = members.len();
    let edits = if odd {
        proptest::collection::vec(0u8..40, n).boxed()
    } else {
        Just(vec![0u8; n]).boxed()
    };
    let shuffle = if odd {
        any::<bool>().boxed()
    } else {
        Just(false).boxed()
    };
    (
        edits,
        shuffle,
        proptest::collection::vec(ws(), 4 * n + 8),
        any::<u64>(),
    )
        .prop_map(move |(edits, shuffle, spaces, seed)| {
            let mut list = Vec::new();
            for ((k, v), e) in members.iter().zip(&edits) {
                match e {
                    1 => {}
                    2 => {
                        list.push((k.clone(), v.clone()));
                        list.push((k.clone(), v.clone()));
                    }
                    3 => {
                        list.push((k.clone(), v.clone()));
                        list.push(("unknown".into(), r#"{"a":[1,"\"]",null],"b":{}}"#.into()));
                    }
                    4 => {
                        // The key spelled with an escape: the same key to serde_json.
                        let escaped = format!("\\u{:04x}{}", u32::from(k.as_bytes()[0]), &k[1..]);
                        list.push((escaped, v.clone()));
                    }
                    _ => list.push((k.clone(), v.clone())),
                }
            }
            if shuffle {
                let mut state = seed | 1;
                for i in (1..list.len()).rev() {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    list.swap(i, (state % (i as u64 + 1)) as usize);
                }
            }
            let mut sp = spaces.into_iter().cycle();
            let mut out = format!("{{{}", sp.next().unwrap());
            for (i, (k, v)) in list.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    out.push_str(&sp.next().unwrap());
                }
                out.push_str(&format!(
                    "\"{k}\"{}:{}{v}{}",
                    sp.next().unwrap(),
                    sp.next().unwrap(),
                    sp.next().unwrap()
                ));
            }
            out.push('}');
            out
        })
}

fn array(elements: Vec<String>, space: String) -> String {
    format!("[{space}{}{space}]", elements.join(&format!(",{space}")))
}

/// An unsigned integer: plain, at the edges of `u64`, or spelled in ways a `u64` field refuses.
fn number(odd: bool) -> BoxedStrategy<String> {
    let plain = prop_oneof![
        4 => (0u64..100_000).prop_map(|v| v.to_string()),
        2 => any::<u64>().prop_map(|v| v.to_string()),
        1 => Just("0".to_string()),
        1 => Just(u64::MAX.to_string()),
        1 => Just(u32::MAX.to_string()),
    ];
    if !odd {
        return plain.boxed();
    }
    prop_oneof![
        8 => plain,
        1 => Just("18446744073709551616".to_string()),
        1 => Just("99999999999999999999999".to_string()),
        1 => Just("007".to_string()),
        1 => Just("-1".to_string()),
        1 => Just("-0".to_string()),
        1 => Just("1.0".to_string()),
        1 => Just("1e3".to_string()),
        1 => Just("2E1".to_string()),
        1 => Just("null".to_string()),
        1 => Just("\"5\"".to_string()),
        1 => Just("true".to_string()),
    ]
    .boxed()
}

/// A number for a `u32` field: in range, or (odd) just past it.
fn small(odd: bool) -> BoxedStrategy<String> {
    let plain = prop_oneof![
        4 => (0u32..1000).prop_map(|v| v.to_string()),
        1 => any::<u32>().prop_map(|v| v.to_string()),
        1 => Just(u32::MAX.to_string()),
    ];
    if !odd {
        return plain.boxed();
    }
    prop_oneof![
        6 => plain,
        1 => Just("4294967296".to_string()),
        1 => number(true),
    ]
    .boxed()
}

/// A device ordinal: small, unknown (`-1`), or out of range.
fn device(odd: bool) -> BoxedStrategy<String> {
    let plain = prop_oneof![
        4 => (0u32..8).prop_map(|v| v.to_string()),
        1 => Just("-1".to_string()),
        1 => Just("4294967294".to_string()),
    ];
    if !odd {
        return plain.boxed();
    }
    prop_oneof![
        6 => plain,
        1 => Just("4294967295".to_string()),
        1 => Just("-2".to_string()),
        1 => Just("-10".to_string()),
        1 => Just("-1.0".to_string()),
        1 => Just("null".to_string()),
    ]
    .boxed()
}

/// `null` or what `value` gives.
fn nullable(value: BoxedStrategy<String>) -> BoxedStrategy<String> {
    prop_oneof![1 => Just("null".to_string()), 3 => value].boxed()
}

/// An address string: plain, in upper case, with leading zeros, or not an address.
fn address(odd: bool) -> BoxedStrategy<String> {
    let plain = prop_oneof![
        4 => any::<u64>().prop_map(|v| format!("\"{v:#x}\"")),
        1 => (0u64..4096).prop_map(|v| format!("\"0X{v:X}\"")),
        1 => Just("\"0x0000000000000000001\"".to_string()),
        1 => Just("\"0xffffffffffffffff\"".to_string()),
    ];
    if !odd {
        return plain.boxed();
    }
    prop_oneof![
        8 => plain,
        1 => Just("\"0x1ffffffffffffffff\"".to_string()),
        1 => Just("\"0x\"".to_string()),
        1 => Just("\"7f00\"".to_string()),
        1 => Just("\"0xg1\"".to_string()),
        1 => Just("\"\\u0030x10\"".to_string()),
        1 => Just("\"0x1\\u0030\"".to_string()),
        1 => Just("16".to_string()),
        1 => Just("null".to_string()),
    ]
    .boxed()
}

/// A string: a known name, plain text, unicode, or with escapes or a raw control character.
fn text(known: &'static [&'static str], odd: bool) -> BoxedStrategy<String> {
    let plain = prop_oneof![
        4 => proptest::sample::select(known).prop_map(|s| format!("\"{s}\"")),
        1 => "[a-zA-Z0-9_:./ -]{0,40}".prop_map(|s| format!("\"{s}\"")),
        1 => Just("\"é日本 ✓ 𝄞\"".to_string()),
        1 => Just("\"\"".to_string()),
    ];
    if !odd {
        return plain.boxed();
    }
    prop_oneof![
        6 => plain,
        1 => Just("\"a\\\"b\"".to_string()),
        1 => Just("\"\\u00e9t\\u00e9\"".to_string()),
        1 => Just("\"tab\\there\"".to_string()),
        1 => Just("\"\\ud834\\udd1e\"".to_string()),
        1 => Just("\"bad \\x escape\"".to_string()),
        1 => Just("\"raw \u{1} control\"".to_string()),
        1 => Just("\"unterminated".to_string()),
        1 => Just("7".to_string()),
        1 => Just("null".to_string()),
    ]
    .boxed()
}

const APIS: &[&str] = &["cuMemAlloc_v2", "cuMemAllocAsync", "cuMemCreate"];
const MEMORIES: &[&str] = &["device", "async", "vmm", "managed", "from_the_future"];
const STATES: &[&str] = &["live_at_exit", "released_by_context_destroy", "new_state"];
const OWNERS: &[&str] = &["program", "torch_caching_allocator", "cublas_workspace"];

/// One element of `leaks[]`, as JSON text.
fn leak(odd: bool) -> impl Strategy<Value = String> {
    (
        (address(odd), number(odd), number(odd), text(APIS, odd)),
        (text(MEMORIES, odd), device(odd), nullable(small(odd))),
        (number(odd), number(odd), number(odd), nullable(number(odd))),
        (
            text(STATES, odd),
            nullable(address(odd)),
            nullable(text(OWNERS, odd)),
        ),
        (any::<bool>(), any::<bool>()),
    )
        .prop_flat_map(
            move |(
                (address, size, requested, api),
                (memory, device, context),
                (thread, seq, time_ms, stack),
                (state, handle, owner),
                (with_handle, with_owner),
            )| {
                let mut members: Vec<Member> = vec![
                    ("address".into(), address),
                    ("size".into(), size),
                    ("requested".into(), requested),
                    ("api".into(), api),
                    ("memory".into(), memory),
                    ("device".into(), device),
                    ("context".into(), context),
                    ("thread".into(), thread),
                    ("seq".into(), seq),
                    ("time_ms".into(), time_ms),
                    ("stack".into(), stack),
                    ("state".into(), state),
                ];
                if with_handle {
                    members.push(("handle".into(), handle));
                }
                if with_owner {
                    members.push(("owner".into(), owner));
                }
                object(members, odd)
            },
        )
}

const MODULES: &[&str] = &[
    "/opt/app/train",
    "/usr/lib/libtorch_cuda.so",
    "libcuda.so.1",
];
const FUNCTIONS: &[&str] = &["main", "train::step", "at::native::empty_cuda"];
const FILES: &[&str] = &["train.cc", "layers.cc", "/src/a b/ü.py"];

/// One element of `stacks[].frames[]`, as JSON text.
fn frame(odd: bool) -> impl Strategy<Value = String> {
    (
        (address(odd), text(MODULES, odd), address(odd)),
        (nullable(text(FUNCTIONS, odd)), nullable(text(FILES, odd))),
        (nullable(small(odd)), any::<bool>(), any::<bool>()),
        prop_oneof![Just("true"), Just("false"), Just("null"), Just("0")]
            .prop_map(move |v| if v == "0" && !odd { "true" } else { v }),
    )
        .prop_flat_map(
            move |((ip, module, offset), (function, file), (line, with_inlined, full), inlined)| {
                let mut members: Vec<Member> = vec![
                    ("ip".into(), ip),
                    ("module".into(), module),
                    ("offset".into(), offset),
                ];
                if full || !odd {
                    members.push(("function".into(), function));
                    members.push(("file".into(), file));
                }
                members.push(("line".into(), line));
                if with_inlined {
                    members.push(("inlined".into(), inlined.to_string()));
                }
                object(members, odd)
            },
        )
}

/// One element of `stacks[]`, as JSON text.
fn stack(odd: bool) -> impl Strategy<Value = String> {
    (
        number(odd),
        proptest::collection::vec(frame(odd), 0..5),
        ws(),
        prop_oneof![
            2 => Just("null".to_string()),
            1 => (
                prop_oneof![Just("frames"), Just("python")],
                0u64..20,
                "[0-9a-f]{16}",
                prop_oneof![Just("null"), Just("\"user\""), Just("\"fallback\"")],
                any::<bool>(),
            )
                .prop_map(|(list, index, fp, kind, with_kind)| {
                    let kind = if with_kind { format!(",\"kind\":{kind}") } else { String::new() };
                    format!(
                        "{{\"in\":\"{list}\",\"index\":{index},\"fingerprint\":\"{fp}\"{kind}}}"
                    )
                }),
        ],
        nullable(text(OWNERS, odd)),
        (any::<bool>(), any::<bool>(), 0u8..12),
    )
        .prop_flat_map(
            move |(id, frames, space, site, owner, (with_site, with_owner, extra))| {
                let mut members: Vec<Member> =
                    vec![("id".into(), id), ("frames".into(), array(frames, space))];
                if with_site {
                    members.push(("site".into(), site));
                }
                if with_owner {
                    members.push(("owner".into(), owner));
                }
                if odd && extra == 0 {
                    members.push((
                        "python".into(),
                        r#"[{"file":"a.py","line":3,"function":"f"}]"#.into(),
                    ));
                }
                if odd && extra == 1 {
                    members.push(("mixed".into(), "[]".into()));
                }
                object(members, odd)
            },
        )
}

/// A report: a fixture's other members with generated `leaks` and `stacks`, in either order.
fn document(odd: bool) -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(leak(odd), 0..6),
        proptest::collection::vec(stack(odd), 0..4),
        ws(),
        any::<bool>(),
    )
        .prop_map(|(leaks, stacks, space, leaks_first)| {
            let base = fixture_text("leaks-two-contexts.json");
            let mut v: serde_json::Value = serde_json::from_str(&base).unwrap();
            let map = v.as_object_mut().unwrap();
            map.remove("leaks");
            map.remove("stacks");
            let rest = serde_json::to_string(&v).unwrap();
            let rest = &rest[1..rest.len() - 1];
            let leaks = format!("\"leaks\"{space}:{space}{}", array(leaks, space.clone()));
            let stacks = format!("\"stacks\":{}", array(stacks, space.clone()));
            if leaks_first {
                format!("{space}{{{leaks},{rest},{stacks}}}{space}")
            } else {
                format!("{{{stacks},{space}{rest},{leaks}}}")
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Documents as the shim writes them (any whitespace, any values in range): the fast path
    /// reads every one, as serde_json does.
    #[test]
    fn the_fast_path_reads_what_the_shim_writes(text in document(false)) {
        prop_assert!(agrees(&text)?, "the fast path gave up on {text}");
    }

    /// Documents with odd spellings, keys and values: whatever the fast path reads is what
    /// serde_json gives, and it reads nothing serde_json refuses.
    #[test]
    fn the_fast_path_agrees_with_serde_json(text in document(true)) {
        agrees(&text)?;
    }

    /// A fixture with bytes changed or cut short.
    #[test]
    fn the_fast_path_agrees_on_damaged_fixtures(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        name in proptest::sample::select(&["leaks-two-contexts.json", "attribution.json", "h200-torch.json"][..]),
    ) {
        let mut bytes = fixture_text(name).into_bytes();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        if let Ok(text) = std::str::from_utf8(&bytes) {
            agrees(text)?;
        }
        bytes.truncate(cut.index(bytes.len()));
        if let Ok(text) = std::str::from_utf8(&bytes) {
            agrees(text)?;
        }
    }
}

/// Checks the fast header against serde_json's on `text`; gives whether the fast path read it.
fn header_agrees(text: &str) -> Result<bool, TestCaseError> {
    let whole: Result<Header, _> = serde_json::from_str(text);
    let fast = header(text);
    match (whole, &fast) {
        (Ok(w), Some((schema, version, processes))) => {
            prop_assert_eq!(&w.schema, schema);
            prop_assert_eq!(&w.schema_version, version);
            let texts = w
                .processes
                .map(|p| p.iter().map(|r| r.get()).collect::<Vec<_>>());
            prop_assert_eq!(&texts, processes);
        }
        (Err(e), Some((_, _, processes))) => {
            // The processes are only stepped over: one of them must be what serde_json refuses.
            let refused = processes
                .iter()
                .flatten()
                .any(|p| serde_json::from_str::<serde::de::IgnoredAny>(p).is_err());
            prop_assert!(
                refused,
                "serde_json refuses ({e}) a header whose processes it reads"
            );
        }
        (_, None) => {}
    }
    Ok(fast.is_some())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A merged report with bytes changed or cut short: the header read fast is serde_json's.
    #[test]
    fn the_fast_header_agrees_on_damaged_merged_reports(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
        name in proptest::sample::select(&["merged.json", "merged-ranks.json", "merged-workers.json"][..]),
    ) {
        let mut bytes = fixture_text(name).into_bytes();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        if let Ok(text) = std::str::from_utf8(&bytes) {
            header_agrees(text)?;
            agrees(text)?;
        }
        bytes.truncate(cut.index(bytes.len()));
        if let Ok(text) = std::str::from_utf8(&bytes) {
            header_agrees(text)?;
        }
    }

    /// Generated JSON values as a merged report's members and processes: the header read fast
    /// is serde_json's.
    #[test]
    fn the_fast_header_agrees_on_generated_values(
        values in proptest::collection::vec(json_value(), 0..6),
        schema in prop_oneof![
            Just("\"cuguard-report\"".to_string()),
            Just("null".to_string()),
            Just("\"cu\\u0067uard-report\"".to_string()),
            json_value(),
        ],
        version in prop_oneof![Just("1".to_string()), Just("1.0".to_string()), json_value()],
        space in ws(),
        repeat in 0u8..8,
    ) {
        let processes = array(values.clone(), space.clone());
        let mut members = vec![
            format!("\"schema\":{space}{schema}"),
            format!("\"schema_version\":{version}"),
            format!("\"merged\":{}", values.first().cloned().unwrap_or("{}".into())),
            format!("\"processes\"{space}:{processes}"),
        ];
        match repeat {
            0 => members.push(format!("\"processes\":{processes}")),
            1 => members.push("\"schema\":null".into()),
            2 => members.push("\"processes\":null".into()),
            3 => members.reverse(),
            _ => {}
        }
        let text = format!("{{{}}}{space}", members.join(","));
        let read = header_agrees(&text)?;
        let plain = schema == "\"cuguard-report\"" || schema == "null";
        if repeat >= 4 && values.is_empty() && version == "1" && plain {
            prop_assert!(read, "the fast header gave up on {}", text);
        }
    }
}

/// A JSON value, as text: nested arrays and objects of strings (escapes included), numbers
/// (every form of the grammar, and some that are not), literals and whitespace.
fn json_value() -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        Just("nul".to_string()),
        Just("tru".to_string()),
        "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
        prop_oneof![
            Just("01"),
            Just("-"),
            Just("1."),
            Just(".5"),
            Just("1e"),
            Just("+1"),
            Just("-01"),
            Just("1e+"),
            Just("0x10"),
        ]
        .prop_map(str::to_string),
        "[a-z é日]{0,8}".prop_map(|s| format!("\"{s}\"")),
        prop_oneof![
            Just(r#""a\"b""#),
            Just(r#""\\\/\b\f\n\r\t""#),
            Just(r#""\u00e9""#),
            Just(r#""\x""#),
            Just("\"raw\u{1}\""),
            Just(r#""\ud800""#),
            Just("\"open"),
        ]
        .prop_map(str::to_string),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            (proptest::collection::vec(inner.clone(), 0..4), ws())
                .prop_map(|(items, space)| array(items, space)),
            (proptest::collection::vec(("[a-z]{1,4}", inner), 0..4), ws()).prop_map(
                |(members, space)| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, v)| format!("\"{k}\"{space}:{space}{v}"))
                        .collect();
                    format!("{{{space}{}{space}}}", members.join(","))
                }
            ),
            Just("[1,]".to_string()),
            Just("{\"a\":1,}".to_string()),
            Just("{\"a\" 1}".to_string()),
            Just("[1 2]".to_string()),
        ]
    })
    .boxed()
}

/// Every fixture gives what serde_json gives, and the plain ones are read by the fast path.
#[test]
fn the_fast_path_agrees_on_every_fixture() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let (mut fast, mut headers) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if agrees(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
            fast += 1;
        }
        if header_agrees(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
            headers += 1;
        }
    }
    assert!(fast >= 3, "the fast path read {fast} fixtures");
    assert!(headers >= 6, "the fast header read {headers} fixtures");
}

/// Numbers and addresses at their edges, one by one.
#[test]
fn edges_of_numbers_and_addresses() {
    let base =
        |leak: &str| format!(r#"{{"schema":"cuguard-report","leaks":[{leak}],"stacks":[],"x":1}}"#);
    let plain = r#""address":"0x10","size":8,"requested":7,"api":"cuMemAlloc_v2","memory":"device","device":0,"context":1,"thread":5,"seq":3,"time_ms":9,"stack":2,"state":"live_at_exit""#;
    let cases = [
        ("size", "18446744073709551615"),
        ("size", "18446744073709551616"),
        ("size", "0"),
        ("size", "00"),
        ("size", "01"),
        ("size", "-0"),
        ("size", "1.5"),
        ("size", "1e2"),
        ("device", "-1"),
        ("device", "-1.0"),
        ("device", "-1e0"),
        ("device", "-12"),
        ("device", "4294967294"),
        ("device", "4294967295"),
        ("device", "4294967296"),
        ("context", "4294967295"),
        ("context", "4294967296"),
        ("context", "null"),
        ("stack", "null"),
        ("address", "\"0x0\""),
        ("address", "\"0x00000000000000000\""),
        ("address", "\"0x10000000000000000\""),
        ("address", "\"0x0ffffffffffffffff\""),
        ("address", "\"0x0001ffffffffffffffff\""),
        ("address", "\"0XaBc\""),
        ("address", "\"0x\""),
        ("address", "\"x10\""),
        ("api", "\"\""),
        ("api", "\"\\u0000\""),
    ];
    for (key, value) in cases {
        let leak = plain.replace(
            &format!("\"{key}\":{}", field(plain, key)),
            &format!("\"{key}\":{value}"),
        );
        let text = base(&format!("{{{leak}}}"));
        // The skeleton is not a whole report: compare the leaks alone.
        let whole: Result<Vec<crate::Leak>, _> = serde_json::from_str(&format!("[{{{leak}}}]"));
        let mut c = super::Cursor::new(&text);
        c.i = text.find("[{").unwrap() + 1;
        let fast = c.leak().map(|l| l.to_leak());
        match (whole, fast) {
            (Ok(w), Some(f)) => assert_eq!(w, vec![f], "{key}: {value}"),
            (Err(_), Some(f)) => panic!("{key}: {value}: serde_json refuses, fast read {f:?}"),
            (_, None) => {}
        }
    }
}

/// The value of `key` in `members` (a leak's members as text).
fn field<'a>(members: &'a str, key: &str) -> &'a str {
    let start = members.find(&format!("\"{key}\":")).unwrap() + key.len() + 3;
    let end = members[start..]
        .find(",\"")
        .map_or(members.len(), |e| start + e);
    &members[start..end]
}

mod keys {
    //! The fast path's key lists name every field of a leak and a stack, as the types declare
    //! them to serde and as `docs/report.schema.json` publishes them: a field added anywhere
    //! but here would send every report down the slow path.

    use std::collections::BTreeSet;
    use std::fmt;

    use serde::de::{self, Deserialize, Visitor};
    use serde_json::Value;

    use super::super::{FRAME_KEYS, Key, LEAK_KEYS, SITE_KEYS, STACK_KEYS, STACK_SLOW_KEYS};
    use crate::{Frame, Leak, LeakView, PyAllocation, Stack, StackSite};

    /// A deserializer that only asks a struct for the names of its fields.
    struct Introspect<'a>(&'a mut &'static [&'static str]);

    #[derive(Debug)]
    struct Stop;

    impl fmt::Display for Stop {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<T: fmt::Display>(_: T) -> Self {
            Stop
        }
    }

    impl<'de> de::Deserializer<'de> for Introspect<'_> {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            *self.0 = fields;
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }

    /// The JSON names of `T`'s fields, as its derived `Deserialize` declares them.
    fn fields<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
        let mut names: &'static [&'static str] = &[];
        let _ = T::deserialize(Introspect(&mut names));
        assert!(
            !names.is_empty(),
            "{} is a struct",
            std::any::type_name::<T>()
        );
        names.to_vec()
    }

    fn names(keys: &[Key]) -> Vec<&'static str> {
        keys.iter()
            .map(|k| std::str::from_utf8(k.name).unwrap())
            .collect()
    }

    fn set<'a>(names: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
        names.into_iter().map(str::to_string).collect()
    }

    /// The properties the schema gives the object at `pointer`.
    fn schema_properties(pointer: &str) -> BTreeSet<String> {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/report.schema.json");
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let at = schema
            .pointer(pointer)
            .unwrap_or_else(|| panic!("{pointer}"));
        at["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{pointer} has properties"))
            .keys()
            .cloned()
            .collect()
    }

    /// The keys of the JSON object `text`, in the order written.
    fn keys_in_order(text: &str) -> Vec<String> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
                let mut keys = Vec::new();
                while let Some(k) = map.next_key::<String>()? {
                    map.next_value::<de::IgnoredAny>()?;
                    keys.push(k);
                }
                Ok(keys)
            }
        }
        de::Deserializer::deserialize_map(&mut serde_json::Deserializer::from_str(text), Keys)
            .unwrap()
    }

    /// A leak with every optional field present.
    fn full_leak() -> Leak {
        Leak {
            allocation: crate::Allocation {
                address: crate::Addr(0x10),
                size: 8,
                requested: 7,
                api: "cuMemAlloc_v2".into(),
                memory: crate::Memory::Vmm,
                device: 0,
                context: Some(1),
                thread: 5,
                seq: 3,
                time_ms: 9,
                stack: Some(2),
                tag: Some("kv_cache".into()),
            },
            state: crate::LeakState::LiveAtExit,
            handle: Some(crate::Addr(0x20)),
            owner: Some("program".into()),
        }
    }

    #[test]
    fn a_leaks_fields_are_the_fast_paths_keys() {
        let leak = full_leak();
        let text = serde_json::to_string(&leak).unwrap();
        let written = keys_in_order(&text);
        assert_eq!(
            written,
            names(&LEAK_KEYS),
            "Leak and the fast path, in order"
        );
        // Its core first: the keys of the one declaration.
        let core = fields::<crate::Allocation<std::sync::Arc<str>>>();
        assert_eq!(written[..core.len()], core[..], "the core, first");
        // The fold's form reads every one of them.
        let view: LeakView = serde_json::from_str(&text).unwrap();
        assert_eq!(view.to_leak(), leak, "LeakView and Leak");
        // A Python allocation is a leak's record without `state` and `handle`, and its class.
        let py = PyAllocation {
            allocation: leak.allocation.clone(),
            owner: Some("program".into()),
            freed_after: true,
            class: crate::HeldClass::Held,
            holders: Vec::new(),
            blocks: Vec::new(),
        };
        let py = keys_in_order(&serde_json::to_string(&py).unwrap());
        let py = set(py.iter().map(String::as_str));
        let missing: Vec<_> = written
            .iter()
            .filter(|k| !["state", "handle"].contains(&k.as_str()) && !py.contains(*k))
            .collect();
        assert!(missing.is_empty(), "PyAllocation lacks {missing:?}");
        assert_eq!(
            schema_properties("/$defs/process_report/properties/leaks/items"),
            set(written.iter().map(String::as_str)),
            "leaks[] in the schema"
        );
    }

    #[test]
    fn a_stacks_fields_are_the_fast_paths_keys() {
        let read = names(&STACK_KEYS);
        let all = set(read.iter().copied().chain(STACK_SLOW_KEYS));
        assert_eq!(
            all.len(),
            read.len() + STACK_SLOW_KEYS.len(),
            "no key twice"
        );
        assert_eq!(set(fields::<Stack>()), all, "Stack and the fast path");
        assert_eq!(
            schema_properties("/$defs/process_report/properties/stacks/items"),
            all,
            "stacks[] in the schema"
        );
        assert_eq!(fields::<Frame>(), names(&FRAME_KEYS), "Frame, in order");
        assert_eq!(schema_properties("/$defs/frame"), set(names(&FRAME_KEYS)));
        assert_eq!(
            fields::<StackSite>(),
            names(&SITE_KEYS),
            "StackSite, in order"
        );
        let site =
            std::path::Path::new("/$defs/process_report/properties/stacks/items/properties/site");
        let one_of = format!("{}/oneOf", site.display());
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/report.schema.json");
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let object = schema
            .pointer(&one_of)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().position(|v| v.get("properties").is_some()))
            .expect("site is an object or null");
        assert_eq!(
            schema_properties(&format!("{one_of}/{object}")),
            set(names(&SITE_KEYS)),
            "stacks[].site in the schema"
        );
    }
}

/// Two names of the document are one key exactly when their texts are equal, at every length
/// a name is read in words (up to 16 bytes) and past it, whichever byte differs.
#[test]
fn names_are_one_key_exactly_when_their_texts_are() {
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};
    let hash = |name: Name<'_>| {
        let mut h = DefaultHasher::new();
        name.hash(&mut h);
        h.finish()
    };
    let texts: Vec<String> = (0..=20)
        .flat_map(|n| {
            let base = "abcdefghijklmnopqrstu"[..n].to_string();
            let from = base.clone();
            let changed = (0..n).map(move |i| {
                let mut b = from.clone().into_bytes();
                b[i] = b'Z';
                String::from_utf8(b).unwrap()
            });
            std::iter::once(base.clone())
                .chain(changed)
                .chain(std::iter::once(format!("{base}\0")))
        })
        .collect();
    for a in &texts {
        for b in &texts {
            assert_eq!(Name(a) == Name(b), a == b, "{a:?} {b:?}");
            if a == b {
                assert_eq!(hash(Name(a)), hash(Name(b)));
            }
        }
    }
}
