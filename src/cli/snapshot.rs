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
//! # Where it looks
//!
//! Where the shim writes (`CUGUARD_REPORT` from the process's environment, expanded by the
//! shim's own expander, `cuguard_format::template`, relative to its working directory; in a
//! directory it names, by the default name): the path itself, then, while each name is taken, the names the shim tries when it is
//! ([`template::numbered`]: `NAME.1.json`, `NAME.2.json`, … up to `NAME.999.json`; past those, a
//! `NAME.<16 hex digits>.json` it finds in the directory, [`template::tagged`]); the same in
//! `$TMPDIR` of the process (or /tmp), where the shim writes when the directory cannot be
//! written. The snapshot replaces the process's earlier snapshot or checkpoint wherever that went.
//!
//! # What it reads
//!
//! The path and the environment are the process's: whoever runs it chose them, and may not be
//! the user running this command (root, a monitoring job). So only a report the shim wrote for
//! this request is read:
//! - the name is opened with `O_PATH | O_NOFOLLOW` (nothing is opened through it yet: a device's
//!   driver never sees an open), and what it names is judged with `fstat`: a symbolic link is not
//!   followed; a FIFO, a socket, a device or a directory is not read;
//! - the file must be owned by the process's user (its effective or file-system uid, from
//!   `/proc/PID/status`: the owner of what its shim writes), and changed after the request was
//!   sent (its mtime, less [`MTIME_SLACK`] for file systems with coarse timestamps);
//! - at most `--max-size` bytes (default [`DEFAULT_MAX_SIZE`], 2 GiB): the shim writes a report
//!   whole from memory, and real reports are megabytes to a few hundred; the bound caps the work
//!   a file chosen by someone else can cost. Only that file is then opened for reading (through
//!   `/proc/self/fd`, the inode judged, not the name again) and read as a stream: the memory
//!   held is a buffer, whatever the file's size;
//! - it must be a cuguard report of this process (its `process.pid`) ended at or after the
//!   request (`process.end_unix_ms`);
//! - everything, reading included, ends at the `--wait` deadline.
//!
//! A file refused is said (why) in the one line that says no report came in time.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use cuguard_format::template;

use super::error::{CliError, SnapshotError};

/// The largest report read by default: 2 GiB (see the module documentation).
pub const DEFAULT_MAX_SIZE: u64 = 2 << 30;

/// How much earlier than the request a report's mtime may read: file systems keep coarse
/// timestamps (FAT's are 2 s); the report's own end time then decides.
pub const MTIME_SLACK: Duration = Duration::from_secs(2);

/// How many numbered names the shim tries (`NAME.1.json` … `NAME.999.json`).
const NUMBERED: u32 = 1000;

/// Arguments of `cuguard snapshot`.
#[derive(Debug, Args)]
#[command(after_help = "\
The process must run under the shim (cuguard run, or LD_PRELOAD=libcuguard.so) and have made \
at least one CUDA allocation. Prints the report's path. Only a regular file of the process's \
user, written for this request, is read; links are not followed.

Example:
  cuguard snapshot 12345 && cuguard summary cuguard.python3.12345.json")]
pub struct SnapshotArgs {
    /// The process.
    pub pid: u32,
    /// How long to wait for the report, in seconds (reading it included).
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub wait: f64,
    /// Where the report is expected, when it cannot be worked out from the process's
    /// environment (a report template, as CUGUARD_REPORT).
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
    /// The largest report read (512MiB, 4GiB, …) [default: 2GiB].
    #[arg(long, value_name = "SIZE", value_parser = super::check::parse_bytes,
          default_value_t = DEFAULT_MAX_SIZE, hide_default_value = true)]
    pub max_size: u64,
}

/// Runs `cuguard snapshot`.
pub fn run(args: SnapshotArgs) -> Result<u8, CliError> {
    let path = snapshot(&args).map_err(|e| CliError::Snapshot(Box::new(e)))?;
    super::common::write_stdout(|out| writeln!(out, "{}", path.display()))?;
    Ok(super::exit::OK)
}

