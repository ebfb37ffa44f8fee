//! The Python package's in-process API (`src/python/cuguard`, over the shim's C ABI in
//! `shim/src/api/`), exercised by `harness/workloads/python/api.py` under the shim on the
//! simulated driver: one scenario per process. The script asserts what it sees from inside; these
//! tests check its exit, its lines, and the reports the process wrote. Every run is bounded in
//! time: a hang fails the test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{artifacts, read_report, scratch_dir, shim_command, sim_command};

/// The most a scenario may take.
const LIMIT: Duration = Duration::from_secs(120);

/// The Python that CI installed the distribution into (`CUGUARD_TEST_PYTHON`, see
/// `tests/it/python.rs`), if any: the scenarios run there first, on the installed package.
fn installed_python() -> Option<PathBuf> {
    std::env::var_os("CUGUARD_TEST_PYTHON")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// CI's installed Python (if any), `python3`, and the other CPython 3.9–3.13 the machine has
/// (pyenv, /usr/bin), one per version.
fn pythons() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = installed_python().into_iter().collect();
    out.push(PathBuf::from("python3"));
    let mut seen = vec![version_of(Path::new("python3"))];
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")));
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(Ok(dir)) = pyenv.map(|p| std::fs::read_dir(p.join("versions"))) {
        candidates.extend(dir.flatten().map(|e| e.path().join("bin/python3")));
    }
    candidates.extend((9..=13).map(|m| PathBuf::from(format!("/usr/bin/python3.{m}"))));
    candidates.sort();
    for c in candidates {
        let v = version_of(&c);
        let minor = v
            .as_deref()
            .and_then(|v| v.strip_prefix("3."))
            .and_then(|m| m.parse::<u32>().ok());
        if minor.is_some_and(|m| (9..=13).contains(&m)) && !seen.contains(&v) {
            seen.push(v);
            out.push(c);
        }
    }
    out
}

