//! The `cuguard` command as a user runs it: `summary` on fixtures (each format, decoded with
//! this file's own types), refusal of bad input with exit 2 and one line, and `run`'s exit
//! status, environment and simulated-driver directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;

use crate::support;

fn fixture(name: &str) -> PathBuf {
    support::artifacts().root.join("tests/fixtures").join(name)
}

fn cuguard() -> Command {
    let mut cmd = Command::new(&support::artifacts().cuguard);
    cmd.env_remove("CUGUARD_SHIM")
        .env_remove("CUGUARD_SIM_DRIVER")
        .env("NO_COLOR", "1");
    cmd
}

/// A scratch directory holding copies of the hand-written fixtures (three single reports and
/// the merged one), so directory reads see a known set whatever fixtures are added later.
pub fn fixture_dir(test: &str) -> PathBuf {
    let dir = support::scratch_dir(test);
    for name in [
        "leaks-two-contexts.json",
        "events.json",
        "incomplete.json",
        "merged.json",
    ] {
        std::fs::copy(fixture(name), dir.join(name)).unwrap();
    }
    dir
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts exit 2 and a single `cuguard: error: …` line holding `want`.
fn assert_input_error(out: &Output, want: &str) {
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(out));
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("cuguard: error: "), "{err:?}");
    assert!(err.contains(want), "{err:?} should contain {want:?}");
    assert!(out.stdout.is_empty());
}

// ---- summary -------------------------------------------------------------------------------

/// The JSON summary, as a consumer would decode it (independent of cuguard's own types).
#[derive(Deserialize)]
struct JsonSummary {
    reports: usize,
    complete_reports: usize,
    leaked_bytes: u64,
    leaks: u64,
    events: Vec<JsonCount>,
    sites: Vec<JsonSite>,
    processes: Vec<JsonProcess>,
}

#[derive(Deserialize)]
struct JsonCount {
    kind: String,
    count: u64,
}

#[derive(Deserialize)]
struct JsonSite {
    site: String,
    leaked_bytes: u64,
    leaks: u64,
}

#[derive(Deserialize)]
struct JsonProcess {
    source: String,
    process: JsonWho,
    complete: bool,
    leaked_bytes: u64,
    devices: Vec<JsonDevice>,
    contexts: Vec<JsonContext>,
    largest_leaks: Vec<JsonLeak>,
}

#[derive(Deserialize)]
struct JsonWho {
    pid: u32,
    rank: Option<u32>,
    hostname: String,
}

#[derive(Deserialize)]
struct JsonDevice {
    device: u32,
    leaked_bytes: u64,
    leaks: u64,
}

#[derive(Deserialize)]
struct JsonContext {
    context: Option<u32>,
    leaked_bytes: u64,
}

#[derive(Deserialize)]
struct JsonLeak {
    address: String,
    size: u64,
    site: String,
}

fn summary_json(args: &[&str], paths: &[PathBuf]) -> JsonSummary {
    let out = cuguard()
        .args(["summary", "--format", "json"])
        .args(args)
        .args(paths)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("summary --format json is JSON")
}

