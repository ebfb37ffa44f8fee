//! The shim's `_exit` and `_Exit`: a process that leaves without `exit`'s handlers (Python's
//! `os._exit`, multiprocessing's forked children, a C program's child after `fork`) still gets
//! its one final report, with the reason `exit`.
//!
//! `_exit` is async-signal-safe, so a program may call it from a signal handler, where writing
//! a report could wait on a lock the interrupted code holds. The report is therefore written by
//! the cuguard thread ([`super::reporter`]) in ordinary context while the exiting thread waits,
//! bounded; only without that thread is it written in place. Then the process ends as glibc's
//! `_exit` ends it: the `exit_group` system call.
//!
//! A program's handler for a fatal signal that the shim chained to (see [`super::signals`])
//! and that leaves through `_exit` ends the process of that signal: the signal's report, interim
//! until then (the handler might have recovered), is written again as the final one.
//!
//! Skipped, straight to `exit_group`: a process that never used the driver, a child of `vfork`
//! (it shares the parent's memory, and its pid is not the one the shim knows: Python's
//! `subprocess` calls `_exit` there when `exec` fails), and a second exit while the report is
//! being written (it waits for that one).

// The exports are left out of the unit tests' binary (they would replace its own `_exit`).
#![cfg_attr(test, allow(dead_code))]

use std::sync::atomic::{AtomicI32, Ordering};

use super::reporter::{self, Fatal};

/// This process's pid as the shim knows it: set at first use, and in a forked child.
static OWN_PID: AtomicI32 = AtomicI32::new(0);

/// How long `_exit` waits for the cuguard thread's report, milliseconds.
const WAIT_MS: u64 = 30_000;

/// Remembers this process's pid (at first use and after a fork).
pub fn note_pid() {
    // SAFETY: getpid cannot fail.
    OWN_PID.store(unsafe { libc::getpid() }, Ordering::Release);
}

/// In a forked child: not leaving (the parent may have been).
pub fn after_fork_child() {
    crate::process::leaving::after_fork_child();
    note_pid();
}

fn before_exit(status: libc::c_int) {
    if crate::tracker::if_any().is_none() || crate::phase::final_done() {
        return;
    }
    // SAFETY: getpid cannot fail; glibc does not cache it, so a vfork child sees its own.
    if unsafe { libc::getpid() } != OWN_PID.load(Ordering::Acquire) {
        return;
    }
    if crate::phase::final_claimed() {
        super::report::wait_for_final();
        return;
    }
    if let Some(sig) = super::signals::chained_signal() {
        // The program's handler for a fatal signal, chained from the shim's, ends the process:
        // it ends of that signal, and its report (interim until now) becomes the final one.
        if let Fatal::NoReporter = reporter::request_fatal(sig, true, WAIT_MS) {
            super::report::final_report(crate::writer::Occasion::signal(sig));
        }
        return;
    }
    crate::process::leaving::through_exit(status);
    match reporter::request_exit_report(WAIT_MS) {
        Fatal::Written | Fatal::TimedOut | Fatal::Failed => {}
        Fatal::NoReporter => {
            super::report::final_report(crate::writer::Occasion::EXIT);
        }
    }
}

fn leave(status: libc::c_int) -> ! {
    loop {
        // SAFETY: exit_group ends the process; it does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// `_exit(2)`: the final report, then the end of the process.
///
/// # Safety
/// The caller's contract is `_exit(2)`'s.
#[cfg(not(test))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _exit(status: libc::c_int) -> ! {
    crate::guard::shield((), || before_exit(status));
    leave(status)
}

/// `_Exit(3)`: glibc's other name for `_exit`.
///
/// # Safety
/// The caller's contract is `_exit(2)`'s.
#[cfg(not(test))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Exit(status: libc::c_int) -> ! {
    crate::guard::shield((), || before_exit(status));
    leave(status)
}
