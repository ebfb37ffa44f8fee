//! The reader's fast path against the shim's own output: reports written by real workloads under
//! the shim, on the simulated driver, read by the fast path and by serde_json give the same
//! report, every field; the fast path never gives up on them; and between them the reports carry
//! every key of a leak, a stack, a frame and a site, so that a field the shim starts writing
//! cannot send reports down the slow path unseen.

use std::collections::BTreeSet;

use cuguard_format::read::{DEFAULT_MAX_REPORT_BYTES, Document, fast_path};
use cuguard_format::{LeakFold, Report};
use serde_json::Value;

use crate::support::{c_program, run, scratch_dir, shim_command};

/// The keys of each object of `list` (`None`: none), added to `seen`.
fn keys_of<'a>(list: impl IntoIterator<Item = &'a Value>, seen: &mut BTreeSet<String>) {
    for object in list {
        if let Some(map) = object.as_object() {
            seen.extend(map.keys().cloned());
        }
    }
}

#[test]
fn the_fast_path_reads_every_field_the_shim_writes() {
    let dir = scratch_dir("format-read");
    let (mut leak, mut stack, mut frame, mut site) = Default::default();
    // leaks_linked: every memory kind, VMM handles, the pool off and on; stack_sites and
    // stack_named: stacks with sites and named frames; tag_steps: leaks with tags.
    let runs = [
        ("leaks_linked", "0"),
        ("leaks_linked", "1"),
        ("stack_sites", "0"),
        ("stack_named", "0"),
        ("tag_steps", "1"),
    ];
    for (program, pool) in runs {
        let path = dir.join(format!("{program}-pool{pool}.json"));
        let _ = std::fs::remove_file(&path);
        let mut cmd = shim_command(&c_program(program), &path);
        cmd.env("CUGUARD_POOL", pool).env("CUGUARD_QUIET", "1");
        run(&mut cmd, true);
        let what = format!("{program}, pool {pool}");
        let text = std::fs::read_to_string(&path).unwrap();

        let slow: Report = serde_json::from_str(&text).unwrap();
        assert!(!slow.leaks.is_empty(), "{what}: leaks");
        let fast = fast_path(&text).unwrap_or_else(|| panic!("{what}: the fast path gave up"));
        assert_eq!(fast, slow, "{what}");
        // The reader, as the commands use it: the report whole, or beside its leaks' fold.
        let read: Vec<Report> = Document::read(&path)
            .unwrap()
            .into_reports()
            .map(Result::unwrap)
            .collect();
        assert_eq!(read, std::slice::from_ref(&slow), "{what}");
        let (doc, fold) = Document::read_folding(&path, DEFAULT_MAX_REPORT_BYTES, 3).unwrap();
        let folded = doc.into_reports().next().unwrap().unwrap();
        assert_eq!(
            folded,
            Report {
                leaks: Vec::new(),
                ..slow.clone()
            },
            "{what}"
        );
        let whole = LeakFold::of(&slow.leaks, 3);
        assert_eq!(fold.groups(), whole.groups(), "{what}");
        assert_eq!(fold.count(), slow.leaks.len() as u64, "{what}");
        assert_eq!(fold.largest(), whole.largest(), "{what}");

        let v: Value = serde_json::from_str(&text).unwrap();
        crate::cli_schema::validate(&v).unwrap_or_else(|e| panic!("{what}: {e}"));
        keys_of(v["leaks"].as_array().unwrap(), &mut leak);
        let stacks = v["stacks"].as_array().unwrap();
        keys_of(stacks, &mut stack);
        keys_of(
            stacks.iter().flat_map(|s| s["frames"].as_array().unwrap()),
            &mut frame,
        );
        keys_of(stacks.iter().map(|s| &s["site"]), &mut site);
    }
    // Every key the schema publishes, but a Python report's and an origin's (`python`, `mixed`,
    // `origin`: the fast path leaves those stacks to serde_json on purpose).
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/report.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let published = |pointer: &str| -> BTreeSet<String> {
        let at = schema
            .pointer(pointer)
            .unwrap_or_else(|| panic!("{pointer}"));
        let object = match at.get("oneOf").and_then(Value::as_array) {
            Some(any) => any.iter().find(|v| v.get("properties").is_some()).unwrap(),
            None => at,
        };
        object["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    let stacks = "/$defs/process_report/properties/stacks/items";
    assert_eq!(
        leak,
        published("/$defs/process_report/properties/leaks/items"),
        "leaks[]"
    );
    let mut stack_keys = published(stacks);
    for slow in ["python", "mixed", "origin"] {
        assert!(stack_keys.remove(slow), "{slow}");
    }
    assert_eq!(stack, stack_keys, "stacks[]");
    assert_eq!(frame, published("/$defs/frame"), "stacks[].frames[]");
    assert_eq!(
        site,
        published(&format!("{stacks}/properties/site")),
        "stacks[].site"
    );
}
