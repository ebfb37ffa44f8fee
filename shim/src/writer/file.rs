//! How the report gets where it goes: an atomic write that never overwrites a report of another
//! process of the same run, and replaces one of an earlier run. (The path template is the report
//! crate's, `cuguard_format::template`.)
//!
//! The document is written to a temporary file created with `O_EXCL | O_NOFOLLOW`, mode 0600,
//! beside the destination, then renamed into place with `RENAME_NOREPLACE`. If the destination
//! exists, what is there decides ([`earlier_run`]):
//!
//! - A report of an earlier run is replaced: a cuguard report (its first bytes say so) of this
//!   user, written before this process started, whose `run_id` is not this process's
//!   (`CUGUARD_RUN_ID`, which `cuguard run` gives every process it starts; outside a run, every
//!   report written before this process started is an earlier run's). So the same command run
//!   twice leaves the second run's report at the path. The replacement is an atomic exchange
//!   (`RENAME_EXCHANGE`) followed by a check that what came out is the file judged, and the
//!   removal of it; a file that came in meanwhile is put back.
//! - Anything else stays: a report of another process of this run (`cuguard run` of a program
//!   that starts several processes with one path), one written while this process ran (another
//!   process at the same time), another user's, or a file that is not a process's report. Then
//!   `NAME.1.json`, `NAME.2.json`, … are tried (a name not ending in `.json` gets `.1`, `.2`, …
//!   at its end), each judged the same way.
//!
//! If the directory cannot be written, the report goes to `$TMPDIR` (or /tmp) instead and says
//! so.
//!
//! A process that writes more than one report (checkpoints, snapshots on request, then the final
//! report) replaces its own previous one: [`write_report`] remembers the file it last made (path,
//! device and inode) and renames the next one over it only while that path still holds that
//! very file. Anything else at the path is another process's report and is never replaced. A
//! forked child forgets the parent's file ([`forget_own_after_fork`]).

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};

// The names tried when a report's name is taken: the report crate's, which `cuguard snapshot`
// looks for too.
use cuguard_format::template::{numbered, tagged};

/// Where the report finally went, and what went wrong on the way.
pub struct Written {
    pub path: PathBuf,
    /// Set when the report could not go where it was asked to.
    pub fallback_reason: Option<String>,
}

/// The report file this process made last: replaced by its next report.
pub struct Own {
    pub pid: u32,
    pub path: PathBuf,
    /// `path` as a C string, for the signal-time writer (which must not allocate).
    pub cpath: CString,
    pub dev: u64,
    pub ino: u64,
}

/// The report file this process made last, or null. Only the report writer (one at a time, see
/// [`crate::lifecycle`]) swaps it; the signal-time writer only reads it.
static OWN: AtomicPtr<Own> = AtomicPtr::new(std::ptr::null_mut());

/// The report file this process made last, if it is still this process's.
pub fn own() -> Option<&'static Own> {
    let p = OWN.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked Box that is never freed (see `set_own`).
    let own = unsafe { p.as_ref() }?;
    // SAFETY: getpid has no preconditions (and is async-signal-safe).
    (own.pid == unsafe { libc::getpid() } as u32).then_some(own)
}

fn set_own(path: &Path) {
    let Ok(cpath) = cstr(path) else { return };
    let Some((dev, ino)) = dev_ino(&cpath) else {
        return;
    };
    let fresh = Box::into_raw(Box::new(Own {
        pid: std::process::id(),
        path: path.to_path_buf(),
        cpath,
        dev,
        ino,
    }));
    // The previous record is leaked, not freed: the signal-time writer may be reading it. One
    // small record per report written.
    OWN.store(fresh, Ordering::Release);
}

/// In a forked child: the parent's report is not the child's to replace.
pub fn forget_own_after_fork() {
    OWN.store(std::ptr::null_mut(), Ordering::Release);
}

/// The device and inode of the file at `path` (not following a link). Async-signal-safe.
pub fn dev_ino(path: &CStr) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: path is NUL-terminated; st is writable.
    let r = unsafe { libc::lstat(path.as_ptr(), &mut st) };
    (r == 0).then_some((st.st_dev, st.st_ino))
}

/// Whether `own` still names the file this process made.
pub fn still_own(own: &Own) -> bool {
    dev_ino(&own.cpath) == Some((own.dev, own.ino))
}

