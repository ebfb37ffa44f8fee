//! `cuguard symbolize`: a report written without names (CUGUARD_SYMBOLIZE_SECS=0) gets the same
//! functions, lines and sites afterwards as the shim gives when it names frames itself.

use serde_json::Value;

use crate::cli_schema::validate;
use crate::support::{artifacts, read_report, run, rust_program, scratch_dir, shim_command};

fn sites(r: &Value) -> Vec<(u64, String, u64)> {
    let stacks = r["stacks"].as_array().unwrap();
    let mut v: Vec<(u64, String, u64)> = r["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let s = stacks.iter().find(|s| s["id"] == l["stack"]).unwrap();
            let site = &s["site"];
            let f = &s[site["in"].as_str().unwrap()][site["index"].as_u64().unwrap() as usize];
            (
                l["size"].as_u64().unwrap(),
                f["function"].as_str().unwrap().to_string(),
                f["line"].as_u64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn names_frames_and_sites_after_the_fact() {
    let dir = scratch_dir("symbolize");
    let raw = dir.join("raw.json");
    run(
        shim_command(&rust_program("cudarc_leaks"), &raw)
            .env("CUGUARD_SYMBOLIZE_SECS", "0")
            .env("CUGUARD_QUIET", "1"),
        true,
    );
    let before = read_report(&raw);
    assert!(before["stacks"].as_array().unwrap().iter().all(|s| {
        s["frames"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["function"].is_null())
    }));
    let named = dir.join("named.json");
    let out = run(
        std::process::Command::new(&artifacts().cuguard)
            .arg("symbolize")
            .arg("-o")
            .arg(&named)
            .arg(&raw),
        true,
    );
    assert_eq!(out.status.code(), Some(0));
    let after = read_report(&named);
    validate(&after).unwrap();
    assert_eq!(
        sites(&after),
        vec![
            (1 << 20, "cudarc_leaks::main::{{closure}}".into(), 43),
            (2 << 20, "cudarc_leaks::main".into(), 25),
            (3 << 20, "cudarc_leaks::main::{{closure}}".into(), 43),
            (5 << 20, "cudarc_leaks::main".into(), 25),
        ]
    );
    // Everything else is kept.
    assert_eq!(after["leaks"], before["leaks"]);
    assert_eq!(after["contexts"], before["contexts"]);
    // The summary groups by those sites.
    let summary = run(
        std::process::Command::new(&artifacts().cuguard)
            .arg("summary")
            .arg(&named),
        true,
    );
    let text = String::from_utf8_lossy(&summary.stdout);
    assert!(
        text.contains("cudarc_leaks::main (cudarc_leaks.rs:25)"),
        "{text}"
    );
}

#[test]
fn refuses_what_is_not_a_report() {
    let dir = scratch_dir("symbolize-bad");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, b"{\"hello\": 1}").unwrap();
    let out = run(
        std::process::Command::new(&artifacts().cuguard)
            .arg("symbolize")
            .arg(&bad),
        false,
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}
