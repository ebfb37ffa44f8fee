//! A report and its history are one process's: concurrent runs given one report name each keep
//! and read their own; a history of another process, another user's file, or one named many
//! times is refused or read once; hostile histories (a 4 GiB hole, adversarial replays) cost
//! little; the shim's rotation never touches a file it did not make.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cuguard_format::MemoryKind;

use cuguard_history::{Action, Chunk, Header, Raw, VERSION, kind, write_chunk};
use serde_json::Value;

use super::support::*;

const MIB: u64 = 1 << 20;

fn cuguard(dir: &Path) -> Command {
    let mut cmd = Command::new(&artifacts().cuguard);
    cmd.current_dir(dir).env("NO_COLOR", "1");
    cmd
}

/// What a finished command said, the processor time it took (user and system: what it costs,
/// whatever else the machine runs meanwhile) and its peak memory (its own image's high-water
/// mark, sampled from /proc while it ran).
struct Measured {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
    peak: u64,
}

fn measured(mut cmd: Command, limit: Duration) -> Measured {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let began = Instant::now();
    // Reaped by wait4 below.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().unwrap();
    let pid = child.id() as i32;
    let mut peak = 0u64;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        if let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status"))
            && let Some(kib) = st
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kib * 1024);
        }
        // SAFETY: the pid is our child's, not yet waited for; status and usage are writable.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert_eq!(r, 0, "wait4: {}", std::io::Error::last_os_error());
        if began.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still ran after {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let took = tv(usage.ru_utime) + tv(usage.ru_stime);
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    Measured {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stdout,
        stderr,
        took,
        peak,
    }
}

