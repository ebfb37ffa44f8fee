//! The cuguard thread: writes checkpoints (`CUGUARD_CHECKPOINT_SECS`), snapshots on request
//! (`cuguard snapshot PID`), a checkpoint when an allocation is refused for lack of memory (at
//! most one a second), and the report for signals, all in ordinary context (the thread
//! that received a signal waits for it in the handler; see [`super::signals`]); and keeps the
//! stats page ([`super::page`]), the timeline and the `CUGUARD_WARN_AT` checks up to date.
//!
//! It starts when the process first allocates (never at load), with every signal blocked, and
//! sleeps in `poll` on an eventfd. Signal handlers wake it by writing to that eventfd (which is
//! async-signal-safe) after setting a request flag. It stays inside the shim's guard for its
//! whole life, so nothing it does is tracked. Reports are written under short per-structure
//! locks (the tracker's snapshots) and the JSON is built outside them, so allocations on other
//! threads are never stalled for longer than one copy of one shard.
//!
//! Its name tells `cuguard snapshot` that the process is armed and which signal asks for a
//! snapshot: `cuguard-s<N>` when the shim's handler owns signal N, `cuguard` when snapshots are
//! off (the program uses that signal, or `CUGUARD_SNAPSHOT_SIGNAL=off`).
//!
//! Fork: the thread does not exist in a child; the child's [`after_fork_child`] closes the
//! inherited eventfd (shared with the parent) and the child starts its own thread when it first
//! allocates.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::reporter_thread;
use crate::writer::{Occasion, Reason};

static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
static RUNNING: AtomicBool = AtomicBool::new(false);
static SNAPSHOTS_OFF: AtomicBool = AtomicBool::new(false);

static REQ_SNAPSHOT: AtomicBool = AtomicBool::new(false);
static REQ_OOM: AtomicBool = AtomicBool::new(false);
static REQ_OTHERS: AtomicBool = AtomicBool::new(false);
/// When the last out-of-memory report was asked for (ms since start; 0: never).
static LAST_OOM_MS: AtomicU64 = AtomicU64::new(0);
/// Out-of-memory reports are asked for at most this often.
const OOM_REPORT_EVERY_MS: u64 = 1000;
static REQ_FATAL: AtomicI32 = AtomicI32::new(0);
static REQ_FATAL_FINAL: AtomicBool = AtomicBool::new(false);
/// `_exit` asks for the final report ([`request_exit_report`]).
static REQ_EXIT: AtomicBool = AtomicBool::new(false);
/// State of the fatal-signal report: idle, pending, written, failed.
static FATAL_STATE: AtomicU8 = AtomicU8::new(IDLE);
const IDLE: u8 = 0;
const PENDING: u8 = 1;
const WRITTEN: u8 = 2;
const FAILED: u8 = 3;

/// Starts the cuguard thread; returns whether it runs.
pub fn start() -> bool {
    if RUNNING.load(Ordering::Acquire) {
        return true;
    }
    // SAFETY: eventfd has no memory-safety preconditions.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        crate::process::diag::log(|| "could not create the cuguard thread's eventfd".into());
        return false;
    }
    WAKE_FD.store(fd, Ordering::Release);
    let spawned = crate::process::thread::spawn_masked("cuguard", run);
    match spawned {
        Ok(_) => {
            RUNNING.store(true, Ordering::Release);
            true
        }
        Err(e) => {
            crate::process::diag::log(|| format!("could not start the cuguard thread: {e}"));
            // SAFETY: fd is ours.
            unsafe { libc::close(fd) };
            WAKE_FD.store(-1, Ordering::Release);
            false
        }
    }
}

/// Names the thread after the snapshot signal it answers, `sig` (`None`: it answers none);
/// called once the handlers are installed.
pub fn announce(sig: Option<i32>) {
    reporter_thread::settle_snapshot_signal(sig);
    wake();
}

/// Records that the snapshot signal could not be taken (the program handles it).
pub fn snapshot_unavailable() {
    if !SNAPSHOTS_OFF.swap(true, Ordering::Relaxed) {
        crate::process::diag::log(|| {
            format!(
                "snapshot signal {} is the program's; `cuguard snapshot` is off (set CUGUARD_SNAPSHOT_SIGNAL)",
                crate::config::get().snapshot_signal
            )
        });
    }
}

fn wake() {
    let fd = WAKE_FD.load(Ordering::Acquire);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd; async-signal-safe.
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
}

