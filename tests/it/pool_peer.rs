//! The pool across contexts (`harness/workloads/c/pool_peer.c`, two simulated devices): a block
//! freed in context A is not reused while work of context B can still write it, whether B has
//! peer access to A or copies into A's memory without it; disabling access and destroying B
//! end the wait; a context nothing reaches keeps its immediate reuse and waits for nobody else.
//! Also the simulated driver's peer entries and codes, with and without the shim.

use serde_json::Value;

use crate::support::{
    c_program, env_tag, read_report, run, scratch_dir, shim_command, sim_command,
};

/// Bytes each trial reallocates (16 blocks of 4 MiB).
const TRIAL_BYTES: u64 = 16 * (4 << 20);

/// Runs `pool_peer MODE TRIALS` under the shim with the pool on; its output and report.
fn peer_run(mode: &str, trials: u32, env: &[(&str, &str)]) -> (Value, Value) {
    let dir = scratch_dir(&format!("pool-peer-{mode}{}", env_tag(env)));
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("pool_peer"), &report);
    cmd.args([mode, &trials.to_string()])
        .env("CUGUARD_SIM_DEVICES", "2")
        .env("CUGUARD_POOL", "1")
        .env("CUGUARD_QUIET", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{mode}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    (v, read_report(&report))
}

/// Stream-aware reuse off: the fence rule alone, whose counters some tests read exactly.
const STREAM_REUSE_OFF: (&str, &str) = ("CUGUARD_POOL_STREAM_REUSE", "0");

/// The pool counters of `device` in a report.
fn pool(report: &Value, device: u64) -> &Value {
    report["stats"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == device)
        .map(|d| &d["pool"])
        .unwrap_or_else(|| panic!("no device {device}: {}", report["stats"]))
}

