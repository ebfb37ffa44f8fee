//! Attribution (issue 10), as the shim records it on the simulated driver: what was live at each
//! device's peak, live bytes per stack over time (what grew), out-of-memory records, owners and
//! reconciliation. Python programs allocate through ctypes.

use std::path::Path;

use serde_json::Value;

use crate::support::{artifacts, read_report, run, scratch_dir, shim_command};

/// The stack whose site is the Python line of `file` marked with `marker`.
fn stack_at_marker<'a>(report: &'a Value, file: &Path, marker: &str) -> &'a Value {
    let text = std::fs::read_to_string(file).unwrap();
    let line = text.lines().position(|l| l.ends_with(marker)).unwrap() as u64 + 1;
    report["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            let site = &s["site"];
            site["in"] == "python"
                && s["python"][site["index"].as_u64().unwrap() as usize]["line"] == line
        })
        .unwrap_or_else(|| panic!("no stack with its site at {marker} (line {line})"))
}

fn python_workload(name: &str) -> std::path::PathBuf {
    artifacts().root.join("harness/workloads/python").join(name)
}

/// Runs a Python workload under the shim; returns (stdout, stderr, report).
fn run_python(
    test: &str,
    script: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Option<(String, String, Value)> {
    let dir = scratch_dir(test);
    let report = dir.join("r.json");
    let mut cmd = shim_command(Path::new("python3"), &report);
    cmd.arg(script).args(args).envs(env.iter().copied());
    let out = cmd.output().unwrap();
    if out.status.code() == Some(127) {
        eprintln!("skipped: no python3");
        return None;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        read_report(&report),
    ))
}

const MIB: u64 = 1 << 20;