fn version_of(python: &Path) -> Option<String> {
    let o = Command::new(python)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// Runs `api.py SCENARIO ARGS` with `python`, under the shim (writing its report to `report`) or,
/// without `report`, bare on the simulated driver.
fn scenario(
    python: &Path,
    name: &str,
    args: &[&str],
    report: Option<&Path>,
    env: &[(&str, &str)],
) -> Output {
    let a = artifacts();
    let mut cmd = match report {
        Some(r) => shim_command(python, r),
        None => sim_command(python),
    };
    // The checkout's package, except in CI's Python, which has the distribution installed.
    let pythonpath = if installed_python().as_deref() == Some(python) {
        a.root
            .join("harness/workloads/python")
            .display()
            .to_string()
    } else {
        format!(
            "{}:{}",
            a.root.join("src/python").display(),
            a.root.join("harness/workloads/python").display()
        )
    };
    cmd.arg(a.root.join("harness/workloads/python/api.py"))
        .arg(name)
        .args(args)
        .env("PYTHONPATH", pythonpath)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .envs(env.iter().copied());
    let out = run_within(&mut cmd, LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("ok {name}")),
        "{} api.py {name} failed: {}\n--- stdout\n{stdout}\n--- stderr\n{}",
        python.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd` to completion, failing the test if it takes longer than `limit`.
fn run_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning python3");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("waiting").is_some() {
            return child.wait_with_output().expect("reading output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("reading output");
            panic!(
                "{cmd:?} hung (over {limit:?})\n--- stdout\n{}\n--- stderr\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a scenario under the shim with `python3`; returns its output and final report.
fn under_shim(name: &str, args: &[&str], env: &[(&str, &str)]) -> (Output, Option<Value>) {
    let dir = scratch_dir(&format!("python_api-{name}"));
    let report = dir.join("report.json");
    let out = scenario(Path::new("python3"), name, args, Some(&report), env);
    let r = report.exists().then(|| read_report(&report));
    if let Some(r) = &r {
        crate::cli_schema::validate(r).unwrap_or_else(|e| panic!("{name}'s report: {e}"));
    }
    (out, r)
}

#[test]
fn python_package_version_is_the_crates() {
    let root = &artifacts().root;
    let crate_version = env!("CARGO_PKG_VERSION");
    let abi = std::fs::read_to_string(root.join("src/python/cuguard/_abi.py")).unwrap();
    assert!(
        abi.contains(&format!("VERSION = \"{crate_version}\"")),
        "src/python/cuguard/_abi.py's VERSION is not the crate's {crate_version}"
    );
    assert!(
        abi.contains("ABI_VERSION = 1"),
        "the shim's ABI_VERSION is 1"
    );
}

#[test]
fn api_outside_the_shim_is_not_active_and_says_how_to_run_under_it() {
    scenario(Path::new("python3"), "outside", &[], None, &[]);
}

#[test]
fn api_with_the_shim_turned_off_is_not_active() {
    let (_, report) = under_shim("disabled", &[], &[("CUGUARD_DISABLE", "1")]);
    assert!(report.is_none(), "an inert shim writes no report");
}

#[test]
fn api_live_counts_exact_bytes_with_the_pool_on_and_off() {
    for pool in ["0", "1"] {
        under_shim("live", &[], &[("CUGUARD_POOL", pool)]);
    }
}

#[test]
fn api_snapshot_is_the_report_now_and_written_where_asked() {
    let dir = scratch_dir("python_api-snapshot-file");
    let path = dir.join("now.json");
    let (out, report) = under_shim("snapshot", &[path.to_str().unwrap()], &[]);
    let snap = read_report(&path);
    crate::cli_schema::validate(&snap).unwrap_or_else(|e| panic!("the snapshot: {e}"));
    assert_eq!(snap["reason"], "request");
    assert_eq!(snap["complete"], false);
    assert_eq!(snap["process"]["labels"]["phase"], "snapshot");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kept: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let kept = format!("{:#x}", kept["kept"].as_u64().unwrap());
    let final_report = report.expect("a final report");
    for r in [&snap, &final_report] {
        assert!(
            r["leaks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["address"] == kept.as_str()),
            "{kept} not in {r}"
        );
    }
    // Three snapshots (the last could not be written to its path), then the final report.
    assert_eq!(
        final_report["report_number"], 4,
        "{}",
        final_report["report_number"]
    );
}

#[test]
fn api_track_sees_every_thread_nests_and_overlaps_on_every_python() {
    for python in pythons() {
        for pool in ["0", "1"] {
            let dir = scratch_dir("python_api-track");
            scenario(
                &python,
                "track",
                &[],
                Some(&dir.join("r.json")),
                &[("CUGUARD_POOL", pool)],
            );
        }
    }
}

#[test]
fn api_label_reaches_the_final_report() {
    let (_, report) = under_shim("label", &[], &[]);
    let labels = &report.expect("a final report")["process"]["labels"];
    assert_eq!(labels["test"], "tests/test_a.py::test_two");
    assert_eq!(labels["epoch"], "3");
    assert_eq!(labels.as_object().unwrap().len(), 256, "bounded: {labels}");
}

#[test]
fn api_holders_name_the_module_global_and_the_key_on_every_python() {
    for python in pythons() {
        for pool in ["0", "1"] {
            let dir = scratch_dir("python_api-holders");
            let out = scenario(
                &python,
                "holders",
                &[],
                Some(&dir.join("r.json")),
                &[("CUGUARD_POOL", pool)],
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.contains(
                    "api_held.CACHE → ['weights'] → api_held.DeviceArray (2.0 MiB, made at api.py:"
                ),
                "{}: {stdout}",
                python.display()
            );
        }
    }
}

#[test]
fn api_from_many_threads_at_once() {
    under_shim("threads", &[], &[]);
}

#[test]
fn api_in_a_forked_child() {
    under_shim("fork", &[], &[]);
}

#[test]
fn api_in_atexit_handlers() {
    let (out, report) = under_shim("atexit", &[], &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok atexit-handler"));
    let report = report.expect("a final report");
    assert_eq!(report["process"]["labels"]["stage"], "atexit");
    assert_eq!(
        report["leaks"].as_array().unwrap().len(),
        2,
        "{}",
        report["leaks"]
    );
}

#[test]
fn api_without_any_cuda_answers_and_leaves_no_report() {
    let (_, report) = under_shim("nocuda", &[], &[]);
    assert!(
        report.is_none(),
        "asking the API made the shim write a report for a process that never used CUDA"
    );
}

#[test]
fn api_refuses_a_shim_of_another_version_saying_both() {
    let (out, _) = under_shim("version", &[], &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let said = format!(
        "is version {} (C ABI 1), but this cuguard Python package is version 9.9.9",
        env!("CARGO_PKG_VERSION")
    );
    assert!(stdout.contains(&said), "{stdout}");
}
