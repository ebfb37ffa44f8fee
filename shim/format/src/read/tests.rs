//! Tests of the model and the reader: round trips, and refusal of everything that is not a
//! version-1 report, each with its one-line reason; and a fold asked for is the leaks' fold.

use std::path::{Path, PathBuf};

use super::*;
use crate::*;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn read_fixture(name: &str) -> Report {
    let doc = Document::read(&fixture(name)).unwrap();
    let mut reports: Vec<Report> = doc.into_reports().map(Result::unwrap).collect();
    assert_eq!(reports.len(), 1);
    reports.remove(0)
}

fn refuse(text: &str) -> String {
    match Document::from_bytes(Path::new("r.json"), text.as_bytes().to_vec()) {
        Ok(doc) => match doc.into_reports().find_map(Result::err) {
            Some(e) => e.to_string(),
            None => panic!("accepted: {text}"),
        },
        Err(e) => e.to_string(),
    }
}

#[test]
fn fixtures_read_with_their_additions() {
    let r = read_fixture("leaks-two-contexts.json");
    assert_eq!(r.leaks.len(), 5);
    assert_eq!(
        r.contexts[1].destroyed_by.as_deref(),
        Some("cuCtxDestroy_v2")
    );
    assert_eq!(r.leaks[2].memory, Memory::Pitched);
    assert_eq!(r.leaks[3].state, LeakState::ReleasedByContextDestroy);
    assert_eq!(r.leaks[0].address, Addr(0x7f2a40000000));
    assert_eq!(r.doors.as_ref().map(|d| d.get_proc_address), Some(41));
    assert_eq!(r.modules.len(), 3);
    assert!(r.stats.devices[0].pool.is_some());

    let e = read_fixture("events.json");
    assert_eq!(e.events[0].kind, EventKind::DoubleFree);
    assert_eq!(
        e.events.last().map(|e| e.kind.clone()),
        Some(EventKind::Other("kind_from_the_future".into()))
    );
    assert_eq!(e.timeline.as_ref().map(|t| t.samples.len()), Some(6));
    assert_eq!(e.stacks[0].python[0].function, "load_batch");

    let i = read_fixture("incomplete.json");
    assert!(!i.complete);
    assert_eq!(i.reason, Reason::Signal);
    assert!(i.config.is_none() && i.timeline.is_none() && i.doors.is_none());
}

#[test]
fn round_trip_is_lossless_for_known_fields() {
    for name in ["leaks-two-contexts.json", "events.json", "incomplete.json"] {
        let r = read_fixture(name);
        let text = serde_json::to_vec(&r).unwrap();
        let again = Document::from_bytes(Path::new(name), text)
            .unwrap()
            .into_reports()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(r, again, "{name}");
    }
}

#[test]
fn addresses_are_written_lower_case() {
    let r = read_fixture("leaks-two-contexts.json");
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["leaks"][0]["address"], "0x7f2a40000000");
    assert_eq!(v["contexts"][0]["handle"], "0x55d0c0a1b2c0");
}

fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

fn with(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v: serde_json::Value = serde_json::from_str(&fixture_text(name)).unwrap();
    edit(&mut v);
    v.to_string()
}

#[test]
fn refusals_name_the_problem_on_one_line() {
    let full = fixture_text("events.json");
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "r.json: truncated: the file is empty"),
        (
            full[..full.len() / 2].to_string(),
            "r.json: truncated: EOF while parsing",
        ),
        (
            "{\"schema\": \"cuguard-report\",}".into(),
            "r.json: not valid JSON: trailing comma",
        ),
        (
            "[1, 2, 3]".into(),
            "r.json: not a cuguard report: the document is not a JSON object",
        ),
        (
            "{\"hello\": 1}".into(),
            "r.json: not a cuguard report: no \"schema\" field",
        ),
        (
            with("events.json", |v| v["schema"] = "heaptrack".into()),
            "r.json: not a cuguard report: schema is \"heaptrack\", expected \"cuguard-report\"",
        ),
        (
            with("events.json", |v| v["schema_version"] = 2.into()),
            "r.json: unsupported schema_version 2 (this cuguard reads version 1)",
        ),
        (
            with("events.json", |v| {
                v["schema_version"] = 2.into();
                v.as_object_mut().unwrap().remove("leaks");
            }),
            "r.json: unsupported schema_version 2",
        ),
        (
            with("events.json", |v| {
                v.as_object_mut().unwrap().remove("leaks");
            }),
            "r.json: invalid report: missing field `leaks`",
        ),
        (
            with("events.json", |v| v["leaks"][0]["size"] = "big".into()),
            "r.json: invalid report: invalid type: string \"big\", expected u64",
        ),
        (
            with("events.json", |v| v["leaks"][0]["size"] = (-1).into()),
            "r.json: invalid report: invalid value: integer `-1`, expected u64",
        ),
        (
            with("events.json", |v| v["leaks"][0]["address"] = "7f00".into()),
            "r.json: invalid report: invalid address \"7f00\"",
        ),
        (
            format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)),
            "r.json: not a cuguard report",
        ),
        (
            format!("{{\"a\":{}1{}}}", "[".repeat(10_000), "]".repeat(10_000)),
            "r.json: not a cuguard report: no \"schema\" field",
        ),
        (
            with("events.json", |v| v["config"] = "DEEP".into()).replace(
                "\"DEEP\"",
                &format!("{{\"x\":{}1{}}}", "[".repeat(10_000), "]".repeat(10_000)),
            ),
            "r.json: not valid JSON: recursion limit exceeded",
        ),
    ];
    for (input, want) in cases {
        let got = refuse(&input);
        assert!(got.starts_with(want), "got {got:?}, want {want:?}");
        assert!(!got.contains('\n'), "one line: {got:?}");
    }
}

