//! The pool under real programs on the simulated driver: freed blocks are not reused while late
//! work may still write them (and the test would catch it if they were), every block keeps its
//! own bytes through heavy churn, pooled pointers answer queries like real allocations, and the
//! pool's limit and settings behave as documented.

use serde_json::Value;

use crate::cli_schema::validate;
use crate::support::{
    c_program, env_tag, program_report, read_report, run, scratch_dir, shim_command, sim_command,
};

fn reuse_cases(env: &[(&str, &str)]) -> Vec<(String, bool, u64)> {
    let dir = scratch_dir(&format!("reuse{}", env_tag(env)));
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("pool_reuse"), &report);
    cmd.env("CUGUARD_QUIET", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["case"].as_str().unwrap().to_string(),
                c["same_address"].as_bool().unwrap(),
                c["corrupted_bytes"].as_u64().unwrap(),
            )
        })
        .collect()
}

const CASES: [&str; 5] = [
    "non_blocking_stream",
    "legacy_stream",
    "per_thread_stream",
    "stream_ordered_free",
    "destroyed_stream",
];

#[test]
fn freed_blocks_wait_for_work_issued_before_the_free() {
    let safe = reuse_cases(&[("CUGUARD_POOL", "1")]);
    assert_eq!(safe.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), CASES);
    for (case, _, corrupted) in &safe {
        assert_eq!(*corrupted, 0, "{case}: late work wrote into a reused block");
    }
    // The fence rule alone, without stream-aware reuse, is safe too.
    let fence_only = reuse_cases(&[("CUGUARD_POOL", "1"), ("CUGUARD_POOL_STREAM_REUSE", "0")]);
    for (case, _, corrupted) in &fence_only {
        assert_eq!(
            *corrupted, 0,
            "{case}: late work wrote into a reused block (fence rule alone)"
        );
    }
    // The same program would see the damage if the pool reused blocks at once.
    let unsafe_reuse = reuse_cases(&[("CUGUARD_POOL", "1"), ("CUGUARD_TEST_UNSAFE_REUSE", "1")]);
    for (case, same, corrupted) in &unsafe_reuse {
        assert!(
            *same,
            "{case}: immediate reuse should hand the same block out"
        );
        assert_eq!(
            *corrupted,
            1 << 20,
            "{case}: the test must catch immediate reuse"
        );
    }
    // And the driver's own free is safe too.
    for (case, _, corrupted) in reuse_cases(&[("CUGUARD_POOL", "0")]) {
        assert_eq!(corrupted, 0, "{case} without the pool");
    }
}