#[test]
fn cli_summary_text_of_a_fixture() {
    let out = cuguard()
        .arg("summary")
        .arg(fixture("leaks-two-contexts.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("leaked   15.0 MiB in 5 leaks"), "{text}");
    assert!(text.contains("make_buffers (train.c:42)"));
    assert!(text.contains("context 2  destroyed by cuCtxDestroy_v2"));
    assert!(!text.contains('\x1b'), "no colour off a terminal");
    let width = text.lines().map(|l| l.chars().count()).max().unwrap();
    assert!(width <= 140, "lines stay readable: {width}");
}

#[test]
fn cli_summary_json_decodes() {
    let s = summary_json(
        &[],
        &[fixture("leaks-two-contexts.json"), fixture("events.json")],
    );
    assert_eq!((s.reports, s.complete_reports), (2, 2));
    assert_eq!(s.leaks, 6);
    assert_eq!(s.leaked_bytes, 15_729_152 + 65_536);
    assert_eq!(s.sites[0].site, "make_buffers");
    assert_eq!((s.sites[0].leaked_bytes, s.sites[0].leaks), (8_389_120, 2));
    let double = s.events.iter().find(|e| e.kind == "double_free").unwrap();
    assert_eq!(double.count, 2);
    let p = &s.processes[0];
    assert_eq!((p.process.pid, p.process.rank), (4242, Some(0)));
    assert_eq!(p.process.hostname, "gpu01");
    assert!(p.complete);
    assert_eq!(p.leaked_bytes, 15_729_152);
    let per_device: Vec<(u32, u64, u64)> = p
        .devices
        .iter()
        .map(|d| (d.device, d.leaked_bytes, d.leaks))
        .collect();
    assert_eq!(per_device, [(0, 11_534_848, 4), (1, 4_194_304, 1)]);
    assert_eq!(p.contexts[1].context, Some(2));
    assert_eq!(p.contexts[1].leaked_bytes, 4_194_304);
    assert_eq!(p.largest_leaks[0].address, "0x7f2a40000000");
    assert_eq!(p.largest_leaks[0].size, 8_388_608);
    assert_eq!(p.largest_leaks[0].site, "make_buffers");
}

#[test]
fn cli_summary_reads_directories_globs_and_merged_reports() {
    let dir = fixture_dir("cli-summary-dir");
    let all = summary_json(&[], std::slice::from_ref(&dir));
    // events, incomplete, leaks-two-contexts, and the merged report's two processes.
    assert_eq!(all.reports, 5);
    assert_eq!(all.complete_reports, 3);
    let merged = summary_json(&["--top", "1"], &[fixture("merged.json")]);
    assert_eq!(merged.reports, 2);
    assert!(merged.processes[1].source.ends_with("merged.json[1]"));
    assert!(!merged.processes[1].complete);
    assert_eq!(merged.processes[0].largest_leaks.len(), 1);
    let glob = summary_json(&[], &[dir.join("i*.json")]);
    assert_eq!(glob.reports, 1);
    assert_eq!(glob.processes[0].process.pid, 9001);
}

#[test]
fn cli_summary_markdown() {
    let out = cuguard()
        .args(["summary", "--format", "markdown"])
        .arg(fixture("events.json"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let md = stdout(&out);
    assert!(md.starts_with("## cuguard summary\n"), "{md}");
    assert!(
        md.contains("| 64.0 KiB | 1 | cupy\\_cuda\\_memory\\_malloc | cuMemAllocAsync |"),
        "{md}"
    );
    assert!(md.contains("2 × double\\_free"));
}

#[test]
fn cli_summary_refuses_bad_input_with_exit_2() {
    let dir = support::scratch_dir("cli-bad-input");
    let good = std::fs::read_to_string(fixture("events.json")).unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "truncated.json",
            good[..good.len() / 3].to_string(),
            "truncated",
        ),
        (
            "v2.json",
            good.replacen("\"schema_version\": 1", "\"schema_version\": 2", 1),
            "unsupported schema_version 2",
        ),
        (
            "other.json",
            "{\"schema\": \"x\"}".into(),
            "not a cuguard report",
        ),
        (
            "garbage.json",
            "\u{0}\u{1}binary".into(),
            "not a cuguard report",
        ),
        (
            "missing.json",
            good.replacen("\"stacks\"", "\"stacks_gone\"", 1),
            "missing field `stacks`",
        ),
    ];
    for (name, text, want) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = cuguard().arg("summary").arg(&path).output().unwrap();
        assert_input_error(&out, want);
        // One bad file among good ones still fails the whole command.
        let out = cuguard()
            .arg("summary")
            .arg(fixture("incomplete.json"))
            .arg(&path)
            .output()
            .unwrap();
        assert_input_error(&out, name);
    }
    let out = cuguard()
        .arg("summary")
        .arg(dir.join("absent.json"))
        .output()
        .unwrap();
    assert_input_error(&out, "absent.json: no such file or directory");
    let out = cuguard()
        .arg("summary")
        .arg(dir.join("none-*.json"))
        .output()
        .unwrap();
    assert_input_error(&out, "no file matches");
    let out = cuguard()
        .args(["summary", "--format", "yaml", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
    let out = cuguard().arg("summary").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a PATH is required");
}

#[test]
fn cli_hostile_input_never_panics() {
    let dir = fixture("hostile");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let events = fixture("events.json");
        let events = events.to_str().unwrap();
        for sub in [
            vec!["summary"],
            vec!["check"],
            vec!["suppressions"],
            vec!["diff", events],
        ] {
            let out = cuguard().args(&sub).arg(&path).output().unwrap();
            let code = out.status.code();
            assert!(
                matches!(code, Some(0..=2)),
                "{sub:?} {}: {code:?} {}",
                path.display(),
                stderr(&out)
            );
            assert!(stderr(&out).lines().count() <= 1, "{}", stderr(&out));
        }
    }
    // Huge input: refused by size before it is read.
    let out = cuguard()
        .env("CUGUARD_MAX_REPORT_BYTES", "1000")
        .arg("summary")
        .arg(fixture("events.json"))
        .output()
        .unwrap();
    assert_input_error(&out, "more than the limit of 1000 bytes");
}

#[test]
fn cli_closed_stdout_is_quiet() {
    use std::process::Stdio;
    let mut child = cuguard()
        .args(["summary", "--top", "0"])
        .arg(fixture(""))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
}

#[test]
fn cli_help_has_examples_and_exit_codes() {
    for sub in ["run", "summary"] {
        let out = cuguard().args([sub, "--help"]).output().unwrap();
        assert!(out.status.success());
        assert!(stdout(&out).contains("Examples:"), "{sub} --help");
    }
    let out = cuguard().arg("--help").output().unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("Exit status:") && text.contains("127"),
        "{text}"
    );
}

// ---- run -----------------------------------------------------------------------------------

/// A shared library that does nothing, to stand in for the shim where only the environment
/// matters.
fn dummy_library(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let src = dir.join("dummy.c");
    std::fs::write(&src, "int cuguard_test_dummy = 1;\n").unwrap();
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-o"])
        .arg(&path)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success());
    path
}