#[test]
fn huge_string_values_are_cut_in_messages() {
    let long = "x".repeat(100_000);
    let got = refuse(&with("events.json", |v| v["schema"] = long.into()));
    assert!(got.len() < 500, "{} chars", got.len());
}

#[test]
fn merged_reports_read_process_by_process() {
    let a = fixture_text("leaks-two-contexts.json");
    let b = fixture_text("incomplete.json");
    let merged = format!(
        "{{\"schema\":\"cuguard-report\",\"schema_version\":1,\"tool\":{{\"name\":\"cuguard\",\"version\":\"0\"}},\
         \"merged\":{{\"created_unix_ms\":1,\"inputs\":[\"a\",\"b\"]}},\"processes\":[{a},{b}]}}"
    );
    let doc = Document::from_bytes(Path::new("m.json"), merged.into_bytes()).unwrap();
    assert!(doc.is_merged());
    assert_eq!(doc.len(), 2);
    let raws: Vec<&[u8]> = doc.raw_processes().collect();
    assert_eq!(raws[0], a.trim_end().as_bytes());
    let pids: Vec<u32> = doc.into_reports().map(|r| r.unwrap().process.pid).collect();
    assert_eq!(pids, [4242, 9001]);

    let bad = format!(
        "{{\"schema\":\"cuguard-report\",\"schema_version\":1,\"processes\":[{a},{{\"schema\":\"cuguard-report\",\"schema_version\":1}}]}}"
    );
    let doc = Document::from_bytes(Path::new("m.json"), bad.into_bytes()).unwrap();
    let errors: Vec<String> = doc
        .into_reports()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("m.json: invalid report (process 1): missing field `tool`"),
        "{}",
        errors[0]
    );
}

#[test]
fn a_merged_process_that_is_not_json_is_refused_where_it_is_in_the_file() {
    let a = fixture_text("incomplete.json");
    let merged = format!(
        "{{\"schema\":\"cuguard-report\",\"schema_version\":1,\"merged\":{{}},\n\"processes\":[{a},\n{{\"schema\": tru}}]}}"
    );
    let whole = serde_json::from_str::<serde::de::IgnoredAny>(&merged).unwrap_err();
    let want = format!("m.json: not valid JSON: {whole}");
    assert!(
        want.contains(&format!("line {}", merged.lines().count())),
        "{want}"
    );
    // The header steps over the processes; the bad one is found when it is parsed.
    let doc = Document::from_bytes(Path::new("m.json"), merged.into_bytes()).unwrap();
    assert_eq!(doc.len(), 2);
    assert_eq!(doc.check_processes().unwrap_err().to_string(), want);
    let got: Vec<Result<u32, String>> = doc
        .into_reports()
        .map(|r| r.map(|r| r.process.pid).map_err(|e| e.to_string()))
        .collect();
    assert_eq!(got, [Ok(9001), Err(want)]);
}

#[test]
fn the_merged_hint_only_orders_attempts() {
    // The hint is seen where `cuguard merge` writes it, and not in a single report.
    assert!(looks_merged(
        br#"{"schema":"cuguard-report","schema_version":1,"merged":{"inputs":[]},"processes":[]}"#
    ));
    assert!(looks_merged(b"{\"merged\" : {}}"));
    assert!(!looks_merged(fixture_text("events.json").as_bytes()));
    // A single report that mentions "merged" early is still a single report.
    let single = with("events.json", |v| {
        v["config"] = serde_json::json!({"merged": true});
    });
    let single = format!("{{\"aaa\":{{\"merged\":1}},{}", &single[1..]);
    let doc = Document::from_bytes(Path::new("s.json"), single.into_bytes()).unwrap();
    assert!(!doc.is_merged());
    // A merged report without the "merged" field, processes first, is still merged.
    let a = fixture_text("incomplete.json");
    let merged =
        format!("{{\"processes\":[{a}],\"schema\":\"cuguard-report\",\"schema_version\":1}}");
    let doc = Document::from_bytes(Path::new("m.json"), merged.into_bytes()).unwrap();
    assert!(doc.is_merged());
    assert_eq!(
        doc.into_reports()
            .map(|r| r.unwrap().process.pid)
            .collect::<Vec<_>>(),
        [9001]
    );
    // A hinted document that is neither gets the single report's complaint.
    let bad = with("events.json", |v| {
        v.as_object_mut().unwrap().remove("stats");
        v["merged"] = 1.into();
    });
    let bad = format!("{{\"merged\":1,{}", &bad[1..]);
    let e = Document::from_bytes(Path::new("b.json"), bad.into_bytes()).unwrap_err();
    assert!(e.to_string().contains("missing field `stats`"), "{e}");
}

#[test]
fn files_over_the_limit_are_refused() {
    let e = Document::read_with_limit(&fixture("events.json"), 100).unwrap_err();
    assert!(
        e.to_string().contains("more than the limit of 100 bytes"),
        "{e}"
    );
    let e = Document::read(&fixture("no-such-file.json")).unwrap_err();
    assert!(e.to_string().contains("No such file"), "{e}");
}
