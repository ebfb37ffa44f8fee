//! `cuguard replay` on real histories: the `limit` workload (`harness/workloads/c/limit.c`) run
//! under the shim on a simulated device of a chosen size (`CUGUARD_SIM_MEMORY`), replayed
//! against the allocators' models. A refusal the simulated driver made is met by the `async`
//! model at the same request, moment and site; the smallest capacity the `driver` and
//! `cuguard` models find is the one a bisection of real runs finds (pool off and on); a history cut short is replayed up to its end and
//! says so; bad input is one line and exit 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{artifacts, c_program, read_report, run, scratch_dir, shim_command};

const MIB: u64 = 1 << 20;

/// Runs the `limit` workload under the shim on a simulated device of `memory`, with `env` and
/// the steps `steps`, its report `dir/NAME.json`; returns its stdout lines and the report's path.
fn limited(
    dir: &Path,
    name: &str,
    memory: &str,
    env: &[(&str, &str)],
    steps: &str,
) -> (Vec<String>, PathBuf) {
    let report = dir.join(format!("{name}.json"));
    let mut cmd = shim_command(&c_program("limit"), &report);
    cmd.env("CUGUARD_SIM_MEMORY", memory)
        .env("CUGUARD_QUIET", "1")
        .args(steps.split_whitespace());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    (lines, report)
}

/// Whether every allocation step of `lines` ("STEP SIZE RESULT") succeeded.
fn none_refused(lines: &[String]) -> bool {
    lines
        .iter()
        .filter(|l| l.starts_with("alloc ") || l.starts_with("async "))
        .all(|l| l.ends_with(" 0"))
}

fn cuguard(dir: &Path, args: &[&str]) -> Output {
    Command::new(&artifacts().cuguard)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap()
}

