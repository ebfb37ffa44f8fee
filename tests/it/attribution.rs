//! Attribution (issue 10), as the shim records it on the simulated driver: what was live at each
//! device's peak, live bytes per stack over time (what grew), out-of-memory records, owners and
//! reconciliation. Python programs allocate through ctypes.

use std::path::{Path, PathBuf};
use std::process::Command;

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
    run_python_report(test, script, args, env).map(|(out, err, r, _)| (out, err, r))
}

/// As [`run_python`], with the report's path too (for the `cuguard` command).
fn run_python_report(
    test: &str,
    script: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Option<(String, String, Value, PathBuf)> {
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
        report,
    ))
}

const MIB: u64 = 1 << 20;

#[test]
fn a_growing_list_is_sampled_rising_and_the_temporary_is_live_at_the_peak() {
    let script = python_workload("growth.py");
    let env = [SAMPLED[0], ("CUGUARD_TIMELINE_MS", "20")];
    let Some((_, _, r, path)) = run_python_report("attr-growth", &script, &["20", "60"], &env)
    else {
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
    // The list's line grows to the 20 buffers (freed at shutdown does not hide it); the
    // temporary does not. --max-growth fails on it and names it.
    let grows_at = site_at(&script, "# grows");
    let got = growing(&path);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((&got[0].0[..], &got[0].1[..]), (&grows_at[..], "program"));
    assert_eq!(got[0].3, 20 * MIB);
    let (code, out) = cuguard_on(&path, &["check", "--max-growth", "1MiB"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("{grows_at}) grew by "))
            && out.contains("(more than --max-growth 1.0 MiB)"),
        "{out}"
    );
    let (code, out) = cuguard_on(&path, &["check", "--max-growth", "64MiB"]);
    assert_eq!(code, Some(0), "{out}");
}

/// `growth.py:LINE`: the location of the line of `script` marked with `marker`.
fn site_at(script: &Path, marker: &str) -> String {
    let text = std::fs::read_to_string(script).unwrap();
    let line = text.lines().position(|l| l.ends_with(marker)).unwrap() + 1;
    format!("{}:{line}", script.file_name().unwrap().to_string_lossy())
}

/// `cuguard ARGS… REPORT`: its exit code and stdout.
fn cuguard_on(report: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(&artifacts().cuguard)
        .args(args)
        .arg(report)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The sites `cuguard summary --format json` says grow in the report's one process:
/// (location, owner, from_bytes, to_bytes), most grown first.
pub(crate) fn growing(report: &Path) -> Vec<(String, String, u64, u64)> {
    let (code, out) = cuguard_on(report, &["summary", "--format", "json"]);
    assert_eq!(code, Some(0), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    v["processes"][0]["growing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["location"].as_str().unwrap_or_default().to_string(),
                g["owner"].as_str().unwrap().to_string(),
                g["from_bytes"].as_u64().unwrap(),
                g["to_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The live bytes of `stack` at each sample time.
fn series_of(report: &Value, stack: &Value) -> Vec<u64> {
    report["stack_samples"]["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stack"] == *stack)
        .unwrap_or_else(|| panic!("no series for stack {stack}"))["bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect()
}

/// The settings of the runs whose growth is read: a sample every 10 ms, and no stats page. The
/// reporter thread makes the page at the end of its first turn, naming the first sites, and
/// takes no samples meanwhile: on a loaded machine that is a second, the whole of a short run.
const SAMPLED: [(&str, &str); 2] = [("CUGUARD_PAGE", "0"), ("CUGUARD_TIMELINE_MS", "10")];

/// The stand-in cache's owner rule, as a user declares their own allocator.
const STANDIN_CACHE: (&str, &str) = (
    "CUGUARD_OWNERS",
    "standin_cache:framework_cache=file:*/standin_cache.py",
);

/// Set-up then steady work (issue 21): after 8 iterations of start-up, weights kept by the
/// program and a stand-in framework cache filled in 8 iterations, one of each given back two
/// iterations later, then 45 iterations that only use a temporary. Nothing grows, by any owner, and --max-growth passes; cut at its last
/// maximum, each series is nothing but a rise (what the criterion used to call growth).
#[test]
fn set_up_then_a_plateau_does_not_grow() {
    let script = python_workload("growth.py");
    let cache_py = python_workload("standin_cache.py");
    let env = [SAMPLED[0], SAMPLED[1], STANDIN_CACHE];
    let Some((stdout, _, r, path)) =
        run_python_report("attr-warmup", &script, &["64", "25", "warmup"], &env)
    else {
        return;
    };
    assert!(stdout.contains("\"warm\": 8"), "{stdout}");
    let cache = stack_at_marker(&r, &cache_py, "# cache block");
    // The weights are freed at shutdown; the cache keeps its 7 blocks to the end.
    let leaks = r["leaks"].as_array().unwrap();
    assert_eq!(leaks.len(), 7, "{leaks:?}");
    assert!(leaks.iter().all(|l| l["stack"] == cache["id"]
        && l["size"] == 4 * MIB
        && l["owner"] == "standin_cache"));
    let weights = stack_at_marker(&r, &script, "# weights");
    assert_eq!(cache["owner"], "standin_cache");
    assert_eq!(weights["owner"], "program");
    assert!(
        r["owners"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == "standin_cache" && o["kind"] == "framework_cache"),
        "{}",
        r["owners"]
    );
    for (stack, size) in [(cache, 4 * MIB), (weights, 2 * MIB)] {
        let bytes = series_of(&r, &stack["id"]);
        let first_max = bytes.iter().position(|&b| b == 8 * size);
        let last_max = bytes.iter().rposition(|&b| b == 8 * size);
        let (Some(first_max), Some(last_max)) = (first_max, last_max) else {
            panic!("never held 8 blocks: {bytes:?}");
        };
        let low_at = bytes[..=first_max]
            .iter()
            .rposition(|&b| b == 0)
            .expect("sampled before the set-up");
        let rising = bytes[low_at..=first_max]
            .windows(2)
            .filter(|w| w[1] > w[0])
            .count();
        assert!(
            rising >= 3 && last_max - low_at >= 4,
            "a rise of steps: {bytes:?}"
        );
        // Then one given back, held to the end (the weights until the teardown frees them).
        let rest = &bytes[last_max + 1..];
        let held = rest.iter().take_while(|&&b| b == 7 * size).count();
        // After the plateau, only the teardown: its frees one by one, which a sample can catch
        // half done (a clean-clone run once sampled 12 of the weights' 14 MiB), down to none.
        let teardown = &rest[held..];
        assert!(
            teardown.windows(2).all(|w| w[1] <= w[0])
                && teardown.iter().all(|&b| b < 7 * size)
                && teardown.last().is_none_or(|&b| b == 0),
            "{bytes:?}"
        );
        assert!(
            held >= 2 * (last_max - low_at + 1),
            "a plateau longer than the rise: {bytes:?}"
        );
    }
    assert_eq!(growing(&path), []);
    let (_, text) = cuguard_on(&path, &["summary"]);
    assert!(!text.contains("growing"), "{text}");
    // The cache's blocks at exit count as leaks under --owners framework_cache: a byte limit
    // for them, as docs/cli.md's example gives, and no growth.
    for owners in ["program", "framework_cache", "all"] {
        let (code, out) = cuguard_on(
            &path,
            &[
                "check",
                "--owners",
                owners,
                "--max-leaked-bytes",
                "64MiB",
                "--max-growth",
                "1MiB",
            ],
        );
        assert_eq!(code, Some(0), "--owners {owners}: {out}");
        assert!(!out.contains("grew"), "{out}");
    }
    let (code, out) = cuguard_on(&path, &["check", "--max-growth", "1MiB"]);
    assert_eq!(
        code,
        Some(0),
        "the cache's blocks are not the program's: {out}"
    );
}

/// The seed's loop (issue 21): an allocation leaked in every iteration grows for the whole run,
/// at its line, and fails --max-growth (and the leak check).
#[test]
fn an_allocation_leaked_in_every_iteration_grows() {
    let script = python_workload("growth.py");
    let env = SAMPLED;
    let Some((_, _, r, path)) =
        run_python_report("attr-leak", &script, &["30", "30", "leak"], &env)
    else {
        return;
    };
    let leaks_at = stack_at_marker(&r, &script, "# leaks")["id"].clone();
    let leaks = r["leaks"].as_array().unwrap();
    assert_eq!(leaks.len(), 30);
    assert!(
        leaks
            .iter()
            .all(|l| l["stack"] == leaks_at && l["size"] == MIB)
    );
    let got = growing(&path);
    assert_eq!(got.len(), 1, "the temporary does not grow: {got:?}");
    let (location, owner, from, to) = &got[0];
    assert_eq!(
        (&location[..], &owner[..], *to),
        (&site_at(&script, "# leaks")[..], "program", 30 * MIB)
    );
    assert!(
        *from <= MIB,
        "sampling begins at the first allocation: {from}"
    );
    let loose = ["check", "--max-leaked-bytes", "1GiB"];
    let (code, out) = cuguard_on(&path, &loose);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = cuguard_on(&path, &[&loose[..], &["--max-growth", "1MiB"]].concat());
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("{}) grew by ", site_at(&script, "# leaks"))),
        "{out}"
    );
}

/// Growth inside a cache: the stand-in cache takes a block in every iteration and keeps them
/// all to the end. It grows, held by its owner; the default check (the program's own) passes,
/// and docs/cli.md's `--owners framework_cache --max-leaked-bytes … --max-growth …` fails on
/// the growth.
#[test]
fn a_cache_that_keeps_taking_blocks_grows_under_its_owner() {
    let script = python_workload("growth.py");
    let cache_py = python_workload("standin_cache.py");
    let env = [SAMPLED[0], SAMPLED[1], STANDIN_CACHE];
    let Some((_, _, r, path)) =
        run_python_report("attr-cache", &script, &["30", "30", "cache"], &env)
    else {
        return;
    };
    assert_eq!(r["leaks"].as_array().unwrap().len(), 30, "kept to the end");
    let block = site_at(&cache_py, "# cache block");
    let got = growing(&path);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (&got[0].0[..], &got[0].1[..], got[0].3),
        (&block[..], "standin_cache", 120 * MIB)
    );
    let (code, out) = cuguard_on(&path, &["check", "--max-growth", "1MiB"]);
    assert_eq!(code, Some(0), "the cache is not the program: {out}");
    let cache_check = [
        "check",
        "--owners",
        "framework_cache",
        "--max-leaked-bytes",
        "1GiB",
    ];
    let (code, out) = cuguard_on(&path, &cache_check);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = cuguard_on(
        &path,
        &[&cache_check[..], &["--max-growth", "1MiB"]].concat(),
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("{block}) grew by ")), "{out}");
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
                && lines[0].ends_with(
                    ") 256.0 MiB; nothing cuguard can see would: 32.0 MiB asked, 0 B left and 0 B idle, 32.0 MiB short; 256.0 MiB is live"
                ),
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

/// What the pool gave back: a 64 MiB block freed under `CUGUARD_POOL_KEEP=0` goes back to the
/// driver at once. Whichever way it went (`cuMemFreeAsync`, which the driver may still hold at
/// the end, or `cuMemFree`), the reconciliation names no more of it than what the device says is
/// used leaves, every part adds up to what is used, and nothing is negative.
#[test]
fn reconciliation_names_what_the_pool_gave_back_and_is_never_negative() {
    let mib = 1u64 << 20;
    for cache in ["0", "1"] {
        let dir = scratch_dir(&format!("attr-given-back-{cache}"));
        let report = dir.join("r.json");
        run(
            shim_command(&crate::support::c_program("limit"), &report)
                .env("CUGUARD_SIM_MEMORY", "1GiB")
                .env("CUGUARD_POOL_KEEP", "0")
                .env("CUGUARD_POOL_THREAD_CACHE", cache)
                .env("CUGUARD_QUIET", "1")
                .args(["alloc", "1", "alloc", "64", "freeall", "alloc", "1"]),
            true,
        );
        let r = read_report(&report);
        crate::cli_schema::validate(&r).unwrap();
        let rec = &r["reconciliation"][0];
        let e = &rec["explained"];
        let part = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{k}: {rec}"));
        let parts: u64 = [
            "program_bytes",
            "framework_cache_bytes",
            "library_bytes",
            "driver_bytes",
            "pool_idle_bytes",
            "context_overhead_bytes",
        ]
        .iter()
        .map(|k| part(k))
        .sum::<u64>()
            + e["given_back_bytes"].as_u64().unwrap_or(0);
        let used = rec["device_used_bytes"].as_u64().unwrap();
        let unexplained = rec["unexplained_bytes"]
            .as_i64()
            .unwrap_or_else(|| panic!("{rec}"));
        assert!(unexplained >= 0, "{rec}");
        assert_eq!(parts + unexplained as u64, used, "{rec}");
        assert_eq!(part("program_bytes"), mib, "the last block is live: {rec}");
        let given = e["given_back_bytes"].as_u64().unwrap_or(0);
        match rec["given_back_pending_bytes"].as_u64() {
            // Given back with cuMemFreeAsync: the 64 MiB chunk and the first 1 MiB block's.
            Some(pending) => {
                assert!(pending >= 64 * mib, "{rec}");
                assert!(given <= pending, "{rec}");
            }
            None => assert_eq!(given, 0, "{rec}"),
        }
        assert!(rec.get("excess_bytes").is_none(), "{rec}");
    }
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
    let reports: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .collect();
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