#[test]
fn a_growing_list_is_sampled_rising_and_the_temporary_is_live_at_the_peak() {
    let script = python_workload("growth.py");
    let Some((_, _, r)) = run_python("attr-growth", &script, &["20", "60"], &[]) else {
        return;
    };
    crate::cli_schema::validate(&r).unwrap();
    // Freed at shutdown: no leak.
    assert_eq!(r["leaks"], serde_json::json!([]));
    let grows = stack_at_marker(&r, &script, "# grows")["id"].clone();
    let temporary = stack_at_marker(&r, &script, "# temporary")["id"].clone();
    assert_ne!(grows, temporary);
    // The last peak record: the 20 kept buffers and the one temporary, by their stacks.
    let peaks = r["peaks"].as_array().unwrap();
    assert_eq!(peaks.len(), 1, "one device");
    let peak = &peaks[0];
    assert_eq!(peak["live_bytes"], 28 * MIB);
    let at_peak = |id: &Value| -> (u64, u64) {
        let s = peak["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stack"] == *id)
            .expect("the stack is in the peak record");
        (
            s["bytes"].as_u64().unwrap(),
            s["allocations"].as_u64().unwrap(),
        )
    };
    assert_eq!(at_peak(&grows), (20 * MIB, 20));
    assert_eq!(at_peak(&temporary), (8 * MIB, 1));
    assert_eq!(
        r["stats"]["devices"][0]["peak_live_bytes"], peak["live_bytes"],
        "the last record is the peak (one thread: exact)"
    );
    // Sampled over time: the kept list's stack rises in steps of 1 MiB to 20 MiB and never falls
    // until the interpreter tears the list down.
    let samples = &r["stack_samples"];
    let times = samples["times_ms"].as_array().unwrap();
    assert!(times.len() >= 8, "{} samples", times.len());
    let series = samples["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stack"] == grows)
        .expect("a series for the list's stack");
    let bytes: Vec<u64> = series["bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    let top = bytes
        .iter()
        .position(|&b| b == 20 * MIB)
        .expect("reaches 20 MiB");
    assert!(bytes[..=top].windows(2).all(|w| w[0] <= w[1]), "{bytes:?}");
    assert!(bytes[..=top].iter().all(|b| b % MIB == 0), "{bytes:?}");
    assert!(bytes[0] < 10 * MIB, "sampling began early: {bytes:?}");
    // Whole stacks, and owners: the program's.
    for id in [&grows, &temporary] {
        let s = r["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == *id)
            .unwrap();
        assert_eq!(s["owner"], "program");
        assert_eq!(s["site"]["kind"], "user");
    }
    assert_eq!(r["owners"][0]["id"], "program");
}

/// The out-of-memory record names the request and what held the memory, with the pool off and
/// on; the first refusal gets one line on stderr.
#[test]
fn running_out_of_memory_is_recorded_with_what_held_it() {
    let script = python_workload("oom.py");
    for pool in ["0", "1"] {
        let env = [("CUGUARD_POOL", pool), ("CUGUARD_SIM_MEMORY", "256MiB")];
        let Some((stdout, stderr, r)) = run_python(&format!("attr-oom-{pool}"), &script, &[], &env)
        else {
            return;
        };
        crate::cli_schema::validate(&r).unwrap();
        let said: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(said["held"], 8, "256 MiB in 32 MiB blocks");
        assert_eq!(
            (said["hoard_result"].clone(), said["ask_result"].clone()),
            (2.into(), 2.into())
        );
        let hoards = stack_at_marker(&r, &script, "# hoards")["id"].clone();
        let asks = stack_at_marker(&r, &script, "# asks")["id"].clone();
        let ooms = r["ooms"].as_array().unwrap();
        assert_eq!(ooms.len(), 2, "pool {pool}");
        for (o, (size, stack)) in ooms.iter().zip([(32 * MIB, &hoards), (64 * MIB, &asks)]) {
            assert_eq!(o["api"], "cuMemAlloc_v2");
            assert_eq!(o["size"], size, "pool {pool}");
            assert_eq!(o["stack"], *stack, "pool {pool}");
            assert_eq!(o["device"], 0);
            assert_eq!(o["refused_by"], "driver");
            assert_eq!(o["live_bytes"], 256 * MIB);
            assert_eq!(
                o["stacks"],
                serde_json::json!([{"stack": hoards, "bytes": 256 * MIB, "allocations": 8}]),
                "pool {pool}: the hoarding line holds all of it"
            );
            assert_eq!(
                o["by_owner"],
                serde_json::json!([{"owner": "program", "bytes": 256 * MIB}])
            );
            assert_eq!(o["device_total_bytes"], 256 * MIB);
            if pool == "1" {
                assert_eq!(o["pool"]["reserved_bytes"], 256 * MIB);
            } else {
                assert!(o["pool"].is_null());
            }
        }
        // The alloc_failed events and the records share their sequence numbers.
        let failed: Vec<&Value> = r["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "alloc_failed")
            .collect();
        assert_eq!(failed.len(), 2);
        assert_eq!(failed[0]["seq"], ooms[0]["seq"]);
        assert_eq!(failed[1]["seq"], ooms[1]["seq"]);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("out of memory"))
            .collect();
        assert_eq!(lines.len(), 1, "{stderr}");
        assert!(
            lines[0].starts_with("cuguard: out of memory at hoard (oom.py:")
                && lines[0].contains(
                    "asking 32.0 MiB (cuMemAlloc_v2); 256.0 MiB live, top: hoard (oom.py:"
                )
                && lines[0].ends_with(") 256.0 MiB"),
            "{}",
            lines[0]
        );
    }
}

/// The pool's own limit: refused by `pool_limit`, said so.
#[test]
fn the_pool_limit_refusal_is_recorded_as_such() {
    let script = python_workload("oom.py");
    let env = [("CUGUARD_POOL", "1"), ("CUGUARD_POOL_LIMIT", "128MiB")];
    let Some((stdout, stderr, r)) = run_python("attr-oom-limit", &script, &[], &env) else {
        return;
    };
    let said: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(said["held"], 4, "128 MiB in 32 MiB blocks");
    let ooms = r["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 2);
    assert!(ooms.iter().all(|o| o["refused_by"] == "pool_limit"));
    assert!(
        ooms[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("CUGUARD_POOL_LIMIT")
    );
    assert_eq!(ooms[0]["live_bytes"], 128 * MIB);
    assert!(stderr.contains("(CUGUARD_POOL_LIMIT)"), "{stderr}");
}

/// A storm of refusals: one line on stderr, a bounded report, the rest counted.
#[test]
fn an_oom_storm_costs_one_line_and_a_bounded_report() {
    let script = python_workload("oom.py");
    let env = [("CUGUARD_SIM_MEMORY", "256MiB")];
    let Some((_, stderr, r)) = run_python("attr-oom-storm", &script, &["5000"], &env) else {
        return;
    };
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("out of memory"))
            .count(),
        1,
        "{stderr}"
    );
    assert_eq!(r["ooms"].as_array().unwrap().len(), 16);
    assert_eq!(r["ooms_dropped"], 5002 - 16);
}

/// Reconciliation on the simulated driver (no NVML): the device's used memory against the
/// program's live memory and the pool's idle memory, and why NVML's figure is missing.
#[test]
fn reconciliation_splits_what_the_device_uses() {
    let dir = scratch_dir("attr-reconcile");
    let report = dir.join("r.json");
    let out = run(
        &mut shim_command(&crate::support::rust_program("cudarc_leaks"), &report),
        true,
    );
    assert!(out.status.success());
    let r = read_report(&report);
    let rec = &r["reconciliation"][0];
    assert_eq!(rec["device"], 0);
    assert_eq!(rec["process_used_note"], "NVML is not available");
    let e = &rec["explained"];
    let leaked: u64 = r["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["size"].as_u64().unwrap())
        .sum();
    assert_eq!(e["program_bytes"], leaked);
    let pool = &r["stats"]["devices"][0]["pool"];
    // Idle: free and pending, and the rounding of the live pooled blocks: the kept 3 MiB
    // `cuMemAlloc_v2` is a dedicated chunk of 4 MiB.
    assert_eq!(
        e["pool_idle_bytes"].as_u64().unwrap(),
        pool["free_bytes"].as_u64().unwrap() + pool["pending_bytes"].as_u64().unwrap() + (1 << 20)
    );
    // The simulated driver counts what it handed out: the pool's chunks and the stream-ordered
    // allocations. All of it is explained.
    let used = rec["device_used_bytes"].as_u64().unwrap();
    assert_eq!(
        rec["unexplained_bytes"],
        used as i64
            - (e["program_bytes"].as_u64().unwrap() + e["pool_idle_bytes"].as_u64().unwrap())
                as i64
    );
    assert_eq!(rec["unexplained_bytes"], 0, "{rec}");
}

/// A bad setting is said once, by the process that uses CUDA, not by every process the program
/// runs (here a shell running helpers before the program); bad owner and site rules too, and
/// the defaults apply.
#[test]
fn a_bad_setting_is_said_once() {
    let dir = scratch_dir("attr-bad-setting");
    let report = dir.join("r.%p.json");
    let program = crate::support::rust_program("cudarc_leaks");
    let mut cmd = shim_command(Path::new("/bin/sh"), &report);
    cmd.arg("-c")
        .arg(format!(
            "true; ls / > /dev/null; true; {}",
            program.display()
        ))
        .env("CUGUARD_POOL_INITIAL", "bogus")
        .env(
            "CUGUARD_OWNERS",
            "mypool=framework_cache:function:my_pool_*, nonsense",
        )
        .env("CUGUARD_QUIET", "1");
    let out = run(&mut cmd, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cuguard:"))
        .collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(
        lines[0].contains("CUGUARD_POOL_INITIAL: \"bogus\""),
        "{stderr}"
    );
    assert!(lines[1].starts_with("cuguard: CUGUARD_OWNERS:"), "{stderr}");
    // One report (the program's), whose sites and owners follow the built-in rules.
    let reports: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(reports.len(), 1);
    let r = read_report(&reports[0].path());
    assert!(
        r["leaks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["owner"] == "program")
    );
    assert_eq!(r["faults"].as_array().unwrap().len(), 2, "{}", r["faults"]);
}
