//! `CUGUARD_HISTORY` as a process reads it: a bound past 2^64 - 1 bytes is a bad value (one line,
//! the default bound), never taken as unbounded.

use super::support::*;

const MIB: u64 = 1 << 20;

#[test]
fn a_history_bound_past_2_pow_64_is_said_and_the_default_kept() {
    let dir = scratch_dir("history-setting-overflow");
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("history_churn"), &report);
    cmd.env("CUGUARD_HISTORY", "18446744073709551616")
        .args(["1", "1", "10"]);
    let out = run(&mut cmd, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("CUGUARD_HISTORY"))
        .collect();
    let line = "CUGUARD_HISTORY=\"18446744073709551616\" is out of range (16EiB or more); \
                give a size (as 256MiB) or 0 for off; using 256MiB";
    assert_eq!(said, [format!("cuguard: {line}")], "{stderr}");
    let r = read_report(&report);
    assert_eq!(
        r["history"]["bound_bytes"].as_u64(),
        Some(256 * MIB),
        "{}",
        r["history"]
    );
    assert_eq!(r["faults"], serde_json::json!([line]), "{}", r["faults"]);
    assert!(dir.join("r.history").exists());
}