#[test]
fn every_block_keeps_its_own_pattern_through_churn() {
    let dir = scratch_dir("integrity");
    let report = dir.join("r.json");
    let out = run(
        shim_command(&c_program("pool_integrity"), &report)
            .arg("800")
            .env("CUGUARD_SIM_WORK_DELAY_US", "100")
            .env("CUGUARD_QUIET", "1"),
        true,
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bad_blocks"], 0, "{v}");
    assert!(v["blocks"].as_u64().unwrap() > 1000, "{v}");
    assert_eq!(v["checked"], v["blocks"]);
    let r = read_report(&report);
    validate(&r).unwrap();
    assert_eq!(r["leaks"].as_array().unwrap().len(), 0);
    let pool = &r["stats"]["devices"][0]["pool"];
    assert!(pool["chunks_added"].as_u64().unwrap() >= 1, "{pool}");
    // The settings are echoed, and memory over time was sampled.
    assert_eq!(r["config"]["pool"], true);
    assert_eq!(r["config"]["pool_initial"], "0");
    assert_eq!(r["config"]["pool_keep"], "10%");
    assert!(r["config"]["pool_limit"].is_null());
    let samples = r["timeline"]["samples"].as_array().unwrap();
    assert!(samples.len() >= 2, "{}", r["timeline"]);
    assert!(
        samples
            .iter()
            .any(|s| s["reserved_bytes"].as_u64().unwrap() > 0)
    );
    assert!(
        pool["fences"].as_u64().unwrap() >= 1,
        "late work must have been fenced: {pool}"
    );
}

#[test]
fn pooled_pointers_answer_queries_like_real_allocations() {
    let program = c_program("pool_queries");
    let lines = |pool: &str| {
        let dir = scratch_dir(&format!("queries-{pool}"));
        let out = run(
            shim_command(&program, &dir.join("r.json"))
                .env("CUGUARD_POOL", pool)
                .env("CUGUARD_QUIET", "1"),
            true,
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        (text, stderr, read_report(&dir.join("r.json")))
    };
    let bare = String::from_utf8(run(&mut sim_command(&program), true).stdout).unwrap();
    let (off, _, _) = lines("0");
    let (on, on_stderr, on_report) = lines("1");
    assert_eq!(off, bare);
    let differs: Vec<(&str, &str)> = off
        .lines()
        .zip(on.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(
        differs,
        vec![(
            "ipc_export                   0",
            "ipc_export                   801"
        )]
    );
    for expected in [
        "range_interior_size          1000",
        "attr_size_value              1000",
        "buffer_ids_differ            1",
        "info_all_back                1",
        "range_after_free             500",
    ] {
        assert!(on.contains(expected), "missing {expected:?} in\n{on}");
    }
    assert!(
        on_stderr.contains("cuIpcGetMemHandle refused for a pooled pointer"),
        "{on_stderr}"
    );
    let kinds: Vec<&str> = on_report["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["ipc_refused"]);
}

#[test]
fn the_limit_refuses_with_out_of_memory_and_says_why() {
    let dir = scratch_dir("limit");
    let report = dir.join("r.json");
    // leaks_door allocates 1, 2 and 3 MiB; a 4 MiB limit lets the pool hold 1 + 2 only.
    let out = run(
        shim_command(&c_program("leaks_door"), &report)
            .arg("dlsym")
            .env("CUGUARD_POOL_LIMIT", "4MiB")
            .env("CUGUARD_QUIET", "1"),
        false,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "the program's third allocation must fail"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("-> 2"),
        "CUDA_ERROR_OUT_OF_MEMORY"
    );
    let r = read_report(&report);
    let failed: Vec<&Value> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "alloc_failed")
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["result"], 2);
    assert_eq!(failed[0]["size"], 3 << 20);
    let why = failed[0]["message"].as_str().unwrap();
    assert!(why.contains("CUGUARD_POOL_LIMIT"), "{why}");
    assert_eq!(r["stats"]["devices"][0]["pool"]["limit_refusals"], 1);
}

#[test]
fn bad_pool_settings_get_a_clear_line_and_the_default() {
    let dir = scratch_dir("bad-settings");
    let report = dir.join("r.json");
    let out = run(
        shim_command(&c_program("leaks_door"), &report)
            .arg("dlsym")
            .env("CUGUARD_POOL_LIMIT", "lots")
            .env("CUGUARD_POOL", "maybe")
            .env("CUGUARD_QUIET", "1"),
        true,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        vec![
            "cuguard: CUGUARD_POOL=\"maybe\" is not 0 or 1; using 1",
            "cuguard: CUGUARD_POOL_LIMIT: \"lots\" is not a number of bytes; using the default",
        ]
    );
    let r = read_report(&report);
    assert_eq!(r["faults"].as_array().unwrap().len(), 2);
    assert!(
        !r["stats"]["devices"][0]["pool"].is_null(),
        "pool on by default"
    );
}

/// The per-thread caches through threads that exit with blocks in them, a context destroyed
/// with a block its cache handed out, and a fork with blocks in the forking thread's cache: every
/// kept block is reported exactly once, in its state, no block is handed to two owners, the
/// forked child works, and nothing is reported that did not happen. The same with the caches
/// off, for comparison.
#[test]
fn thread_caches_survive_thread_exit_context_destroy_and_fork() {
    let program = c_program("pool_thread_cache");
    for cache in ["1", "0"] {
        let dir = scratch_dir(&format!("thread-cache-{cache}"));
        let report = dir.join("r.json");
        let out = run(
            shim_command(&program, &report)
                .env("CUGUARD_POOL", "1")
                .env("CUGUARD_POOL_THREAD_CACHE", cache)
                .env("CUGUARD_QUIET", "1"),
            true,
        );
        let truth: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(truth["mismatches"], 0, "cache {cache}: {truth}");
        assert_eq!(truth["child_status"], 0, "cache {cache}: {truth}");
        if cache == "1" {
            // Each thread's pairs came from its cache: the same block every time.
            assert_eq!(truth["thread_pairs_same"], 8 * 198, "{truth}");
        }
        // The forked child writes a report of its own (it leaves through `_exit`).
        let r = program_report(&report);
        validate(&r).unwrap();
        let key = |v: &Value| {
            (
                v["address"].as_str().unwrap().to_string(),
                v["size"].as_u64().unwrap(),
                v["state"].as_str().unwrap().to_string(),
            )
        };
        let mut want: Vec<_> = truth["kept"].as_array().unwrap().iter().map(key).collect();
        let mut got: Vec<_> = r["leaks"].as_array().unwrap().iter().map(key).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "cache {cache}");
        let events: Vec<&str> = r["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            events,
            ["context_destroyed_with_live_allocations"],
            "cache {cache}"
        );
    }
}

#[test]
fn the_pool_waits_for_the_oldest_fence_not_for_later_work() {
    let dir = scratch_dir("fence-wait");
    let report = dir.join("r.json");
    let out = run(
        shim_command(&c_program("pool_fence_wait"), &report).env("CUGUARD_QUIET", "1"),
        true,
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The freed chunk came back once the fence covering its late work completed, while the work
    // submitted after that fence (a long stall on the second stream) was still running.
    assert_eq!(
        v,
        serde_json::json!({"same_address": true, "s2_busy_after": true, "corrupted_bytes": 0})
    );
    let r = read_report(&report);
    let pool = &r["stats"]["devices"][0]["pool"];
    assert_eq!(pool["syncs"], 0, "{pool}");
    assert!(pool["fence_waits"].as_u64().unwrap() >= 1, "{pool}");
    assert_eq!(pool["stream_reuses"], 0, "{pool}");
}
