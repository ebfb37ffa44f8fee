//! One merged answer for a job's processes, as a user runs it on the hand-made merged fixtures
//! (`merged-ranks.json`: ranks 0, 1, 2 and 4 of `WORLD_SIZE` 5, rank 1 holding 64× the median
//! at one site, rank 4 a checkpoint; `merged-workers.json`: three Dask workers, one holding a
//! site the others do not have): `summary --by` in every format, `check` naming who failed,
//! and `merge --by`.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::support;

fn fixtures() -> PathBuf {
    support::artifacts().root.join("tests/fixtures")
}

/// `cuguard ARGS` run in the fixtures directory, so sources print as the fixtures' names.
fn cuguard(args: &[&str]) -> Output {
    Command::new(&support::artifacts().cuguard)
        .current_dir(fixtures())
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The lines from the one starting with `from` up to the first empty line.
fn section(text: &str, from: &str) -> String {
    let start = text
        .find(&format!("\n{from}"))
        .unwrap_or_else(|| panic!("{from:?} in {text}"));
    let rest = &text[start + 1..];
    rest[..rest.find("\n\n").map_or(rest.len(), |i| i + 1)].to_string()
}

#[test]
fn cli_job_summary_by_rank_text() {
    let out = cuguard(&["summary", "--by", "rank", "merged-ranks.json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        section(&stdout(&out), "by rank"),
        "\
by rank: 4 groups
  rank 0: 1 process, leaked 9.0 MiB in 2 leaks (program 9.0 MiB, others 0 B), peak 18.0 MiB, grew 0 B
      8.0 MiB  1 leak  make_buffers (train.c:42)
      1.0 MiB  1 leak  worker_loop (train.c:61)
  rank 1: 1 process, leaked 513.0 MiB in 2 leaks (program 513.0 MiB, others 0 B), peak 1.0 GiB, grew 0 B
      512.0 MiB  1 leak  make_buffers (train.c:42)
        1.0 MiB  1 leak  worker_loop (train.c:61)
  rank 2: 1 process, leaked 9.0 MiB in 2 leaks (program 9.0 MiB, others 0 B), peak 18.0 MiB, grew 0 B
      8.0 MiB  1 leak  make_buffers (train.c:42)
      1.0 MiB  1 leak  worker_loop (train.c:61)
  rank 4: 1 process, leaked 8.0 MiB in 1 leak (program 8.0 MiB, others 0 B), peak 16.0 MiB, grew 0 B
      8.0 MiB  1 leak  make_buffers (train.c:42)
called out (at least 4× the median and at least 64.0 MiB more at a site, over at least 3 processes)
  rank 1 holds 512.0 MiB at make_buffers (train.c:42), 64.0× the median of 8.0 MiB over 4 ranks (host gpu01, pid 5001)
incomplete reports
  rank 4 (host gpu02, pid 5004): checkpoint, merged-ranks.json[3]
missing reports (WORLD_SIZE 5)
  rank 3
"
    );
}

#[test]
fn cli_job_the_comparison_needs_no_option() {
    // Without --by: no groups, but who is called out, what is incomplete and missing.
    let text = stdout(&cuguard(&["summary", "merged-ranks.json"]));
    assert!(!text.contains("by rank"), "{text}");
    assert!(
        section(&text, "called out").contains("rank 1 holds 512.0 MiB"),
        "{text}"
    );
    // The processes name their launcher rank (rank 2 has only the label RANK).
    assert!(
        text.contains("process  python3  pid 5002  ppid 100  host gpu02  rank 2\n"),
        "{text}"
    );
    // A single report, or the older merged fixture, has no job section.
    let text = stdout(&cuguard(&["summary", "merged.json"]));
    assert!(
        !text.contains("called out") && !text.contains("missing reports"),
        "{text}"
    );
}

#[test]
fn cli_job_summary_by_host_and_process() {
    let text = stdout(&cuguard(&["summary", "--by", "host", "merged-ranks.json"]));
    let s = section(&text, "by host");
    assert!(s.starts_with("by host: 2 groups\n"), "{s}");
    assert!(
        s.contains("  host gpu01: 2 processes, leaked 522.0 MiB in 4 leaks (program 522.0 MiB, others 0 B), peak 1.0 GiB, grew 0 B\n      520.0 MiB  2 leaks  make_buffers (train.c:42)\n"),
        "{s}"
    );
    let text = stdout(&cuguard(&[
        "summary",
        "--by",
        "process",
        "merged-workers.json",
    ]));
    let s = section(&text, "by process");
    assert!(s.starts_with("by process: 3 groups\n"), "{s}");
    assert!(
        s.contains("  worker tcp://10.0.0.5:4002 (host n1, pid 7002): 1 process, leaked 202.0 MiB in 2 leaks"),
        "{s}"
    );
    // By rank where no process has one: one group of the unlabelled.
    let text = stdout(&cuguard(&[
        "summary",
        "--by",
        "rank",
        "merged-workers.json",
    ]));
    assert!(
        text.contains("by rank: 1 group\n  (no rank): 3 processes,"),
        "{text}"
    );
}

#[test]
fn cli_job_summary_by_worker_markdown_and_json() {
    let md = stdout(&cuguard(&[
        "summary",
        "--by",
        "worker",
        "--format",
        "markdown",
        "merged-workers.json",
    ]));
    assert!(md.contains("\n### By worker\n\n| worker |"), "{md}");
    let s = section(&md, "| worker |");
    assert_eq!(
        s,
        "\
| worker | processes | leaked | leaks | program | others | peak | grew | largest sites |
|---|---:|---:|---:|---:|---:|---:|---:|---|
| worker tcp://10.0.0.5:4001 | 1 | 2.0 MiB | 1 | 2.0 MiB | 0 B | 4.0 MiB | 0 B | 2.0 MiB worker\\_loop (train.c:61) |
| worker tcp://10.0.0.5:4002 | 1 | 202.0 MiB | 2 | 202.0 MiB | 0 B | 404.0 MiB | 0 B | 200.0 MiB make\\_buffers (train.c:42); 2.0 MiB worker\\_loop (train.c:61) |
| worker tcp://10.0.0.6:4001 | 1 | 2.0 MiB | 1 | 2.0 MiB | 0 B | 4.0 MiB | 0 B | 2.0 MiB worker\\_loop (train.c:61) |
"
    );
    assert!(md.contains("- worker tcp://10.0.0.5:4002 holds 200.0 MiB at make\\_buffers (train.c:42), where the median over 3 workers is 0 B (host n1, pid 7002)\n"), "{md}");
    assert!(
        md.contains("### python3 (pid 7002, worker tcp://10.0.0.5:4002, n1)\n"),
        "{md}"
    );

    let json = stdout(&cuguard(&[
        "summary",
        "--by",
        "rank",
        "--format",
        "json",
        "merged-ranks.json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let job = &v["job"];
    assert_eq!(job["by"], "rank");
    let names: Vec<&str> = job["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rank 0", "rank 1", "rank 2", "rank 4"]);
    let g1 = &job["groups"][1];
    assert_eq!(g1["leaked_bytes"], 537_919_488);
    assert_eq!(g1["own_bytes"], 537_919_488);
    assert_eq!(g1["peak_bytes"], 1_075_838_976u64);
    assert_eq!(g1["processes"][0]["pid"], 5001);
    let o = &job["outliers"][0];
    assert_eq!(
        (
            o["who"]["rank"].as_u64(),
            o["measure"].as_str(),
            o["site"].as_str()
        ),
        (Some(1), Some("held"), Some("make_buffers"))
    );
    assert_eq!(
        (o["bytes"].as_u64(), o["median_bytes"].as_u64()),
        (Some(512 << 20), Some(8 << 20))
    );
    assert_eq!(job["outliers_total"], 1);
    assert_eq!(job["incomplete"][0]["rank"], 4);
    assert_eq!(job["incomplete"][0]["reason"], "checkpoint");
    assert_eq!(job["world_size"], 5);
    assert_eq!(job["missing_ranks"], serde_json::json!([3]));
    // Without --by and with nothing to call out, the JSON has no job.
    let json = stdout(&cuguard(&["summary", "--format", "json", "merged.json"]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v.get("job").is_none());
}

#[test]
fn cli_job_check_names_who_failed() {
    let out = cuguard(&["check", "merged-ranks.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        section(&format!("\n{}", stdout(&out)), "failed processes").lines().take(5).collect::<Vec<_>>().join("\n"),
        "\
failed processes
  rank 0 (host gpu01, pid 5000) python3[5000]: 8.0 MiB in 1 leak at make_buffers; 1.0 MiB in 1 leak at worker_loop
  rank 1 (host gpu01, pid 5001) python3[5001]: 512.0 MiB in 1 leak at make_buffers; 1.0 MiB in 1 leak at worker_loop
  rank 2 (host gpu02, pid 5002) python3[5002]: 8.0 MiB in 1 leak at make_buffers; 1.0 MiB in 1 leak at worker_loop
  rank 4 (host gpu02, pid 5004) python3[5004]: 8.0 MiB in 1 leak at make_buffers"
    );
    let out = cuguard(&["check", "--format", "json", "merged-workers.json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &v["processes"][1];
    assert_eq!(p["worker"], "tcp://10.0.0.5:4002");
    assert_eq!(p["who"], "worker tcp://10.0.0.5:4002 (host n1, pid 7002)");
    assert_eq!(p["failed"], true);
    let out = cuguard(&["check", "--format", "junit", "merged-workers.json"]);
    let xml = stdout(&out);
    assert!(
        xml.contains(r#"<testcase classname="cuguard.process" name="python3[7002] (n1, worker tcp://10.0.0.5:4002)" file="merged-workers.json[1]">
      <failure type="cuguard" message="worker tcp://10.0.0.5:4002 (host n1, pid 7002) failed: 202.0 MiB leaked in 2 leaks">"#),
        "{xml}"
    );
    // A single process is not a job: no list of who failed.
    let out = cuguard(&["check", "leaks-two-contexts.json"]);
    assert!(!stdout(&out).contains("failed processes"));
}

#[test]
fn cli_job_view_has_a_per_process_view() {
    let dir = support::scratch_dir("cli-job-view");
    let page = dir.join("job.html");
    let out = cuguard(&["view", "merged-ranks.json", "-o", page.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<h2 id=\"per-process\">Per process</h2>"));
    assert!(html.contains("<li class=\"bad\">rank 1 holds 512.0 MiB at make_buffers (train.c:42), 64.0× the median of 8.0 MiB over 4 ranks (host gpu01, pid 5001)</li>"), "{html}");
    assert!(html.contains("<p class=\"warn\">No report from rank 3 (WORLD_SIZE 5).</p>"));
    assert!(html.contains("<tr id=\"process-row-3\"><td>rank 4</td><td></td><td class=\"num\">4</td><td>gpu02</td><td class=\"num\">5004</td><td><span class=\"warn\">incomplete (checkpoint)</span></td><td class=\"num\">8.0 MiB</td><td class=\"num\">8.0 MiB</td><td class=\"num\">0 B</td><td class=\"num\">16.0 MiB</td><td class=\"site\">make_buffers (train.c:42)</td></tr>"), "{html}");
    assert_eq!(
        html.matches("<details class=\"process\" id=\"process-")
            .count(),
        4
    );
    assert!(html.contains("<summary>rank 1 (host gpu01, pid 5001)</summary>"));
    // The page still loads nothing and links nowhere; its ids are unique.
    assert!(!html.contains(" href="));
    assert_eq!(html.matches("id=\"per-process\"").count(), 1);
    // One process: no per-process view.
    let page = dir.join("one.html");
    cuguard(&[
        "view",
        "leaks-two-contexts.json",
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(
        !std::fs::read_to_string(&page)
            .unwrap()
            .contains("Per process")
    );
}