/// Asks the process for a report and waits for it; where it was written (also used by `top`).
pub(super) fn snapshot(args: &SnapshotArgs) -> Result<PathBuf, SnapshotError> {
    let pid = args.pid;
    let deadline = Instant::now() + Duration::from_secs_f64(args.wait.clamp(0.1, 1e9));
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let maps = std::fs::read_to_string(proc_dir.join("maps"))
        .map_err(|e| SnapshotError::NoProcess(pid, e.to_string()))?;
    if !maps.lines().any(|l| l.contains("libcuguard")) {
        return Err(SnapshotError::NoShim(pid));
    }
    let sig = armed_signal(&proc_dir).ok_or(SnapshotError::NotArmed(pid))?;
    let status = std::fs::read_to_string(proc_dir.join("status"))
        .map_err(|e| SnapshotError::NoProcess(pid, e.to_string()))?;
    if sig <= 0 || !caught(&status, sig) {
        return Err(SnapshotError::NoSignal(pid));
    }
    let owners = writer_uids(&status)
        .ok_or_else(|| SnapshotError::NoProcess(pid, "its user cannot be read".into()))?;
    let env = environ(&proc_dir);
    let places = places(pid, &proc_dir, &env, args.report.as_deref());
    let sent_ms = unix_ms();
    let mut looker = Looker {
        pid,
        owners,
        sent_ms,
        max_size: args.max_size,
        deadline,
        judged: HashMap::new(),
    };
    // SAFETY: kill with a pid and a signal number has no memory-safety preconditions.
    if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
        return Err(SnapshotError::Send(pid, std::io::Error::last_os_error()));
    }
    loop {
        let mut looked = Vec::new();
        for place in &places {
            if let Some(found) = looker.look(place, &mut looked) {
                return Ok(found);
            }
        }
        if Instant::now() >= deadline {
            return Err(SnapshotError::TimedOut { pid, looked });
        }
        std::thread::sleep(
            Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now())),
        );
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

/// Whether the process catches `sig` (its `SigCgt` mask, from `/proc/PID/status`).
fn caught(status: &str, sig: i32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| (1..=64).contains(&sig) && mask & (1u64 << (sig - 1)) != 0)
}

