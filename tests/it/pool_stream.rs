//! Stream-aware reuse (`CUGUARD_POOL_STREAM_REUSE`, `harness/workloads/c/pool_stream.c`): a
//! block whose pending work is all on one stream comes back at once, without a synchronization;
//! written on that stream it keeps the right bytes, and written on any other stream (another
//! non-blocking stream, the legacy stream, a synchronous set or copy) it is never corrupted,
//! because that stream was made to wait; the test catches the corruption when the pool reuses
//! blocks without that rule. During a stream capture nothing is reused early, and a capture's
//! beginning, like the destruction of the block's stream, ends the waits. With peer access, and with the setting off, the pool behaves as
//! before.

use serde_json::Value;

use crate::cli_schema::validate;
use crate::support::{c_program, env_tag, read_report, run, scratch_dir, shim_command};

/// Runs `pool_stream MODE TRIALS` under the shim with the pool on and `env`; its output and the
/// pool counters of device 0.
fn stream_run(mode: &str, trials: u32, env: &[(&str, &str)]) -> (Value, Value) {
    let dir = scratch_dir(&format!("pool-stream-{mode}{}", env_tag(env)));
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("pool_stream"), &report);
    cmd.args([mode, &trials.to_string()])
        .env("CUGUARD_POOL", "1")
        .env("CUGUARD_QUIET", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{mode}: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    let r = read_report(&report);
    validate(&r).unwrap();
    let pool = r["stats"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == 0)
        .map(|d| d["pool"].clone())
        .unwrap_or_else(|| panic!("no device 0: {}", r["stats"]));
    (v, pool)
}

fn count(pool: &Value, key: &str) -> u64 {
    pool[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {pool}"))
}

const ON: (&str, &str) = ("CUGUARD_POOL_STREAM_REUSE", "1");
const OFF: (&str, &str) = ("CUGUARD_POOL_STREAM_REUSE", "0");

#[test]
fn a_block_whose_work_is_on_one_stream_comes_back_at_once_on_that_stream() {
    let (v, pool) = stream_run("same", 20, &[ON]);
    assert_eq!(v["corrupted_bytes"], 0, "{v}");
    assert_eq!(
        v["same_address"], 20,
        "the freed block comes back at once: {v}"
    );
    assert_eq!(
        (count(&pool, "syncs"), count(&pool, "fences")),
        (0, 0),
        "no synchronization, no fence: {pool}"
    );
    assert!(count(&pool, "stream_reuses") >= 20, "{pool}");
    assert_eq!(
        count(&pool, "stream_waits"),
        0,
        "one stream: nothing waits: {pool}"
    );
    // Without the rule, the same program waits for the late work (the fence rule alone).
    let (v, pool) = stream_run("same", 20, &[OFF]);
    assert_eq!(v["corrupted_bytes"], 0, "{v}");
    assert_eq!(count(&pool, "stream_reuses"), 0, "{pool}");
}

#[test]
fn other_streams_wait_for_the_work_of_an_early_reused_block() {
    let trials = 24;
    let (v, pool) = stream_run("other", trials, &[ON]);
    assert_eq!(
        v["corrupted_bytes"], 0,
        "a late write landed in a block reused early: {v}"
    );
    assert_eq!(v["same_address"], trials, "{v}");
    assert!(count(&pool, "stream_reuses") >= trials as u64, "{pool}");
    assert!(
        count(&pool, "stream_waits") >= trials as u64,
        "each trial's first write on another stream waited: {pool}"
    );
    // The same program sees the damage when the pool reuses blocks at once, without the rule.
    let (v, _) = stream_run("other", trials, &[ON, ("CUGUARD_TEST_UNSAFE_REUSE", "1")]);
    assert_eq!(v["same_address"], trials, "{v}");
    // How many trials the late writes win depends on the machine's load (a descheduled program
    // can write after them): every one when idle, fewer under load, never none.
    let corrupted = v["corrupted_bytes"].as_u64().unwrap();
    assert!(
        corrupted > 0 && corrupted <= trials as u64 * (4 << 20),
        "the test must catch a reuse whose other-stream writes do not wait: {v}"
    );
}

#[test]
fn no_block_is_reused_early_during_a_capture_and_a_capture_ends_the_waits() {
    let trials = 8;
    let (v, pool) = stream_run("capture", trials, &[ON]);
    assert_eq!(v["corrupted_bytes"], 0, "{v}");
    // Freed during a capture: the fence rule alone (no fence, no synchronization then: the
    // block waits and a new one is allocated). Reused early before one: the capture's
    // beginning waited for the block's stream on the host, so no stream wait was left to make.
    assert_eq!(v["same_address"], trials / 2, "{v}");
    assert_eq!(count(&pool, "stream_reuses"), (trials / 2) as u64, "{pool}");
    assert_eq!(count(&pool, "stream_waits"), 0, "{pool}");
}

#[test]
fn destroying_the_stream_of_an_early_reused_block_ends_the_waits() {
    let trials = 8;
    let (v, pool) = stream_run("destroy", trials, &[ON]);
    assert_eq!(v["corrupted_bytes"], 0, "{v}");
    assert_eq!(v["same_address"], trials, "{v}");
    assert!(count(&pool, "stream_reuses") >= trials as u64, "{pool}");
    // The destroy waited for the stream on the host: no stream wait was left to make.
    assert_eq!(count(&pool, "stream_waits"), 0, "{pool}");
}

#[test]
fn with_peers_or_the_setting_off_the_pool_reuses_as_before_and_on_is_the_default() {
    // A second context that can reach this one's memory: the fence rule alone.
    let (v, pool) = stream_run("peer", 8, &[ON, ("CUGUARD_SIM_DEVICES", "2")]);
    assert_eq!(v["corrupted_bytes"], 0, "{v}");
    assert_eq!(
        (count(&pool, "stream_reuses"), count(&pool, "stream_waits")),
        (0, 0),
        "{pool}"
    );
    // On is the default: the same answers and the same counters as 1.
    for mode in ["same", "other"] {
        let (v_default, p_default) = stream_run(mode, 8, &[]);
        let (v_on, p_on) = stream_run(mode, 8, &[ON]);
        assert_eq!(v_default, v_on, "{mode}");
        assert_eq!(v_on["corrupted_bytes"], 0, "{mode}: {v_on}");
        assert_eq!(v_on["same_address"], 8, "{mode}: {v_on}");
        for key in ["fences", "syncs", "chunks_added", "stream_reuses"] {
            assert_eq!(p_default[key], p_on[key], "{mode}: {key}");
        }
        assert!(count(&p_on, "stream_reuses") >= 8, "{mode}: {p_on}");
    }
    // Off (0): the fence rule alone, as before the rule existed.
    for mode in ["same", "other"] {
        let (v_off, p_off) = stream_run(mode, 8, &[OFF]);
        assert_eq!(v_off["corrupted_bytes"], 0, "{mode}: {v_off}");
        assert_eq!(count(&p_off, "stream_reuses"), 0, "{mode}: {p_off}");
        assert_eq!(count(&p_off, "stream_waits"), 0, "{mode}: {p_off}");
    }
}
