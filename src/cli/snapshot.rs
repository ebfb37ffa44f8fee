//! `cuguard snapshot PID`: ask a running process (under the shim) to write its report now, wait
//! for it, and print where it went.
//!
//! How it works (see docs/reliability.md): once the process has made its first tracked
//! allocation, the shim runs a thread named `cuguard-s<N>`, where N is the signal it answers
//! with a report (`CUGUARD_SNAPSHOT_SIGNAL`, default `SIGRTMIN+7`); the shim takes that signal
//! only if the program had no handler for it, and names the thread plain `cuguard` otherwise.
//! This command checks all of that (the shim is mapped, the thread is there, the signal is
//! caught) before it sends anything: a real-time signal nobody handles would end the process.
//!
//! The report goes where the final one will go (`CUGUARD_REPORT` from the process's
//! environment, expanded by the shim's own expander, `cuguard_report::template`, relative to its
//! working directory), replacing the process's earlier snapshot or
//! checkpoint; a `.N` suffix or `$TMPDIR` are looked at too, as the shim uses them when the path
//! is taken or cannot be written.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use cuguard_report::template;

use super::CliError;

/// Arguments of `cuguard snapshot`.
#[derive(Debug, Args)]
#[command(after_help = "\
The process must run under the shim (cuguard run, or LD_PRELOAD=libcuguard.so) and have made \
at least one CUDA allocation. Prints the report's path.

Example:
  cuguard snapshot 12345 && cuguard summary cuguard.python3.12345.json")]
pub struct SnapshotArgs {
    /// The process.
    pub pid: u32,
    /// How long to wait for the report, in seconds.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub wait: f64,
    /// Where the report is expected, when it cannot be worked out from the process's
    /// environment (a report template, as CUGUARD_REPORT).
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
}

