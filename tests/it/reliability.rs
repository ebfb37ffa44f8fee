//! Reliability (issue 6): the report survives every way a process ends, forks, signals, many
//! threads and bad arguments, and the program behaves as it does without cuguard.
//!
//! - every exit path writes exactly one report, marked with `reason` and `complete`, holding
//!   exactly the program's leaks, and the process ends with the status it would have had;
//! - `_exit` and SIGKILL: a checkpoint (`CUGUARD_CHECKPOINT_SECS`) is left, replaced in place;
//! - snapshots on request (the signal, and `cuguard snapshot PID`);
//! - the program's own signal handlers are honoured;
//! - fork: children write their own reports, inherit none of the parent's leaks, never hang on a
//!   lock another thread held at the fork; fork+exec keeps the shim;
//! - many threads pushing and popping contexts while allocating: an exact report;
//! - bad arguments to every tracked entry get the driver's own answers;
//! - `CUGUARD_WARN_AT`; a full disk.

use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli_schema::validate;
use crate::shim_leaks::{program_leaks, report_leaks};
use crate::support::{self, c_program, read_report, run, scratch_dir, shim_command};

/// The 1 MiB and 3 MiB blocks exit_paths keeps.
const KEPT: [u64; 2] = [1 << 20, 3 << 20];

/// What a run ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Code(i32),
    Signal(i32),
}

fn end_of(status: std::process::ExitStatus) -> End {
    match status.code() {
        Some(c) => End::Code(c),
        None => End::Signal(status.signal().unwrap_or(0)),
    }
}

/// The report files in `dir` (temporary files left behind count as failures); the histories
/// beside them are [`histories_in`]'s.
fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !is_history(n))
        .collect();
    v.sort();
    v
}

fn is_history(name: &str) -> bool {
    name.ends_with(".history") || name.ends_with(".history.1")
}

/// The history files in `dir`.
fn histories_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| is_history(n))
        .collect();
    v.sort();
    v
}

fn leak_sizes(r: &Value) -> Vec<u64> {
    let mut v: Vec<u64> = r["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["size"].as_u64().unwrap())
        .collect();
    v.sort();
    v
}

fn leak_addresses(r: &Value) -> Vec<String> {
    let mut v: Vec<String> = r["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["address"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// Runs exit_paths MODE to its end; returns how it ended, its stdout, stderr and the dir.
fn run_mode(name: &str, mode: &str, env: &[(&str, &str)]) -> (End, String, String, PathBuf) {
    let dir = scratch_dir(&format!("rel-{name}"));
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("exit_paths"), &report);
    cmd.arg(mode);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        end_of(out.status),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        dir,
    )
}

/// The addresses exit_paths printed on its "ready" line.
fn ready_addresses(stdout: &str) -> Vec<String> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("ready "))
        .expect("ready line");
    let mut v: Vec<String> = line
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// One report, exact leaks, schema-valid. `churning`: another thread allocated and freed 4 KiB
/// blocks when the process ended, so one of them may have been live then, between its
/// allocation and its free (at most one, besides the kept blocks).
fn check_one_report(
    dir: &Path,
    stdout: &str,
    reason: &str,
    complete: bool,
    signal: Option<&str>,
    churning: bool,
) -> Value {
    assert_eq!(
        files_in(dir),
        vec!["r.json".to_string()],
        "exactly one report and no temporary file"
    );
    let r = read_report(&dir.join("r.json"));
    if let Err(e) = validate(&r) {
        panic!("report does not conform to the schema:\n{e}");
    }
    assert_eq!(r["reason"], reason);
    assert_eq!(r["complete"], complete);
    match signal {
        Some(name) => assert_eq!(r["signal"]["name"], name),
        None => assert!(r["signal"].is_null()),
    }
    let sizes = leak_sizes(&r);
    if churning && sizes.len() == KEPT.len() + 1 && sizes.contains(&4096) {
        let kept: Vec<u64> = sizes.into_iter().filter(|s| *s != 4096).collect();
        assert_eq!(kept, KEPT.to_vec());
        let addresses = leak_addresses(&r);
        for a in ready_addresses(stdout) {
            assert!(addresses.contains(&a), "{a} not in {addresses:?}");
        }
    } else {
        assert_eq!(sizes, KEPT.to_vec());
        assert_eq!(leak_addresses(&r), ready_addresses(stdout));
    }
    assert!(r["process"]["pid"].as_u64().is_some());
    // The history survives the same ending, whole, and ends with what the report says was live.
    assert_eq!(histories_in(dir), vec!["r.history".to_string()]);
    assert_eq!(
        r["history"]["files"],
        serde_json::json!([dir.join("r.history")])
    );
    let bytes = std::fs::read(dir.join("r.history")).unwrap();
    let h = cuguard_history::replay::Replay::read(&[&bytes]).unwrap();
    assert!(
        h.whole && h.cut.is_none(),
        "{reason}: the history ended whole"
    );
    let mut live: Vec<u64> = h
        .blocks
        .iter()
        .filter(|b| b.end_ns.is_none())
        .map(|b| b.size)
        .collect();
    live.sort();
    assert_eq!(
        live,
        leak_sizes(&r),
        "the history's live blocks are the report's leaks"
    );
    r
}