/// The uids a file the process writes can belong to: its effective and file-system uids (the
/// `Uid:` line of `/proc/PID/status`: real, effective, saved, file system).
fn writer_uids(status: &str) -> Option<[u32; 2]> {
    let ids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    (ids.len() == 4).then(|| [ids[1], ids[3]])
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

/// Where the shim may put the report: each path the template expands to (several when it holds
/// `%t`), then the same name in the process's `$TMPDIR`; most likely first, each once.
fn places(
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
    let tmp = env
        .get("TMPDIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let mut out: Vec<PathBuf> = Vec::new();
    let mut add = |p: PathBuf| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
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
        // A directory (`CUGUARD_REPORT=out/`, `.`): the shim writes into it, by the default name.
        let p = template::into_directory(&template, p, &placeholders);
        let name = p.file_name().map(OsStr::to_os_string);
        add(p);
        if let Some(name) = name {
            add(tmp.join(name));
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

/// What a name turned out to hold.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Judged {
    /// Nothing is there.
    Missing,
    /// The report written for this request.
    Report,
    /// Something that is not it (yet): an earlier file, another process's report.
    Other,
    /// Something not to read, and why.
    Refused(String),
}

/// Looks at the places the report may be, remembering what it judged of each file (by device,
/// inode, size and mtime) so that a file is read at most once.
struct Looker {
    pid: u32,
    owners: [u32; 2],
    sent_ms: u64,
    max_size: u64,
    deadline: Instant,
    judged: HashMap<(u64, u64, u64, i64, i64), Judged>,
}

impl Looker {
    /// Looks at `base` and the names the shim tries after it; the report's path if one of them
    /// is it. Adds the base path and each refused file to `looked`.
    fn look(
        &mut self,
        base: &Path,
        looked: &mut Vec<(PathBuf, Option<String>)>,
    ) -> Option<PathBuf> {
        let dir = base.parent().unwrap_or(Path::new("/"));
        let name = base.file_name()?.to_os_string();
        for n in 0..NUMBERED {
            let path = if n == 0 {
                base.to_path_buf()
            } else {
                dir.join(template::numbered(&name, n))
            };
            let judged = self.judge(&path);
            match &judged {
                Judged::Report => return Some(path),
                Judged::Refused(why) => looked.push((path, Some(why.clone()))),
                _ if n == 0 => looked.push((path, None)),
                _ => {}
            }
            if judged == Judged::Missing {
                return None;
            }
        }
        // Every numbered name is taken: the shim used a random tag.
        let entries = std::fs::read_dir(dir).ok()?;
        for e in entries.flatten() {
            if Instant::now() >= self.deadline {
                return None;
            }
            if is_tagged(&e.file_name(), &name) && self.judge(&e.path()) == Judged::Report {
                return Some(e.path());
            }
        }
        None
    }

    /// What `path` holds (see the module documentation for the rules).
    fn judge(&mut self, path: &Path) -> Judged {
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return Judged::Missing;
        };
        // SAFETY: c is NUL-terminated. O_PATH opens nothing for reading: no driver's open runs,
        // no FIFO is waited on; with O_NOFOLLOW a link is opened as itself.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Judged::Missing,
                _ => Judged::Refused(format!("cannot be opened: {e}")),
            };
        }
        // SAFETY: fd was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an all-zero stat is a valid out-parameter; fd is open.
        let st = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
                return Judged::Refused(format!("cannot be read: {}", io::Error::last_os_error()));
            }
            st
        };
        let kind = st.st_mode & libc::S_IFMT;
        if kind != libc::S_IFREG {
            return Judged::Refused(match kind {
                libc::S_IFLNK => "a symbolic link: not followed".into(),
                libc::S_IFIFO => "not a regular file: a FIFO".into(),
                libc::S_IFCHR | libc::S_IFBLK => "not a regular file: a device".into(),
                libc::S_IFSOCK => "not a regular file: a socket".into(),
                libc::S_IFDIR => "not a regular file: a directory".into(),
                _ => "not a regular file".into(),
            });
        }
        if !self.owners.contains(&st.st_uid) {
            return Judged::Refused(format!(
                "owned by uid {}, not by the process's user (uid {}): not read",
                st.st_uid, self.owners[0]
            ));
        }
        let mtime_ms = i128::from(st.st_mtime) * 1000 + i128::from(st.st_mtime_nsec) / 1_000_000;
        if mtime_ms + (MTIME_SLACK.as_millis() as i128) < i128::from(self.sent_ms) {
            return Judged::Other;
        }
        let size = st.st_size.max(0) as u64;
        if size > self.max_size {
            return Judged::Refused(format!(
                "{size} bytes, more than --max-size {}: not read",
                self.max_size
            ));
        }
        let key = (st.st_dev, st.st_ino, size, st.st_mtime, st.st_mtime_nsec);
        if let Some(j) = self.judged.get(&key) {
            return j.clone();
        }
        let judged = match self.read(&fd) {
            Ok(head) => {
                if head.schema != cuguard_format::SCHEMA_NAME {
                    Judged::Refused("not a cuguard report".into())
                } else if head.process.pid == u64::from(self.pid)
                    && head.process.end_unix_ms >= self.sent_ms
                {
                    Judged::Report
                } else {
                    Judged::Other
                }
            }
            // The deadline passed while reading: judged again at the next look, if any.
            Err(Unread::Late) => return Judged::Other,
            Err(Unread::Refused(why)) => Judged::Refused(why),
        };
        self.judged.insert(key, judged.clone());
        judged
    }

    /// Reads the file `fd` names as a stream, within `--max-size` and the deadline: what the
    /// report says of itself.
    fn read(&self, fd: &OwnedFd) -> Result<Head, Unread> {
        // The inode judged, opened for reading (the name could have changed since).
        let at = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&at)
            .map_err(|e| Unread::Refused(format!("cannot be opened: {e}")))?;
        let reader = Bounded {
            file,
            left: self.max_size,
            deadline: self.deadline,
        };
        serde_json::from_reader(io::BufReader::with_capacity(1 << 16, reader)).map_err(|e| match e
            .io_error_kind()
        {
            Some(io::ErrorKind::TimedOut) => Unread::Late,
            Some(_) => Unread::Refused(format!("cannot be read: {e}")),
            None => Unread::Refused("not a cuguard report".into()),
        })
    }
}

/// Why a file was not read to its end.
enum Unread {
    /// The deadline passed.
    Late,
    /// It is not to be read, and why.
    Refused(String),
}

/// What a report says of itself, read as a stream: every other field is skipped unread.
#[derive(serde::Deserialize)]
struct Head {
    schema: String,
    process: HeadProcess,
}

#[derive(serde::Deserialize)]
struct HeadProcess {
    pid: u64,
    end_unix_ms: u64,
}

/// A file read up to `left` bytes and until `deadline`.
struct Bounded {
    file: File,
    left: u64,
    deadline: Instant,
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if Instant::now() >= self.deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the wait is over"));
        }
        if self.left == 0 {
            return Err(io::Error::other("it grew past --max-size"));
        }
        let room = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..room])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Whether `name` is [`template::tagged`]'s name for `base` with a random tag (16 hexadecimal
