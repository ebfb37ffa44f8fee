//! The shim's `sigaction`, `signal` and `bsd_signal`: a program's changes of signal disposition
//! pass through them, so that what it reads back is what it set and a program that restores the
//! default action before re-raising a signal still gets its report (see [`super::signals`] for
//! the rules).
//!
//! Each is a thin export over [`super::signals::program_sets`]. They allocate nothing, take no
//! lock a signal handler could hold (a per-signal turn that the same thread may re-enter), and
//! never call the symbols they stand in for: the shim's own calls go to libc's through
//! [`super::signals::real_sigaction`].

use super::signals;

/// `sigaction(2)`.
///
/// # Safety
/// The caller's contract is `sigaction(2)`'s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    // SAFETY: the caller's own arguments, under its contract.
    unsafe { signals::program_sets(sig, act, old) }
}

/// `signal(3)` as glibc defines it (BSD semantics): the handler stays installed, interrupted
/// system calls restart, and the signal is blocked while its handler runs.
///
/// # Safety
/// The caller's contract is `signal(3)`'s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: an all-zero sigaction is valid; the fields set are glibc's for `signal`.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler;
        libc::sigemptyset(&mut act.sa_mask);
        if sig > 0 && libc::sigaddset(&mut act.sa_mask, sig) != 0 {
            return libc::SIG_ERR;
        }
        act.sa_flags = libc::SA_RESTART;
        let mut old: libc::sigaction = std::mem::zeroed();
        if signals::program_sets(sig, &act, &mut old) != 0 {
            return libc::SIG_ERR;
        }
        old.sa_sigaction
    }
}

/// `bsd_signal(3)`: glibc's other name for `signal`.
///
/// # Safety
/// The caller's contract is `signal(3)`'s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsd_signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: the caller's own arguments, under its contract.
    unsafe { signal(sig, handler) }
}
