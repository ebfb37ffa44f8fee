//! `CUGUARD_LIMIT`: the process's device-memory limit, enforced on every tracked device
//! allocation (pool on and off; async, managed and VMM memory), shown to the program through
//! cuMemGetInfo, recorded in the report; bad values said once and ignored; and the launcher's
//! labels in `process.labels` (and `%r` in the report path).

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

use crate::support::{artifacts, c_program, read_report, run, scratch_dir, shim_command};

const MIB: u64 = 1 << 20;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
const OOM: &str = "2";

/// Runs the `limit` workload under the shim on a simulated driver of 1 GiB per device, with
/// `env` and the steps `steps`; returns its stdout lines, its stderr and its report.
fn limited(test: &str, env: &[(&str, &str)], steps: &str) -> (Vec<String>, String, Value) {
    let dir = scratch_dir(test);
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("limit"), &report);
    cmd.env("CUGUARD_SIM_MEMORY", "1GiB")
        .env("CUGUARD_QUIET", "1")
        .args(steps.split_whitespace());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (
        stdout.lines().map(str::to_string).collect(),
        stderr,
        read_report(&report),
    )
}

/// The `info` lines, as (free, total).
pub(crate) fn infos(lines: &[String]) -> Vec<(u64, u64)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("info "))
        .map(|l| {
            let mut it = l.split(' ').map(|n| n.parse::<u64>().unwrap());
            (it.next().unwrap(), it.next().unwrap())
        })
        .collect()
}

/// The result of each allocation step, as "STEP SIZE RESULT".
fn results(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| !l.starts_with("info ") && !l.starts_with("dev ") && *l != "freeall")
        .map(String::as_str)
        .collect()
}

fn pool(on: bool) -> (&'static str, &'static str) {
    ("CUGUARD_POOL", if on { "1" } else { "0" })
}

/// One device: cuMemGetInfo says the limit as total and what is left of it as free, exactly,
/// and an allocation past it is refused, pool off and on.
#[test]
fn one_device_sees_its_limit_and_is_held_to_it() {
    for on in [false, true] {
        let (lines, stderr, r) = limited(
            &format!("limit-one-{on}"),
            &[("CUGUARD_LIMIT", "256MiB"), pool(on)],
            "info alloc 100 info alloc 200 alloc 156 info alloc 1 freeall info alloc 256 info",
        );
        let l = 256 * MIB;
        assert_eq!(
            infos(&lines),
            vec![(l, l), (156 * MIB, l), (0, l), (l, l), (0, l)],
            "pool {on}: {lines:?}"
        );
        assert_eq!(
            results(&lines),
            vec![
                "alloc 100 0",
                &format!("alloc 200 {OOM}"),
                "alloc 156 0",
                &format!("alloc 1 {OOM}"),
                "alloc 256 0"
            ],
            "pool {on}"
        );
        assert_eq!(r["devices"][0]["limit_bytes"], l);
        assert_eq!(r["config"]["limit"], l.to_string());
        assert_eq!(r["config"]["limit_virtual"], true);
        let ooms = r["ooms"].as_array().unwrap();
        assert_eq!(ooms.len(), 2, "pool {on}");
        for o in ooms {
            assert_eq!(o["refused_by"], "limit");
            assert_eq!(o["api"], "cuMemAlloc_v2");
            assert_eq!(o["device"], 0);
        }
        assert_eq!(ooms[0]["size"], 200 * MIB);
        assert_eq!(ooms[0]["live_bytes"], 100 * MIB);
        assert_eq!(
            ooms[0]["message"],
            "CUGUARD_LIMIT of 256.0 MiB on device 0 reached: 100.0 MiB held, 200.0 MiB more asked for"
        );
        assert!(stderr.contains("(CUGUARD_LIMIT)"), "{stderr}");
        assert_eq!(
            stderr
                .lines()
                .filter(|l| l.contains("out of memory"))
                .count(),
            1,
            "{stderr}"
        );
    }
}

