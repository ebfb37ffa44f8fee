//! `cuguard merge` and `cuguard diff`: a merged report of several processes is valid against the
//! schema, keeps each process's identity, and every subcommand accepts it; diff shows new,
//! fixed, grown and shrunk sites.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde::Deserialize;
use serde_json::Value;

use crate::support;

fn fixture(name: &str) -> PathBuf {
    support::artifacts().root.join("tests/fixtures").join(name)
}

fn cuguard(args: &[&str]) -> Output {
    Command::new(&support::artifacts().cuguard)
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap()
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn cli_merge_of_several_processes() {
    let dir = support::scratch_dir("cli-merge");
    let out_path = dir.join("all.json");
    // Three single reports, one of them twice under another name, plus a merged one.
    let rank1 = dir.join("rank1.json");
    let mut r: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("leaks-two-contexts.json")).unwrap())
            .unwrap();
    r["process"]["pid"] = 5150.into();
    r["process"]["rank"] = 1.into();
    r["process"]["hostname"] = "gpu02".into();
    std::fs::write(&rank1, serde_json::to_string(&r).unwrap()).unwrap();
    let out = cuguard(&[
        "merge",
        "-o",
        path(&out_path),
        path(&fixture("leaks-two-contexts.json")),
        path(&rank1),
        path(&fixture("events.json")),
        path(&fixture("merged.json")),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    crate::cli_schema::validate(&merged).unwrap();
    let who: Vec<(u64, Value, String)> = merged["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["process"]["pid"].as_u64().unwrap(),
                p["process"]["rank"].clone(),
                p["process"]["hostname"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        who,
        [
            (4242, 0.into(), "gpu01".into()),
            (5150, 1.into(), "gpu02".into()),
            (777, Value::Null, "ci-runner-3".into()),
            (4242, 0.into(), "gpu01".into()),
            (9001, 3.into(), "node17".into()),
        ]
    );
    // Byte for byte: the shim's own fields survive, unknown ones included.
    assert_eq!(merged["processes"][0]["doors"]["get_proc_address"], 41);
    assert_eq!(merged["merged"]["inputs"].as_array().unwrap().len(), 4);

    // Every subcommand takes it.
    let all = path(&out_path);
    for args in [
        vec!["summary", all],
        vec!["summary", "--format", "json", all],
        vec!["suppressions", all],
        vec!["diff", all, all],
    ] {
        let out = cuguard(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = cuguard(&["check", all]);
    assert_eq!(out.status.code(), Some(1), "it has leaks");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("cuguard check: FAIL: 5 reports"), "{text}");
    let out = cuguard(&["check", "--baseline", all, all]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Merging the merged report again flattens it; the output is never its own input.
    let out = cuguard(&["merge", "-o", all, path(&dir)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let again: Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    assert_eq!(
        again["processes"].as_array().unwrap().len(),
        1,
        "only rank1.json besides all.json"
    );

    // A bad input leaves no output behind and exits 2.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"schema\":\"cuguard-report\",\"schema_version\":7}").unwrap();
    let fresh = dir.join("fresh.json");
    let out = cuguard(&["merge", "-o", path(&fresh), path(&rank1), path(&bad)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unsupported schema_version 7"));
    assert!(!fresh.exists());
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[derive(Deserialize)]
struct JsonDiff {
    delta_bytes: i64,
    sites: Vec<JsonChange>,
}

#[derive(Deserialize)]
struct JsonChange {
    site: String,
    change: String,
    delta_bytes: i64,
    delta_leaks: i64,
}

#[test]
fn cli_diff_new_fixed_grown_shrunk() {
    let dir = support::scratch_dir("cli-diff");
    // NEW: leaks-two-contexts with the make_buffers leak smaller and worker_loop gone.
    let mut r: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("leaks-two-contexts.json")).unwrap())
            .unwrap();
    r["leaks"][0]["size"] = 1024.into();
    let leaks = r["leaks"].as_array_mut().unwrap();
    leaks.retain(|l| l["stack"] != 2);
    let new = dir.join("new.json");
    std::fs::write(&new, serde_json::to_string(&r).unwrap()).unwrap();
    let base = fixture("leaks-two-contexts.json");
    let out = cuguard(&["diff", "--format", "json", path(&base), path(&new)]);
    assert!(out.status.success());
    let d: JsonDiff = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<(&str, &str, i64, i64)> = d
        .sites
        .iter()
        .map(|s| {
            (
                s.site.as_str(),
                s.change.as_str(),
                s.delta_bytes,
                s.delta_leaks,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("make_buffers", "shrunk", 1024 - 8_388_608, 0),
            ("worker_loop", "fixed", -3_145_728, -2),
            ("libscratch.so+0x1a2b", "unchanged", 0, 0),
        ]
    );
    assert_eq!(d.delta_bytes, 1024 - 8_388_608 - 3_145_728);
    let out = cuguard(&["diff", path(&new), path(&base)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("new sites\n  +3.0 MiB  +2 leaks  worker_loop (train.c:61)"),
        "{text}"
    );
    assert!(
        text.contains("grown\n  +8.0 MiB  +0 leaks  make_buffers (train.c:42)"),
        "{text}"
    );
    assert!(text.contains("1 site unchanged"), "{text}");
}

#[test]
fn cli_merge_by_rank_writes_the_processes_in_rank_order() {
    let dir = support::scratch_dir("cli-merge-by");
    let out_path = dir.join("job.json");
    let base: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("leaks-two-contexts.json")).unwrap())
            .unwrap();
    // Ranks 10, none, 2 (as a launcher label only), 0: rank 10 must come after rank 2.
    let mut inputs = Vec::new();
    for (i, (pid, rank, label)) in [
        (7010, Some(10), None),
        (7099, None, None),
        (7002, None, Some("2")),
        (7000, Some(0), None),
    ]
    .into_iter()
    .enumerate()
    {
        let mut r = base.clone();
        r["process"]["pid"] = pid.into();
        r["process"]["rank"] = rank.map_or(Value::Null, Value::from);
        if let Some(l) = label {
            r["process"]["labels"] = serde_json::json!({ "RANK": l });
        }
        let p = dir.join(format!("r{i}.json"));
        std::fs::write(&p, serde_json::to_string(&r).unwrap()).unwrap();
        inputs.push(p);
    }
    let mut args = vec!["merge", "--by", "rank", "-o", path(&out_path)];
    args.extend(inputs.iter().map(|p| path(p)));
    let out = cuguard(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    crate::cli_schema::validate(&merged).unwrap();
    assert_eq!(merged["merged"]["by"], "rank");
    let pids: Vec<u64> = merged["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["process"]["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, [7000, 7002, 7010, 7099]);
    // Without --by: input order, and no `by`.
    let plain = dir.join("plain.json");
    let mut args = vec!["merge", "-o", path(&plain)];
    args.extend(inputs.iter().map(|p| path(p)));
    assert!(cuguard(&args).status.success());
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(&plain).unwrap()).unwrap();
    assert!(merged["merged"].get("by").is_none(), "{}", merged["merged"]);
    let pids: Vec<u64> = merged["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["process"]["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids, [7010, 7099, 7002, 7000]);
}
