//! A Python program that got the shim by `LD_PRELOAD` alone (issue 37): the shim hands the
//! interpreter cuguard's bootstrap itself (`shim/src/lifecycle/python_bootstrap.rs`), so the end
//! of the program's code, held and lost, and growth read as under `cuguard run`. The program is
//! run 7's PyTorch loop on stand-in tensors (`harness/workloads/python/train_list.py`): a list
//! appended every step, freed by the interpreter's teardown, which then goes on as long as the
//! loop took. Read at exit, the list has fallen for the last half of the run and nothing grows;
//! read at the end of the code, the append line grows.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{artifacts, missing, read_report, scratch_dir, shim_command};

const MIB: u64 = 1 << 20;
const STEPS: u64 = 30;

/// Every setting of these runs: a sample every 20 ms, no stats page (the reporter thread takes
/// no samples while it makes one), the stand-in tensors as plumbing.
const SETTINGS: [(&str, &str); 3] = [
    ("CUGUARD_PAGE", "0"),
    ("CUGUARD_TIMELINE_MS", "20"),
    ("CUGUARD_PLUMBING", "file:*/tensorlib.py"),
];

fn workloads() -> PathBuf {
    artifacts().root.join("harness/workloads/python")
}

/// `python3 ARGS…` in the workloads' directory, by `LD_PRELOAD` alone (as the README's "by
/// hand"), with `env`; its output and report. `None` (said) without python3.
fn by_hand(test: &str, args: &[&str], env: &[(&str, &str)]) -> Option<(Output, PathBuf)> {
    let report = scratch_dir(test).join("r.json");
    let mut cmd = shim_command(Path::new("python3"), &report);
    cmd.current_dir(workloads())
        .args(args)
        .envs(SETTINGS)
        .envs(env.iter().copied())
        .env_remove("PYTHONPATH");
    started(test, cmd.output(), report)
}

/// The same under `cuguard run --driver sim`.
fn under_run(test: &str, args: &[&str]) -> Option<(Output, PathBuf)> {
    let a = artifacts();
    let report = scratch_dir(test).join("r.json");
    let mut cmd = Command::new(&a.cuguard);
    for (k, _) in std::env::vars() {
        if k.starts_with("CUGUARD_") {
            cmd.env_remove(k);
        }
    }
    cmd.current_dir(workloads())
        .env_remove("LD_PRELOAD")
        .env_remove("PYTHONPATH")
        .env("CUGUARD_RUNTIME_DIR", a.scratch.join("runtime"))
        .envs(SETTINGS)
        .args(["run", "--driver", "sim", "--quiet", "--report"])
        .arg(&report)
        .arg("--")
        .arg("python3")
        .args(args);
    started(test, cmd.output(), report)
}