/// Free memory is never above what the device really has: a limit of the whole device reports
/// the device's own free memory (less than its total once the program holds some).
#[test]
fn free_is_never_above_the_device() {
    let (lines, _, _) = limited(
        "limit-whole",
        &[("CUGUARD_LIMIT", "100%"), pool(false)],
        "info alloc 300 info",
    );
    let bare = limited("limit-whole-bare", &[pool(false)], "info alloc 300 info").0;
    let (with, without) = (infos(&lines), infos(&bare));
    assert_eq!(with, without, "a limit of 100% is the device itself");
    assert_eq!(with[1].1 - with[1].0, with[0].1 - with[0].0 + 300 * MIB);
}

/// Several devices, each its own limit (bytes for one, a share for the other), each its own
/// held bytes.
#[test]
fn each_device_its_own_limit() {
    for on in [false, true] {
        let (lines, _, r) = limited(
            &format!("limit-devices-{on}"),
            &[
                ("CUGUARD_SIM_DEVICES", "2"),
                ("CUGUARD_LIMIT", "0:128MiB,1:50%"),
                pool(on),
            ],
            "info alloc 100 info dev 1 info alloc 400 info alloc 200 dev 0 alloc 29 alloc 28 info",
        );
        let (l0, l1) = (128 * MIB, 512 * MIB);
        assert_eq!(
            infos(&lines),
            vec![(l0, l0), (28 * MIB, l0), (l1, l1), (112 * MIB, l1), (0, l0)],
            "pool {on}: {lines:?}"
        );
        assert_eq!(
            results(&lines),
            vec![
                "alloc 100 0",
                "alloc 400 0",
                &format!("alloc 200 {OOM}"),
                &format!("alloc 29 {OOM}"),
                "alloc 28 0"
            ]
        );
        let limits: Vec<(u64, u64)> = r["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["ordinal"].as_u64().unwrap(),
                    d["limit_bytes"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(limits, vec![(0, l0), (1, l1)]);
        let devices: Vec<u64> = r["ooms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["device"].as_u64().unwrap())
            .collect();
        assert_eq!(devices, vec![1, 0]);
    }
}

/// Memory that passes the pool by (async, managed, VMM) counts against the same limit, as do
/// pitched allocations; frees give it back.
#[test]
fn every_kind_of_device_memory_counts() {
    for on in [false, true] {
        let (lines, _, r) = limited(
            &format!("limit-kinds-{on}"),
            &[("CUGUARD_LIMIT", "64MiB"), pool(on)],
            "async 40 async 40 managed 20 managed 20 vmm 2 vmm 4 info \
             freeall info vmm 64 vmm 2 freeall managed 64 freeall async 64 alloc 1 freeall \
             pitch 1048576 64 alloc 1",
        );
        assert_eq!(
            results(&lines),
            vec![
                "async 40 0",
                &format!("async 40 {OOM}"),
                "managed 20 0",
                &format!("managed 20 {OOM}"),
                "vmm 2 0",
                &format!("vmm 4 {OOM}"),
                "vmm 64 0",
                &format!("vmm 2 {OOM}"),
                "managed 64 0",
                "async 64 0",
                &format!("alloc 1 {OOM}"),
                "pitch 1048576 64 0",
                &format!("alloc 1 {OOM}"),
            ],
            "pool {on}: {lines:?}"
        );
        assert_eq!(
            infos(&lines),
            vec![(2 * MIB, 64 * MIB), (64 * MIB, 64 * MIB)]
        );
        let apis: Vec<&str> = r["ooms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["api"].as_str().unwrap())
            .collect();
        assert_eq!(
            apis,
            [
                "cuMemAllocAsync",
                "cuMemAllocManaged",
                "cuMemCreate",
                "cuMemCreate",
                "cuMemAlloc_v2",
                "cuMemAlloc_v2"
            ]
        );
        assert!(
            r["ooms"]
                .as_array()
                .unwrap()
                .iter()
                .all(|o| o["refused_by"] == "limit")
        );
    }
}

/// `CUGUARD_LIMIT_VIRTUAL=0`: the limit is enforced, cuMemGetInfo says the device as it is.
#[test]
fn enforcement_without_virtualization() {
    let steps = "info alloc 100 info alloc 200";
    let (lines, _, r) = limited(
        "limit-novirt",
        &[("CUGUARD_LIMIT", "256MiB"), ("CUGUARD_LIMIT_VIRTUAL", "0")],
        steps,
    );
    let bare = limited("limit-novirt-bare", &[], steps).0;
    assert_eq!(infos(&lines), infos(&bare));
    assert_eq!(infos(&lines)[0].1, 1 << 30);
    assert_eq!(
        results(&lines),
        vec!["alloc 100 0", &format!("alloc 200 {OOM}")]
    );
    assert_eq!(r["config"]["limit_virtual"], false);
}

/// `CUGUARD_POOL_LIMIT` is shown as `CUGUARD_LIMIT` is: cuMemGetInfo says the pool's limit as
/// total and what the pool's blocks leave of it as free, and an allocation past it is refused
/// (by the pool). Not shown with the pool off (nothing enforces it then) nor with
/// `CUGUARD_LIMIT_VIRTUAL=0`; under both limits, the tighter.
#[test]
fn the_pools_limit_is_shown_as_the_limit_is() {
    let (lines, _, r) = limited(
        "pool-limit-shown",
        &[("CUGUARD_POOL_LIMIT", "256MiB"), pool(true)],
        "info alloc 100 info alloc 200 alloc 156 info alloc 1 freeall info alloc 256 info",
    );
    let l = 256 * MIB;
    assert_eq!(
        infos(&lines),
        vec![(l, l), (156 * MIB, l), (0, l), (l, l), (0, l)],
        "{lines:?}"
    );
    assert_eq!(
        results(&lines),
        vec![
            "alloc 100 0",
            &format!("alloc 200 {OOM}"),
            "alloc 156 0",
            &format!("alloc 1 {OOM}"),
            "alloc 256 0"
        ]
    );
    let ooms = r["ooms"].as_array().unwrap();
    assert!(
        !ooms.is_empty() && ooms.iter().all(|o| o["refused_by"] == "pool_limit"),
        "{ooms:?}"
    );

    // A 1 GiB pool limit on a 16 GiB device: a 1 GiB device.
    let g = 1u64 << 30;
    let (lines, _, _) = limited(
        "pool-limit-1g",
        &[
            ("CUGUARD_SIM_MEMORY", "16GiB"),
            ("CUGUARD_POOL_LIMIT", "1GiB"),
            pool(true),
        ],
        "info alloc 100 info",
    );
    assert_eq!(infos(&lines), vec![(g, g), (g - 100 * MIB, g)], "{lines:?}");

    // Not enforced, not shown: the pool off, or CUGUARD_LIMIT_VIRTUAL=0.
    let steps = "info alloc 100 info";
    let bare = infos(&limited("pool-limit-bare", &[pool(false)], steps).0);
    assert_eq!(bare[0], (g, g));
    for (test, env) in [
        (
            "pool-limit-off",
            &[("CUGUARD_POOL_LIMIT", "256MiB"), pool(false)][..],
        ),
        (
            "pool-limit-novirt",
            &[
                ("CUGUARD_POOL_LIMIT", "256MiB"),
                ("CUGUARD_LIMIT_VIRTUAL", "0"),
                pool(true),
            ][..],
        ),
    ] {
        assert_eq!(infos(&limited(test, env, steps).0), bare, "{test}");
    }

    // Both: the tighter total, and the smaller free.
    for (pool_limit, limit, total) in [("128MiB", "512MiB", 128), ("512MiB", "128MiB", 128)] {
        let (lines, _, _) = limited(
            &format!("pool-limit-both-{pool_limit}"),
            &[
                ("CUGUARD_POOL_LIMIT", pool_limit),
                ("CUGUARD_LIMIT", limit),
                pool(true),
            ],
            "info alloc 100 info",
        );
        let t = total * MIB;
        assert_eq!(
            infos(&lines),
            vec![(t, t), (t - 100 * MIB, t)],
            "{pool_limit} {limit}: {lines:?}"
        );
    }
}

/// A bad value: one line on stderr saying so, and no limit at all.
#[test]
fn bad_limits_are_said_once_and_ignored() {
    for (bad, says) in [
        ("0", "CUGUARD_LIMIT: \"0\" is zero; no limit is set"),
        ("lots", "CUGUARD_LIMIT: in \"lots\": "),
        (
            "0:1GiB,0:2GiB",
            "CUGUARD_LIMIT: device 0 is given twice; no limit is set",
        ),
        ("150%", "CUGUARD_LIMIT: in \"150%\": "),
        (
            "2GiB",
            "CUGUARD_LIMIT: 2.0 GiB is more than device 0's 1.0 GiB; no limit on device 0",
        ),
    ] {
        let (lines, stderr, r) = limited(
            &format!("limit-bad-{}", bad.replace([':', ',', '%'], "_")),
            &[("CUGUARD_LIMIT", bad)],
            "info alloc 900 info",
        );
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("CUGUARD_LIMIT"))
            .collect();
        assert_eq!(said.len(), 1, "{bad}: {stderr}");
        assert!(said[0].contains(says), "{bad}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{bad}: {stderr}");
        assert_eq!(infos(&lines)[0].1, 1 << 30, "{bad}: no limit");
        assert_eq!(results(&lines), vec!["alloc 900 0"], "{bad}");
        assert!(r["devices"][0].get("limit_bytes").is_none(), "{bad}");
    }
}

/// The summary's device line says the limit, and its refusals say who refused.
#[test]
fn the_summary_says_the_limit() {
    let dir = scratch_dir("limit-summary");
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("limit"), &report);
    cmd.env("CUGUARD_SIM_MEMORY", "1GiB")
        .env("CUGUARD_LIMIT", "64MiB")
        .args(["alloc", "40", "alloc", "40"]);
    run(&mut cmd, true);
    let out = run(
        Command::new(&artifacts().cuguard)
            .arg("summary")
            .arg(&report)
            .env("NO_COLOR", "1"),
        false,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let device = text
        .lines()
        .find(|l| l.trim_start().starts_with("device 0"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(device.contains("limit 64.0 MiB"), "{text}");
    assert!(
        text.contains("the process's limit (CUGUARD_LIMIT)"),
        "{text}"
    );
}

/// The launcher's variables label the report, and `%r` in the path is the rank.
#[test]
fn launcher_variables_label_the_report() {
    let dir = scratch_dir("limit-labels");
    let vars = [
        ("RANK", "3"),
        ("LOCAL_RANK", "1"),
        ("WORLD_SIZE", "4"),
        ("TORCHELASTIC_RUN_ID", "run-7"),
        ("SLURM_PROCID", "3"),
        ("SLURM_JOB_ID", "4242"),
        ("OMPI_COMM_WORLD_RANK", "3"),
    ];
    let mut cmd = shim_command(&c_program("limit"), &dir.join("unused.json"));
    cmd.env("CUGUARD_REPORT", dir.join("r.%r.json"))
        .env("CUGUARD_QUIET", "1")
        .args(["alloc", "1"]);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    run(&mut cmd, true);
    let r = read_report(&dir.join("r.3.json"));
    assert_eq!(r["process"]["rank"], 3);
    let labels: BTreeMap<String, String> =
        serde_json::from_value(r["process"]["labels"].clone()).unwrap();
    let want: BTreeMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(labels, want);

    // Without a rank, `%r` is `norank` and there are no labels.
    let mut cmd = shim_command(&c_program("limit"), &dir.join("unused.json"));
    cmd.env("CUGUARD_REPORT", dir.join("r.%r.json"))
        .env("CUGUARD_QUIET", "1")
        .args(["alloc", "1"]);
    for (k, _) in vars {
        cmd.env_remove(k);
    }
    run(&mut cmd, true);
    let r = read_report(&dir.join("r.norank.json"));
    assert!(r["process"]["rank"].is_null());
    assert!(r["process"].get("labels").is_none());
}