/// digits), as the shim names a report when every numbered name is taken.
fn is_tagged(name: &OsStr, base: &OsStr) -> bool {
    const MARK: &str = "################";
    let model = template::tagged(base, MARK);
    let model = model.as_bytes();
    let Some(at) = model.windows(MARK.len()).position(|w| w == MARK.as_bytes()) else {
        return false;
    };
    let name = name.as_bytes();
    name.len() == model.len()
        && name[..at] == model[..at]
        && name[at + MARK.len()..] == model[at + MARK.len()..]
        && name[at..at + MARK.len()].iter().all(u8::is_ascii_hexdigit)
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_user_is_its_effective_and_file_system_uid() {
        let status = "Name:\tx\nUid:\t1000\t1001\t1002\t1003\nGid:\t1\t1\t1\t1\n";
        assert_eq!(writer_uids(status), Some([1001, 1003]));
        assert_eq!(writer_uids("Uid:\t1\t2\n"), None);
        assert!(caught("SigCgt:\t0000000000000002\n", 2));
        assert!(!caught("SigCgt:\t0000000000000002\n", 1));
    }

    #[test]
    fn randomly_tagged_names_are_recognised() {
        let base = OsStr::new("r.json");
        assert!(is_tagged(OsStr::new("r.0123456789abcdef.json"), base));
        assert!(!is_tagged(OsStr::new("r.0123456789abcdeg.json"), base));
        assert!(!is_tagged(OsStr::new("r.1.json"), base));
        assert!(!is_tagged(OsStr::new("s.0123456789abcdef.json"), base));
        assert!(is_tagged(
            OsStr::new("out.0123456789abcdef"),
            OsStr::new("out")
        ));
    }

    fn looker(max_size: u64) -> Looker {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        Looker {
            pid: 42,
            owners: [me, me],
            sent_ms: unix_ms() - 10_000,
            max_size,
            deadline: Instant::now() + Duration::from_secs(5),
            judged: HashMap::new(),
        }
    }

    #[test]
    fn only_a_report_of_the_process_written_after_the_request_is_taken() {
        let d = std::env::temp_dir().join(format!("cuguard-snapshot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let report = |pid: u64, end: u64| {
            format!(
                r#"{{"schema":"cuguard-report","schema_version":1,"process":{{"pid":{pid},"end_unix_ms":{end},"x":"{}"}},"leaks":[]}}"#,
                "y".repeat(100)
            )
        };
        let now = unix_ms();
        std::fs::write(d.join("r.json"), "not json").unwrap();
        std::fs::write(d.join("r.1.json"), report(7, now)).unwrap();
        std::fs::write(d.join("r.2.json"), report(42, now)).unwrap();
        let mut l = looker(1 << 20);
        let mut looked = Vec::new();
        assert_eq!(
            l.look(&d.join("r.json"), &mut looked),
            Some(d.join("r.2.json"))
        );
        assert_eq!(
            looked,
            [(d.join("r.json"), Some("not a cuguard report".to_string()))]
        );
        // Too big for --max-size: refused, not read.
        let mut small = looker(64);
        assert_eq!(
            small.judge(&d.join("r.2.json")),
            Judged::Refused(format!(
                "{} bytes, more than --max-size 64: not read",
                report(42, now).len()
            ))
        );
        // Written before the request: not it.
        let mut old = Looker {
            sent_ms: now + 60_000,
            ..looker(1 << 20)
        };
        assert_eq!(old.judge(&d.join("r.2.json")), Judged::Other);
        // The deadline passed: nothing is read.
        let mut late = Looker {
            deadline: Instant::now(),
            ..looker(1 << 20)
        };
        assert_eq!(late.judge(&d.join("r.2.json")), Judged::Other);
        // A link, a directory: refused by kind.
        std::os::unix::fs::symlink(d.join("r.2.json"), d.join("link.json")).unwrap();
        assert_eq!(
            l.judge(&d.join("link.json")),
            Judged::Refused("a symbolic link: not followed".into())
        );
        assert_eq!(
            l.judge(&d),
            Judged::Refused("not a regular file: a directory".into())
        );
        assert_eq!(
            l.judge(Path::new("/dev/null")),
            Judged::Refused("not a regular file: a device".into())
        );
        assert_eq!(l.judge(&d.join("none.json")), Judged::Missing);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