#[test]
fn every_exit_path_writes_one_final_report() {
    let cases: &[(&str, End, &str, Option<&str>)] = &[
        ("return", End::Code(0), "exit", None),
        ("exit", End::Code(3), "exit", None),
        ("exit_thread", End::Code(4), "exit", None),
        ("quick_exit", End::Code(5), "exit", None),
        ("_exit", End::Code(6), "exit", None),
        (
            "abort",
            End::Signal(libc::SIGABRT),
            "signal",
            Some("SIGABRT"),
        ),
        (
            "segv",
            End::Signal(libc::SIGSEGV),
            "signal",
            Some("SIGSEGV"),
        ),
        ("bus", End::Signal(libc::SIGBUS), "signal", Some("SIGBUS")),
        ("fpe", End::Signal(libc::SIGFPE), "signal", Some("SIGFPE")),
        ("ill", End::Signal(libc::SIGILL), "signal", Some("SIGILL")),
        (
            "raise_term",
            End::Signal(libc::SIGTERM),
            "signal",
            Some("SIGTERM"),
        ),
    ];
    for pool in ["0", "1"] {
        for (mode, end, reason, signal) in cases {
            let (got, stdout, stderr, dir) =
                run_mode(&format!("{mode}-{pool}"), mode, &[("CUGUARD_POOL", pool)]);
            assert_eq!(got, *end, "{mode}: {stderr}");
            check_one_report(&dir, &stdout, reason, true, *signal, *mode == "exit_thread");
            let lines: Vec<&str> = stderr
                .lines()
                .filter(|l| l.starts_with("cuguard:"))
                .collect();
            assert_eq!(lines.len(), 1, "{mode}: one summary line: {stderr}");
            if let Some(name) = signal {
                assert!(lines[0].contains(name), "{mode}: {}", lines[0]);
            }
            // Nothing the program would not have done: no output after a raise that kills.
            assert!(
                !stdout.contains("unknown mode"),
                "{mode} went on after the signal"
            );
        }
    }
}

#[test]
fn exit_paths_without_signal_handling_or_report_are_unchanged() {
    // CUGUARD_SIGNALS=0: the shim takes no signal; the process still dies the same way.
    let (got, _, _, dir) = run_mode("nosignals", "segv", &[("CUGUARD_SIGNALS", "0")]);
    assert_eq!(got, End::Signal(libc::SIGSEGV));
    assert!(files_in(&dir).is_empty());
    // No report, but what the history drained before the crash is readable.
    for f in histories_in(&dir) {
        let bytes = std::fs::read(dir.join(f)).unwrap();
        let h = cuguard_history::replay::Replay::read(&[&bytes]).unwrap();
        assert!(!h.whole && h.cut.is_none());
    }
}

/// Starts exit_paths MODE and waits for its "ready" line.
fn start(dir: &Path, mode: &str, env: &[(&str, &str)]) -> (Child, String) {
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("exit_paths"), &report);
    cmd.arg(mode).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    default_signals(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("ready "), "{line}");
    (child, line)
}