fn count(pool: &Value, key: &str) -> u64 {
    pool[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {pool}"))
}

/// Every trial reused all its blocks, and none of them got a byte of the late writes.
fn assert_safe_trials(mode: &str, v: &Value, trials: u32) {
    let t = v["trials"].as_array().unwrap();
    assert_eq!(t.len(), trials as usize, "{mode}: {v}");
    for (i, trial) in t.iter().enumerate() {
        assert_eq!(
            trial["corrupted_bytes"], 0,
            "{mode}, trial {i}: a late write of context B landed in a reused block: {v}"
        );
        assert_eq!(
            trial["same_blocks"], 16,
            "{mode}, trial {i}: the pool reuses the freed blocks once B's work is done: {v}"
        );
    }
}

#[test]
fn peer_access_writes_are_waited_for() {
    let trials = 20;
    let (v, r) = peer_run("peer_write", trials, &[]);
    assert_safe_trials("peer_write", &v, trials);
    // While B has access, A's pool waited for B's work even when A's own was done.
    assert_eq!(v["b_busy_after"], false, "{v}");
    // Every fence and synchronization of A's pool covered B; nothing reaches B's.
    let a = pool(&r, 0);
    assert!(count(a, "fences") >= trials as u64, "{a}");
    assert_eq!(
        count(a, "peer_waits"),
        count(a, "fences") + count(a, "syncs"),
        "{a}"
    );
    let b = pool(&r, 1);
    assert_eq!((count(b, "peer_waits"), count(b, "syncs")), (0, 0), "{b}");
}

#[test]
fn the_peer_test_catches_immediate_reuse() {
    let (v, _) = peer_run("peer_write", 3, &[("CUGUARD_TEST_UNSAFE_REUSE", "1")]);
    for trial in v["trials"].as_array().unwrap() {
        assert_eq!(trial["same_blocks"], 16, "{v}");
        let bad = trial["corrupted_bytes"].as_u64().unwrap();
        assert!(
            bad > 0 && bad <= TRIAL_BYTES,
            "immediate reuse must let B's late writes land: {v}"
        );
    }
}

#[test]
fn peer_copies_are_waited_for_without_peer_access() {
    for mode in ["peer_copy", "unified_copy"] {
        let trials = 10;
        // As shipped (stream-aware reuse on): the frees after the copies fence and wait for B;
        // the trial's last frees, after A's own work on one stream, are reused early.
        let (v, r) = peer_run(mode, trials, &[]);
        assert_safe_trials(mode, &v, trials);
        let a = pool(&r, 0);
        assert!(count(a, "peer_waits") >= trials as u64, "{mode}: {a}");
        assert!(count(a, "stream_reuses") >= trials as u64, "{mode}: {a}");
        assert_eq!(count(pool(&r, 1), "peer_waits"), 0, "{mode}");
        // The fence rule alone: each trial's fence waited for B's copies; once a fence covered
        // them, A's later fences (those of the trial's last frees) waited for A alone.
        let (v, r) = peer_run(mode, trials, &[STREAM_REUSE_OFF]);
        assert_safe_trials(mode, &v, trials);
        let a = pool(&r, 0);
        let waits = count(a, "peer_waits");
        assert!(waits >= trials as u64, "{mode}: {a}");
        assert!(
            waits < count(a, "fences") + count(a, "syncs"),
            "{mode}: copies reach A only until a fence covered them: {a}"
        );
        assert_eq!(count(pool(&r, 1), "peer_waits"), 0, "{mode}");
    }
}

#[test]
fn disabled_access_is_waited_for_until_covered_then_forgotten() {
    let trials = 10;
    let (v, r) = peer_run("disable", trials, &[]);
    // B disables access right after queueing its writes: they are still waited for.
    assert_safe_trials("disable", &v, trials);
    assert!(count(pool(&r, 0), "peer_waits") >= trials as u64);
    // With access disabled and a fence past B's earlier work, A waits for A alone.
    assert_eq!(v["b_busy_after"], true, "{v}");
}

#[test]
fn a_destroyed_peer_leaves_nothing_to_wait_for() {
    let trials = 10;
    let (v, r) = peer_run("destroy", trials, &[]);
    assert_safe_trials("destroy", &v, trials);
    // Each B is destroyed (its work done) before A frees: no fence of A waits for a context
    // that is gone.
    let a = pool(&r, 0);
    assert!(count(a, "fences") >= trials as u64, "{a}");
    assert_eq!(count(a, "peer_waits"), 0, "{a}");
    let contexts = r["contexts"].as_array().unwrap();
    assert_eq!(contexts.len(), 1 + trials as usize);
    assert!(
        contexts[1..]
            .iter()
            .all(|c| c["device"] == 1 && c["destroyed"] == true)
    );
}

#[test]
fn a_context_nothing_reaches_keeps_its_reuse() {
    let trials = 8;
    // The fence rule alone (with stream-aware reuse, C's frees after its own work on one stream
    // are reused at once and nothing synchronizes: checked after).
    let (v, r) = peer_run("control", trials, &[STREAM_REUSE_OFF]);
    // Alone in the process, nothing submitted: every free is reused at once.
    assert_eq!(
        v["alone"],
        Value::Array(vec![Value::Bool(true); trials as usize]),
        "{v}"
    );
    assert_eq!(v["peer_trial"][0]["corrupted_bytes"], 0, "{v}");
    // With B reaching A (not C), C's pool waits for a fence of C alone: B's stall is still
    // running.
    assert_eq!(v["with_peers_same_address"], true, "{v}");
    assert_eq!(v["b_busy_after"], true, "{v}");
    let c = pool(&r, 1);
    assert_eq!(
        (
            count(c, "fence_waits"),
            count(c, "syncs"),
            count(c, "peer_waits")
        ),
        (trials as u64, 0, 0),
        "one wait for a fence of C only per reuse with work, no synchronization: {c}"
    );
    assert!(count(pool(&r, 0), "peer_waits") >= 1);
    // As shipped: C's reuses do not wait for anything, and B is still busy after.
    let (v, r) = peer_run("control", trials, &[]);
    assert_eq!(v["peer_trial"][0]["corrupted_bytes"], 0, "{v}");
    assert_eq!(v["with_peers_same_address"], true, "{v}");
    assert_eq!(v["b_busy_after"], true, "{v}");
    let c = pool(&r, 1);
    assert_eq!(count(c, "peer_waits"), 0, "{c}");
    assert!(count(c, "stream_reuses") >= trials as u64, "{c}");
}

#[test]
fn simulated_peer_access_answers_as_the_driver() {
    let program = c_program("pool_peer");
    let expected = serde_json::json!({
        "can_access_0_1": 1, "can_access_0_0": 0, "can_access_bad_device": 101,
        "enable_self": 101, "fill_without_access": 705, "disable_never_enabled": 705,
        "enable_bad_flags": 1, "enable_null": 201, "enable": 0, "enable_again": 704,
        "fill_with_access": 0, "filled_bytes": 4 << 20, "fill_the_other_way": 705,
        "disable": 0, "disable_again": 705, "fill_after_disable": 705, "copy_peer": 0,
        "copy_peer_async": 0, "copied_bytes": 4 << 20, "copy_null_context": 201,
        "disable_after_peer_reset": 705
    });
    let bare = run(
        sim_command(&program)
            .arg("sim")
            .env("CUGUARD_SIM_DEVICES", "2"),
        true,
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&bare.stdout).unwrap(),
        expected
    );
    // The shim forwards them unchanged, pool on or off.
    for on in ["0", "1"] {
        let dir = scratch_dir(&format!("pool-peer-sim-{on}"));
        let out = run(
            shim_command(&program, &dir.join("r.json"))
                .arg("sim")
                .env("CUGUARD_SIM_DEVICES", "2")
                .env("CUGUARD_POOL", on)
                .env("CUGUARD_QUIET", "1"),
            true,
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&out.stdout).unwrap(),
            expected,
            "pool {on}"
        );
    }
}