fn run_under(shim: Option<&Path>, args: &[&str], report_dir: &Path) -> Output {
    let mut cmd = cuguard();
    if let Some(shim) = shim {
        cmd.env("CUGUARD_SHIM", shim);
    }
    cmd.env("CUGUARD_REPORT", report_dir.join("cuguard.%e.%p.json"))
        .arg("run")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn cli_run_passes_exit_status_through() {
    let dir = support::scratch_dir("cli-run-status");
    let out = run_under(None, &["--", "/bin/sh", "-c", "exit 3"], &dir);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    let out = run_under(None, &["--quiet", "--", "/bin/sh", "-c", "exit 0"], &dir);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let out = run_under(None, &["--", "/bin/sh", "-c", "kill -9 $$"], &dir);
    assert_eq!(out.status.code(), Some(137), "SIGKILL is 128+9");
    let out = run_under(None, &["--", "/bin/sh", "-c", "kill -TERM $$"], &dir);
    assert_eq!(out.status.code(), Some(143), "SIGTERM is 128+15");
    // Without `--`, PROGRAM's own options stay its own.
    let out = run_under(None, &["/bin/sh", "-c", "exit 5", "--quiet"], &dir);
    assert_eq!(out.status.code(), Some(5));
}

#[test]
fn cli_run_missing_program_or_shim() {
    let dir = support::scratch_dir("cli-run-missing");
    let out = run_under(None, &["--", "./no-such-program-here"], &dir);
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr(&out).contains("no-such-program-here: program not found"));
    let not_exec = dir.join("not-executable");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    let out = run_under(None, &["--", not_exec.to_str().unwrap()], &dir);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    let out = run_under(Some(&dir.join("nope.so")), &["--", "/bin/true"], &dir);
    assert_input_error(&out, "the shim libcuguard.so not found");
}