/// Gives the program the terminating signals' default actions, whatever the test runner's are:
/// under `nohup` SIGHUP is ignored, and a shell's background job ignores SIGINT and SIGQUIT (Python
/// then installs no KeyboardInterrupt handler); the shim leaves an ignored signal ignored, so the
/// program would wait forever. These tests are of programs that did not change them.
fn default_signals(cmd: &mut Command) {
    // SAFETY: only `signal`, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The name of `pid`'s cuguard thread once it announces a snapshot signal ("cuguard-s<N>").
fn cuguard_thread(pid: u32) -> String {
    let mut name = String::new();
    wait_for(
        || {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                return false;
            };
            tasks.flatten().any(|t| {
                let c = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                name = c.trim().to_string();
                name.starts_with("cuguard-s")
            })
        },
        "the cuguard thread",
    );
    name
}

#[test]
fn terminating_signals_write_the_report_then_kill_as_before() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
        let dir = scratch_dir(&format!("rel-term-{sig}"));
        let (mut child, ready) = start(&dir, "wait", &[]);
        signal(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(end_of(status), End::Signal(sig));
        let name = match sig {
            libc::SIGTERM => "SIGTERM",
            libc::SIGINT => "SIGINT",
            libc::SIGHUP => "SIGHUP",
            _ => "SIGQUIT",
        };
        let r = check_one_report(&dir, &ready, "signal", true, Some(name), false);
        assert_eq!(r["signal"]["number"], sig);
    }
}

