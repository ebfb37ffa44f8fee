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
    // Each allocation's capture is a part of its hooks' work; the others (the context's, the
    // events') are a bill of their own.
    let stacks = &cost["stacks"];
    assert_eq!(u(&stacks["calls"]), allocations, "{cost}");
    assert_eq!(u(&stacks["timed"]), u(&stacks["calls"]));
    assert_eq!(
        u(&cost["captures"]["calls"]),
        other_captures(&report),
        "{cost}"
    );
    assert!(u(&hooks["ns"]) > 0 && u(&stacks["ns"]) > 0, "{cost}");
    assert!(u(&stacks["ns"]) <= u(&hooks["ns"]), "{cost}");
    assert_eq!(u(&hooks["first_calls"]), 8);
    assert_eq!(u(&stacks["first_calls"]), 8);
    // The first capture read the module tables: work done once, billed apart.
    assert!(u(&cost["one_time"]["calls"]) >= 1, "{cost}");
    // A C program: no Python frames.
    assert_eq!(
        cost["python"],
        serde_json::json!({"calls": 0, "timed": 0, "dropped": 0, "ns": 0,
                           "first_calls": 0, "first_ns": 0})
    );
    assert_eq!(u(&cost["reports"]["written"]), 1);
    assert!(u(&cost["reports"]["ns"]) > 0);
    assert!(u(&cost["heap_bytes"]) > 0);

    // The summary says it in one line.
    let out = run(
        std::process::Command::new(&artifacts().cuguard)
            .arg("summary")
            .arg("--cost")
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
    // Without `--cost`, one short line, the summary's last.
    let out = run(
        std::process::Command::new(&artifacts().cuguard)
            .arg("summary")
            .arg(&path),
        true,
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let last = text.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("cuguard's cost: ")
            && last.contains(" per allocation, ")
            && last.ends_with(" of memory (--cost: the whole bill)")
            && last.chars().count() < 100,
        "{text}"
    );
}

#[test]
fn sampled_by_default() {
    let (report, _) = run_deep("cost_sampled", &[]);
    let cost = &report["cost"];
    let every = u(&cost["sample_every"]);
    assert_eq!(every, 32);
    // One thread allocated: its first 8 calls timed, then one in each window of 32, the
    // window w's at its offset w % 32 (the last window's only if the calls reached it).
    let hooks = &cost["hooks"];
    let calls = u(&hooks["calls"]);
    assert_eq!(calls, report_allocations(&report));
    let later = calls - 8;
    let windows = later / every;
    let last = u64::from((windows % every) < later % every);
    assert_eq!(u(&hooks["timed"]), 8 + windows + last);
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
        u(&python["ns"]) > 0 && u(&python["ns"]) + u(&stacks["ns"]) <= u(&hooks["ns"]),
        "{cost}"
    );
}

/// A report's bill adds up: the parts (stacks, Python frames) within their whole (the hooks),
/// together, in all, in each thread's first calls and after them; the first calls within all;
/// and the summary's line says no part larger than its whole. `what` names the run in a failure.
fn bill_adds_up(what: &str, report: &Value, path: &Path) {
    let cost = &report["cost"];
    let t = |k: &str, f: &str| u(&cost[k][f]);
    for k in ["hooks", "stacks", "python", "captures", "one_time"] {
        assert!(t(k, "first_ns") <= t(k, "ns"), "{what}: {k}: {cost}");
        assert!(t(k, "first_calls") <= t(k, "calls"), "{what}: {k}: {cost}");
        assert!(t(k, "timed") <= t(k, "calls"), "{what}: {k}: {cost}");
    }
    // Work that was done took time: the hooks were called and timed, the stacks captured, and
    // each part timed in some calls took more than nothing; the report was built.
    assert!(
        t("hooks", "calls") > 0 && t("hooks", "timed") > 0,
        "{what}: no hook timed: {cost}"
    );
    assert!(
        t("stacks", "calls") > 0,
        "{what}: no stack captured: {cost}"
    );
    for k in ["hooks", "stacks", "python", "captures", "one_time"] {
        assert!(
            t(k, "timed") == 0 || t(k, "ns") > 0,
            "{what}: {k}: {} calls timed at 0 ns: {cost}",
            t(k, "timed")
        );
    }
    assert!(
        u(&cost["reports"]["written"]) >= 1 && u(&cost["reports"]["ns"]) > 0,
        "{what}: the report's own building is not in the bill: {cost}"
    );
    let later = |k: &str| t(k, "ns") - t(k, "first_ns");
    assert!(
        t("stacks", "ns") + t("python", "ns") <= t("hooks", "ns"),
        "{what}: the parts are more than the whole: {cost}"
    );
    assert!(
        t("stacks", "first_ns") + t("python", "first_ns") <= t("hooks", "first_ns"),
        "{what}: in the first calls: {cost}"
    );
    assert!(
        later("stacks") + later("python") <= later("hooks"),
        "{what}: after the first calls: {cost}"
    );
    // The summary's line: each part's time per allocation is at most the allocation's.
    let out = run(
        std::process::Command::new(&artifacts().cuguard)
            .arg("summary")
            .arg("--cost")
            .arg(path),
        true,
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("cuguard's cost: "))
        .unwrap_or_else(|| panic!("{what}: {text}"));
    if t("hooks", "calls") == 0 {
        return;
    }
    let micros = |s: &str| -> f64 {
        let s = s.trim();
        let (n, unit) = s
            .split_once(' ')
            .unwrap_or_else(|| panic!("{what}: {line}"));
        let n: f64 = n.parse().unwrap_or_else(|_| panic!("{what}: {line}"));
        match unit {
            "µs" => n,
            "ms" => n * 1e3,
            "s" => n * 1e6,
            "ns" => n / 1e3,
            _ => panic!("{what}: {line}"),
        }
    };
    let inner = line
        .split_once(" (")
        .and_then(|(_, r)| r.split_once(')'))
        .unwrap_or_else(|| panic!("{what}: {line}"))
        .0;
    let (each, rest) = inner
        .split_once(" each")
        .unwrap_or_else(|| panic!("{what}: {line}"));
    let whole = micros(each);
    if let Some((_, parts)) = rest.split_once(", of which ") {
        let parts = parts.split(';').next().unwrap();
        for p in parts.split(", ") {
            let (label, time) = if let Some(t) = p.strip_prefix("stacks ") {
                ("stacks", t)
            } else if let Some(t) = p.strip_prefix("Python frames ") {
                ("Python frames", t)
            } else {
                panic!("{what}: {line}")
            };
            assert!(
                micros(time) <= whole,
                "{what}: {label} larger than its whole: {line}"
            );
        }
    }
}

