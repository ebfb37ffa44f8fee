//! The out-of-memory card: at a refusal, what each holder kept idle (the driver's default and
//! created memory pools, cuguard's pool), the verdict worked out
//! from it, the reconciliation that counts the driver's pools, and `CUGUARD_LIMIT` counting the
//! pool's chunks whole, through real processes on the simulated driver (1 GiB a device); the
//! simulated driver giving a pool's completed frees to a plain allocation, as the H100 does; and
//! other processes holding memory on the device (`CUGUARD_SIM_OTHERS`), named where NVML lists
//! them and said to be not known where it cannot be asked.

use std::process::Command;

use serde_json::Value;

use crate::support::{
    artifacts, c_program, memory_viz_checked, read_report, run, scratch_dir, shim_command,
    sim_command,
};

const MIB: u64 = 1 << 20;

/// Runs the `limit` workload under the shim with `env` and `steps` on a 1 GiB device; returns
/// its stdout lines, its stderr, its report, and the report's path.
fn refused(
    test: &str,
    env: &[(&str, &str)],
    steps: &str,
) -> (Vec<String>, String, Value, std::path::PathBuf) {
    let dir = scratch_dir(test);
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("limit"), &report);
    cmd.env("CUGUARD_SIM_MEMORY", "1GiB")
        .args(steps.split_whitespace());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    (
        stdout.lines().map(str::to_string).collect(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        read_report(&report),
        report,
    )
}

/// `alloc 1` `n` times.
fn small_blocks(n: usize) -> String {
    " alloc 1".repeat(n)
}

fn summary(report: &std::path::Path, extra: &[&str]) -> String {
    let out = run(
        Command::new(&artifacts().cuguard)
            .arg("summary")
            .arg(report)
            .args(extra)
            .env("NO_COLOR", "1"),
        true,
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The steps of the program: the default pool keeps 576 MiB freed with cuMemFreeAsync
/// (release threshold unlimited) whose frees have not completed (no synchronization since), 64
/// MiB live, then a plain 512 MiB cuMemAlloc.
const POOL_KEEPS: &str = "threshold max async 576 alloc 64 release alloc 512";

/// What the simulated driver does with a pool's memory when a plain allocation needs it, as the
/// H100 did (docs/gpu-runs/2026-12-06-run28, run29): frees that completed (a synchronization
/// observed them) are given to it, whatever the release threshold, and the pool's memory leaves
/// the device; frees that did not are not, though the pool stops counting them used as soon as
/// they are enqueued.
#[test]
fn the_driver_gives_completed_frees_to_a_plain_allocation() {
    for (steps, want) in [
        (
            "threshold max async 576 alloc 64 freeasync alloc 512",
            vec!["alloc 512 0"],
        ),
        (
            "newpool async 576 alloc 64 freeasync alloc 512",
            vec!["alloc 512 0"],
        ),
        (
            "threshold max async 576 alloc 64 release attrs alloc 512 sync attrs alloc 512 attrs",
            vec![
                "release",
                "attrs 603979776 0",
                "alloc 512 2",
                "sync 0",
                "attrs 603979776 0",
                "alloc 512 0",
                "attrs 0 0",
            ],
        ),
    ] {
        let mut cmd = sim_command(&c_program("limit"));
        cmd.env("CUGUARD_SIM_MEMORY", "1GiB")
            .args(steps.split_whitespace());
        let out = run(&mut cmd, true);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines[lines.len() - want.len()..],
            want,
            "{steps}: {lines:?}"
        );
    }
}

/// The driver's default pool holds frees no synchronization observed and a plain allocation is
/// refused: the card names the pool, its idle bytes and its threshold, the verdict says a
/// synchronization fits, the one stderr line says the verdict, the reconciliation's
/// "unexplained" is 0 B, and the memory-viz export's `oom` entry has the device's free memory,
/// pool on and off.
#[test]
fn the_default_pool_holds_what_was_missing() {
    for pool in ["0", "1"] {
        let (lines, stderr, r, path) = refused(
            &format!("oom-card-default-{pool}"),
            &[("CUGUARD_POOL", pool)],
            POOL_KEEPS,
        );
        assert_eq!(lines.last().unwrap(), "alloc 512 2", "{lines:?}");
        let oom = &r["ooms"][0];
        assert_eq!(oom["refused_by"], "driver");
        let idle = oom["idle"].as_array().unwrap();
        let driver = &idle[0];
        assert_eq!(driver["holder"], "driver_pool", "{oom:#}");
        assert_eq!(driver["name"], "the default memory pool of device 0");
        assert_eq!(driver["idle_bytes"], 576 * MIB);
        assert_eq!(driver["reserved_bytes"], 576 * MIB);
        assert_eq!(driver["release_threshold"], u64::MAX);
        assert!(driver["handle"].as_u64().unwrap() != 0);
        let verdict = &oom["verdict"];
        assert_eq!(verdict["action"], "sync_driver_pool");
        assert_eq!(verdict["fits"], true);
        let text = "synchronizing before the request fits: the default memory pool of device 0 \
                    held 576.0 MiB freed with cuMemFreeAsync and not yet synchronized, which the \
                    driver lends no other allocation until cuStreamSynchronize or \
                    cuCtxSynchronize (release threshold unlimited)";
        assert_eq!(verdict["text"], text);
        assert!(stderr.contains(&format!("; {text}")), "{stderr}");
        let rec = &r["reconciliation"][0];
        assert_eq!(
            rec["explained"]["driver_pool_idle_bytes"],
            576 * MIB,
            "{rec:#}"
        );
        assert_eq!(rec["unexplained_bytes"], 0, "{rec:#}");
        let s = summary(&path, &[]);
        assert!(s.contains(&format!("    verdict: {text}\n")), "{s}");
        assert!(
            s.contains(
                "    every byte then: 1.0 GiB = 64.0 MiB live + 576.0 MiB idle + 384.0 MiB free + 0 B else"
            ),
            "{s}"
        );
        assert!(
            s.contains("    idle: the default memory pool of device 0 holds 576.0 MiB idle of 576.0 MiB reserved (release threshold unlimited)\n"),
            "{s}"
        );
        assert!(
            s.contains("driver's memory pools idle 576.0 MiB, unexplained 0 B"),
            "{s}"
        );
        // The memory-viz export's `oom` entry carries the device's free memory then.
        let pickle = path.with_extension("pickle");
        run(
            Command::new(&artifacts().cuguard)
                .args(["export", "--format", "memory-viz"])
                .arg(&path)
                .arg("-o")
                .arg(&pickle),
            true,
        );
        let viz: Value = serde_json::from_slice(&memory_viz_checked(&pickle).stdout).unwrap();
        let ooms: Vec<&Value> = viz["traces"][0]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e[0] == "oom")
            .collect();
        assert_eq!(ooms.len(), 1, "{viz:#}");
        assert_eq!(
            (&ooms[0][1], &ooms[0][2]),
            (&(384 * MIB).into(), &(512 * MIB).into())
        );
        // `--at oom` prints the card first, then what was live.
        let at = summary(&path, &["--at", "oom"]);
        let card = at.find("    verdict: ").expect(&at);
        let live = at.find("live at ").expect(&at);
        assert!(card < live, "{at}");
    }
}