#[test]
fn the_programs_own_handlers_are_honoured() {
    // A SIGSEGV handler installed before CUDA was used: the shim writes the report, then chains.
    let (got, stdout, _, dir) = run_mode("handler-before", "handler_before", &[]);
    assert_eq!(got, End::Code(42));
    assert!(stdout.contains("program handler ran"));
    check_one_report(&dir, &stdout, "signal", true, Some("SIGSEGV"), false);
    // One installed after the shim's replaces it: the program decides. Here it leaves through
    // _exit, from the handler: the cuguard thread writes the final report while it waits.
    let (got, stdout, _, dir) = run_mode("handler-after", "handler_after", &[]);
    assert_eq!(got, End::Code(42));
    assert!(stdout.contains("program handler ran"));
    check_one_report(&dir, &stdout, "exit", true, None, false);
    // A SIGTERM handler of the program's: not taken; the program exits cleanly, and so does the
    // report.
    let dir = scratch_dir("rel-term-handler");
    let (child, ready) = start(&dir, "term_handler", &[]);
    signal(&child, libc::SIGTERM);
    let out = child.wait_with_output().unwrap();
    assert_eq!(end_of(out.status), End::Code(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("clean shutdown"));
    check_one_report(&dir, &ready, "exit", true, None, false);
}

/// Ctrl-C in a program that restores the default action before dying of it (Python ends an
/// unhandled KeyboardInterrupt that way, and so do C programs that clean up and re-raise): the
/// report is written first, then the process dies of SIGINT as it would have.
#[test]
fn ctrl_c_after_the_program_restores_the_default_action_leaves_the_report() {
    // A C program with its own SIGINT handler that resets SIG_DFL and raises.
    let (got, stdout, stderr, dir) = run_mode("reset-dfl-raise", "reset_dfl_raise", &[]);
    assert_eq!(got, End::Signal(libc::SIGINT), "{stderr}");
    assert!(!stdout.contains("went on after raise"));
    let r = check_one_report(&dir, &stdout, "signal", true, Some("SIGINT"), false);
    assert_eq!(r["signal"]["number"], libc::SIGINT);
    // Python through ctypes: an unhandled KeyboardInterrupt, raised or from SIGINT sent to itself.
    let script = "import ctypes, os, signal, sys, time\n\
        cu = ctypes.CDLL('libcuda.so.1')\n\
        assert cu.cuInit(0) == 0\n\
        dev = ctypes.c_int(); ctx = ctypes.c_void_p(); p = ctypes.c_uint64()\n\
        assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0\n\
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0\n\
        assert cu.cuCtxSetCurrent(ctx) == 0\n\
        assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0\n\
        if sys.argv[1] == 'raise':\n    raise KeyboardInterrupt\n\
        os.kill(os.getpid(), signal.SIGINT)\n\
        time.sleep(20)\n";
    for how in ["raise", "kill"] {
        let dir = scratch_dir(&format!("rel-python-ctrl-c-{how}"));
        let report = dir.join("r.json");
        let mut cmd = shim_command(Path::new("python3"), &report);
        cmd.args(["-c", script, how]);
        default_signals(&mut cmd);
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(127) {
            return crate::support::missing(
                "ctrl_c_after_the_program_restores_the_default_action_leaves_the_report",
                "no python3",
            );
        }
        assert_eq!(
            end_of(out.status),
            End::Signal(libc::SIGINT),
            "{how}: {stderr}"
        );
        assert!(stderr.contains("KeyboardInterrupt"), "{how}: {stderr}");
        assert_eq!(files_in(&dir), vec!["r.json".to_string()]);
        let r = read_report(&report);
        validate(&r).unwrap();
        assert_eq!(r["reason"], "signal", "{how}");
        assert_eq!(r["complete"], true, "{how}");
        assert_eq!(r["signal"]["name"], "SIGINT", "{how}");
        assert_eq!(leak_sizes(&r), vec![1 << 20], "{how}");
    }
}

/// What a program reads back from `sigaction` is what it set, whatever the shim installed for
/// itself: the same lines with and without the shim, pool on and off.
#[test]
fn sigaction_reads_back_what_the_program_set() {
    let lines = |out: &std::process::Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with("ready "))
            .map(str::to_string)
            .collect()
    };
    let bare = support::sim_command(&c_program("exit_paths"))
        .arg("readback")
        .output()
        .unwrap();
    assert!(bare.status.success());
    let expected = lines(&bare);
    assert_eq!(expected.len(), 4 * 13, "{expected:?}");
    for pool in ["0", "1"] {
        let (got, stdout, stderr, dir) = run_mode(
            &format!("readback-{pool}"),
            "readback",
            &[("CUGUARD_POOL", pool)],
        );
        assert_eq!(got, End::Code(0), "{stderr}");
        let shimmed: Vec<String> = stdout
            .lines()
            .filter(|l| !l.starts_with("ready "))
            .map(str::to_string)
            .collect();
        assert_eq!(shimmed, expected, "pool {pool}");
        check_one_report(&dir, &stdout, "exit", true, None, false);
    }
}

#[test]
fn checkpoints_survive_sigkill_and_replace_each_other() {
    let dir = scratch_dir("rel-checkpoint");
    let (mut child, ready) = start(&dir, "churn", &[("CUGUARD_CHECKPOINT_SECS", "1")]);
    let report = dir.join("r.json");
    wait_for(
        || report.exists() && read_report(&report)["report_number"].as_u64().unwrap_or(0) >= 3,
        "three checkpoints",
    );
    child.kill().unwrap();
    assert_eq!(end_of(child.wait().unwrap()), End::Signal(libc::SIGKILL));
    assert_eq!(
        files_in(&dir),
        vec!["r.json".to_string()],
        "checkpoints replace each other"
    );
    let r = read_report(&report);
    validate(&r).unwrap();
    assert_eq!(r["reason"], "checkpoint");
    assert_eq!(r["complete"], false);
    assert!(r["cut_short"].is_string());
    // The two kept blocks, and at most one 4 KiB block the churn held at that moment.
    let sizes = leak_sizes(&r);
    let kept: Vec<u64> = sizes.iter().copied().filter(|s| *s != 4096).collect();
    assert_eq!(kept, KEPT.to_vec());
    assert!(sizes.len() <= 3, "{sizes:?}");
    for a in ready_addresses(&ready) {
        assert!(leak_addresses(&r).contains(&a));
    }
}