/// A framework's refusal was recorded (`hooks::oom::framework_refused`): asks for the line and
/// a checkpoint report now, whatever the once-a-second bound, since the driver's refusal that
/// came just before it (and took the last checkpoint) is explained by this one.
pub fn request_oom_report_now() {
    if !RUNNING.load(Ordering::Acquire) {
        return;
    }
    LAST_OOM_MS.store(
        crate::process::clock::since_start_ms().max(1),
        Ordering::Relaxed,
    );
    REQ_OOM.store(true, Ordering::Release);
    wake();
}

/// A refusal's card is waiting for NVML's list of the other processes: asks this thread to
/// list them now ([`crate::tracker::ooms::Ooms::fill_others`]), before the line and the report.
pub fn request_others() {
    if RUNNING.load(Ordering::Acquire) {
        REQ_OTHERS.store(true, Ordering::Release);
        wake();
    }
}

/// From the snapshot signal's handler: asks for a snapshot. Async-signal-safe.
pub fn request_snapshot() {
    if RUNNING.load(Ordering::Acquire) {
        REQ_SNAPSHOT.store(true, Ordering::Release);
        wake();
    }
}

/// Whether the cuguard thread runs (it says the first refusal's line, and writes reports).
pub fn running() -> bool {
    RUNNING.load(Ordering::Acquire)
}

/// An allocation was refused for lack of memory: asks for a checkpoint report now (`reason:
/// oom`), at most once a second, so that what held the memory is on disk even if the process
/// then dies or frees it all.
pub fn request_oom_report() {
    if !RUNNING.load(Ordering::Acquire) {
        return;
    }
    let now = crate::process::clock::since_start_ms().max(1);
    let last = LAST_OOM_MS.load(Ordering::Relaxed);
    if last != 0 && now < last + OOM_REPORT_EVERY_MS {
        return;
    }
    if LAST_OOM_MS
        .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        REQ_OOM.store(true, Ordering::Release);
        wake();
    }
}

/// How a fatal signal's report went.
pub enum Fatal {
    Written,
    NoReporter,
    TimedOut,
    Failed,
}

/// From a fatal signal's handler: asks for the report (final, or interim when the program's own
/// handler runs next) and waits up to `wait_ms` for it. Async-signal-safe.
pub fn request_fatal(sig: libc::c_int, final_report: bool, wait_ms: u64) -> Fatal {
    if !RUNNING.load(Ordering::Acquire) {
        return Fatal::NoReporter;
    }
    FATAL_STATE.store(PENDING, Ordering::Release);
    REQ_FATAL_FINAL.store(final_report, Ordering::Release);
    REQ_FATAL.store(sig, Ordering::Release);
    wake();
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..wait_ms {
        match FATAL_STATE.load(Ordering::Acquire) {
            WRITTEN => return Fatal::Written,
            FAILED => return Fatal::Failed,
            _ => {}
        }
        // SAFETY: nanosleep is async-signal-safe.
        unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
    }
    Fatal::TimedOut
}

/// From `_exit` (which may be called in a signal handler): asks for the final report and waits
/// up to `wait_ms` for it, as [`request_fatal`] does. Async-signal-safe.
#[cfg_attr(test, allow(dead_code))] // its caller, `_exit`, is not in the unit tests' binary
pub fn request_exit_report(wait_ms: u64) -> Fatal {
    if !RUNNING.load(Ordering::Acquire) || reporter_thread::on_reporter_thread() {
        return Fatal::NoReporter;
    }
    FATAL_STATE.store(PENDING, Ordering::Release);
    REQ_EXIT.store(true, Ordering::Release);
    wake();
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..wait_ms {
        match FATAL_STATE.load(Ordering::Acquire) {
            WRITTEN => return Fatal::Written,
            FAILED => return Fatal::Failed,
            _ => {}
        }
        // SAFETY: nanosleep is async-signal-safe.
        unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
    }
    Fatal::TimedOut
}

/// The cuguard thread faulted: a waiting thread is told, and this thread never returns.
pub fn failed_forever() -> ! {
    RUNNING.store(false, Ordering::Release);
    FATAL_STATE.store(FAILED, Ordering::Release);
    loop {
        // SAFETY: pause only waits (every signal is blocked here, so it waits forever).
        unsafe { libc::pause() };
    }
}