fn started(test: &str, out: std::io::Result<Output>, report: PathBuf) -> Option<(Output, PathBuf)> {
    let out = out.unwrap();
    if out.status.code() == Some(127)
        || String::from_utf8_lossy(&out.stderr).contains("python3: program not found")
    {
        missing(test, "python3");
        return None;
    }
    Some((out, report))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
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

/// `train_list.py:LINE`, the line marked `# appends`.
fn append_line() -> String {
    let text = std::fs::read_to_string(workloads().join("train_list.py")).unwrap();
    let line = text.lines().position(|l| l.ends_with("# appends")).unwrap() + 1;
    format!("train_list.py:{line}")
}

/// What a user reads of a run of `train_list.py` whose end was marked: the end, the appended
/// tensors held at it and freed after by the teardown, the append line growing in `summary`,
/// and `check --max-growth 1MiB` failing on it.
fn reads_growing_at_the_append_line(report: &Path) {
    let r = read_report(report);
    crate::cli_schema::validate(&r).unwrap();
    let end = &r["python"]["end"];
    assert_eq!(end["recorded"], true, "{end}");
    assert_eq!(end["how"], "finished", "{end}");
    // No leak at exit: the teardown freed the list.
    assert_eq!(r["leaks"], serde_json::json!([]));
    // At the end, the STEPS tensors are held (by the list), each freed after by the teardown.
    let view = &r["python"]["view"];
    assert_eq!(view["complete"], true, "{view}");
    let kept: Vec<&Value> = view["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["size"] == MIB)
        .collect();
    assert_eq!(kept.len() as u64, STEPS, "{view}");
    for a in &kept {
        assert_eq!(a["class"], "held", "{a}");
        assert_eq!(a["freed_after"], true, "{a}");
        assert_eq!(a["holders"][0]["path"][0], "history", "{a}");
    }
    // The summary: the append line grows by the STEPS tensors; nothing else grows.
    let at = append_line();
    let (code, out) = cuguard_on(report, &["summary", "--format", "json"]);
    assert_eq!(code, Some(0), "{out}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    let growing = summary["processes"][0]["growing"].as_array().unwrap();
    assert_eq!(growing.len(), 1, "{growing:?}");
    let g = &growing[0];
    assert!(g["location"].as_str() == Some(at.as_str()), "{g}");
    // To the STEPS tensors, from the first sample (taken at or just after the first).
    assert_eq!(g["to_bytes"].as_u64().unwrap(), STEPS * MIB, "{g}");
    assert!(g["from_bytes"].as_u64().unwrap() <= MIB, "{g}");
    let (code, text) = cuguard_on(report, &["summary"]);
    assert_eq!(code, Some(0));
    let section = text.split("\ngrowing").nth(1).unwrap_or_default();
    assert!(section.contains(&format!("train ({at})")), "{text}");
    // check --max-growth fails on it, naming it; a bound above the growth passes.
    let (code, out) = cuguard_on(report, &["check", "--max-growth", "1MiB"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!("train ({at}) grew by "))
            && out.contains("(more than --max-growth 1.0 MiB)"),
        "{out}"
    );
    let (code, out) = cuguard_on(report, &["check", "--max-growth", "64MiB"]);
    assert_eq!(code, Some(0), "{out}");
}

/// `python3 train_list.py` by `LD_PRELOAD` alone: grows at the append line, fails
/// `check --max-growth` (run 7 read no growth and passed).
#[test]
fn by_hand_a_list_appended_every_step_grows_at_the_append_line() {
    let Some((out, report)) = by_hand("byhand-script", &["train_list.py"], &[]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stderr(&out)
            .lines()
            .filter(|l| l.contains("cuguard"))
            .count(),
        1,
        "one line: {}",
        stderr(&out)
    );
    reads_growing_at_the_append_line(&report);
}

/// `python3 -m train_list` by `LD_PRELOAD` alone: the same.
#[test]
fn by_hand_a_module_run_with_dash_m_grows_at_the_append_line() {
    let Some((out, report)) = by_hand("byhand-module", &["-m", "train_list"], &[]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    reads_growing_at_the_append_line(&report);
}

/// `python3 -I train_list.py` (isolated: no `sitecustomize`, no `PYTHONPATH`) by `LD_PRELOAD`
/// alone: the shim's bootstrap does not need the path, so the same.
#[test]
fn by_hand_an_isolated_interpreter_grows_at_the_append_line() {
    let Some((out, report)) = by_hand("byhand-isolated", &["-I", "train_list.py"], &[]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    reads_growing_at_the_append_line(&report);
}

/// The same program under `cuguard run` (the bootstrap on `PYTHONPATH`): the same reading.
#[test]
fn by_hand_the_same_program_under_cuguard_run_reads_the_same() {
    let Some((out, report)) = under_run("byhand-run", &["train_list.py"]) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    reads_growing_at_the_append_line(&report);
}

/// Without the end (`CUGUARD_PYTHON_END=0`), what run 7 read: the list fell half-way through the
/// run, so nothing grows and `check --max-growth 1MiB` passes; the report says why in one line.
#[test]
fn by_hand_with_the_end_off_the_teardown_hides_the_growth() {
    let Some((out, report)) = by_hand(
        "byhand-off",
        &["train_list.py"],
        &[("CUGUARD_PYTHON_END", "0")],
    ) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    let r = read_report(&report);
    let end = &r["python"]["end"];
    assert_eq!(end["recorded"], false, "{end}");
    assert_eq!(
        end["why"],
        "CUGUARD_PYTHON_END=0 turned cuguard's Python bootstrap off: this report only has what \
         was live at exit, after the interpreter's teardown"
    );
    let (code, out) = cuguard_on(&report, &["summary", "--format", "json"]);
    assert_eq!(code, Some(0), "{out}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["processes"][0]["growing"], serde_json::json!([]));
    let (code, out) = cuguard_on(&report, &["check", "--max-growth", "1MiB"]);
    assert_eq!(code, Some(0), "{out}");
}

/// Where it cannot work: the loop on another thread while the main thread waits in native code
/// and the process leaves through libc's `exit` (no Python code ever runs on the main thread
/// again, as in an embedded interpreter). The report says why, in one line, and `summary` prints
/// it on its `the end` line.
#[test]
fn by_hand_a_main_thread_that_stays_in_native_code_is_said() {
    let Some((out, report)) = by_hand(
        "byhand-native",
        &["train_list.py", "10", "10", "0", "native-exit"],
        &[],
    ) else {
        return;
    };
    assert!(out.status.success(), "{}", stderr(&out));
    let r = read_report(&report);
    let end = &r["python"]["end"];
    assert_eq!(end["recorded"], false, "{end}");
    let why = end["why"].as_str().unwrap();
    assert!(
        why.starts_with(
            "the interpreter's main thread ran no Python code from the program's first CUDA \
             call to its exit"
        ) && !why.contains('\n'),
        "{why}"
    );
    // Nothing was torn down: the list's tensors are live at exit.
    assert_eq!(r["leaks"].as_array().unwrap().len(), 10, "{}", r["leaks"]);
    let (_, text) = cuguard_on(&report, &["summary"]);
    assert!(
        text.contains(&format!("the end  not recorded: {why}")),
        "{text}"
    );
}