#[test]
fn checkpoint_then_exit_leaves_only_the_final_report() {
    let dir = scratch_dir("rel-checkpoint-exit");
    let (mut child, ready) = start(&dir, "wait", &[("CUGUARD_CHECKPOINT_SECS", "1")]);
    let report = dir.join("r.json");
    wait_for(|| report.exists(), "a checkpoint");
    assert_eq!(read_report(&report)["reason"], "checkpoint");
    signal(&child, libc::SIGTERM);
    child.wait().unwrap();
    let r = check_one_report(&dir, &ready, "signal", true, Some("SIGTERM"), false);
    assert!(r["report_number"].as_u64().unwrap() >= 2);
}

#[test]
fn snapshot_on_request_then_final() {
    let dir = scratch_dir("rel-snapshot");
    let (mut child, ready) = start(&dir, "churn", &[]);
    let name = cuguard_thread(child.id());
    let rtmin = libc::SIGRTMIN();
    assert_eq!(name, format!("cuguard-s{}", rtmin + 7));
    // Through the command.
    let out = run(
        Command::new(&support::artifacts().cuguard).args(["snapshot", &child.id().to_string()]),
        true,
    );
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(Path::new(&said), dir.join("r.json"));
    let r = read_report(&dir.join("r.json"));
    validate(&r).unwrap();
    assert_eq!(r["reason"], "request");
    assert_eq!(r["complete"], false);
    let kept: Vec<u64> = leak_sizes(&r).into_iter().filter(|s| *s != 4096).collect();
    assert_eq!(kept, KEPT.to_vec());
    // The raw signal works too, and the final report replaces the snapshot.
    signal(&child, rtmin + 7);
    wait_for(
        || read_report(&dir.join("r.json"))["report_number"].as_u64() == Some(2),
        "second snapshot",
    );
    signal(&child, libc::SIGTERM);
    assert_eq!(end_of(child.wait().unwrap()), End::Signal(libc::SIGTERM));
    assert_eq!(files_in(&dir), vec!["r.json".to_string()]);
    let r = read_report(&dir.join("r.json"));
    assert_eq!(r["reason"], "signal");
    assert_eq!(r["report_number"], 3);
    for a in ready_addresses(&ready) {
        assert!(leak_addresses(&r).contains(&a));
    }
}

#[test]
fn snapshot_refuses_what_it_cannot_do_safely() {
    // Snapshots off: the thread says so, and the command refuses without signalling.
    let dir = scratch_dir("rel-snapshot-off");
    let (mut child, _) = start(
        &dir,
        "wait",
        &[
            ("CUGUARD_SNAPSHOT_SIGNAL", "off"),
            ("CUGUARD_CHECKPOINT_SECS", "3600"),
        ],
    );
    wait_for(
        || {
            std::fs::read_dir(format!("/proc/{}/task", child.id()))
                .unwrap()
                .flatten()
                .any(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "cuguard")
                })
        },
        "the cuguard thread",
    );
    let out = run(
        Command::new(&support::artifacts().cuguard).args(["snapshot", &child.id().to_string()]),
        false,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no snapshot signal"));
    assert!(child.try_wait().unwrap().is_none(), "still running");
    signal(&child, libc::SIGTERM);
    child.wait().unwrap();
    // A process without the shim.
    let mut plain = Command::new("sleep").arg("30").spawn().unwrap();
    let out = run(
        Command::new(&support::artifacts().cuguard).args(["snapshot", &plain.id().to_string()]),
        false,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not run under cuguard"));
    plain.kill().unwrap();
    plain.wait().unwrap();
}

/// The report file of each child, in the children's order. A pid can come back within one run
/// (some kernels, gVisor's among them, hand out pids at random, and the children run one after
/// another): the shim never replaces another process's report, so a pid's second child writes
/// `r.PID.1.json`, its third `r.PID.2.json`.
fn child_report_names(children: &[(u32, i32)]) -> Vec<String> {
    let mut seen = std::collections::HashMap::<u32, u32>::new();
    children
        .iter()
        .map(|(pid, _)| {
            let n = seen.entry(*pid).or_insert(0);
            *n += 1;
            match *n {
                1 => format!("r.{pid}.json"),
                k => format!("r.{pid}.{}.json", k - 1),
            }
        })
        .collect()
}

/// Runs fork_race and returns (children's pids and statuses, the report directory).
fn fork_race(name: &str, child: &str, pool: &str) -> (Vec<(u32, i32)>, PathBuf) {
    let dir = scratch_dir(&format!("rel-fork-{name}"));
    let mut cmd = shim_command(&c_program("fork_race"), &dir.join("r.%p.json"));
    cmd.args(["4", "25", child])
        .env("CUGUARD_POOL", pool)
        .env("CUGUARD_QUIET", "1");
    let out = run(&mut cmd, true);
    let children: Vec<(u32, i32)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "child").then_some(())?;
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect();
    assert_eq!(children.len(), 25);
    (children, dir)
}