/// `cuguard replay ARGS --format json`, which must succeed.
fn replayed(dir: &Path, args: &[&str]) -> Value {
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    let out = cuguard(dir, &all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `cuguard replay ARGS` fails with exit 2 and one line on stderr, which is returned.
fn refused(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    let out = cuguard(dir, &all);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{all:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{all:?}: {stderr}");
    assert!(out.stdout.is_empty());
    stderr
}

/// The one outcome of `allocator` in a replay's JSON.
fn outcome<'a>(r: &'a Value, allocator: &str) -> &'a Value {
    let all: Vec<&Value> = r["allocators"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["name"] == allocator)
        .collect();
    assert_eq!(all.len(), 1, "{r}");
    all[0]
}

/// The site of a report's first refusal as the summary words a site: `function (file:line)`.
fn first_refusal_site(report: &Value) -> String {
    let id = &report["ooms"][0]["stack"];
    let stack = report["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| &s["id"] == id)
        .expect("the refusal's stack");
    let f = &stack["frames"][stack["site"]["index"].as_u64().unwrap() as usize];
    let file = f["file"].as_str().unwrap().rsplit('/').next().unwrap();
    format!("{} ({file}:{})", f["function"].as_str().unwrap(), f["line"])
}

/// A program fills a 1 GiB device with stream-ordered allocations until the simulated driver
/// refuses one: replayed under `async` at the recorded capacity (the device whole, or its bytes)
/// the model fails at that request, at that moment and site; under `driver` on a larger device
/// everything fits.
#[test]
fn async_at_the_recorded_capacity_fails_where_the_run_was_refused() {
    let dir = scratch_dir("replay-async");
    let (lines, report) = limited(
        &dir,
        "r",
        "1GiB",
        &[],
        "async 300 async 300 async 300 async 300",
    );
    let results: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("async "))
        .map(String::as_str)
        .collect();
    assert_eq!(
        results,
        ["async 300 0", "async 300 0", "async 300 0", "async 300 2"],
        "the driver refuses the fourth"
    );
    let r = read_report(&report);
    assert_eq!(r["ooms"].as_array().unwrap().len(), 1, "{r}");
    // The refusal's moment as the history has it.
    let at_oom: Value = serde_json::from_slice(
        &cuguard(
            &dir,
            &["summary", "r.json", "--at", "oom", "--format", "json"],
        )
        .stdout,
    )
    .unwrap();
    for capacity in ["100%", "1073741824", "1GiB"] {
        let got = replayed(
            &dir,
            &["r.json", "--capacity", capacity, "--allocator", "async"],
        );
        assert_eq!(got["requests"], 4, "{got}");
        assert_eq!(got["refusals"], 1, "{got}");
        assert_eq!(got["device_total_bytes"], 1u64 << 30);
        let a = outcome(&got, "async");
        assert_eq!(a["capacity_bytes"], 1u64 << 30);
        assert_eq!(a["fits"], false, "{got}");
        assert_eq!(
            a["event"], 4,
            "the run's refusal is the fourth request: {got}"
        );
        assert_eq!(a["time_ms"], at_oom["at_ms"], "{got}");
        assert_eq!(a["site"], first_refusal_site(&r), "{got}");
        assert_eq!(a["asked_bytes"], 300 * MIB);
        assert_eq!(a["live_bytes"], 900 * MIB);
        assert_eq!(a["peak_reserved_bytes"], 900 * MIB);
    }
    // The history file alone, at the device's bytes: the same answer.
    let got = replayed(
        &dir,
        &["r.history", "--capacity", "1GiB", "--allocator", "async"],
    );
    assert_eq!(outcome(&got, "async")["event"], 4);
    // On a larger device every request fits, the refused one too.
    let got = replayed(
        &dir,
        &["r.json", "--capacity", "2GiB", "--allocator", "driver"],
    );
    let d = outcome(&got, "driver");
    assert_eq!(
        (&d["fits"], &d["peak_reserved_bytes"]),
        (&Value::Bool(true), &Value::from(1200 * MIB))
    );
    // The text says the same, one line per allocator.
    let out = cuguard(
        &dir,
        &[
            "replay",
            "r.json",
            "--capacity",
            "100%,2GiB",
            "--allocator",
            "async,driver",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let site = first_refusal_site(&r);
    let ms = (at_oom["at_ms"].as_f64().unwrap()).ceil() as u64;
    let fails = format!(
        "  async fails at event 4, {ms} ms: asked 300.0 MiB at {site}, live 900.0 MiB, idle 0 B in 0 pieces"
    );
    assert!(text.lines().any(|l| l == fails), "{text}\nwanted: {fails}");
    assert!(
        text.lines()
            .any(|l| l == "  driver fits (peak reserved 1.2 GiB)"),
        "{text}"
    );
    assert!(
        text.contains("at 1.0 GiB:\n") && text.contains("at 2.0 GiB:\n"),
        "{text}"
    );
}

/// The smallest capacity at which the `driver` model fits is the smallest device, to 2 MiB, on
/// which the program runs without a refusal, found by running it on devices of bisected sizes;
/// the same for the `cuguard` model and the program run on cuguard's pool.
#[test]
fn the_smallest_capacity_found_is_the_smallest_device_the_program_runs_on() {
    let dir = scratch_dir("replay-find");
    let steps = "alloc 100 alloc 300 freeall alloc 500 alloc 6 alloc 40 freeall alloc 200";
    for (allocator, pool) in [("driver", "0"), ("cuguard", "1")] {
        let env = [("CUGUARD_POOL", pool)];
        let (lines, _) = limited(&dir, "r", "1GiB", &env, steps);
        assert!(none_refused(&lines), "{lines:?}");
        let got = replayed(
            &dir,
            &["r.json", "--find-capacity", "--allocator", allocator],
        );
        assert_eq!(got["question"], "smallest");
        let found = outcome(&got, allocator)["capacity_bytes"].as_u64().unwrap();
        // Real runs: the smallest device, in 2 MiB steps, on which nothing is refused.
        let fits = |mib: u64| {
            let (lines, _) = limited(&dir, "probe", &format!("{mib}MiB"), &env, steps);
            none_refused(&lines)
        };
        let (mut lo, mut hi) = (0u64, 512u64); // in units of 2 MiB: 0 fails, 1 GiB fits
        assert!(fits(hi * 2));
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if fits(mid * 2) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        assert_eq!(found, hi * 2 * MIB, "{allocator}: {got}");
        assert_eq!(found, 546 * MIB, "500 + 40 + 6, each its own allocation");
    }
    // At the capacity found, the driver model fits; 2 MiB less, it fails where the real run
    // did.
    let pool_off = [("CUGUARD_POOL", "0")];
    let (_, _) = limited(&dir, "r", "1GiB", &pool_off, steps);
    let at = |mib: u64| {
        replayed(
            &dir,
            &[
                "r.json",
                "--capacity",
                &format!("{mib}MiB"),
                "--allocator",
                "driver",
            ],
        )
    };
    assert_eq!(outcome(&at(546), "driver")["fits"], true);
    let below = at(544);
    assert_eq!(outcome(&below, "driver")["event"], 5, "{below}");
    let (lines, _) = limited(&dir, "probe", "544MiB", &pool_off, steps);
    let refused: Vec<&String> = lines.iter().filter(|l| l.ends_with(" 2")).collect();
    assert_eq!(
        refused,
        ["alloc 40 2"],
        "the same request, the fifth, is refused"
    );
}

/// A history written with the shim's own layout but cut short inside a chunk, and one without
/// its end: each replayed up to where it stops, and the output says so.
#[test]
fn a_history_cut_short_is_replayed_up_to_its_end_and_says_so() {
    use cuguard_format::MemoryKind;
    use cuguard_history::{Action, Chunk, Header, Raw, VERSION, kind, write_chunk};
    const MS: u64 = 1_000_000;
    let dir = scratch_dir("replay-cut");
    let mut file = Header {
        version: VERSION,
        pid: 4245,
        start_unix_ns: 1,
        segment: 0,
        run: 0,
    }
    .encode()
    .to_vec();
    let clock = |t: u64| Chunk::Clock {
        tsc: t,
        since_start_ns: t,
        unix_ns: 1 + t,
    };
    let ev = |t: u64, addr: u64, action: Action, size: u64| Raw {
        tsc: t,
        addr,
        size,
        stack: u32::MAX,
        context: 0,
        kind: kind(action, MemoryKind::Device),
        device: 1,
        stream: 0,
    };
    for c in [
        clock(0),
        Chunk::Events {
            thread: 7,
            events: vec![
                ev(10 * MS, 0x10_0000, Action::Alloc, 64 * MIB),
                ev(20 * MS, 0x20_0000, Action::Alloc, 64 * MIB),
            ],
        },
        clock(30 * MS),
    ] {
        write_chunk(&mut file, &c);
    }
    // No end chunk: the process was killed, or is still running.
    std::fs::write(dir.join("killed.history"), &file).unwrap();
    write_chunk(
        &mut file,
        &Chunk::Events {
            thread: 7,
            events: vec![ev(40 * MS, 0x30_0000, Action::Alloc, 64 * MIB)],
        },
    );
    std::fs::write(dir.join("cut.history"), &file[..file.len() - 3]).unwrap();
    for (name, why) in [
        (
            "cut.history",
            "the history ends early: the history is cut short at byte ",
        ),
        (
            "killed.history",
            "the history ends early: it has no end (the process was killed, or is still running)",
        ),
    ] {
        let out = cuguard(
            &dir,
            &[
                "replay",
                name,
                "--capacity",
                "100MiB",
                "--allocator",
                "driver",
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name}: {text}");
        assert!(text.lines().any(|l| l.starts_with(why)), "{name}: {text}");
        // The two allocations it holds are replayed: the second does not fit 100 MiB.
        assert!(
            text.contains("  driver fails at event 2, 20 ms: asked 64.0 MiB at <no stack>, live 64.0 MiB, idle 0 B in 0 pieces"),
            "{name}: {text}"
        );
        let got = replayed(
            &dir,
            &[name, "--capacity", "100MiB", "--allocator", "driver"],
        );
        assert_eq!(got["requests"], 2, "{name}: {got}");
        assert!(got["ends_early"].as_str().is_some(), "{name}: {got}");
    }
    // Events lost while the program ran are said.
    let lost = crate::cli_history::lost_history(&dir);
    let got = replayed(
        &dir,
        &[
            lost.to_str().unwrap(),
            "--capacity",
            "1GiB",
            "--allocator",
            "torch",
        ],
    );
    assert_eq!(got["ends_early"], Value::Null, "{got}");
    assert_eq!(
        got["notes"][0],
        "7 events were lost while the program ran: the replay does not have them"
    );
}

/// Bad input is one line and exit 2; a capacity too small for the first request is an answer.
#[test]
fn bad_input_is_one_line_and_a_capacity_too_small_is_an_answer() {
    let dir = scratch_dir("replay-bad");
    let (_, _) = limited(&dir, "r", "1GiB", &[], "async 300 async 10");
    // Smaller than the first request: it fails at event 1, exit 0.
    let got = replayed(&dir, &["r.json", "--capacity", "100MiB"]);
    for o in got["allocators"].as_array().unwrap() {
        assert_eq!(o["event"], 1, "{got}");
    }
    // A report without a history says how to have one.
    let (_, _) = limited(
        &dir,
        "off",
        "1GiB",
        &[("CUGUARD_HISTORY", "0")],
        "async 300",
    );
    let said = refused(&dir, &["off.json", "--capacity", "1GiB"]);
    assert!(
        said.contains("off.json: ")
            && said.contains("the report names no history")
            && said.contains("CUGUARD_HISTORY"),
        "{said}"
    );
    // A share of the device needs the report.
    let said = refused(&dir, &["r.history", "--capacity", "95%"]);
    assert!(
        said.contains("r.history: a history file alone does not say the device's memory"),
        "{said}"
    );
    // Sizes and names that are not.
    let said = refused(&dir, &["r.json", "--capacity", "12XB"]);
    assert!(
        said.contains("invalid value '12XB' for '--capacity <SIZE>'"),
        "{said}"
    );
    let said = refused(
        &dir,
        &[
            "r.json",
            "--capacity",
            "1GiB",
            "--release-threshold",
            "lots",
        ],
    );
    assert!(said.contains("--release-threshold"), "{said}");
    let said = refused(
        &dir,
        &[
            "r.json",
            "--capacity",
            "1GiB",
            "--allocator",
            "torch,jemalloc",
        ],
    );
    assert!(
        said.contains(
            "unknown allocator \"jemalloc\": the allocators are driver, async, cuguard, rmm-pool, \
             torch, torch-expandable, or all"
        ),
        "{said}"
    );
    // Neither a capacity nor the search.
    let said = refused(&dir, &["r.json"]);
    assert!(said.contains("--capacity"), "{said}");
    // Not a report nor a history.
    std::fs::write(dir.join("junk.json"), "{}").unwrap();
    let said = refused(&dir, &["junk.json", "--capacity", "1GiB"]);
    assert!(said.contains("junk.json"), "{said}");
}
