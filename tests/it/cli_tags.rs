//! Tags (issue 55): `harness/workloads/c/tag_steps.c` names its memory with the C ABI's tags
//! (what Python's `cuguard.tag` and `cuguard.annotate` call): `weights`, `kv_cache` with
//! `scratch` nested inside it (one of its allocations freed), `activations` given after the
//! fact, and allocations without a tag. The report's `leaks[].tag`, `summary --by tag` of the
//! report and of the history at its peak and over the run, `summary --at`'s rows and the largest
//! leaks, the memory-viz export's `user_metadata` and pprof's `tag` label (`go tool pprof
//! -tags`) each say exactly which bytes carry which tag. The view's is in `cli_view.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::{self, artifacts, c_program, run, scratch_dir, shim_command};

const MIB: u64 = 1 << 20;

fn cuguard(dir: &Path, args: &[&str]) -> Output {
    Command::new(&artifacts().cuguard)
        .current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// `cuguard ARGS` in `dir`, which must succeed; its standard output.
fn stdout(dir: &Path, args: &[&str]) -> String {
    let out = cuguard(dir, args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "cuguard {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One run of `tag_steps` under the shim: its report `dir/r.json`, and each site's label
/// (`kv_site (tag_steps.c:49)`) by its name as the program prints it (`kv`).
pub(crate) fn tagged_run(dir: &Path) -> (PathBuf, HashMap<String, String>) {
    let report = dir.join("r.json");
    let out = run(&mut shim_command(&c_program("tag_steps"), &report), true);
    let sites = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (name, line) = l.split_once(' ').unwrap();
            (
                name.to_string(),
                format!("{name}_site (tag_steps.c:{line})"),
            )
        })
        .collect();
    (report, sites)
}

/// `tags[]` of `summary --by tag --format json` as (tag, bytes in MiB, allocations, [(site
/// label, MiB, allocations)]).
type Rows = Vec<(Value, u64, u64, Vec<(String, u64, u64)>)>;

fn rows(s: &Value) -> Rows {
    s["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let sites = t["sites"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    (
                        x["label"].as_str().unwrap().to_string(),
                        x["bytes"].as_u64().unwrap() / MIB,
                        x["allocations"].as_u64().unwrap(),
                    )
                })
                .collect();
            (
                t["tag"].clone(),
                t["bytes"].as_u64().unwrap() / MIB,
                t["allocations"].as_u64().unwrap(),
                sites,
            )
        })
        .collect()
}