#[test]
fn forked_children_write_their_own_reports_and_never_hang() {
    // Pool off too: the simulated driver holds its own locks across a fork, so a child that
    // allocates from it never meets a lock a parent thread held.
    for pool in ["1", "0"] {
        let (children, dir) = fork_race(&format!("alloc-{pool}"), "alloc", pool);
        let names = child_report_names(&children);
        for ((pid, status), name) in children.iter().zip(&names) {
            assert_eq!(
                *status, 0,
                "child {pid} ended with wait status {status} (14 = hung, killed by SIGALRM), pool {pool}"
            );
            let r = read_report(&dir.join(name));
            validate(&r).unwrap();
            assert_eq!(r["process"]["pid"], *pid);
            assert_eq!(
                leak_sizes(&r),
                vec![64 << 10, 64 << 10],
                "the child's own two blocks, none of the parent's"
            );
        }
        let parent: Vec<String> = files_in(&dir)
            .into_iter()
            .filter(|f| !names.contains(f))
            .collect();
        assert_eq!(parent.len(), 1, "{parent:?}");
        let r = read_report(&dir.join(&parent[0]));
        assert_eq!(leak_sizes(&r), vec![5 << 20]);
    }
}

#[test]
fn forked_children_exit_cleanly_while_parent_threads_hold_locks() {
    for pool in ["0", "1"] {
        let (children, dir) = fork_race(&format!("exit-{pool}"), "exit", pool);
        let names = child_report_names(&children);
        for ((pid, status), name) in children.iter().zip(&names) {
            assert_eq!(*status, 0, "child {pid}: wait status {status} (14 = hung)");
            let r = read_report(&dir.join(name));
            assert!(
                r["leaks"].as_array().unwrap().is_empty(),
                "the parent's live blocks are not the child's"
            );
        }
    }
}

#[test]
fn fork_and_exec_keeps_the_shim() {
    let (children, dir) = fork_race("exec", "exec", "1");
    for ((_, status), name) in children.iter().zip(&child_report_names(&children)) {
        assert_eq!(*status, 0);
        let r = read_report(&dir.join(name));
        assert_eq!(leak_sizes(&r), vec![7 << 20]);
        assert!(
            r["process"]["argv"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == "child_exec")
        );
    }
}

/// Seconds the stress runs (`CUGUARD_STRESS_SECS`, default 10).
fn stress_secs() -> String {
    std::env::var("CUGUARD_STRESS_SECS").unwrap_or_else(|_| "10".into())
}

#[test]
fn many_threads_pushing_contexts_give_an_exact_report() {
    let secs = stress_secs();
    for pool in ["0", "1"] {
        let dir = scratch_dir(&format!("rel-stress-{pool}"));
        let report = dir.join("r.json");
        let mut cmd = shim_command(&c_program("stress_threads"), &report);
        cmd.args(["8", &secs])
            .env("CUGUARD_POOL", pool)
            .env("CUGUARD_CHECKPOINT_SECS", "1");
        let out = run(&mut cmd, true);
        let said: Value = serde_json::from_slice(&out.stdout).unwrap();
        let r = read_report(&report);
        validate(&r).unwrap();
        assert_eq!(r["reason"], "exit");
        assert_eq!(r["complete"], true);
        assert_eq!(
            report_leaks(&r),
            program_leaks(&said),
            "leaks (pool {pool})"
        );
        let allocations = support::report_allocations(&r);
        assert_eq!(
            allocations,
            said["allocations"].as_u64().unwrap(),
            "allocations (pool {pool})"
        );
        assert!(said["allocations"].as_u64().unwrap() > 1000);
        assert!(
            r["events"].as_array().unwrap().is_empty(),
            "no invented events: {}",
            r["events"]
        );
        assert!(
            r["report_number"].as_u64().unwrap() >= 2,
            "checkpoints were written during the stress"
        );
    }
}

