//! CUDA IPC of pooled allocations: a block that is its dedicated chunk whole (2 MiB and more) is
//! exported with the driver's own handle, so a second process opens it at the allocation's own
//! address and sees its bytes, whether that process runs under the shim or not; its chunk goes
//! back to the driver when the exporter frees it (as the driver's would), whatever the keep. A
//! block that shares its chunk is refused, with the clear line, as before.

use std::collections::HashMap;

use crate::cli_schema::validate;
use crate::support::{c_program, read_report, run, scratch_dir, shim_command, sim_command};

fn lines(out: &[u8]) -> HashMap<String, String> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every report in `dir`, checked against the schema.
fn reports_in(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            let r = read_report(&p);
            validate(&r).unwrap();
            out.push(r);
        }
    }
    out
}

const SHARED: [(&str, &str); 11] = [
    ("export.handle", "0"),
    ("export.ipc_capable", "1"),
    ("receive.open", "0"),
    ("receive.marks_at_its_address", "1"),
    ("receive.range_starts_at_it", "1"),
    ("receive.range_holds_it", "1"),
    ("receive.close", "0"),
    ("export.receiver_exit", "0"),
    ("export.sees_receiver_write", "1"),
    ("export.free", "0"),
    ("export.alloc_again", "0"),
];

#[test]
fn a_pooled_allocation_exported_is_opened_at_its_own_address_with_its_bytes() {
    let program = c_program("pool_ipc");
    for size in [2u64 << 20, 4 << 20, 3 << 20, 256 << 20] {
        for receiver in ["shim", "plain"] {
            let what = format!("{size} bytes, receiver {receiver}");
            let bare = lines(
                &run(
                    sim_command(&program).arg(size.to_string()).arg(receiver),
                    true,
                )
                .stdout,
            );
            let dir = scratch_dir(&format!("ipc-{size}-{receiver}"));
            let report = dir.join("r.json");
            let out = run(
                shim_command(&program, &report)
                    .arg(size.to_string())
                    .arg(receiver)
                    .env("CUGUARD_POOL", "1")
                    .env("CUGUARD_POOL_KEEP", "100%")
                    .env("CUGUARD_QUIET", "1"),
                true,
            );
            let pooled = lines(&out.stdout);
            for (k, v) in SHARED {
                assert_eq!(
                    bare.get(k).map(String::as_str),
                    Some(v),
                    "bare, {what}: {k}"
                );
                assert_eq!(
                    pooled.get(k).map(String::as_str),
                    Some(v),
                    "pool, {what}: {k}"
                );
            }
            assert_eq!(bare["receive.preloaded"], "0");
            assert_eq!(
                pooled["receive.preloaded"],
                if receiver == "shim" { "1" } else { "0" },
                "{what}"
            );
            assert!(String::from_utf8_lossy(&out.stderr).is_empty(), "{what}");
            // A receiver under the shim writes its own report beside the exporter's.
            let reports = reports_in(&dir);
            assert_eq!(
                reports.len(),
                if receiver == "shim" { 2 } else { 1 },
                "{what}"
            );
            let r = reports
                .into_iter()
                .find(|r| r["process"]["argv"][1] != "receive")
                .unwrap();
            assert!(
                r["events"].as_array().unwrap().is_empty(),
                "{what}: {}",
                r["events"]
            );
            // Kept by nothing but the exported block: given back when it was freed, although
            // the keep would have held it.
            let pool = &r["stats"]["devices"][0]["pool"];
            assert_eq!(pool["trims"], 1, "{what}: {pool}");
        }
    }
}

#[test]
fn a_pooled_allocation_that_shares_its_chunk_is_refused_with_a_clear_line() {
    let program = c_program("pool_ipc");
    let bare = lines(&run(sim_command(&program).args(["1048576", "plain"]), true).stdout);
    assert_eq!(bare["export.handle"], "0");
    let dir = scratch_dir("ipc-shared");
    let report = dir.join("r.json");
    let out = run(
        shim_command(&program, &report)
            .args(["1048576", "plain"])
            .env("CUGUARD_POOL", "1"),
        true,
    );
    assert_eq!(lines(&out.stdout)["export.handle"], "801");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "cuIpcGetMemHandle refused for a pooled pointer: the allocation shares a chunk"
        ),
        "{stderr}"
    );
    let r = read_report(&report);
    let kinds: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ipc_refused"]);
    // With the pool off, the driver exports it.
    let off = run(
        shim_command(&program, &dir.join("off.json"))
            .args(["1048576", "plain"])
            .env("CUGUARD_POOL", "0"),
        true,
    );
    assert_eq!(lines(&off.stdout)["receive.marks_at_its_address"], "1");
}