fn run() {
    reporter_thread::mark_current();
    // Inside the shim for good: nothing this thread does is tracked.
    std::mem::forget(crate::guard::Guard::enter());
    let cfg = crate::config::get();
    let period = Duration::from_secs(cfg.checkpoint_secs);
    let mut next = Instant::now() + period;
    let mut named = false;
    let watch = cfg.warn_at.is_some();
    // The page is made at the end of the first turn, after the timeline's first sample: making
    // it names the first sites, which may take a while.
    let mut page: Option<super::page::Writer> = None;
    let mut page_pending = cfg.page_dir.is_some();
    let mut page_due_ms = super::page::PUBLISH_MS;
    loop {
        let mut timeout_ms: libc::c_int = if period.is_zero() {
            -1
        } else {
            next.saturating_duration_since(Instant::now())
                .as_millis()
                .min(i32::MAX as u128) as libc::c_int
        };
        if watch && !(0..=1000).contains(&timeout_ms) {
            timeout_ms = 1000;
        }
        if page_pending {
            timeout_ms = 0;
        } else if page.is_some() {
            let due = page_due_ms.max(1).min(i32::MAX as u64) as libc::c_int;
            if timeout_ms < 0 || timeout_ms > due {
                timeout_ms = due;
            }
        }
        if let Some(due) = crate::writer::timeline::tick() {
            let due = due.max(1).min(i32::MAX as u64) as libc::c_int;
            if timeout_ms < 0 || timeout_ms > due {
                timeout_ms = due;
            }
        }
        let fd = WAKE_FD.load(Ordering::Acquire);
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: pfd is valid for one entry; every signal is blocked on this thread.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        let mut drain = 0u64;
        // SAFETY: reads at most 8 bytes into a valid u64 (non-blocking).
        unsafe { libc::read(fd, (&mut drain as *mut u64).cast(), 8) };

        if !named {
            named = name_thread();
        }
        if REQ_OTHERS.swap(false, Ordering::AcqRel)
            && let Some(t) = crate::tracker::if_any()
        {
            crate::guard::shield((), || t.ooms.fill_others());
        }
        let sig = REQ_FATAL.swap(0, Ordering::AcqRel);
        if sig != 0 {
            let occasion = Occasion {
                reason: Reason::Signal,
                complete: true,
                signal: Some(sig),
                cut_short: None,
            };
            let ok = if REQ_FATAL_FINAL.load(Ordering::Acquire) {
                super::report::final_report(occasion) || crate::phase::final_done()
            } else {
                super::report::interim_report(occasion)
            };
            FATAL_STATE.store(if ok { WRITTEN } else { FAILED }, Ordering::Release);
        }
        if REQ_EXIT.swap(false, Ordering::AcqRel) {
            let ok = super::report::final_report(Occasion::EXIT) || crate::phase::final_done();
            FATAL_STATE.store(if ok { WRITTEN } else { FAILED }, Ordering::Release);
        }
        if watch
            && !crate::phase::final_claimed()
            && let Some(t) = crate::tracker::if_any()
        {
            super::alerts::poll(t);
        }
        if REQ_SNAPSHOT.swap(false, Ordering::AcqRel) {
            super::report::interim_report(Occasion::REQUEST);
        }
        if REQ_OOM.swap(false, Ordering::AcqRel) {
            crate::guard::shield((), || super::oom_line::say_pending(false));
            super::report::interim_report(Occasion::OOM);
        }
        if !period.is_zero() && Instant::now() >= next {
            super::report::interim_report(Occasion::CHECKPOINT);
            next = Instant::now() + period;
        }
        if page_pending {
            page_pending = false;
            page = super::page::start();
        } else if let Some(p) = page.as_mut() {
            page_due_ms = p.tick();
        }
        if crate::phase::final_claimed() && crate::phase::final_done() {
            RUNNING.store(false, Ordering::Release);
            return;
        }
    }
}

/// Sets the thread's name once the snapshot signal is settled; returns whether it did.
fn name_thread() -> bool {
    let sig = reporter_thread::settled_signal();
    if sig == 0 {
        return false;
    }
    let name = if sig > 0 {
        format!("cuguard-s{sig}\0")
    } else {
        "cuguard\0".to_string()
    };
    // SAFETY: name is NUL-terminated and at most 15 bytes plus NUL; pthread_self is this thread.
    unsafe { libc::pthread_setname_np(libc::pthread_self(), name.as_ptr().cast()) };
    true
}

/// In a forked child: the thread is gone and the eventfd is the parent's.
pub fn after_fork_child() {
    RUNNING.store(false, Ordering::Release);
    let fd = WAKE_FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: the child's copy of the descriptor; the parent keeps its own.
        unsafe { libc::close(fd) };
    }
    REQ_SNAPSHOT.store(false, Ordering::Release);
    REQ_OOM.store(false, Ordering::Release);
    LAST_OOM_MS.store(0, Ordering::Release);
    REQ_FATAL.store(0, Ordering::Release);
    REQ_EXIT.store(false, Ordering::Release);
    FATAL_STATE.store(IDLE, Ordering::Release);
    reporter_thread::after_fork_child();
}