#[test]
fn bad_arguments_to_every_tracked_entry_get_the_drivers_answers() {
    let program = c_program("stress_bad_args");
    let (bare, reports) = support::reports_with_bare_answers(&program, "rel-bad-args");
    assert!(bare.stdout.len() > 1000);
    for r in reports {
        assert!(r["leaks"].as_array().unwrap().is_empty(), "{}", r["leaks"]);
        assert!(
            r["faults"].as_array().unwrap().is_empty(),
            "{}",
            r["faults"]
        );
    }
}

#[test]
fn warn_at_gives_one_line_and_an_event() {
    for (setting, sim_memory) in [("3MiB", "16GiB"), ("20%", "16MiB")] {
        let dir = scratch_dir(&format!("rel-warn-{}", setting.replace('%', "pct")));
        let (child, _) = start(
            &dir,
            "wait",
            &[
                ("CUGUARD_WARN_AT", setting),
                ("CUGUARD_SIM_MEMORY", sim_memory),
            ],
        );
        std::thread::sleep(Duration::from_millis(1500));
        signal(&child, libc::SIGTERM);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("crossed CUGUARD_WARN_AT"))
            .collect();
        assert_eq!(warnings.len(), 1, "{stderr}");
        assert!(
            warnings[0].contains("top sites: c-exit_paths"),
            "{}",
            warnings[0]
        );
        let r = read_report(&dir.join("r.json"));
        validate(&r).unwrap();
        let ev: Vec<&Value> = r["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "warn_threshold_crossed")
            .collect();
        assert_eq!(ev.len(), 1);
        // The live bytes when the crossing was seen: the program goes through 1, 3, 6 and 4 MiB,
        // and the check runs on the shim's own thread, so any of those at or over the threshold.
        let threshold: u64 = if setting == "3MiB" {
            3 << 20
        } else {
            (16 << 20) / 5
        };
        let seen = ev[0]["size"].as_u64().unwrap();
        assert!(
            [3u64 << 20, 6 << 20, 4 << 20].contains(&seen) && seen >= threshold,
            "{seen}"
        );
    }
}

#[test]
fn a_full_disk_gives_one_line_and_the_fallback() {
    let dir = scratch_dir("rel-full-disk");
    let full = dir.join("full");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    // A tiny tmpfs, filled up. Needs the right to mount (root in CI); skipped otherwise.
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"])
        .arg(&full)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        return crate::support::missing(
            "a_full_disk_gives_one_line_and_the_fallback",
            "cannot mount a tmpfs here (needs root)",
        );
    }
    let _ = std::fs::write(full.join("filler"), vec![0u8; 64 << 10]);
    let report = full.join("r.json");
    let mut cmd = shim_command(&c_program("exit_paths"), &report);
    cmd.arg("return").env("TMPDIR", &tmp);
    let out = cmd.output().unwrap();
    let _ = Command::new("umount").arg(&full).status();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("could not write")
            && lines[0].contains(&tmp.join("r.json").display().to_string()),
        "{stderr}"
    );
    let r = read_report(&tmp.join("r.json"));
    assert_eq!(leak_sizes(&r), KEPT.to_vec());
}

