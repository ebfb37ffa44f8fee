//! How the report gets where it goes: an atomic write that never overwrites another process's
//! report. (The path template is the report crate's, `cuguard_report::template`.)
//!
//! The document is written to a temporary file created with `O_EXCL | O_NOFOLLOW`, mode 0600,
//! beside the destination, then renamed into place with `RENAME_NOREPLACE`. If the destination
//! exists (another process, or an earlier run with the same pid), `NAME.1.json`, `NAME.2.json`, …
//! are tried (a name not ending in `.json` gets `.1`, `.2`, … at its end). If the directory
//! cannot be written, the report goes to `$TMPDIR` (or /tmp) instead and says so.
//!
//! A process that writes more than one report (checkpoints, snapshots on request, then the final
//! report) replaces its own previous one: [`write_report`] remembers the file it last made (path,
//! device and inode) and renames the next one over it only while that path still holds that
//! very file. Anything else at the path is another process's report and is never replaced. A
//! forked child forgets the parent's file ([`forget_own_after_fork`]).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};

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
pub fn dev_ino(path: &CString) -> Option<(u64, u64)> {
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
    if let Some(own) = own() {
        if still_own(own) {
            if let Ok(()) = replace_own(own, contents) {
                let p = own.path.clone();
                set_own(&p);
                return Ok(Written {
                    path: p,
                    fallback_reason: None,
                });
            }
        }
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

/// `NAME.json` as `NAME.N.json`, so that it still reads as a report (`*.json`); another name gets
/// `.N` at its end.
fn numbered(name: &std::ffi::OsStr, n: u32) -> std::ffi::OsString {
    let bytes = name.as_bytes();
    match bytes.strip_suffix(b".json") {
        Some(stem) if !stem.is_empty() => {
            let mut out = std::ffi::OsString::from(std::ffi::OsStr::from_bytes(stem));
            out.push(format!(".{n}.json"));
            out
        }
        _ => {
            let mut out = name.to_os_string();
            out.push(format!(".{n}"));
            out
        }
    }
}

fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("report path has no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        crate::process::clock::monotonic_ns() % 1_000_000
    ));
    Ok(dir.join(tmp_name))
}

fn write_fresh(path: &Path, contents: &[u8]) -> io::Result<Written> {
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
            let p = write_atomic(&fallback, contents)?;
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
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        }
    }
    let _ = std::fs::remove_file(&tmp);
    Err(io::Error::other(
        "1000 reports with this name already exist",
    ))
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

/// The report file's mode: 0600 unless `CUGUARD_REPORT_MODE` (octal) says otherwise.
pub fn report_mode() -> libc::c_uint {
    std::env::var("CUGUARD_REPORT_MODE")
        .ok()
        .and_then(|m| u32::from_str_radix(m.trim(), 8).ok())
        .filter(|m| *m <= 0o777)
        .unwrap_or(0o600)
}

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

    #[test]
    fn never_overwrites_and_falls_back_to_suffixes() {
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
        // Someone else's file where our last one was: never replaced.
        std::fs::remove_file(&b.path).unwrap();
        std::fs::write(&b.path, b"other").unwrap();
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
}