#[test]
fn the_report_s_leaks_carry_their_tags() {
    let dir = scratch_dir("cli-tags-report");
    let (report, _) = tagged_run(&dir);
    let r = support::read_report(&report);
    let mut leaks: Vec<(u64, Option<&str>)> = r["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["size"].as_u64().unwrap() / MIB, l["tag"].as_str()))
        .collect();
    leaks.sort();
    assert_eq!(
        leaks,
        [
            (2, None),
            (8, Some("activations")),
            (8, Some("scratch")),
            (16, Some("weights")),
            (32, Some("kv_cache")),
            (32, Some("kv_cache")),
        ]
    );
    // Untagged, the key is absent, not null.
    let plain = r["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["size"] == 2 * MIB)
        .unwrap();
    assert!(plain.get("tag").is_none(), "{plain}");
}

#[test]
fn summary_by_tag_of_the_report_names_each_tag_s_bytes_and_sites() {
    let dir = scratch_dir("cli-tags-by-tag");
    let (_, site) = tagged_run(&dir);
    let s: Value = serde_json::from_str(&stdout(
        &dir,
        &["summary", "--by", "tag", "--format", "json", "r.json"],
    ))
    .unwrap();
    assert_eq!(s["question"], "leaked");
    assert_eq!(
        (s["bytes"].as_u64().unwrap(), &s["allocations"]),
        (98 * MIB, &json!(6))
    );
    let leaked: Rows = vec![
        (json!("kv_cache"), 64, 2, vec![(site["kv"].clone(), 64, 2)]),
        (
            json!("weights"),
            16,
            1,
            vec![(site["weights"].clone(), 16, 1)],
        ),
        // A tag given after the fact (annotate) names the allocation in the report.
        (
            json!("activations"),
            8,
            1,
            vec![(site["late"].clone(), 8, 1)],
        ),
        // Nested in kv_cache: the innermost names it; its freed allocation is not a leak.
        (
            json!("scratch"),
            8,
            1,
            vec![(site["scratch"].clone(), 8, 1)],
        ),
        (Value::Null, 2, 1, vec![(site["plain"].clone(), 2, 1)]),
    ];
    assert_eq!(rows(&s), leaked);

    let text = stdout(&dir, &["summary", "--by", "tag", "r.json"]);
    let body: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(
        body,
        [
            "leaked: 98.0 MiB in 6 allocations, by tag".to_string(),
            "  kv_cache     64.0 MiB  2 allocations".into(),
            format!("    64.0 MiB  2 allocations  {}", site["kv"]),
            "  weights      16.0 MiB  1 allocation".into(),
            format!("    16.0 MiB  1 allocation  {}", site["weights"]),
            "  activations   8.0 MiB  1 allocation".into(),
            format!("    8.0 MiB  1 allocation  {}", site["late"]),
            "  scratch       8.0 MiB  1 allocation".into(),
            format!("    8.0 MiB  1 allocation  {}", site["scratch"]),
            "  (untagged)    2.0 MiB  1 allocation".into(),
            format!("    2.0 MiB  1 allocation  {}", site["plain"]),
        ],
        "{text}"
    );

    let md = stdout(
        &dir,
        &["summary", "--by", "tag", "--format", "markdown", "r.json"],
    );
    let kv = format!(
        "| kv\\_cache | 64.0 MiB | 2 | {} 64.0 MiB |",
        site["kv"].replace('_', "\\_")
    );
    assert!(md.lines().any(|l| l == kv), "{md}");
    assert!(
        md.lines()
            .any(|l| l.starts_with("| (untagged) | 2.0 MiB | 1 | ")),
        "{md}"
    );
}

#[test]
fn summary_by_tag_of_the_history_at_its_peak_and_over_the_run() {
    let dir = scratch_dir("cli-tags-history");
    let (_, site) = tagged_run(&dir);
    let args = ["summary", "--by", "tag", "--format", "json", "--at", "peak"];
    let s: Value = serde_json::from_str(&stdout(&dir, &[&args[..], &["r.json"]].concat())).unwrap();
    assert_eq!(s["question"], "at");
    assert_eq!(s["span"]["complete"], true);
    assert_eq!(s["bytes"].as_u64().unwrap(), 102 * MIB);
    // At the peak the freed scratch allocation is live: scratch holds 12 MiB at two sites.
    let at_peak: Rows = vec![
        (json!("kv_cache"), 64, 2, vec![(site["kv"].clone(), 64, 2)]),
        (
            json!("weights"),
            16,
            1,
            vec![(site["weights"].clone(), 16, 1)],
        ),
        (
            json!("scratch"),
            12,
            2,
            vec![
                (site["scratch"].clone(), 8, 1),
                (site["temp"].clone(), 4, 1),
            ],
        ),
        (
            json!("activations"),
            8,
            1,
            vec![(site["late"].clone(), 8, 1)],
        ),
        (Value::Null, 2, 1, vec![(site["plain"].clone(), 2, 1)]),
    ];
    assert_eq!(rows(&s), at_peak);

    // Over the whole run, what was kept is what leaked.
    let s: Value = serde_json::from_str(&stdout(
        &dir,
        &[
            "summary",
            "--by",
            "tag",
            "--format",
            "json",
            "--between",
            "0",
            "end",
            "r.json",
        ],
    ))
    .unwrap();
    assert_eq!(s["question"], "between");
    let kept: Vec<(Value, u64, u64)> = rows(&s).into_iter().map(|r| (r.0, r.1, r.2)).collect();
    assert_eq!(
        kept,
        [
            (json!("kv_cache"), 64, 2),
            (json!("weights"), 16, 1),
            (json!("activations"), 8, 1),
            (json!("scratch"), 8, 1),
            (Value::Null, 2, 1),
        ]
    );

    let text = stdout(&dir, &["summary", "--by", "tag", "--at", "peak", "r.json"]);
    let headline = text.lines().nth(1).unwrap();
    assert!(
        headline.starts_with("live at ")
            && headline
                .contains(", by tag: 102.0 MiB in 7 allocations (the history spans 0 ms to "),
        "{text}"
    );
    assert!(
        text.contains("\n  scratch      12.0 MiB  2 allocations\n"),
        "{text}"
    );
}

#[test]
fn summary_at_and_the_largest_leaks_say_each_site_s_tag() {
    let dir = scratch_dir("cli-tags-at");
    let (_, site) = tagged_run(&dir);
    let m: Value = serde_json::from_str(&stdout(
        &dir,
        &["summary", "--at", "peak", "--format", "json", "r.json"],
    ))
    .unwrap();
    let mut got: Vec<(String, u64, Option<&str>)> = m["devices"][0]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["label"].as_str().unwrap().to_string(),
                s["bytes"].as_u64().unwrap() / MIB,
                s["tag"].as_str(),
            )
        })
        .collect();
    got.sort();
    let mut want = vec![
        (site["kv"].clone(), 64, Some("kv_cache")),
        (site["weights"].clone(), 16, Some("weights")),
        (site["late"].clone(), 8, Some("activations")),
        (site["scratch"].clone(), 8, Some("scratch")),
        (site["temp"].clone(), 4, Some("scratch")),
        (site["plain"].clone(), 2, None),
    ];
    want.sort();
    assert_eq!(got, want);

    let text = stdout(&dir, &["summary", "--at", "peak", "r.json"]);
    let row = |label: &str| {
        text.lines()
            .find(|l| l.contains(&format!("  {label}")) && l.contains("since "))
            .unwrap_or_else(|| panic!("no row of {label}: {text}"))
            .to_string()
    };
    assert!(
        row(&site["kv"]).contains(&format!("2 allocations  {} [kv_cache]  ", site["kv"])),
        "{text}"
    );
    assert!(
        row(&site["temp"]).contains(&format!("{} [scratch]  ", site["temp"])),
        "{text}"
    );
    assert!(!row(&site["plain"]).contains('['), "{text}");

    // The summary's largest leaks, one line each, end with the tag.
    let text = stdout(&dir, &["summary", "r.json"]);
    let largest: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "largest leaks")
        .skip(1)
        .take(6)
        .collect();
    let ends: Vec<String> = largest
        .iter()
        .map(|l| l.split("  ").last().unwrap().to_string())
        .collect();
    assert_eq!(
        ends,
        [
            format!("{} [kv_cache]", site["kv"]),
            format!("{} [kv_cache]", site["kv"]),
            format!("{} [weights]", site["weights"]),
            format!("{} [activations]", site["late"]),
            format!("{} [scratch]", site["scratch"]),
            site["plain"].clone(),
        ],
        "{text}"
    );
}