#[test]
fn python_sys_exit_and_rust_process_exit_write_the_report() {
    // Python through ctypes: sys.exit(7) after allocating.
    let dir = scratch_dir("rel-python");
    let report = dir.join("r.json");
    let script = "import ctypes, sys\n\
        cu = ctypes.CDLL('libcuda.so.1')\n\
        assert cu.cuInit(0) == 0\n\
        dev = ctypes.c_int(); ctx = ctypes.c_void_p(); p = ctypes.c_uint64()\n\
        assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0\n\
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0\n\
        assert cu.cuCtxSetCurrent(ctx) == 0\n\
        assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0\n\
        sys.exit(7)\n";
    let mut cmd = shim_command(Path::new("python3"), &report);
    cmd.args(["-c", script]);
    match cmd.output() {
        Err(_) => crate::support::missing(
            "python_sys_exit_and_rust_process_exit_write_the_report (its Python half)",
            "no python3",
        ),
        Ok(out) => {
            assert_eq!(
                out.status.code(),
                Some(7),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let r = read_report(&report);
            assert_eq!(r["reason"], "exit");
            assert_eq!(leak_sizes(&r), vec![1 << 20]);
        }
    }
    // Rust: std::process::exit from main and from a thread (whether or not Python ran).
    for mode in ["main", "thread"] {
        let dir = scratch_dir(&format!("rel-rust-{mode}"));
        let report = dir.join("r.json");
        let out = shim_command(&support::rust_program("exit_rust"), &report)
            .arg(mode)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(9),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r = read_report(&report);
        assert_eq!(r["reason"], "exit");
        assert_eq!(leak_sizes(&r), vec![2 << 20]);
    }
}

#[test]
fn uncaught_cxx_exception_writes_the_report() {
    let a = support::artifacts();
    let dir = scratch_dir("rel-cxx");
    let src = dir.join("throw.cc");
    std::fs::write(
        &src,
        "#include <stdexcept>\n#include \"cusim.h\"\n\
         int main() { CUdevice d; CUcontext c; CUdeviceptr p;\n\
           cuInit(0); cuDeviceGet(&d, 0); cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);\n\
           cuMemAlloc(&p, 1 << 20);\n\
           throw std::runtime_error(\"uncaught\"); }\n",
    )
    .unwrap();
    let exe = dir.join("throw");
    let built = Command::new("c++")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-I")
        .arg(a.root.join("harness/workloads/c"))
        .arg("-L")
        .arg(&a.sim_dir)
        .arg("-lcuda")
        .status();
    if !built.is_ok_and(|s| s.success()) {
        return crate::support::missing(
            "uncaught_cxx_exception_writes_the_report",
            "no C++ compiler (c++)",
        );
    }
    let report = dir.join("r.json");
    let out = shim_command(&exe, &report).output().unwrap();
    assert_eq!(end_of(out.status), End::Signal(libc::SIGABRT));
    let r = read_report(&report);
    validate(&r).unwrap();
    assert_eq!(r["reason"], "signal");
    assert_eq!(r["signal"]["name"], "SIGABRT");
    assert_eq!(r["complete"], true);
    assert_eq!(leak_sizes(&r), vec![1 << 20]);
}

#[test]
fn processes_given_one_report_path_each_keep_their_report() {
    let dir = scratch_dir("one-report-path");
    let path = dir.join("job.json");
    let program = c_program("leaks_linked");
    let children: Vec<Child> = (0..4)
        .map(|_| {
            shim_command(&program, &path)
                .env("CUGUARD_QUIET", "1")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut pids: Vec<u64> = children.iter().map(|c| u64::from(c.id())).collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    // Still `*.json`, so that a directory or a glob finds them all.
    assert_eq!(
        files_in(&dir),
        ["job.1.json", "job.2.json", "job.3.json", "job.json"]
    );
    let mut written: Vec<u64> = files_in(&dir)
        .iter()
        .map(|f| {
            read_report(&dir.join(f))["process"]["pid"]
                .as_u64()
                .unwrap()
        })
        .collect();
    written.sort_unstable();
    pids.sort_unstable();
    assert_eq!(written, pids);
    let merged = scratch_dir("one-report-path-merged").join("all.json");
    let out = Command::new(&support::artifacts().cuguard)
        .args(["merge", "-o"])
        .arg(&merged)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    assert_eq!(merged["processes"].as_array().unwrap().len(), 4);
}