/// Writes `contents` to `path` (or a fallback place) atomically, replacing this process's own
/// previous report if it has one, and never another process's.
pub fn write_report(path: &Path, contents: &[u8]) -> io::Result<Written> {
    if let Some(own) = own()
        && still_own(own)
        && let Ok(()) = replace_own(own, contents)
    {
        let p = own.path.clone();
        set_own(&p);
        return Ok(Written {
            path: p,
            fallback_reason: None,
        });
    }
    let written = write_fresh(path, contents)?;
    set_own(&written.path);
    Ok(written)
}

/// Writes a temporary file beside `own` and renames it over `own`.
fn replace_own(own: &Own, contents: &[u8]) -> io::Result<()> {
    let tmp = temp_path(&own.path)?;
    write_new(&tmp, contents)?;
    // Re-check just before the rename: the window left is the rename itself.
    if !still_own(own) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io::Error::other("the previous report is no longer ours"));
    }
    std::fs::rename(&tmp, &own.path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// A fresh temporary name beside `path`, unpredictable and short enough
/// ([`cuguard_files::temp_path`]).
fn temp_path(path: &Path) -> io::Result<PathBuf> {
    cuguard_files::temp_path(path, cuguard_files::random())
}

fn write_fresh(path: &Path, contents: &[u8]) -> io::Result<Written> {
    // Temporaries of a writer killed before its rename (an hour or more old) are this user's to
    // clear.
    cuguard_files::clean_stale_temps(path, std::time::Duration::from_secs(3600));
    match write_atomic(path, contents) {
        Ok(p) => Ok(Written {
            path: p,
            fallback_reason: None,
        }),
        Err(first) => {
            let dir = std::env::var_os("TMPDIR")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/tmp"));
            let name = path
                .file_name()
                .map(PathBuf::from)
                .unwrap_or_else(|| "cuguard.json".into());
            let fallback = dir.join(name);
            let p = write_atomic(&fallback, contents).map_err(|second| {
                io::Error::new(
                    second.kind(),
                    format!(
                        "{} ({first}), nor {} ({second})",
                        path.display(),
                        fallback.display()
                    ),
                )
            })?;
            Ok(Written {
                path: p,
                fallback_reason: Some(format!("could not write {} ({first})", path.display())),
            })
        }
    }
}

fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<PathBuf> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("report path has no file name"))?;
    let tmp = temp_path(path)?;
    write_new(&tmp, contents)?;
    for attempt in 0..1000u32 {
        let target = if attempt == 0 {
            path.to_path_buf()
        } else {
            dir.join(numbered(name, attempt))
        };
        match rename_noreplace(&tmp, &target) {
            Ok(()) => return Ok(target),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if let (Ok(t), Ok(d)) = (cstr(&tmp), cstr(&target))
                    && replace_earlier(&t, &d)
                {
                    return Ok(target);
                }
                continue;
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        }
    }
    // A thousand names taken (by reports, or by someone filling the directory): a name no one
    // can have guessed, rather than no report.
    let target = dir.join(tagged(name, &format!("{:016x}", cuguard_files::random())));
    rename_noreplace(&tmp, &target)
        .map(|()| target)
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

/// How much of a file is read to judge it: the header of a report (schema, tool, reason, the
/// process's report number and run) fits well within it.
const HEADER: usize = 2048;
/// How a process's report begins (compact JSON, as the report crate writes it).
const REPORT_START: &[u8] = b"{\"schema\":\"cuguard-report\",";

/// Whether the file at `path` is a report of an earlier run, which this process's report may
/// replace (see the module documentation); its device and inode when it is. Async-signal-safe:
/// `open`, `fstat`, `read` and `close`, a buffer on the stack, the settings and the start time
/// already read.
pub fn earlier_run(path: &CStr) -> Option<(u64, u64)> {
    // SAFETY: path is NUL-terminated; the flags open for reading only and never follow a link
    // (a FIFO does not block).
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; HEADER];
    let judged = judge_open(fd, &mut buf);
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    judged
}

fn judge_open(fd: libc::c_int, buf: &mut [u8; HEADER]) -> Option<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; st is writable.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != unsafe { libc::geteuid() } {
        return None;
    }
    let written_ns = i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec);
    if written_ns >= i128::from(crate::process::clock::start_ns().0) {
        return None;
    }
    let mut n = 0;
    while n < buf.len() {
        // SAFETY: fd is open for reading; the rest of buf is writable.
        let r = unsafe { libc::read(fd, buf[n..].as_mut_ptr().cast(), buf.len() - n) };
        if r < 0 {
            // SAFETY: reads errno only.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return None;
        }
        if r == 0 {
            break;
        }
        n += r as usize;
    }
    let mine = crate::config::get().run_id.as_deref().map(str::as_bytes);
    earlier_report(&buf[..n], mine).then_some((st.st_dev, st.st_ino))
}

