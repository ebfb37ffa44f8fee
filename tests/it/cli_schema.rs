//! `docs/report.schema.json` against the hand-written fixtures: every fixture (single and merged)
//! validates, and breaking a field of the contract makes validation fail.
//!
//! [`validate`] is there for other tests too: any report the shim writes must pass it.

use std::path::PathBuf;

use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The compiled schema.
pub fn validator() -> &'static jsonschema::Validator {
    static V: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let text = std::fs::read_to_string(root().join("docs/report.schema.json")).unwrap();
        let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
        jsonschema::draft202012::new(&schema).expect("schema compiles")
    })
}

/// Validates a report (single or merged) against the schema; the error lists every violation.
pub fn validate(report: &Value) -> Result<(), String> {
    let errors: Vec<String> = validator()
        .iter_errors(report)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

fn fixture(name: &str) -> Value {
    let path = root().join("tests/fixtures").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Hand-written fixtures (`attribution.json` holds every field added for attribution: owners,
/// peaks, stack samples, out-of-memory records, reconciliation, site kinds, mixed stacks), two
/// reports the shim wrote on the simulated driver (`harness/workloads/c/leaks_threads.c` with two
/// devices, `cudarc_leaks`), and two it wrote on the H200 (docs/gpu-runs/2026-11-29-thin: the
/// planted-leak program, PyTorch).
const GOOD: [&str; 9] = [
    "leaks-two-contexts.json",
    "events.json",
    "incomplete.json",
    "merged.json",
    "attribution.json",
    "sim-leaks-threads.json",
    "sim-cudarc-leaks.json",
    "h200-planted.json",
    "h200-torch.json",
];

#[test]
fn schema_fixtures_validate() {
    for name in GOOD {
        if let Err(e) = validate(&fixture(name)) {
            panic!("{name}:\n{e}");
        }
    }
}

fn fails(name: &str, what: &str, edit: impl FnOnce(&mut Value)) {
    let mut v = fixture(name);
    edit(&mut v);
    assert!(
        validate(&v).is_err(),
        "{name} with {what} should not validate"
    );
}

fn remove(v: &mut Value, pointer: &str, key: &str) {
    v.pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("{pointer}"))
        .remove(key)
        .unwrap_or_else(|| panic!("{pointer}/{key}"));
}

#[test]
fn schema_refuses_broken_reports() {
    let f = "leaks-two-contexts.json";
    for key in [
        "schema",
        "schema_version",
        "tool",
        "complete",
        "reason",
        "process",
        "driver",
        "devices",
        "contexts",
        "leaks",
        "events",
        "stacks",
        "stats",
    ] {
        fails(f, &format!("no {key}"), |v| remove(v, "", key));
    }
    for key in [
        "address",
        "size",
        "requested",
        "api",
        "memory",
        "device",
        "context",
        "thread",
        "seq",
        "time_ms",
        "stack",
        "state",
    ] {
        fails(f, &format!("a leak without {key}"), |v| {
            remove(v, "/leaks/0", key)
        });
    }
    fails(f, "a frame without function", |v| {
        remove(v, "/stacks/0/frames/0", "function")
    });
    fails(f, "a context without primary", |v| {
        remove(v, "/contexts/0", "primary")
    });
    fails(f, "stats without pool", |v| {
        remove(v, "/stats/devices/0", "pool")
    });
    fails(f, "schema_version 2", |v| v["schema_version"] = json!(2));
    fails(f, "another schema", |v| v["schema"] = json!("heaptrack"));
    fails(f, "a size as a string", |v| {
        v["leaks"][0]["size"] = json!("8")
    });
    fails(f, "a negative size", |v| v["leaks"][0]["size"] = json!(-8));
    fails(f, "a float size", |v| v["leaks"][0]["size"] = json!(8.5));
    fails(f, "an upper-case address", |v| {
        v["leaks"][0]["address"] = json!("0x7F2A40000000")
    });
    fails(f, "an address as a number", |v| {
        v["leaks"][0]["address"] = json!(1234)
    });
    fails(f, "an unknown memory kind", |v| {
        v["leaks"][0]["memory"] = json!("magic")
    });
    fails(f, "an unknown state", |v| {
        v["leaks"][0]["state"] = json!("gone")
    });
    fails(f, "an unknown reason", |v| v["reason"] = json!("whim"));
    fails(f, "a pool without reserved_bytes", |v| {
        remove(v, "/stats/devices/0/pool", "reserved_bytes")
    });
    fails(
        f,
        "a timeline sample without device",
        |v| v["timeline"] = json!({"interval_ms": 10, "samples": [{"time_ms": 0, "live_bytes": 0, "reserved_bytes": 0}]}),
    );
    fails("events.json", "an event without kind", |v| {
        remove(v, "/events/0", "kind")
    });
    fails("merged.json", "a merged process without leaks", |v| {
        remove(v, "/processes/1", "leaks")
    });
    fails("merged.json", "a merged report without merged", |v| {
        remove(v, "", "merged")
    });
}

#[test]
fn schema_allows_additions_and_unknown_event_kinds() {
    let mut v = fixture("events.json");
    v["something_new"] = json!({"a": 1});
    v["leaks"][0]["extra"] = json!(true);
    v["events"][0]["kind"] = json!("kind_from_the_future");
    validate(&v).unwrap();
}

#[test]
fn schema_and_reader_agree_on_fixtures() {
    // What the schema accepts, cuguard reads.
    let cuguard = crate::support::artifacts().cuguard.clone();
    for name in GOOD {
        let path = root().join("tests/fixtures").join(name);
        let out = std::process::Command::new(&cuguard)
            .args(["summary", "--format", "json"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