/// Every report's bill adds up, for a set of programs (C, Rust and Python; one thread and
/// several, contexts and devices, refusals, pool off and on), sampled as by default and with
/// every call timed.
#[test]
fn every_reports_bill_adds_up() {
    let python = artifacts().root.join("harness/workloads/python");
    let programs: Vec<(&str, std::process::Command)> = vec![
        ("stack_deep", {
            let mut c = std::process::Command::new(c_program("stack_deep"));
            c.args(["60", "500", "3"]);
            c
        }),
        (
            "leaks_linked",
            std::process::Command::new(c_program("leaks_linked")),
        ),
        ("leaks_threads", {
            let mut c = std::process::Command::new(c_program("leaks_threads"));
            c.env("CUGUARD_SIM_DEVICES", "2");
            c
        }),
        ("stress_threads", {
            let mut c = std::process::Command::new(c_program("stress_threads"));
            c.args(["4", "1"]);
            c
        }),
        ("limit refused", {
            let mut c = std::process::Command::new(c_program("limit"));
            c.env("CUGUARD_SIM_MEMORY", "256MiB").args([
                "alloc", "100", "alloc", "200", "alloc", "100", "alloc", "100",
            ]);
            c
        }),
        ("leaks_door getproc", {
            let mut c = std::process::Command::new(c_program("leaks_door"));
            c.arg("getproc");
            c
        }),
        (
            "cudarc_leaks",
            std::process::Command::new(crate::support::rust_program("cudarc_leaks")),
        ),
        ("alloc_bench.py", {
            let mut c = std::process::Command::new("python3");
            c.arg(python.join("alloc_bench.py")).args(["300", "40"]);
            c
        }),
        ("growth.py", {
            let mut c = std::process::Command::new("python3");
            c.arg(python.join("growth.py"));
            c
        }),
    ];
    let mut checked = 0;
    for (name, template) in programs {
        for (sample, pool) in [("32", "1"), ("1", "1"), ("32", "0")] {
            let what = format!("{name}, CUGUARD_COST_SAMPLE={sample}, CUGUARD_POOL={pool}");
            let path = scratch_dir(&format!(
                "cost-adds-up-{}-{sample}-{pool}",
                name.replace([' ', '.'], "_")
            ))
            .join("r.json");
            let mut cmd = shim_command(Path::new(template.get_program()), &path);
            cmd.args(template.get_args());
            for (k, v) in template.get_envs() {
                if let Some(v) = v {
                    cmd.env(k, v);
                }
            }
            cmd.env("CUGUARD_COST_SAMPLE", sample)
                .env("CUGUARD_POOL", pool)
                .env("CUGUARD_QUIET", "1");
            let out = match cmd.output() {
                Ok(out) => out,
                Err(e) => {
                    crate::support::missing(&what, &format!("cannot start it: {e}"));
                    continue;
                }
            };
            // Every program here ends well, with and without the shim.
            assert!(
                out.status.success(),
                "{what}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            let report = read_report(&path);
            crate::cli_schema::validate(&report).unwrap();
            assert!(u(&report["cost"]["hooks"]["calls"]) > 0, "{what}");
            bill_adds_up(&what, &report, &path);
            checked += 1;
        }
    }
    // No run lost: nine programs, three settings each (outside CI, a missing python3 is said).
    assert!(
        checked == 27 || (std::env::var_os("CI").is_none() && checked == 21),
        "{checked} reports checked of 27"
    );
}

/// The checker itself: a real report passes it, and the same report with every timing zeroed
/// (what a broken clock or a bill never filled would give) fails it.
#[test]
fn the_bill_check_fails_a_report_whose_timings_are_all_zero() {
    let dir = scratch_dir("cost-zeroed");
    let path = dir.join("r.json");
    run(
        shim_command(&c_program("leaks_linked"), &path).env("CUGUARD_QUIET", "1"),
        true,
    );
    let report = read_report(&path);
    bill_adds_up("leaks_linked", &report, &path);
    let mut zeroed = report.clone();
    fn zero(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, v) in m.iter_mut() {
                    if k == "ns" || k.ends_with("_ns") {
                        *v = Value::from(0);
                    } else {
                        zero(v);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(zero),
            _ => {}
        }
    }
    zero(&mut zeroed["cost"]);
    let zeroed_path = dir.join("zeroed.json");
    std::fs::write(&zeroed_path, serde_json::to_vec(&zeroed).unwrap()).unwrap();
    let failed = std::panic::catch_unwind(|| bill_adds_up("zeroed", &zeroed, &zeroed_path));
    assert!(failed.is_err(), "a bill of zeros passed the check");
}