/// Whether a file beginning with `head` is a process's report that is not of the run `mine`.
fn earlier_report(head: &[u8], mine: Option<&[u8]>) -> bool {
    if !head.starts_with(REPORT_START) || find(head, b"\"merged\":{").is_some() {
        return false;
    }
    match (mine, run_id_in(head)) {
        (Some(m), Some(theirs)) => m != theirs,
        _ => true,
    }
}

/// The `run_id` in a report's first bytes (its value never needs escaping).
fn run_id_in(head: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = b"\"run_id\":\"";
    let at = find(head, KEY)? + KEY.len();
    let len = head[at..].iter().position(|&b| b == b'"')?;
    Some(&head[at..at + len])
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Puts the report at `tmp` in place of a report of an earlier run at `target`
/// ([`earlier_run`]); whether it did. Async-signal-safe.
///
/// Atomic where the filesystem can exchange two names: the exchange, then a check that what
/// came out is the file judged (or another earlier run's), removed; a file that came in
/// between the judgment and the exchange (a report of this run) is exchanged back. Without the
/// exchange, the file is judged again just before a plain rename over it.
pub fn replace_earlier(tmp: &CStr, target: &CStr) -> bool {
    let Some(judged) = earlier_run(target) else {
        return false;
    };
    match rename_exchange(tmp, target) {
        Ok(()) => {
            if dev_ino(tmp) == Some(judged) || earlier_run(tmp).is_some() {
                // SAFETY: tmp now names the earlier report that was at target.
                unsafe { libc::unlink(tmp.as_ptr()) };
                return true;
            }
            // Not the file judged: put it back, and keep ours at tmp.
            let _ = rename_exchange(tmp, target);
            false
        }
        Err(libc::EINVAL | libc::ENOSYS | libc::ENOTSUP) => {
            // SAFETY: both paths are NUL-terminated; rename only renames.
            dev_ino(target) == Some(judged)
                && unsafe { libc::rename(tmp.as_ptr(), target.as_ptr()) } == 0
        }
        Err(_) => false,
    }
}

/// `renameat2(a, b, RENAME_EXCHANGE)`; the errno on failure. Async-signal-safe.
fn rename_exchange(a: &CStr, b: &CStr) -> Result<(), i32> {
    // SAFETY: both paths are NUL-terminated; renameat2 only renames.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        // SAFETY: reads errno only.
        Err(unsafe { *libc::__errno_location() })
    }
}

pub fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("path contains NUL"))
}

fn write_new(path: &Path, contents: &[u8]) -> io::Result<()> {
    let c = cstr(path)?;
    let mode = report_mode();
    // SAFETY: c is NUL-terminated; the flags create a new file and never follow a link.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut rest = contents;
    while !rest.is_empty() {
        // SAFETY: fd is open for writing; rest is a valid buffer.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // SAFETY: fd is ours to close; c names the file we created.
            unsafe {
                libc::close(fd);
                libc::unlink(c.as_ptr());
            }
            return Err(e);
        }
        rest = &rest[n as usize..];
    }
    // SAFETY: fd is ours.
    if unsafe { libc::close(fd) } != 0 {
        let e = io::Error::last_os_error();
        // SAFETY: c names the file we created.
        unsafe { libc::unlink(c.as_ptr()) };
        return Err(e);
    }
    Ok(())
}

/// The report file's mode: 0600 unless `CUGUARD_REPORT_MODE` (octal) says otherwise (a bad
/// value is said once, with the other settings).
pub fn report_mode() -> libc::c_uint {
    crate::config::get().report_mode
}