#[test]
fn by_tag_is_refused_where_it_answers_nothing() {
    let dir = scratch_dir("cli-tags-refused");
    tagged_run(&dir);
    let out = cuguard(
        &dir,
        &["summary", "--by", "phase", "--at", "peak", "r.json"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "cuguard: error: --at and --between answer one process's history: they take --by tag, not --by phase"
    );
    let out = cuguard(&dir, &["summary", "--by", "tag", "r.history"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "cuguard: error: --by tag of a history file asks a moment: add --at TIME (--at end: what was live at its end) or --between T1 T2"
    );
}

#[test]
fn memory_viz_says_each_tagged_allocation_s_tag_as_user_metadata() {
    let dir = scratch_dir("cli-tags-memory-viz");
    tagged_run(&dir);
    stdout(
        &dir,
        &[
            "export",
            "--format",
            "memory-viz",
            "-o",
            "m.pickle",
            "r.json",
        ],
    );
    let out = run(
        Command::new("python3").current_dir(&dir).args([
            "-c",
            "import pickle, json\n\
             s = pickle.load(open('m.pickle', 'rb'))\n\
             print(json.dumps([[e['action'], e['size'] >> 20, e.get('user_metadata')] \
             for e in s['device_traces'][0] if not e['action'].startswith('segment')]))",
        ]),
        true,
    );
    let events: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        events,
        json!([
            ["alloc", 1, null],
            ["free_requested", 1, null],
            ["free_completed", 1, null],
            ["alloc", 16, "weights"],
            ["alloc", 2, null],
            // Named after it was made: its alloc carries the tag too.
            ["alloc", 8, "activations"],
            ["alloc", 32, "kv_cache"],
            ["alloc", 32, "kv_cache"],
            ["alloc", 8, "scratch"],
            ["alloc", 4, "scratch"],
            ["free_requested", 4, "scratch"],
            ["free_completed", 4, "scratch"],
        ])
    );
}

/// `go tool pprof ARGS FILE` in `dir`; its standard output.
fn go_pprof(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("go")
        .current_dir(dir)
        .args(["tool", "pprof"])
        .args(args)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// The `tag:` part of `go tool pprof -tags`: its lines, trimmed.
fn tag_part(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("tag:"))
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn pprof_labels_each_tagged_sample_with_its_tag() {
    let test = "pprof_labels_each_tagged_sample_with_its_tag";
    let dir = scratch_dir("cli-tags-pprof");
    tagged_run(&dir);
    stdout(
        &dir,
        &["export", "--format", "pprof", "-o", "p.pb.gz", "r.json"],
    );
    let Some(inuse) = go_pprof(&dir, &["-tags", "p.pb.gz"]) else {
        support::missing(test, "go is not installed (apt-get install golang-go)");
        return;
    };
    // In use at the end: the leaks, the untagged 2 MiB in no tag.
    assert_eq!(
        tag_part(&inuse),
        [
            "tag: Total 96.0MB",
            "64.0MB (66.67%): kv_cache",
            "16.0MB (16.67%): weights",
            "8.0MB ( 8.33%): activations",
            "8.0MB ( 8.33%): scratch",
        ],
        "{inuse}"
    );
    // Allocated over the run: the freed scratch allocation too; the allocation tagged after
    // the fact counts whole for its tag.
    let alloc = go_pprof(&dir, &["-sample_index=alloc_space", "-tags", "p.pb.gz"]).unwrap();
    assert_eq!(
        tag_part(&alloc),
        [
            "tag: Total 100.0MB",
            "64.0MB (64.00%): kv_cache",
            "16.0MB (16.00%): weights",
            "12.0MB (12.00%): scratch",
            "8.0MB ( 8.00%): activations",
        ],
        "{alloc}"
    );
    // One tag kept: its site alone.
    let focused = go_pprof(
        &dir,
        &[
            "-sample_index=alloc_space",
            "-tagfocus=tag=scratch",
            "-top",
            "p.pb.gz",
        ],
    )
    .unwrap();
    let flat: Vec<&str> = focused
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter(|l| !l.trim_start().starts_with('0'))
        .map(|l| l.split_whitespace().last().unwrap())
        .collect();
    assert_eq!(flat, ["scratch_site", "temp_site"], "{focused}");
}
