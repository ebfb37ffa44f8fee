//! The shim's own bill (the report's `cost`) end to end: a C program allocating from deep native
//! recursion and a Python program allocating through ctypes from deep Python recursion, run
//! under the shim on the simulated driver. Call counts are exact and must match the report's
//! own counts; with `CUGUARD_COST_SAMPLE=1` every call is timed; `cuguard summary` prints the
//! bill in one line.

use std::path::Path;

use serde_json::Value;

use crate::support::{
    artifacts, c_program, read_report, report_allocations, run, scratch_dir, shim_command,
};

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Stacks captured besides the allocations' own: contexts' and events' stacks.
fn other_captures(report: &Value) -> u64 {
    let with_stack = |key: &str| {
        report[key]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| !x["stack"].is_null())
            .count() as u64
    };
    with_stack("contexts") + with_stack("events")
}

fn run_deep(test: &str, env: &[(&str, &str)]) -> (Value, std::path::PathBuf) {
    let program = c_program("stack_deep");
    let report_path = scratch_dir(test).join("r.json");
    let out = run(
        shim_command(&program, &report_path)
            .args(["60", "500", "3"])
            .envs(env.iter().copied()),
        true,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "allocations 503\n");
    let report = read_report(&report_path);
    crate::cli_schema::validate(&report).unwrap();
    (report, report_path)
}

#[test]
fn every_call_timed_counts_match_the_report() {
    let (report, path) = run_deep("cost_every_call", &[("CUGUARD_COST_SAMPLE", "1")]);
    let cost = &report["cost"];
    assert_eq!(u(&cost["sample_every"]), 1);
    assert_eq!(u(&cost["first_timed"]), 8);
    let allocations = report_allocations(&report);
    assert_eq!(allocations, 503);
    let hooks = &cost["hooks"];
    assert_eq!(u(&hooks["calls"]), allocations);
    assert_eq!(u(&hooks["timed"]), allocations);
    let stacks = &cost["stacks"];
    assert_eq!(
        u(&stacks["calls"]),
        allocations + other_captures(&report),
        "{cost}"
    );
    assert_eq!(u(&stacks["timed"]), u(&stacks["calls"]));
    assert!(u(&hooks["ns"]) > 0 && u(&stacks["ns"]) > 0, "{cost}");
    // Capture is part of the hooks' time, except for the captures made outside an allocation
    // (the context's, first of all: cold, it reads the unwind tables, several milliseconds on a
    // loaded machine); so stacks may exceed hooks by those alone.
    assert!(u(&stacks["ns"]) <= u(&hooks["ns"]) + 50_000_000, "{cost}");
    // A C program: no Python frames.
    assert_eq!(
        cost["python"],
        serde_json::json!({"calls": 0, "timed": 0, "dropped": 0, "ns": 0})
    );
    assert_eq!(u(&cost["reports"]["written"]), 1);
    assert!(u(&cost["reports"]["ns"]) > 0);
    assert!(u(&cost["heap_bytes"]) > 0);

    // The summary says it in one line.
    let out = run(
        std::process::Command::new(&artifacts().cuguard)
            .arg("summary")
            .arg(&path),
        true,
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("cuguard's cost: "))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains(" in hooks over 503 allocations (")
            && lines[0].contains(" writing 1 report, ")
            && lines[0].ends_with(" of its own memory"),
        "{}",
        lines[0]
    );
}

#[test]
fn sampled_by_default() {
    let (report, _) = run_deep("cost_sampled", &[]);
    let cost = &report["cost"];
    let every = u(&cost["sample_every"]);
    assert_eq!(every, 32);
    // One thread allocated: its first 8 calls timed, then one in 32.
    let hooks = &cost["hooks"];
    let calls = u(&hooks["calls"]);
    assert_eq!(calls, report_allocations(&report));
    assert_eq!(u(&hooks["timed"]), 8 + (calls - 8).div_ceil(every));
    assert!(u(&hooks["dropped"]) <= u(&hooks["timed"]) - 8);
    assert!(u(&hooks["ns"]) > 0);
}

#[test]
fn python_frames_are_billed_apart() {
    let script = artifacts()
        .root
        .join("harness/workloads/python/alloc_bench.py");
    let report_path = scratch_dir("cost_python").join("r.json");
    let mut cmd = shim_command(Path::new("python3"), &report_path);
    cmd.arg(&script)
        .args(["200", "60"])
        .env("CUGUARD_COST_SAMPLE", "1");
    let out = cmd.output().unwrap();
    if out.status.code() == Some(127) {
        eprintln!("skipped: no python3");
        return;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = read_report(&report_path);
    let cost = &report["cost"];
    let (hooks, stacks, python) = (&cost["hooks"], &cost["stacks"], &cost["python"]);
    assert_eq!(u(&hooks["calls"]), report_allocations(&report));
    // Every capture ran under Python, so every one read Python frames.
    assert_eq!(u(&python["calls"]), u(&stacks["calls"]), "{cost}");
    assert_eq!(u(&python["timed"]), u(&python["calls"]));
    assert!(
        u(&python["ns"]) > 0 && u(&python["ns"]) < u(&hooks["ns"]),
        "{cost}"
    );
}