/// Renames `from` to `to` unless something is already at `to` (`EEXIST` then): `renameat2`'s
/// `RENAME_NOREPLACE`, or where the file system lacks it, a hard link and an unlink.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let (f, t) = (cstr(from)?, cstr(to)?);
    // SAFETY: both paths are NUL-terminated; renameat2 only renames.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // Filesystems without RENAME_NOREPLACE: link() also refuses an existing target.
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            // SAFETY: as above.
            if unsafe { libc::link(f.as_ptr(), t.as_ptr()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: as above.
            unsafe { libc::unlink(f.as_ptr()) };
            Ok(())
        }
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests that write reports share this process's record of its own file.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn never_overwrites_and_falls_back_to_suffixes() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("cuguard-file-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("r.json");
        // Another process's report at the path: kept; ours goes beside it.
        std::fs::write(&p, b"theirs").unwrap();
        let a = write_report(&p, b"one").unwrap();
        assert_eq!(a.path, dir.join("r.1.json"));
        assert_eq!(std::fs::read(&p).unwrap(), b"theirs");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&a.path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // This process's next report replaces its own previous one, not the other's.
        let b = write_report(&p, b"two").unwrap();
        assert_eq!(b.path, dir.join("r.1.json"));
        assert_eq!(std::fs::read(&b.path).unwrap(), b"two");
        assert_eq!(std::fs::read(&p).unwrap(), b"theirs");
        // Someone else's file where our last one was: never replaced. (Made beside it and renamed
        // over it, so that it is another file: removing ours first would let the file system
        // give the new one our inode number, as tmpfs and ext4 do.)
        let theirs = dir.join("other.tmp");
        std::fs::write(&theirs, b"other").unwrap();
        std::fs::rename(&theirs, &b.path).unwrap();
        let c = write_report(&p, b"three").unwrap();
        assert_eq!(c.path, dir.join("r.2.json"));
        assert_eq!(std::fs::read(dir.join("r.1.json")).unwrap(), b"other");
        // A forked child forgets the parent's file.
        forget_own_after_fork();
        let d = write_report(&p, b"four").unwrap();
        assert_eq!(d.path, dir.join("r.3.json"));
        assert_eq!(std::fs::read(&c.path).unwrap(), b"three");
        forget_own_after_fork();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A report as the shim begins one, of the run `run`.
    fn head(run: Option<&str>) -> Vec<u8> {
        let run = run.map_or(String::new(), |r| format!(",\"run_id\":\"{r}\""));
        format!(
            "{{\"schema\":\"cuguard-report\",\"schema_version\":1,\"tool\":{{\"name\":\"cuguard\",\
             \"version\":\"0.1.0\"}},\"complete\":true,\"reason\":\"exit\",\"cut_short\":null,\
             \"signal\":null,\"report_number\":1{run},\"process\":{{\"pid\":7}}}}\n"
        )
        .into_bytes()
    }

    #[test]
    fn a_report_of_another_run_is_earlier() {
        assert_eq!(run_id_in(&head(Some("a-1"))), Some(&b"a-1"[..]));
        assert_eq!(run_id_in(&head(None)), None);
        // Outside a run, every report is another run's; inside one, all but the run's own.
        assert!(earlier_report(&head(None), None));
        assert!(earlier_report(&head(Some("a-1")), None));
        assert!(earlier_report(&head(None), Some(b"a-1")));
        assert!(earlier_report(&head(Some("a-2")), Some(b"a-1")));
        assert!(!earlier_report(&head(Some("a-1")), Some(b"a-1")));
        // Not a process's report: kept whatever it says.
        assert!(!earlier_report(b"theirs", None));
        assert!(!earlier_report(b"", None));
        let merged = b"{\"schema\":\"cuguard-report\",\"schema_version\":1,\"tool\":{},\
                       \"merged\":{\"created_unix_ms\":1,\"inputs\":[]},\"processes\":[]}";
        assert!(!earlier_report(merged, None));
        // The key inside a string is escaped, so never taken for the field.
        let mut quoted = head(Some("a-1"));
        let at = find(&quoted, b"\"cut_short\":null").unwrap();
        quoted.splice(
            at..at + b"\"cut_short\":null".len(),
            b"\"cut_short\":\"\\\"run_id\\\":\\\"a-9\"".iter().copied(),
        );
        assert_eq!(run_id_in(&quoted), Some(&b"a-1"[..]));
    }

    #[test]
    fn a_report_written_before_this_process_started_is_replaced() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("cuguard-file-earlier-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("r.json");
        crate::process::clock::start_ns();
        // A report written an hour before this process started: an earlier run's.
        std::fs::write(&p, head(None)).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let a = write_report(&p, b"mine").unwrap();
        assert_eq!(a.path, p);
        assert_eq!(std::fs::read(&p).unwrap(), b"mine");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["r.json"]);
        // A report written while this process runs (another process's, now): kept.
        forget_own_after_fork();
        std::fs::write(&p, head(None)).unwrap();
        let b = write_report(&p, b"again").unwrap();
        assert_eq!(b.path, dir.join("r.1.json"));
        assert_eq!(std::fs::read(&p).unwrap(), head(None));
        forget_own_after_fork();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