#[test]
fn cli_run_sets_the_environment() {
    let dir = support::scratch_dir("cli-run-env");
    let shim = dummy_library(&dir, "libcuguard.so");
    let out = cuguard()
        .env("CUGUARD_SHIM", &shim)
        .env("LD_PRELOAD", "/lib/x86_64-linux-gnu/libc.so.6")
        .env("LD_LIBRARY_PATH", "/keep/me")
        .env_remove("CUGUARD_QUIET")
        .args(["run", "--report", "out/%p.json", "--quiet", "--"])
        .args([
            "/bin/sh",
            "-c",
            "echo \"$LD_PRELOAD|$CUGUARD_REPORT|$CUGUARD_QUIET|$LD_LIBRARY_PATH\"",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let shim = std::fs::canonicalize(&shim).unwrap();
    assert_eq!(
        stdout(&out).trim_end(),
        format!(
            "{}:/lib/x86_64-linux-gnu/libc.so.6|out/%p.json|1|/keep/me",
            shim.display()
        ),
        "the shim comes first, the old LD_PRELOAD stays, --driver system leaves LD_LIBRARY_PATH"
    );
}

#[test]
fn cli_run_sim_driver_directory() {
    let dir = support::scratch_dir("cli-run-sim");
    let shim = dummy_library(&dir, "libcuguard.so");
    let sim = dummy_library(&dir, "libcuguard_simcuda.so");
    let links = dir.join("cuguard-sim");
    let script = format!("echo \"$LD_LIBRARY_PATH\"; ls -l {}", links.display());
    // Several at once: the directory and its links are made race-safely.
    let children: Vec<_> = (0..4)
        .map(|_| {
            cuguard()
                .env("CUGUARD_SHIM", &shim)
                .env("CUGUARD_SIM_DRIVER", &sim)
                .env("LD_LIBRARY_PATH", "/opt/elsewhere")
                .args(["run", "--driver", "sim", "--", "/bin/sh", "-c", &script])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        let first = text.lines().next().unwrap();
        let links = std::fs::canonicalize(&links).unwrap();
        assert_eq!(first, format!("{}:/opt/elsewhere", links.display()));
        assert!(text.contains("libcuda.so.1 -> "), "{text}");
        assert!(text.contains("libcuda.so -> "), "{text}");
    }
    let want = std::fs::canonicalize(&sim).unwrap();
    for name in ["libcuda.so.1", "libcuda.so"] {
        assert_eq!(std::fs::canonicalize(links.join(name)).unwrap(), want);
    }
}

#[test]
fn cli_run_sim_with_the_real_shim_and_driver() {
    // The built artifacts, found next to the cuguard executable.
    let dir = support::scratch_dir("cli-run-real");
    let out = run_under(
        None,
        &[
            "--driver",
            "sim",
            "--quiet",
            "--",
            "/bin/sh",
            "-c",
            "echo \"$LD_LIBRARY_PATH\"; exit 4",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let first = stdout(&out).lines().next().unwrap_or_default().to_string();
    let sim_dir = first.split(':').next().unwrap();
    assert!(Path::new(sim_dir).join("libcuda.so.1").exists(), "{first}");
}

// ---- attribution: sections, owners, sites printed once ----------------------------------------

/// The summary's sections, as a consumer would decode them.
#[derive(Deserialize)]
struct JsonSections {
    owners: Vec<JsonOwner>,
    processes: Vec<JsonProcessSections>,
}

#[derive(Deserialize)]
struct JsonOwner {
    owner: String,
    kind: String,
    bytes: u64,
    count: u64,
    hint: Option<String>,
}

#[derive(Deserialize)]
struct JsonProcessSections {
    owners: Vec<JsonOwner>,
    ooms: Vec<JsonOom>,
    ooms_dropped: u64,
    peaks: Vec<JsonPeak>,
    growing: Vec<JsonGrowing>,
    reconciliation: Vec<JsonReconciliation>,
}

#[derive(Deserialize)]
struct JsonOom {
    size: u64,
    refused_by: String,
    site: JsonSiteRef,
    device_free_bytes: Option<u64>,
    sites: Vec<JsonSiteBytes>,
}

#[derive(Deserialize)]
struct JsonSiteRef {
    label: String,
    location: Option<String>,
    kind: Option<String>,
}

#[derive(Deserialize)]
struct JsonSiteBytes {
    label: String,
    owner: String,
    bytes: u64,
}

#[derive(Deserialize)]
struct JsonPeak {
    device: u32,
    live_bytes: u64,
    sites: Vec<JsonSiteBytes>,
}

#[derive(Deserialize)]
struct JsonGrowing {
    label: String,
    location: Option<String>,
    grown_bytes: u64,
    from_ms: u64,
    to_ms: u64,
}

#[derive(Deserialize)]
struct JsonReconciliation {
    device: u32,
    used_by: Option<String>,
    unexplained_bytes: Option<i64>,
}

#[test]
fn cli_summary_prints_every_section_of_a_report_that_has_them() {
    let out = cuguard()
        .current_dir(support::artifacts().root.join("tests/fixtures"))
        .args(["summary", "attribution.json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let want = std::fs::read_to_string(
        support::artifacts()
            .root
            .join("src/summary/snapshots/attribution.txt"),
    )
    .unwrap();
    assert_eq!(stdout(&out), want);
}

#[test]
fn cli_summary_json_carries_the_sections() {
    let out = cuguard()
        .args(["summary", "--format", "json"])
        .arg(fixture("attribution.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let s: JsonSections = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s.owners[0].owner, "pytorch_caching_allocator");
    assert_eq!(s.owners[0].kind, "framework_cache");
    assert!(
        s.owners[0]
            .hint
            .as_deref()
            .unwrap()
            .contains("PYTORCH_NO_CUDA_MEMORY_CACHING=1")
    );
    let p = &s.processes[0];
    let program = p.owners.iter().find(|o| o.owner == "program").unwrap();
    assert_eq!((program.bytes, program.count), ((1 << 20) + (512 << 10), 2));
    assert_eq!(p.ooms.len(), 1);
    assert_eq!(p.ooms_dropped, 2);
    let oom = &p.ooms[0];
    assert_eq!((oom.size, oom.refused_by.as_str()), (2 << 30, "driver"));
    assert_eq!(oom.site.label, "append_batch (train.py:7)");
    assert_eq!(oom.site.location.as_deref(), Some("train.py:7"));
    assert_eq!(oom.site.kind.as_deref(), Some("user"));
    assert_eq!(oom.device_free_bytes, Some(100 << 20));
    assert_eq!(
        (oom.sites[0].label.as_str(), oom.sites[0].bytes),
        ("append_batch (train.py:7)", 384 << 20)
    );
    assert_eq!(oom.sites[1].owner, "pytorch_caching_allocator");
    assert_eq!((p.peaks[0].device, p.peaks[0].live_bytes), (0, 418 << 20));
    assert!(
        p.peaks[0]
            .sites
            .iter()
            .any(|s| s.label == "step (train.py:12)"),
        "the temporary is named at the peak"
    );
    assert_eq!(p.growing.len(), 1, "the temporary does not grow");
    let g = &p.growing[0];
    assert_eq!(g.label, "append_batch (train.py:7)");
    assert_eq!(g.location.as_deref(), Some("train.py:7"));
    assert_eq!((g.grown_bytes, g.from_ms, g.to_ms), (384 << 20, 3000, 9000));
    let r: Vec<(u32, Option<&str>, Option<i64>)> = p
        .reconciliation
        .iter()
        .map(|r| (r.device, r.used_by.as_deref(), r.unexplained_bytes))
        .collect();
    assert_eq!(
        r,
        [
            (0, Some("device"), Some((697 << 20) - (512 << 10))),
            (1, Some("process"), Some(0))
        ]
    );
}

#[test]
fn cli_outputs_print_a_sites_location_once() {
    let path = fixture("attribution.json");
    let other = fixture("leaks-two-contexts.json");
    let runs: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["summary".as_ref(), path.as_os_str()],
        vec![
            "summary".as_ref(),
            "--format".as_ref(),
            "markdown".as_ref(),
            path.as_os_str(),
        ],
        vec![
            "check".as_ref(),
            "--owners".as_ref(),
            "all".as_ref(),
            path.as_os_str(),
        ],
        vec!["diff".as_ref(), other.as_os_str(), path.as_os_str()],
        vec!["suppressions".as_ref(), path.as_os_str()],
    ];
    for args in runs {
        let out = cuguard().args(&args).output().unwrap();
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?}: {}",
            stderr(&out)
        );
        let text = stdout(&out);
        for loc in [
            "model.py:40",
            "train.py:25",
            "Functions.cpp:1520",
            "CublasHandlePool.cpp:120",
        ] {
            assert!(text.contains(loc), "{args:?} names {loc}:\n{text}");
            // A Markdown cell holds a site and, after <br>, its stack: two lines when shown.
            for line in text
                .lines()
                .flat_map(|l| l.split("<br>"))
                .filter(|l| l.contains(loc))
            {
                assert_eq!(line.matches(loc).count(), 1, "{args:?}: {line}");
            }
        }
    }
}

#[test]
fn cli_diff_shows_mixed_stacks_like_py_spy() {
    let out = cuguard()
        .arg("diff")
        .arg(fixture("leaks-two-contexts.json"))
        .arg(fixture("attribution.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "  +512.0 KiB   +1 leak  cache_embeddings (train.py:25)                                            0 B → 512.0 KiB\n    at::native::empty_cuda (EmptyTensor.cpp:51) ← cache_embeddings (train.py:25) ← <module> (train.py:30)\n"
        ),
        "{text}"
    );
    assert!(text.contains(
        "  +1.0 MiB   +1 leak  on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520)"
    ), "{text}");
}

/// The files in `dir`, sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `cuguard run --driver sim --report PATH -- ARGS…` from `dir`, as the README runs the demo.
fn run_demo(dir: &Path, report: &str, args: &[&str]) -> Output {
    let out = cuguard()
        .current_dir(dir)
        .env_remove("CUGUARD_RUN_ID")
        .env_remove("CUGUARD_QUIET")
        .env(
            "CUGUARD_RUNTIME_DIR",
            support::artifacts().scratch.join("runtime"),
        )
        .args(["run", "--driver", "sim", "--report", report, "--"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    out
}

/// The README's demo run twice: the second run's report replaces the first's at `demo.json`,
/// and `cuguard summary demo.json` shows the second run (its pid, not the first's).
#[test]
fn cli_the_readme_demo_run_twice_shows_the_second_run() {
    let dir = support::scratch_dir("cli-readme-twice");
    let program = support::rust_program("cudarc_leaks");
    let program = program.to_str().unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let out = run_demo(&dir, "demo.json", &[program]);
        let said = stderr(&out);
        assert!(
            said.contains("demo.json") && !said.contains("demo.1.json"),
            "{said}"
        );
        // The report and its history, replaced by the next run's.
        assert_eq!(files_in(&dir), ["demo.history", "demo.json"]);
        let r = support::read_report(&dir.join("demo.json"));
        runs.push((
            r["process"]["pid"].as_u64().unwrap(),
            r["run_id"].as_str().unwrap().to_string(),
        ));
    }
    let [(pid1, run1), (pid2, run2)] = [runs[0].clone(), runs[1].clone()];
    assert_ne!(pid1, pid2);
    assert_ne!(run1, run2, "each cuguard run is its own run");
    let out = cuguard()
        .current_dir(&dir)
        .args(["summary", "demo.json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(&format!("  pid {pid2}  ")), "{text}");
    assert!(!text.contains(&format!("pid {pid1} ")), "{text}");
}

/// The demo's peak lasts less than a millisecond (its 6 MiB spike is freed at once): the moment
/// the summary prints for it, to the microsecond, is one `--at` finds the peak's 13.0 MiB at.
/// The millisecond rounded up came after the spike ended, and `--at` there found 7.0 MiB.
#[test]
fn cli_the_demo_s_short_peak_is_printed_at_a_moment_at_reads_back() {
    let dir = support::scratch_dir("cli-short-peak");
    let program = support::rust_program("cudarc_leaks");
    run_demo(&dir, "demo.json", &[program.to_str().unwrap()]);
    let summary = |args: &[&str]| {
        let out = cuguard()
            .current_dir(&dir)
            .arg("summary")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let text = summary(&["demo.json"]);
    let line = text
        .lines()
        .find(|l| l.contains("at the peak of "))
        .unwrap_or_else(|| panic!("{text}"));
    // `  device 0: at the peak of 13.0 MiB (at 31.612 ms): the program 13.0 MiB`
    let rest = line.split("at the peak of ").nth(1).unwrap();
    let (bytes, rest) = rest.split_once(" (at ").unwrap();
    let (moment, _) = rest.split_once("): ").unwrap();
    assert_eq!(bytes, "13.0 MiB", "{line}");
    let r = support::read_report(&dir.join("demo.json"));
    let us = r["peaks"][0]["time_us"].as_u64().unwrap();
    assert_eq!(
        r["peaks"][0]["time_ms"].as_u64().unwrap(),
        us.div_ceil(1000)
    );
    let at = summary(&["demo.json", "--at", moment]);
    let headline = at.lines().nth(1).unwrap();
    // The answer names the moment asked as it was asked (not the millisecond after it).
    assert!(
        headline.starts_with(&format!("live at {moment}: 13.0 MiB in 3 allocations (")),
        "--at {moment}: {headline}"
    );
}

/// Processes of one run given one path each keep a report (`demo.json`, `demo.1.json`, one
/// run id); the next run's replace them, one for one, and a process started outside a run
/// replaces a report written before it started.
#[test]
fn cli_one_run_keeps_each_process_report_a_later_run_replaces_them() {
    let dir = support::scratch_dir("cli-run-one-path");
    let program = support::rust_program("cudarc_leaks");
    let twice = format!("{0} >/dev/null && {0} >/dev/null", program.display());
    let mut ids = Vec::new();
    for _ in 0..2 {
        run_demo(&dir, "demo.json", &["/bin/sh", "-c", &twice]);
        // Each process's history is kept too, numbered as the reports are, each report naming
        // its own.
        assert_eq!(
            files_in(&dir),
            ["demo.1.history", "demo.1.json", "demo.history", "demo.json"]
        );
        let reports: Vec<serde_json::Value> = ["demo.json", "demo.1.json"]
            .iter()
            .map(|f| support::read_report(&dir.join(f)))
            .collect();
        // Each names its own, by absolute path.
        let mut histories: Vec<std::path::PathBuf> = reports
            .iter()
            .map(|r| r["history"]["files"][0].as_str().unwrap().into())
            .collect();
        histories.sort();
        assert_eq!(
            histories,
            [dir.join("demo.1.history"), dir.join("demo.history")]
        );
        assert_eq!(reports[0]["run_id"], reports[1]["run_id"]);
        assert_ne!(reports[0]["process"]["pid"], reports[1]["process"]["pid"]);
        ids.push(reports[0]["run_id"].clone());
    }
    assert_ne!(ids[0], ids[1]);

    // Outside a run: the shim by hand, twice; the second replaces the first's report.
    let report = dir.join("by-hand.json");
    let mut pids = Vec::new();
    for _ in 0..2 {
        support::run(
            support::shim_command(&program, &report)
                .env_remove("CUGUARD_RUN_ID")
                .env("CUGUARD_QUIET", "1"),
            true,
        );
        let r = support::read_report(&report);
        assert!(r.get("run_id").is_none(), "{}", r["run_id"]);
        pids.push(r["process"]["pid"].clone());
    }
    assert_ne!(pids[0], pids[1]);
    assert_eq!(
        files_in(&dir),
        [
            "by-hand.history",
            "by-hand.json",
            "demo.1.history",
            "demo.1.json",
            "demo.history",
            "demo.json"
        ]
    );
}

#[test]
fn cli_the_readme_demo_names_mains_line_once() {
    // The README's demo, with default settings: cudarc_leaks on the simulated driver.
    let dir = support::scratch_dir("cli-readme-demo");
    let report = dir.join("demo.json");
    support::run(
        support::shim_command(&support::rust_program("cudarc_leaks"), &report)
            .env("CUGUARD_QUIET", "1"),
        true,
    );
    let out = cuguard().arg("summary").arg(&report).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let src = std::fs::read_to_string(
        support::artifacts()
            .root
            .join("harness/workloads/src/bin/cudarc_leaks.rs"),
    )
    .unwrap();
    let line = src
        .lines()
        .position(|l| l.contains("stream.alloc_zeros::<f32>"))
        .unwrap()
        + 1;
    let site = format!("cudarc_leaks::main (cudarc_leaks.rs:{line})");
    let row = text
        .lines()
        .find(|l| l.contains("cuMemAllocAsync") && l.contains("2 leaks"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains(&site), "{row}\n{text}");
    for l in text.lines().filter(|l| l.contains("cudarc_leaks.rs")) {
        assert_eq!(l.matches("cudarc_leaks.rs").count(), 1, "{l}");
        assert!(!l.contains("mod.rs"), "{l}");
    }
}

/// `cuguard run` built in a checkout, with a Python that cannot import cuguard's package (the
/// system's, no `PYTHONPATH`): the bootstrap is given the checkout's package, so the end of the
/// program's code is classified (held and lost), not only marked. Skips where `python3` is
/// missing or already imports cuguard.
#[test]
fn cli_run_from_a_checkout_classifies_a_system_python_s_end() {
    let plain = |args: &[&str]| {
        Command::new("python3")
            .args(args)
            .env_remove("PYTHONPATH")
            .output()
    };
    let test = "cli_run_from_a_checkout_classifies_a_system_python_s_end";
    match plain(&["-c", "import cuguard"]) {
        Err(_) => return support::missing(test, "no python3"),
        Ok(o) if o.status.success() => {
            return support::missing(
                test,
                "the system's python3 imports cuguard already (the test needs one that does not)",
            );
        }
        Ok(_) => {}
    }
    let dir = support::scratch_dir("cli-run-checkout-package");
    let root = &support::artifacts().root;
    for (from, name) in [
        ("tests/python/end/keeps.py", "keeps.py"),
        ("tests/python/inner/gpu.py", "gpu.py"),
    ] {
        std::fs::copy(root.join(from), dir.join(name)).unwrap();
    }
    let out = cuguard()
        .current_dir(&dir)
        .env_remove("PYTHONPATH")
        .env_remove("CUGUARD_PYTHON_PACKAGE")
        .env_remove("CUGUARD_RUN_ID")
        .env("CUGUARD_PLUMBING", "file:*/gpu.py")
        .env(
            "CUGUARD_RUNTIME_DIR",
            support::artifacts().scratch.join("runtime"),
        )
        .args(["run", "--driver", "sim", "--report", "r.json", "--"])
        .args(["python3", "keeps.py"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let r = support::read_report(&dir.join("r.json"));
    let view = &r["python"]["view"];
    assert_eq!(view["complete"], true, "{view}");
    let mut classes: Vec<(String, u64)> = view["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["class"].as_str().unwrap().to_string(),
                a["size"].as_u64().unwrap() >> 20,
            )
        })
        .collect();
    classes.sort();
    let want: Vec<(String, u64)> = [("held", 1), ("held", 2), ("held", 3), ("lost", 4)]
        .iter()
        .map(|(c, m)| (c.to_string(), *m))
        .collect();
    assert_eq!(classes, want);
}