/// `cuguard summary PATH --at end --format json`, which must succeed.
fn live_at_end(dir: &Path, path: &Path) -> Value {
    let out = cuguard(dir)
        .arg("summary")
        .arg(path)
        .args(["--at", "end", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The bytes live in a `--at` answer, all devices together.
fn bytes_of(moment: &Value) -> u64 {
    moment["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["bytes"].as_u64().unwrap())
        .sum()
}

/// The bytes a report lists as leaked.
fn leaked(report: &Value) -> u64 {
    report["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["size"].as_u64().unwrap())
        .sum()
}

/// `summary PATH --at end` refused: exit 2 and one line, returned.
fn refused_at_end(dir: &Path, path: &Path) -> String {
    let out = cuguard(dir)
        .arg("summary")
        .arg(path)
        .args(["--at", "end"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    stderr
}

/// A run of history_churn with `keep` threads each keeping 1 MiB, into `report`.
fn churn(report: &Path, keep: u32) -> Value {
    run(
        shim_command(&c_program("history_churn"), report).args([
            &keep.to_string(),
            "1",
            "50",
            &keep.to_string(),
        ]),
        true,
    );
    read_report(report)
}

#[test]
fn fifty_concurrent_runs_with_one_report_name_each_answer_for_their_own_process() {
    let dir = scratch_dir("history-fifty");
    let program = c_program("history_churn");
    // Fifty `cuguard run`s at once (each its own run id), one report name: process i keeps
    // 1 + i % 5 MiB, so a history read for another process's report gives other bytes.
    let children: Vec<_> = (0..50)
        .map(|i| {
            let keep = (1 + i % 5).to_string();
            cuguard(&dir)
                .env_remove("CUGUARD_RUN_ID")
                .env("CUGUARD_RUNTIME_DIR", artifacts().scratch.join("runtime"))
                .args([
                    "run",
                    "--driver",
                    "sim",
                    "--quiet",
                    "--report",
                    "same.json",
                    "--",
                ])
                .arg(&program)
                .args([&keep, "1", "200", &keep])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut reports: Vec<PathBuf> = Vec::new();
    let mut histories: Vec<PathBuf> = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".json") {
            reports.push(p);
        } else if name.ends_with(".history") {
            histories.push(p);
        }
    }
    assert_eq!((reports.len(), histories.len()), (50, 50), "{reports:?}");
    let mut named = std::collections::HashSet::new();
    for report in &reports {
        let r = read_report(report);
        let files = r["history"]["files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{}", r["history"]);
        let file = Path::new(files[0].as_str().unwrap());
        assert!(file.is_absolute(), "{file:?}");
        assert!(named.insert(file.to_path_buf()), "{file:?} named twice");
        // The history's header is the report's process, and it answers with that process's
        // bytes.
        let head = std::fs::read(file).unwrap();
        let h = Header::decode(&head).unwrap();
        assert_eq!(u64::from(h.pid), r["process"]["pid"].as_u64().unwrap());
        let moment = live_at_end(&dir, report);
        assert_eq!(bytes_of(&moment), leaked(&r), "{}", report.display());
        assert!(leaked(&r) >= MIB, "{}", report.display());
    }
}

#[test]
fn a_history_of_another_process_or_another_user_is_refused() {
    let dir = scratch_dir("history-other");
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    churn(&a, 1);
    churn(&b, 2);
    // a's report made to name b's history.
    let mut r: Value = read_report(&a);
    r["history"]["files"] = serde_json::json!([dir.join("b.history")]);
    let forged = dir.join("forged.json");
    std::fs::write(&forged, serde_json::to_vec(&r).unwrap()).unwrap();
    let said = refused_at_end(&dir, &forged);
    let b_pid = read_report(&b)["process"]["pid"].as_u64().unwrap();
    let a_pid = r["process"]["pid"].as_u64().unwrap();
    assert!(
        said.contains("b.history: invalid report: not this report's history: it is of process ")
            && said.contains(&format!("process {b_pid} started at"))
            && said.contains(&format!("the report of process {a_pid} started at")),
        "{said}"
    );
    // The same name, relative (a report of an earlier cuguard), in the report's directory.
    r["history"]["files"] = serde_json::json!(["b.history"]);
    std::fs::write(&forged, serde_json::to_vec(&r).unwrap()).unwrap();
    assert!(refused_at_end(&dir, &forged).contains("not this report's history"));
    // Its own history, moved with it to another directory: found beside it by name.
    let moved = dir.join("moved");
    std::fs::create_dir(&moved).unwrap();
    std::fs::copy(&a, moved.join("a.json")).unwrap();
    std::fs::rename(dir.join("a.history"), moved.join("a.history")).unwrap();
    let moment = live_at_end(&moved, &moved.join("a.json"));
    assert_eq!(bytes_of(&moment), MIB);
    // As root (CI): a history owned by another user than the report's owner is not read.
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let c = std::ffi::CString::new(moved.join("a.history").to_str().unwrap()).unwrap();
        // SAFETY: c is a NUL-terminated path.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 1001, 1001) }, 0);
        let said = refused_at_end(&moved, &moved.join("a.json"));
        assert!(
            said.contains(
                "a.history: invalid report: owned by uid 1001, not by the report's owner (uid 0)"
            ),
            "{said}"
        );
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs this test as root, to give a file to another user"
        );
    }
}

#[test]
fn a_report_naming_one_history_twenty_times_reads_it_once() {
    let dir = scratch_dir("history-twenty");
    let report = dir.join("r.json");
    // About 800,000 events: a history of a few MiB, so that reading it twenty times shows.
    run(
        shim_command(&c_program("history_churn"), &report).args(["4", "1", "100000", "3"]),
        true,
    );
    let r0 = read_report(&report);
    let file = r0["history"]["files"][0].clone();
    let size = std::fs::metadata(dir.join("r.history")).unwrap().len();
    let mut r = r0.clone();
    r["history"]["files"] = Value::Array(vec![file.clone(); 20]);
    let many = dir.join("many.json");
    std::fs::write(&many, serde_json::to_vec(&r).unwrap()).unwrap();
    let limit = Duration::from_secs(120);
    let once = measured(
        {
            let mut c = cuguard(&dir);
            c.args(["summary", "r.json", "--at", "end"]);
            c
        },
        limit,
    );
    let twenty = measured(
        {
            let mut c = cuguard(&dir);
            c.args(["summary", "many.json", "--at", "end"]);
            c
        },
        limit,
    );
    assert_eq!(twenty.code, Some(0), "{}", twenty.stderr);
    // The same answer, but for the file's name in the headline, at the same cost.
    assert_eq!(
        twenty.stdout.replace("many.json", "r.json"),
        once.stdout,
        "{}",
        twenty.stderr
    );
    assert!(
        twenty.peak < once.peak + 2 * size,
        "twenty names: {} MiB, one: {} MiB (the file: {} KiB)",
        twenty.peak / MIB,
        once.peak / MIB,
        size >> 10
    );
    // Three distinct files are more than a history has.
    for name in ["x.history", "y.history"] {
        std::fs::copy(dir.join("r.history"), dir.join(name)).unwrap();
    }
    r["history"]["files"] = serde_json::json!([dir.join("x.history"), dir.join("y.history"), file]);
    std::fs::write(&many, serde_json::to_vec(&r).unwrap()).unwrap();
    let said = refused_at_end(&dir, &many);
    assert!(
        said.contains(
            "the report names 3 history files; a history has at most 2 (a segment and the one before it)"
        ),
        "{said}"
    );
}

#[test]
fn a_4_gib_sparse_history_is_refused_in_under_a_second_and_64_mib() {
    let dir = scratch_dir("history-sparse");
    let header = Header {
        version: VERSION,
        pid: 4242,
        start_unix_ns: 1,
        segment: 0,
        run: 0,
    }
    .encode();
    let path = dir.join("hole.history");
    std::fs::write(&path, header).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    for args in [
        vec!["summary", "hole.history", "--at", "end"],
        vec!["view", "hole.history", "-o", "hole.html"],
        vec![
            "export",
            "--format",
            "pprof",
            "hole.history",
            "-o",
            "hole.pb.gz",
        ],
    ] {
        let mut cmd = cuguard(&dir);
        cmd.args(&args);
        let m = measured(cmd, Duration::from_secs(60));
        assert_eq!(m.code, Some(2), "{args:?}: {}{}", m.stdout, m.stderr);
        assert_eq!(
            m.stderr.trim_end(),
            "cuguard: error: hole.history: invalid report: the history is damaged at byte 32: a chunk's checksum does not match",
            "{args:?}"
        );
        assert!(m.took < Duration::from_secs(1), "{args:?}: {:?}", m.took);
        assert!(m.peak < 64 * MIB, "{args:?}: {} MiB", m.peak / MIB);
    }
}

/// A history file of `chunks` after its header and first clock.
fn history_of(chunks: &[Chunk]) -> Vec<u8> {
    let mut file = Header {
        version: VERSION,
        pid: 4243,
        start_unix_ns: 1,
        segment: 0,
        run: 0,
    }
    .encode()
    .to_vec();
    write_chunk(
        &mut file,
        &Chunk::Clock {
            tsc: 0,
            since_start_ns: 0,
            unix_ns: 1,
        },
    );
    for c in chunks {
        write_chunk(&mut file, c);
    }
    file
}

#[test]
fn adversarial_replays_take_under_two_seconds() {
    let dir = scratch_dir("history-adversarial");
    let ev = |tsc: u64, addr: u64, action: Action, size: u64, context: u16| Raw {
        tsc,
        addr,
        size,
        stack: 0,
        context,
        kind: kind(action, MemoryKind::Device),
        device: 1,
        stream: 0,
    };
    // 100,000 blocks live in context 0, then 100,000 releases of other contexts: each release
    // walked every live block.
    let mut events: Vec<Raw> = (0..100_000u64)
        .map(|i| ev(1 + i, 0x1000_0000 + i * 512, Action::Alloc, 512, 0))
        .collect();
    events.extend(
        (0..100_000u64).map(|i| ev(200_000 + i, 1 + i % 60_000, Action::ContextRelease, 0, 0)),
    );
    let mut chunks: Vec<Chunk> = events
        .chunks(1 << 16)
        .map(|part| Chunk::Events {
            thread: 1,
            events: part.to_vec(),
        })
        .collect();
    chunks.push(Chunk::Stack {
        id: 0,
        frames: vec![0x5000_0010, 0x5000_0020],
    });
    chunks.push(Chunk::Clock {
        tsc: 300_000,
        since_start_ns: 300_000,
        unix_ns: 300_001,
    });
    chunks.push(Chunk::End { tsc: 300_000 });
    std::fs::write(dir.join("releases.history"), history_of(&chunks)).unwrap();
    // 80,000 modules: each compared with every one before it.
    let mut chunks: Vec<Chunk> = (0..80_000u64)
        .map(|i| Chunk::Module {
            start: 0x5000_0000 + i * 0x1000,
            end: 0x5000_0000 + (i + 1) * 0x1000,
            bias: 0x5000_0000,
            path: format!("/nonexistent/lib{i}.so"),
            build_id: String::new(),
        })
        .collect();
    chunks.push(Chunk::Stack {
        id: 0,
        frames: (0..64u64).map(|i| 0x5000_0010 + i * 0x1000).collect(),
    });
    chunks.push(Chunk::Events {
        thread: 1,
        events: vec![ev(10, 0x2000_0000, Action::Alloc, MIB, 0)],
    });
    chunks.push(Chunk::End { tsc: 20 });
    std::fs::write(dir.join("modules.history"), history_of(&chunks)).unwrap();
    for (file, live) in [
        ("releases.history", 100_000 * 512),
        ("modules.history", MIB),
    ] {
        let mut cmd = cuguard(&dir);
        cmd.args(["summary", file, "--at", "end", "--format", "json"]);
        let m = measured(cmd, Duration::from_secs(120));
        assert_eq!(m.code, Some(0), "{file}: {}", m.stderr);
        let moment: Value = serde_json::from_str(&m.stdout).unwrap();
        assert_eq!(bytes_of(&moment), live, "{file}");
        assert!(m.took < Duration::from_secs(2), "{file}: {:?}", m.took);
    }
}

#[test]
fn a_file_planted_at_the_rotated_name_is_never_touched_and_the_loss_is_said() {
    let dir = scratch_dir("history-planted");
    let report = dir.join("r.json");
    let planted = dir.join("r.history.1");
    std::fs::write(&planted, b"planted by someone else").unwrap();
    let mut cmd = shim_command(&c_program("history_churn"), &report);
    cmd.env("CUGUARD_HISTORY", "1MiB")
        .args(["50", "40", "200", "10"]);
    run(&mut cmd, true);
    assert_eq!(
        std::fs::read(&planted).unwrap(),
        b"planted by someone else",
        "the planted file is untouched"
    );
    let r = read_report(&report);
    let info = &r["history"];
    assert_eq!(
        info["files"],
        serde_json::json!([dir.join("r.history")]),
        "{info}"
    );
    assert!(info["segments_let_go"].as_u64().unwrap() >= 1, "{info}");
    assert!(info["begins_ms"].as_u64().unwrap() > 0, "{info}");
    let faults = r["faults"].as_array().unwrap();
    assert!(
        faults.iter().any(|f| {
            let f = f.as_str().unwrap();
            f.starts_with("history: ")
                && f.contains("r.history.1 could not take the older segment (File exists")
                && f.contains("was let go")
        }),
        "{faults:?}"
    );
    // What is kept still answers for the end: the ten 1 MiB blocks kept.
    let moment = live_at_end(&dir, &report);
    assert_eq!(bytes_of(&moment), 10 * MIB);
}

#[test]
fn the_history_takes_the_reports_mode_and_a_stopped_recording_is_said_as_such() {
    let dir = scratch_dir("history-mode");
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("history_churn"), &report);
    cmd.env("CUGUARD_REPORT_MODE", "0640")
        .args(["1", "1", "10"]);
    run(&mut cmd, true);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&report), 0o640);
    assert_eq!(mode(&dir.join("r.history")), 0o640);

    // A full disk (a file-size limit stands in for it) stops the recording: `--at end` says
    // so, not that the process was killed.
    let report = dir.join("full.json");
    let mut cmd = shim_command(&c_program("history_churn"), &report);
    cmd.args(["10", "10", "4000", "0"]);
    use std::os::unix::process::CommandExt as _;
    // SAFETY: setrlimit and signal are async-signal-safe; nothing else runs in the child here.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 20,
                rlim_max: 4 << 20,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    run(&mut cmd, true);
    let out = cuguard(&dir)
        .args(["summary", "full.json", "--at", "end"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let headline = text.lines().nth(1).unwrap();
    assert!(
        headline.contains(", up to where the recording stopped: writing ")
            && headline.contains("full.history failed: File too large"),
        "{headline}"
    );
    assert!(!headline.contains("killed"), "{headline}");
}
