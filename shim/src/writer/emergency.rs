//! The report of last resort: written from a signal handler when the full report cannot be
//! (the cuguard thread is not running, did not finish in time, or failed).
//!
//! It is the smallest document the schema accepts, marked `complete: false` with `cut_short`
//! saying why: the process's identity, the signal, and empty lists. Everything that needs memory
//! or the driver is prepared beforehand by [`prepare`] (when tracking is armed): the document is
//! rendered by the report crate ([`SignalTemplate`]) with holes for the signal, the reason and the
//! time. [`write()`] has the crate fill the holes (integers and strings formatted on the stack) and
//! calls `open`, `write`, `close`, `lstat` and `rename`, which are async-signal-safe. It takes no
//! lock and does not allocate.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering};

use cuguard_format::signal::SignalTemplate;
use cuguard_format::wire::UNKNOWN_VERSION;
use cuguard_format::{Driver, Process};

use super::file;
use crate::process::identity as process;

/// What the report says in `faults`.
const FAULT: &str = "the full report could not be written at the signal; this one holds only the process and the signal";

/// Everything [`write()`] needs, made in advance.
pub struct Prepared {
    pid: u32,
    /// Where the final report goes (the template expanded for this process).
    path: CString,
    /// Where it goes if `path` holds another process's report.
    alt_path: CString,
    /// The temporary file.
    tmp: CString,
    mode: libc::c_uint,
    /// The document, with holes for what is known only at the signal.
    template: SignalTemplate,
}

static PREPARED: AtomicPtr<Prepared> = AtomicPtr::new(std::ptr::null_mut());

/// Prepares the emergency report for this process (called when tracking is armed, and again in
/// a forked child when it arms). Allocates; never call it from a signal handler.
pub fn prepare(report_path: &Path) {
    let process = Process {
        pid: process::pid(),
        ppid: process::ppid(),
        exe: process::exe(),
        argv: process::argv(),
        hostname: process::hostname(),
        rank: process::rank().and_then(|r| u32::try_from(r).ok()),
        start_unix_ms: crate::process::clock::start().0,
        end_unix_ms: 0, // filled in at the signal
        labels: None,
    };
    let driver = Driver {
        version: UNKNOWN_VERSION,
        path: crate::driver::driver_if_loaded().map_or_else(String::new, |d| d.path.clone()),
    };
    let run_id = crate::config::get().run_id.as_deref();
    let Some(template) = SignalTemplate::new(&process, run_id, &driver, &[FAULT.to_string()])
    else {
        return;
    };

    let Ok(path) = file::cstr(report_path) else {
        return;
    };
    let mut alt = report_path.as_os_str().to_owned();
    alt.push(format!(".signal.{}", process::pid()));
    let Ok(alt_path) = file::cstr(&PathBuf::from(alt)) else {
        return;
    };
    let dir = report_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = report_path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy();
    let Ok(tmp) = file::cstr(&dir.join(format!(
        ".{}.{:016x}.signal.tmp",
        String::from_utf8_lossy(cuguard_files::shorten(name.as_bytes(), 200)),
        cuguard_files::random()
    ))) else {
        return;
    };
    let fresh = Box::into_raw(Box::new(Prepared {
        pid: process::pid(),
        path,
        alt_path,
        tmp,
        mode: file::report_mode(),
        template,
    }));
    // The previous one (a parent's, before a fork) is leaked: a signal handler may be reading it.
    PREPARED.store(fresh, Ordering::Release);
}

/// Why an emergency report was written (the report's `cut_short`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// No cuguard thread to write the full report.
    NoReporter,
    /// The cuguard thread did not finish in time.
    TimedOut,
    /// The cuguard thread itself failed.
    ReporterFailed,
}

impl Why {
    fn as_str(self) -> &'static str {
        match self {
            Why::NoReporter => "signal: no cuguard thread was running to collect the full report",
            Why::TimedOut => {
                "signal: the full report did not finish in time (a lock or the heap may have been held by the crashing thread)"
            }
            Why::ReporterFailed => {
                "signal: the cuguard thread failed while collecting the full report"
            }
        }
    }
}

/// Writes the emergency report for signal `sig`. Async-signal-safe: no lock, no allocation.
/// Returns whether a report was written.
pub fn write(sig: i32, why: Why) -> bool {
    let p = PREPARED.load(Ordering::Acquire);
    // SAFETY: a non-null pointer is a leaked Box that is never freed.
    let Some(p) = (unsafe { p.as_ref() }) else {
        return false;
    };
    // SAFETY: getpid has no preconditions.
    if p.pid != unsafe { libc::getpid() } as u32 {
        return false; // prepared by the parent of a fork: the path names the parent
    }
    // SAFETY: tmp is NUL-terminated; the flags create a new file and never follow a link.
    let fd = unsafe {
        libc::unlink(p.tmp.as_ptr());
        libc::open(
            p.tmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            p.mode,
        )
    };
    if fd < 0 {
        return false;
    }
    let mut ok = p.template.write(
        &mut |bytes: &[u8]| put(fd, bytes),
        why.as_str(),
        sig.max(0),
        super::occasion::signal_name(sig),
        now_unix_ms(),
    );
    // SAFETY: fd is ours.
    ok &= unsafe { libc::close(fd) } == 0;
    if !ok {
        // SAFETY: tmp names the file we created.
        unsafe { libc::unlink(p.tmp.as_ptr()) };
        return false;
    }
    // Replace this process's own earlier report (a checkpoint) if the path still holds it, or a
    // report of an earlier run; never another process's of this run.
    if let Some(own) = file::own()
        && file::still_own(own)
        // SAFETY: both paths are NUL-terminated.
        && unsafe { libc::rename(p.tmp.as_ptr(), own.cpath.as_ptr()) } == 0
    {
        return true;
    }
    for target in [&p.path, &p.alt_path] {
        // SAFETY: both paths are NUL-terminated; renameat2 only renames.
        let r = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                p.tmp.as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if r == 0 || file::replace_earlier(&p.tmp, target) {
            return true;
        }
    }
    // SAFETY: tmp names the file we created.
    unsafe { libc::unlink(p.tmp.as_ptr()) };
    false
}

/// Forgets what was prepared (in a forked child, until it arms again).
pub fn forget_after_fork() {
    PREPARED.store(std::ptr::null_mut(), Ordering::Release);
}

fn put(fd: libc::c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: fd is open for writing; bytes is a valid buffer.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            // SAFETY: reads errno only.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return false;
        }
        if n == 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

fn now_unix_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-parameter; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}