/// A created pool made the device's current one keeps the freed blocks instead: the card names
/// it by handle.
#[test]
fn a_created_pool_is_named_by_its_handle() {
    let (lines, _, r, _) = refused(
        "oom-card-created",
        &[("CUGUARD_POOL", "0")],
        "newpool async 576 alloc 64 release alloc 512",
    );
    assert_eq!(lines[0], "newpool 0");
    let oom = &r["ooms"][0];
    let holder = &oom["idle"][0];
    let handle = holder["handle"].as_u64().unwrap();
    assert_eq!(
        holder["name"],
        format!("memory pool {handle:#x} of device 0"),
        "{oom:#}"
    );
    assert_eq!(holder["idle_bytes"], 576 * MIB);
    assert_eq!(oom["verdict"]["action"], "sync_driver_pool");
    assert_eq!(r["reconciliation"][0]["unexplained_bytes"], 0);
}

/// When nothing idle would do, the verdict says so.
#[test]
fn when_nothing_would_fit_the_verdict_says_so() {
    let (_, _, r, _) = refused(
        "oom-card-nothing",
        &[("CUGUARD_POOL", "0")],
        "alloc 600 alloc 512",
    );
    let v = &r["ooms"][0]["verdict"];
    assert_eq!(v["action"], "nothing", "{v:#}");
    assert_eq!(v["fits"], false);
    assert_eq!(
        v["text"],
        "nothing cuguard can see would: 512.0 MiB asked, 424.0 MiB left and 0 B idle, 88.0 MiB short; 600.0 MiB is live"
    );
}

