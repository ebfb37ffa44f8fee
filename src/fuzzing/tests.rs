//! Arbitrary bytes, and fixtures with arbitrary edits, never panic the reader or summary.

use std::path::PathBuf;

use proptest::prelude::*;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

fn exercise(bytes: Vec<u8>) {
    let _ = super::exercise(&bytes);
}

/// Inputs that once broke something, or that are hostile on purpose: each must be read or
/// refused without a panic. Fuzzing finds go here too (`.bad`, so directory reads skip them).
#[test]
fn hostile_fixtures_are_refused_or_read() {
    let dir = fixture("hostile");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let outcome = super::exercise(&bytes);
        if let Err(e) = &outcome {
            assert!(!e.contains('\n'), "{}: {e}", path.display());
        }
        seen += 1;
    }
    assert!(seen >= 5, "{seen} hostile fixtures");
}

/// The attribution fields with odd values (indices out of range, lengths that disagree,
/// extreme numbers, unknown names): every output is still produced, without a panic.
#[test]
fn odd_attribution_fields_are_read_and_shown() {
    use serde_json::{Value, json};
    let base: Value = serde_json::from_str(&fixture_text("attribution.json")).unwrap();
    type Edit<'a> = (&'a str, Box<dyn Fn(&mut Value)>);
    let edits: Vec<Edit> = vec![
        (
            "mixed out of range",
            Box::new(|v| {
                v["stacks"][0]["mixed"] =
                    json!([{"native": 99}, {"python": 99}, {"native": 0, "python": 0}, {}]);
            }),
        ),
        (
            "entry marks in part",
            Box::new(|v| {
                v["stacks"][0].as_object_mut().unwrap().remove("mixed");
                v["stacks"][0]["python"][1]
                    .as_object_mut()
                    .unwrap()
                    .remove("entry");
            }),
        ),
        (
            "site index out of range",
            Box::new(|v| {
                v["stacks"][0]["site"]["index"] = json!(1000);
                v["stacks"][3]["site"]["kind"] = json!("from_the_future");
            }),
        ),
        (
            "series longer and shorter than the times",
            Box::new(|v| {
                v["stack_samples"]["series"][0]["bytes"] = json!([1, 2, 3]);
                v["stack_samples"]["series"][1]["bytes"] = json!(vec![u64::MAX; 40]);
                v["stack_samples"]["series"][2]["stack"] = json!(null);
                v["stack_samples"]["series"][3]["stack"] = json!(12345);
            }),
        ),
        (
            "times out of order",
            Box::new(|v| {
                v["stack_samples"]["times_ms"] =
                    json!((0..20).rev().map(|i| i * 7u64).collect::<Vec<u64>>());
            }),
        ),
        (
            "no times",
            Box::new(|v| {
                v["stack_samples"]["times_ms"] = json!([]);
            }),
        ),
        (
            "unknown stacks and owners",
            Box::new(|v| {
                v["peaks"][1]["stacks"][0]["stack"] = json!(777);
                v["ooms"][0]["stack"] = json!(888);
                v["ooms"][0]["by_owner"][0]["owner"] = json!("nobody_knows");
                v["leaks"][0]["owner"] = json!("nobody_knows");
                v["owners"][1]["kind"] = json!("from_the_future");
                v["stacks"][1]["owner"] = json!("");
            }),
        ),
        (
            "extreme numbers",
            Box::new(|v| {
                v["peaks"][1]["live_bytes"] = json!(u64::MAX);
                v["peaks"][1]["stacks"][0]["bytes"] = json!(u64::MAX);
                v["peaks"][1]["stacks"][1]["bytes"] = json!(u64::MAX);
                v["ooms"][0]["size"] = json!(u64::MAX);
                v["ooms"][0]["time_ms"] = json!(u64::MAX);
                v["reconciliation"][0]["unexplained_bytes"] = json!(i64::MIN);
                v["reconciliation"][1]["explained"]["program_bytes"] = json!(u64::MAX);
            }),
        ),
        (
            "empty lists",
            Box::new(|v| {
                v["peaks"][1]["stacks"] = json!([]);
                v["ooms"][0]["stacks"] = json!([]);
                v["ooms"][0]["by_owner"] = json!([]);
                v["ooms"][0]["pool"] = json!(null);
                v["reconciliation"][0]["device_used_bytes"] = json!(null);
            }),
        ),
    ];
    for (what, edit) in edits {
        let mut v = base.clone();
        edit(&mut v);
        let bytes = serde_json::to_vec(&v).unwrap();
        assert_eq!(super::exercise(&bytes), Ok(1), "{what}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        exercise(bytes);
    }

    #[test]
    fn fixture_with_bytes_changed(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = fixture_text("leaks-two-contexts.json").into_bytes();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        exercise(bytes.clone());
        bytes.truncate(cut.index(bytes.len()));
        exercise(bytes);
    }
}