/// Why a snapshot could not be had.
#[derive(Debug)]
pub enum SnapshotError {
    /// The process does not exist or cannot be read.
    NoProcess(u32, String),
    /// The shim is not loaded in it.
    NoShim(u32),
    /// The shim is loaded but has not armed (no allocation yet) or is disabled.
    NotArmed(u32),
    /// The shim is armed but answers no snapshot signal.
    NoSignal(u32),
    /// The signal could not be sent.
    Send(u32, std::io::Error),
    /// No report appeared in time.
    TimedOut { pid: u32, looked: Vec<PathBuf> },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::NoProcess(pid, why) => write!(f, "process {pid}: {why}"),
            SnapshotError::NoShim(pid) => {
                write!(
                    f,
                    "process {pid} does not run under cuguard (libcuguard.so is not loaded)"
                )
            }
            SnapshotError::NotArmed(pid) => write!(
                f,
                "process {pid} has not started tracking yet (cuguard starts at the first CUDA allocation), or CUGUARD_DISABLE is set"
            ),
            SnapshotError::NoSignal(pid) => write!(
                f,
                "process {pid} takes no snapshot signal (the program handles CUGUARD_SNAPSHOT_SIGNAL itself, or it is off); restart it with another CUGUARD_SNAPSHOT_SIGNAL"
            ),
            SnapshotError::Send(pid, e) => write!(f, "signalling process {pid}: {e}"),
            SnapshotError::TimedOut { pid, looked } => {
                write!(f, "process {pid} wrote no report in time; looked at ")?;
                let names: Vec<String> = looked
                    .iter()
                    .take(4)
                    .map(|p| p.display().to_string())
                    .collect();
                write!(f, "{}", names.join(", "))?;
                if looked.len() > 4 {
                    write!(f, " and {} more", looked.len() - 4)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for SnapshotError {}

/// Runs `cuguard snapshot`.
pub fn run(args: SnapshotArgs) -> Result<u8, CliError> {
    let path = snapshot(&args).map_err(|e| CliError::Snapshot(Box::new(e)))?;
    super::write_stdout(|out| writeln!(out, "{}", path.display()))?;
    Ok(super::exit::OK)
}

/// Asks the process for a report and waits for it; where it was written (also used by `top`).
pub(super) fn snapshot(args: &SnapshotArgs) -> Result<PathBuf, SnapshotError> {
    let pid = args.pid;
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let maps = std::fs::read_to_string(proc_dir.join("maps"))
        .map_err(|e| SnapshotError::NoProcess(pid, e.to_string()))?;
    if !maps.lines().any(|l| l.contains("libcuguard")) {
        return Err(SnapshotError::NoShim(pid));
    }
    let sig = armed_signal(&proc_dir).ok_or(SnapshotError::NotArmed(pid))?;
    if sig <= 0 || !caught(&proc_dir, sig) {
        return Err(SnapshotError::NoSignal(pid));
    }
    let env = environ(&proc_dir);
    let candidates = candidates(pid, &proc_dir, &env, args.report.as_deref());
    let sent_ms = unix_ms();
    // SAFETY: kill with a pid and a signal number has no memory-safety preconditions.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
        return Err(SnapshotError::Send(pid, std::io::Error::last_os_error()));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(args.wait.max(0.1));
    loop {
        for p in &candidates {
            if fresh_report(p, pid, sent_ms) {
                return Ok(p.clone());
            }
        }
        if Instant::now() >= deadline {
            return Err(SnapshotError::TimedOut {
                pid,
                looked: candidates,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The snapshot signal the shim's thread announces: `Some(n)` for `cuguard-s<n>`, `Some(0)` for
/// a plain `cuguard` thread, `None` when there is no such thread.
fn armed_signal(proc_dir: &Path) -> Option<i32> {
    let tasks = std::fs::read_dir(proc_dir.join("task")).ok()?;
    let mut found = None;
    for t in tasks.flatten() {
        let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) else {
            continue;
        };
        let comm = comm.trim();
        if let Some(n) = comm.strip_prefix("cuguard-s") {
            if let Ok(n) = n.parse() {
                return Some(n);
            }
        } else if comm == "cuguard" {
            found = Some(0);
        }
    }
    found
}

/// Whether the process catches `sig` (its `SigCgt` mask).
fn caught(proc_dir: &Path, sig: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(proc_dir.join("status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| (1..=64).contains(&sig) && mask & (1u64 << (sig - 1)) != 0)
}

fn environ(proc_dir: &Path) -> HashMap<String, String> {
    std::fs::read(proc_dir.join("environ"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

/// Where the shim may put the report, most likely first.
fn candidates(
    pid: u32,
    proc_dir: &Path,
    env: &HashMap<String, String>,
    template: Option<&Path>,
) -> Vec<PathBuf> {
    let template = match template {
        Some(t) => t.to_string_lossy().into_owned(),
        None => env
            .get("CUGUARD_REPORT")
            .filter(|t| !t.trim().is_empty())
            .cloned()
            .unwrap_or_else(|| template::DEFAULT_TEMPLATE.into()),
    };
    let exe = std::fs::read_link(proc_dir.join("exe"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let rank = [
        "RANK",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "PMIX_RANK",
        "SLURM_PROCID",
        "MV2_COMM_WORLD_RANK",
    ]
    .iter()
    .find_map(|v| env.get(*v)?.trim().parse::<i64>().ok());
    let cwd = std::fs::read_link(proc_dir.join("cwd")).unwrap_or_else(|_| PathBuf::from("."));
    let start = start_unix_s(proc_dir);
    let starts: Vec<Option<u64>> = if template.contains("%t") {
        match start {
            Some(s) => (s.saturating_sub(1)..=s + 2).map(Some).collect(),
            None => vec![None],
        }
    } else {
        vec![start]
    };
    let mut out = Vec::new();
    for s in starts {
        let placeholders = template::Placeholders {
            pid,
            exe_name: &exe,
            host: &host,
            rank,
            start_unix_s: s.unwrap_or(0),
        };
        let p = PathBuf::from(template::expand(&template, &placeholders));
        let p = if p.is_relative() { cwd.join(p) } else { p };
        let tmp = env
            .get("TMPDIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let name = p.file_name().map(PathBuf::from);
        out.push(p.clone());
        for n in 1..=9 {
            let mut q = p.as_os_str().to_owned();
            q.push(format!(".{n}"));
            out.push(PathBuf::from(q));
        }
        if let Some(name) = name {
            out.push(tmp.join(name));
        }
    }
    out
}

/// The process's start, Unix seconds (from its start time in clock ticks after boot).
fn start_unix_s(proc_dir: &Path) -> Option<u64> {
    let stat = std::fs::read_to_string(proc_dir.join("stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(btime + ticks / hz)
}

/// Whether `path` holds a report of `pid` written after `since_ms`.
fn fresh_report(path: &Path, pid: u32, since_ms: u64) -> bool {
    let Ok(text) = std::fs::read(path) else {
        return false;
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) else {
        return false;
    };
    v["process"]["pid"].as_u64() == Some(pid.into())
        && v["process"]["end_unix_ms"]
            .as_u64()
            .is_some_and(|t| t >= since_ms)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