/// cuguard's pool holding idle memory between live blocks: the card gives its idle bytes, its
/// largest free piece, and the verdict that only running without the pool frees them.
#[test]
fn cuguard_pool_idle_between_live_blocks() {
    let steps = format!("{} freealt alloc 512", small_blocks(600));
    let (_, _, r, path) = refused("oom-card-cuguard-pool", &[("CUGUARD_POOL", "1")], &steps);
    let oom = &r["ooms"][0];
    let holder = &oom["idle"][0];
    assert_eq!(holder["holder"], "cuguard_pool", "{oom:#}");
    let pool = &oom["pool"];
    assert_eq!(holder["reserved_bytes"], pool["reserved_bytes"]);
    assert_eq!(holder["largest_free_bytes"], pool["largest_free_block"]);
    // At least the 300 blocks freed between live ones.
    assert!(
        holder["idle_bytes"].as_u64().unwrap() >= 300 * MIB,
        "{oom:#}"
    );
    assert_eq!(oom["verdict"]["action"], "without_cuguard_pool");
    assert_eq!(oom["verdict"]["fits"], true);
    let s = summary(&path, &[]);
    assert!(s.contains("    idle: cuguard's pool holds "), "{s}");
    assert!(s.contains("(fragmentation "), "{s}");
}

/// Under `CUGUARD_LIMIT` a program fills, frees every other block and asks for a large one: the
/// pool never holds more than the limit (its chunks in the history, at every moment), the
/// refusal names the limit with what was held, and the program's cuMemGetInfo still counts the
/// pool's idle memory as free.
#[test]
fn the_limit_counts_the_pools_chunks_whole() {
    let steps = format!("{} info freealt info alloc 300", small_blocks(400));
    let (lines, _, r, path) = refused(
        "oom-card-limit",
        &[("CUGUARD_POOL", "1"), ("CUGUARD_LIMIT", "512MiB")],
        &steps,
    );
    let infos = crate::limit::infos(&lines);
    // 400 MiB live of the 512 MiB limit, then 200 MiB.
    assert_eq!(infos, [(112 * MIB, 512 * MIB), (312 * MIB, 512 * MIB)]);
    assert_eq!(lines.last().unwrap(), "alloc 300 2");
    let oom = &r["ooms"][0];
    assert_eq!(oom["refused_by"], "limit", "{oom:#}");
    let pool = &r["stats"]["devices"][0]["pool"];
    let reserved = pool["reserved_bytes"].as_u64().unwrap();
    assert_eq!(oom["limit"]["limit_bytes"], 512 * MIB);
    assert_eq!(oom["limit"]["held_bytes"], reserved);
    assert!(
        oom["message"]
            .as_str()
            .unwrap()
            .starts_with("CUGUARD_LIMIT of 512.0 MiB on device 0 reached: "),
        "{oom:#}"
    );
    assert!(
        pool["peak_reserved_bytes"].as_u64().unwrap() <= 512 * MIB,
        "{pool:#}"
    );
    assert_eq!(oom["verdict"]["action"], "without_cuguard_pool");
    // The pool's reserved bytes at every moment, from the history's segments.
    let most = most_reserved(&path);
    assert!(most > 400 * MIB && most <= 512 * MIB, "{most}");
}

/// The most bytes the pool's chunks (the history's segments) held at once, from the memory-viz
/// export of the process's history, as PyTorch's readers read it.
fn most_reserved(report: &std::path::Path) -> u64 {
    let pickle = report.with_extension("pickle");
    run(
        Command::new(&artifacts().cuguard)
            .args(["export", "--format", "memory-viz"])
            .arg(report)
            .arg("-o")
            .arg(&pickle),
        true,
    );
    let out = memory_viz_checked(&pickle);
    let viz: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut held: i64 = 0;
    let mut most: i64 = 0;
    for e in viz["traces"][0].as_array().unwrap() {
        let size = e[2].as_i64().unwrap();
        match e[0].as_str().unwrap() {
            "segment_alloc" => held += size,
            "segment_free" => held -= size,
            _ => {}
        }
        most = most.max(held);
    }
    most as u64
}

/// A program beside another process (pid 4242) that holds 600 MiB of the 1 GiB device: 64 MiB
/// live, then 512 MiB asked with 360 MiB free. `nvml`: with the simulated NVML on the library
/// path (a `libnvidia-ml.so.1` link to the simulated driver), as on a machine with a GPU.
fn beside_another_process(
    test: &str,
    nvml: bool,
    pool: &str,
) -> (Vec<String>, String, Value, std::path::PathBuf) {
    let a = artifacts();
    let link_dir = scratch_dir(&format!("{test}-nvml"));
    let mut env = vec![
        ("CUGUARD_POOL", pool.to_string()),
        ("CUGUARD_SIM_OTHERS", "4242:600MiB".to_string()),
    ];
    if nvml {
        std::os::unix::fs::symlink(&a.sim_lib, link_dir.join("libnvidia-ml.so.1")).unwrap();
        env.push((
            "LD_LIBRARY_PATH",
            format!("{}:{}", a.sim_dir.display(), link_dir.display()),
        ));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    refused(test, &env, "alloc 64 alloc 512")
}

/// Another process holds what was missing: the card lists it (NVML's pid and bytes), the
/// verdict says only its freeing the memory makes room, the one stderr line says so, every byte
/// of the device adds up with it, and the reconciliation leaves nothing unexplained; pool off
/// and on.
#[test]
fn another_process_holds_what_was_missing() {
    let text = "other processes hold 600.0 MiB of device 0 (pid 4242: 600.0 MiB): the request \
                fits only once they free it";
    for pool in ["0", "1"] {
        let (lines, stderr, r, path) =
            beside_another_process(&format!("oom-card-others-{pool}"), true, pool);
        assert_eq!(lines, ["alloc 64 0", "alloc 512 2"], "{stderr}");
        let oom = &r["ooms"][0];
        assert_eq!(oom["refused_by"], "driver", "{oom:#}");
        assert_eq!(oom["device_free_bytes"], 360 * MIB, "{oom:#}");
        assert_eq!(
            oom["other_processes"],
            serde_json::json!([{"pid": 4242, "bytes": 600 * MIB}]),
            "{oom:#}"
        );
        assert_eq!(oom["other_processes_bytes"], 600 * MIB);
        assert!(oom.get("other_processes_note").is_none(), "{oom:#}");
        assert_eq!(oom["verdict"]["action"], "other_processes", "{oom:#}");
        assert_eq!(oom["verdict"]["fits"], true);
        assert_eq!(oom["verdict"]["text"], text);
        assert!(stderr.contains(&format!("; {text}\n")), "{stderr}");
        let rec = &r["reconciliation"][0];
        assert_eq!(rec["unexplained_bytes"], 0, "{rec:#}");
        let s = summary(&path, &[]);
        assert!(s.contains(&format!("    verdict: {text}\n")), "{s}");
        assert!(
            s.contains("    other processes: 600.0 MiB (pid 4242: 600.0 MiB)\n"),
            "{s}"
        );
        assert!(s.contains(", unexplained 0 B\n"), "{s}");
        if pool == "0" {
            assert!(
                s.contains(
                    "    every byte then: 1.0 GiB = 64.0 MiB live + 0 B idle + 360.0 MiB free + \
                     600.0 MiB other processes + 0 B else (CUDA's own memory)\n"
                ),
                "{s}"
            );
        }
        let at = summary(&path, &["--at", "oom"]);
        assert!(
            at.contains("    other processes: 600.0 MiB (pid 4242: 600.0 MiB)\n"),
            "{at}"
        );
        let md = summary(&path, &["--format", "markdown"]);
        assert!(
            md.contains("  - other processes: 600.0 MiB (pid 4242: 600.0 MiB)\n"),
            "{md}"
        );
    }
}

/// The same program where NVML cannot be asked (no `libnvidia-ml.so.1`): the card says other
/// processes are not known, never that they hold nothing; the verdict and every byte of the
/// device read as before this was recorded (the other process's bytes "else").
#[test]
fn other_processes_are_not_known_without_nvml() {
    let (lines, stderr, r, path) = beside_another_process("oom-card-others-unknown", false, "0");
    assert_eq!(lines, ["alloc 64 0", "alloc 512 2"], "{stderr}");
    let oom = &r["ooms"][0];
    assert!(oom.get("other_processes").is_none(), "{oom:#}");
    assert!(oom.get("other_processes_bytes").is_none(), "{oom:#}");
    assert_eq!(oom["other_processes_note"], "NVML is not available");
    assert_eq!(oom["verdict"]["action"], "nothing", "{oom:#}");
    let text = "nothing cuguard can see would: 512.0 MiB asked, 360.0 MiB left and 0 B idle, \
                152.0 MiB short; 64.0 MiB is live";
    assert_eq!(oom["verdict"]["text"], text);
    assert!(stderr.contains(&format!("; {text}\n")), "{stderr}");
    assert!(!stderr.contains("other processes"), "{stderr}");
    let s = summary(&path, &[]);
    assert!(
        s.contains("    other processes: not known (NVML is not available)\n"),
        "{s}"
    );
    assert!(
        s.contains(
            "    every byte then: 1.0 GiB = 64.0 MiB live + 0 B idle + 360.0 MiB free + 600.0 MiB \
             else (CUDA's own memory, other processes)\n"
        ),
        "{s}"
    );
    // The reconciliation's "used" is the whole device's: the other process is in what is
    // unexplained, which cuguard cannot read.
    let rec = &r["reconciliation"][0];
    assert_eq!(rec["unexplained_bytes"], 600 * MIB, "{rec:#}");
}
