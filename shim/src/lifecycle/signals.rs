//! The report when a signal ends the process, without taking a signal from the program.
//!
//! Installed once, when the process first allocates (never at load), for:
//!
//! - fatal signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, so also `abort()` and an uncaught
//!   C++ exception): installed unless the program ignores the signal. The program's handler, if
//!   it had one, is kept and called after the report (chaining); with none, the default action
//!   is restored and the signal raised again, so the process dies as it would have (core dump
//!   included). With a handler of the program's the report is written but tracking goes on: the
//!   handler may recover, and a later report then replaces this one.
//! - terminating signals (SIGTERM, SIGINT, SIGHUP, SIGQUIT): installed only where the disposition
//!   is the default. A program's own handler is left alone: it decides how the process ends
//!   (usually through `exit`, which writes the report). One that comes while the final report is
//!   being written (a second SIGTERM: a supervisor signals the process group, and `cuguard run`
//!   forwards it to its program too; or a SIGTERM during `exit`) is held until the report is in
//!   place, then sent again ([`super::held`]): its handler may have
//!   interrupted the very thread that writes the report, and taking the default action at once
//!   would end the process before the report's rename.
//! - the snapshot signal (`CUGUARD_SNAPSHOT_SIGNAL`, default `SIGRTMIN+7`): installed only where
//!   the disposition is the default; otherwise snapshots are off and the cuguard thread's name
//!   says so (see [`super::reporter`]).
//!
//! Programs that change a disposition later go through the shim's `sigaction`, `signal` and
//! `bsd_signal` ([`super::interpose`]), which keep what the program set and what it reads back
//! exact:
//!
//! - a handler of the program's replaces the shim's, for real: it runs exactly as it would have
//!   (its own flags and mask); a report is then written only if it ends the process through
//!   `exit` or chains to the previous handler;
//! - `SIG_IGN` is installed as it is;
//! - `SIG_DFL` for a fatal or terminating signal puts the shim's handler in place (once the
//!   process is armed), remembering `SIG_DFL` as the program's: a program that restores the
//!   default action and raises the signal again (Python's Ctrl-C, C programs that clean up and
//!   re-raise) gets the report, then dies of the default action as before;
//! - `sigaction(sig, NULL, &old)` returns what the program set, never the shim's handler.
//!
//! Runtimes that call the `rt_sigaction` system call themselves (Go) pass the shim by.
//!
//! What the handlers do is async-signal-safe: atomics, `write(2)` to the cuguard thread's
//! eventfd, `nanosleep`, `sigaction`, `raise`/`kill`. The report itself is written by the
//! cuguard thread, in ordinary context: for a terminating signal the handler returns at once and
//! the thread writes the report, restores the default action and sends the signal again; for a
//! fatal signal the faulting thread waits (bounded) for the report, then takes the disposition.
//! If the thread is not running, fails or does not finish in time (the faulting thread may hold
//! a lock or the heap's lock it needs), the handler writes the emergency report
//! ([`crate::writer::emergency`]) itself.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, AtomicUsize, Ordering};

use super::reporter;
use crate::writer::emergency::{self, Why};

/// Signals that end the process with a fault.
pub const FATAL: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGABRT,
];
/// Signals whose default action terminates the process, sent by people and supervisors.
pub const TERMINATING: [libc::c_int; 4] =
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT];

const NSIG: usize = 65;

/// What the shim did with a signal.
const NOT_OURS: u8 = 0;
const FATAL_SLOT: u8 = 1;
const TERMINATING_SLOT: u8 = 2;
const SNAPSHOT_SLOT: u8 = 3;

/// The disposition the program had before the shim's handler, per signal.
struct Previous(UnsafeCell<[libc::sigaction; NSIG]>);

// SAFETY: each entry is written once, before the shim's handler for that signal is installed
// (the `sigaction` call that installs it orders the write before any delivery), and only read
// afterwards.
unsafe impl Sync for Previous {}

// SAFETY: an all-zero sigaction is a valid value (SIG_DFL, no flags, empty mask).
static PREVIOUS: Previous = Previous(UnsafeCell::new(unsafe { std::mem::zeroed() }));
static KIND: [AtomicU8; NSIG] = [const { AtomicU8::new(NOT_OURS) }; NSIG];
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// `CUGUARD_SIGNALS`: fatal and terminating signals are taken.
static SIGNALS: AtomicBool = AtomicBool::new(false);
/// The snapshot signal the shim took, or 0.
static SNAPSHOT_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// A fatal signal's report: claimed by the first thread that faults.
static CLAIMED: AtomicBool = AtomicBool::new(false);
static DONE: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread is inside the fatal-signal handler.
    static IN_FATAL: Cell<bool> = const { Cell::new(false) };
    /// The signal whose program handler this thread is running, chained from the shim's (0:
    /// none): a handler that leaves through `_exit` ends the process of that signal.
    static CHAINED: Cell<libc::c_int> = const { Cell::new(0) };
}

/// The signal whose program handler, chained from the shim's, the calling thread is running.
/// Async-signal-safe.
#[cfg_attr(test, allow(dead_code))] // its caller, `_exit`, is not in the unit tests' binary
pub fn chained_signal() -> Option<libc::c_int> {
    CHAINED.try_with(|c| c.get()).ok().filter(|&s| s != 0)
}

/// How long a faulting thread waits for the cuguard thread's report.
const WAIT_MS: u64 = 10_000;
/// The same when the faulting thread was inside the shim (it may hold a lock the report needs).
const WAIT_INSIDE_MS: u64 = 1_000;

fn previous(sig: libc::c_int) -> &'static libc::sigaction {
    // SAFETY: see `Previous`; sig is in range (checked by callers).
    unsafe { &(*PREVIOUS.0.get())[sig as usize] }
}

/// The signature of `sigaction`.
pub type SigactionFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;

/// libc's `sigaction`, as an address (0: not found yet).
static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);

/// libc's own `sigaction`: the shim exports one ([`super::interpose`]), so its own calls must not
/// go through the symbol. Found with the real `dlsym` and `RTLD_NEXT` (the next definition after
/// the shim), once; call [`resolve_real_sigaction`] from ordinary context before a handler needs
/// it.
pub fn real_sigaction() -> Option<SigactionFn> {
    let p = match REAL_SIGACTION.load(Ordering::Acquire) {
        0 => resolve_real_sigaction(),
        p => p,
    };
    // SAFETY: a non-zero value is the address of libc's sigaction, which has this signature.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, SigactionFn>(p) })
}

/// Finds libc's `sigaction` now; returns its address or 0.
pub fn resolve_real_sigaction() -> usize {
    let Some(dlsym) = crate::driver::real_dlsym() else {
        return 0;
    };
    // SAFETY: the real dlsym with RTLD_NEXT and a NUL-terminated name; it only reads the
    // loader's tables.
    let p = unsafe { dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) } as usize;
    if p != 0 {
        REAL_SIGACTION.store(p, Ordering::Release);
    }
    p
}

/// Calls libc's `sigaction`; -1 (EINVAL) when it cannot be found.
///
/// # Safety
/// `sigaction(2)`'s contract for `act` and `old`.
pub unsafe fn call_real_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    match real_sigaction() {
        // SAFETY: forwarded under the caller's contract.
        Some(f) => unsafe { f(sig, act, old) },
        None => {
            // SAFETY: this thread's errno.
            unsafe { *libc::__errno_location() = libc::EINVAL };
            -1
        }
    }
}

/// The signals the shim watches once armed: whether `sig` is one it takes when the program
/// leaves the default action (fatal and terminating ones with `CUGUARD_SIGNALS`, and the
/// snapshot signal), and which kind.
fn watched_kind(sig: libc::c_int) -> Option<u8> {
    if !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    let signals = SIGNALS.load(Ordering::Acquire);
    if signals && FATAL.contains(&sig) {
        Some(FATAL_SLOT)
    } else if signals && TERMINATING.contains(&sig) {
        Some(TERMINATING_SLOT)
    } else if sig == SNAPSHOT_SIGNAL.load(Ordering::Acquire) {
        Some(SNAPSHOT_SLOT)
    } else {
        None
    }
}

/// Per signal: the thread id inside [`program_sets`] for it, or 0.
static BUSY: [AtomicU32; NSIG] = [const { AtomicU32::new(0) }; NSIG];

/// What the program's `sigaction(sig, act, old)` does under the shim (see the module
/// documentation): `old` gets what the program set, and the real disposition follows `act`,
/// except that `SIG_DFL` on a watched signal of an armed process keeps (or puts) the shim's
/// handler in place. Returns what `sigaction` returns.
///
/// # Safety
/// `sigaction(2)`'s contract for `act` and `old`.
pub unsafe fn program_sets(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    if sig <= 0 || sig as usize >= NSIG {
        // SAFETY: forwarded; libc answers EINVAL for a signal out of range.
        return unsafe { call_real_sigaction(sig, act, old) };
    }
    let idx = sig as usize;
    let me = crate::process::clock::thread_id().max(1);
    // One thread at a time per signal. The same thread again (the program's signal handler
    // calling sigaction while this thread was in here) forwards without the shim's bookkeeping.
    loop {
        match BUSY[idx].compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => break,
            // SAFETY: forwarded under the caller's contract.
            Err(owner) if owner == me => return unsafe { call_real_sigaction(sig, act, old) },
            Err(_) => std::hint::spin_loop(),
        }
    }
    // SAFETY: under the caller's contract; this thread holds the signal's turn.
    let r = unsafe { sets_locked(sig, act, old) };
    BUSY[idx].store(0, Ordering::Release);
    r
}

/// [`program_sets`], holding the signal's turn.
unsafe fn sets_locked(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    let idx = sig as usize;
    let ours = KIND[idx].load(Ordering::Acquire);
    let shadowed = ours == FATAL_SLOT || ours == TERMINATING_SLOT;
    // SAFETY: act is null or the program's valid sigaction (the caller's contract).
    let new = unsafe { act.as_ref() };
    let watched = watched_kind(sig)
        .filter(|_| INSTALLED.load(Ordering::Acquire) && SIGNALS.load(Ordering::Acquire));
    let Some(new) = new else {
        // A query: what the program set.
        if shadowed {
            if !old.is_null() {
                // SAFETY: old is the program's writable out-parameter.
                unsafe { *old = *previous(sig) };
            }
            return 0;
        }
        // SAFETY: forwarded under the caller's contract.
        return unsafe { call_real_sigaction(sig, act, old) };
    };
    let was = if shadowed { Some(*previous(sig)) } else { None };
    if new.sa_sigaction == libc::SIG_DFL
        && let Some(kind) = watched
    {
        // The program's SIG_DFL goes in for real first, and is read back, so that what it reads
        // later is exactly what libc and the kernel would show (flags and mask as they keep
        // them); then the shim's handler takes the signal, with SIG_DFL remembered as the
        // program's.
        // SAFETY: all-zero sigactions are valid out-parameters; act is the program's.
        let (mut real_old, mut stored): (libc::sigaction, libc::sigaction) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: as above.
        let r = unsafe { call_real_sigaction(sig, act, &mut real_old) };
        if r != 0 {
            return r;
        }
        // SAFETY: a query into a valid out-parameter.
        unsafe { call_real_sigaction(sig, std::ptr::null(), &mut stored) };
        // SAFETY: written while the real disposition is the program's SIG_DFL: no handler of the
        // shim reads it until it is installed below.
        unsafe { (*PREVIOUS.0.get())[idx] = stored };
        KIND[idx].store(kind, Ordering::Release);
        // SAFETY: installs the shim's handler.
        if unsafe { install_handler(sig, kind, std::ptr::null_mut()) } != 0 {
            KIND[idx].store(NOT_OURS, Ordering::Release);
        }
        if !old.is_null() {
            // SAFETY: old is the program's writable out-parameter.
            unsafe { *old = was.unwrap_or(real_old) };
        }
        return 0;
    }
    // A handler of the program's, SIG_IGN, or a signal the shim does not watch: installed as it
    // is, and the shim's handler steps aside.
    // SAFETY: forwarded; old is filled by libc, then corrected to what the program had set.
    let r = unsafe { call_real_sigaction(sig, act, old) };
    if r == 0 && shadowed {
        KIND[idx].store(NOT_OURS, Ordering::Release);
        if let (Some(w), false) = (was, old.is_null()) {
            // SAFETY: old is the program's writable out-parameter.
            unsafe { *old = w };
        }
    }
    r
}

/// Installs the handlers (once per image: they are inherited across fork). `fatal_and_term`:
/// `CUGUARD_SIGNALS`; `snapshot`: the snapshot signal, or 0.
pub fn install(fatal_and_term: bool, snapshot: libc::c_int) {
    if INSTALLED.load(Ordering::Acquire) {
        return;
    }
    resolve_real_sigaction();
    SIGNALS.store(fatal_and_term, Ordering::Release);
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    if fatal_and_term {
        for sig in FATAL {
            install_one(sig, FATAL_SLOT);
        }
        for sig in TERMINATING {
            install_one(sig, TERMINATING_SLOT);
        }
    }
    if snapshot > 0 && (snapshot as usize) < NSIG {
        if install_one(snapshot, SNAPSHOT_SLOT) {
            SNAPSHOT_SIGNAL.store(snapshot, Ordering::Release);
        } else {
            reporter::snapshot_unavailable();
        }
    }
}

/// Whether the shim's snapshot handler is installed for `sig`.
pub fn snapshot_installed(sig: libc::c_int) -> bool {
    sig > 0 && (sig as usize) < NSIG && KIND[sig as usize].load(Ordering::Acquire) == SNAPSHOT_SLOT
}

fn install_one(sig: libc::c_int, kind: u8) -> bool {
    // SAFETY: an all-zero sigaction is valid; the calls only read or set this signal's action.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if call_real_sigaction(sig, std::ptr::null(), &mut old) != 0 {
            return false;
        }
        let h = old.sa_sigaction;
        let take = match kind {
            FATAL_SLOT => h != libc::SIG_IGN,
            _ => h == libc::SIG_DFL,
        };
        if !take {
            return false;
        }
        (*PREVIOUS.0.get())[sig as usize] = old;
        KIND[sig as usize].store(kind, Ordering::Release);
        if install_handler(sig, kind, std::ptr::null_mut()) != 0 {
            KIND[sig as usize].store(NOT_OURS, Ordering::Release);
            return false;
        }
        true
    }
}

/// Installs the shim's handler for `sig` (of `kind`); returns what `sigaction` returns.
///
/// # Safety
/// `old` is null or writable.
unsafe fn install_handler(sig: libc::c_int, kind: u8, old: *mut libc::sigaction) -> libc::c_int {
    // SAFETY: an all-zero sigaction is valid; the calls only set this signal's action.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = on_signal as *const () as usize;
        new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        libc::sigemptyset(&mut new.sa_mask);
        if kind == FATAL_SLOT {
            // A terminating signal must not interrupt the fatal one's report.
            for t in TERMINATING {
                libc::sigaddset(&mut new.sa_mask, t);
            }
        }
        call_real_sigaction(sig, &new, old)
    }
}

/// The shim's handler for every signal it takes.
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: reads and restores this thread's errno; the handler must not change it.
    let errno = unsafe { *libc::__errno_location() };
    if sig > 0 && (sig as usize) < NSIG {
        match KIND[sig as usize].load(Ordering::Acquire) {
            FATAL_SLOT => on_fatal(sig, info, ctx),
            TERMINATING_SLOT => on_terminating(sig),
            SNAPSHOT_SLOT => reporter::request_snapshot(),
            _ => {}
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn on_fatal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if super::reporter_thread::on_reporter_thread() {
        // The cuguard thread itself faulted: tell a waiting thread, then never return (returning
        // would fault again). The program goes on without the cuguard thread.
        reporter::failed_forever();
    }
    let nested = IN_FATAL.try_with(|f| f.replace(true)).unwrap_or(true);
    if !nested {
        report_fatal(sig);
        let _ = IN_FATAL.try_with(|f| f.set(false));
    }
    dispose(sig, info, ctx);
}

fn report_fatal(sig: libc::c_int) {
    if crate::phase::final_claimed() {
        return;
    }
    let prev = previous(sig).sa_sigaction;
    let chained = prev != libc::SIG_DFL && prev != libc::SIG_IGN;
    if CLAIMED.swap(true, Ordering::AcqRel) {
        // Another thread faulted first: wait for its report, then take our own disposition.
        wait_until(&DONE, WAIT_MS + 1_000);
        return;
    }
    // Was this thread inside the shim when it faulted (it may hold one of the shim's locks)?
    let inside = crate::guard::Guard::enter().is_none();
    let wait = if inside { WAIT_INSIDE_MS } else { WAIT_MS };
    let why = match reporter::request_fatal(sig, !chained, wait) {
        reporter::Fatal::Written => None,
        reporter::Fatal::NoReporter => Some(Why::NoReporter),
        reporter::Fatal::TimedOut => Some(Why::TimedOut),
        reporter::Fatal::Failed => Some(Why::ReporterFailed),
    };
    if let Some(why) = why
        && emergency::write(sig, why)
    {
        diag_line(
            b"cuguard: the full report could not be written at the signal; wrote a minimal one\n",
        );
    }
    DONE.store(true, Ordering::Release);
}

/// What the program would have had happen: its own handler, or the default action.
fn dispose(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = previous(sig);
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        default_and_raise(sig, info);
        return;
    }
    if prev.sa_flags & libc::SA_RESETHAND != 0 {
        // The kernel would have reset the action on delivery of the program's handler.
        set_default(sig);
    }
    let outer = CHAINED.try_with(|c| c.replace(sig)).unwrap_or(0);
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this function as an SA_SIGINFO handler; it gets the
        // arguments the kernel gave us.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the program installed this function as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
    let _ = CHAINED.try_with(|c| c.set(outer));
}

fn set_default(sig: libc::c_int) {
    // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        call_real_sigaction(sig, &dfl, std::ptr::null_mut());
    }
    KIND[sig as usize].store(NOT_OURS, Ordering::Release);
}

/// Restores the default action and lets the signal take it: a fault the kernel raised happens
/// again when the handler returns; a sent signal (kill, raise, abort) is raised again.
fn default_and_raise(sig: libc::c_int, info: *mut libc::siginfo_t) {
    set_default(sig);
    // SAFETY: info is the kernel's siginfo for this delivery (or null).
    let sent = info.is_null() || unsafe { (*info).si_code } <= 0;
    if sent || sig == libc::SIGABRT {
        // SAFETY: raise is async-signal-safe; the signal is blocked until the handler returns.
        unsafe { libc::raise(sig) };
    }
}

/// A terminating signal: the report, then the default action (the shim only takes signals whose
/// disposition was the default). While the final report is being written, the signal is held
/// for its writer to send again once the report is in place ([`hold`]).
fn on_terminating(sig: libc::c_int) {
    if crate::phase::final_claimed() && !crate::phase::final_done() && super::held::hold(sig) {
        return;
    }
    let nested = IN_FATAL.try_with(|f| f.replace(true)).unwrap_or(true);
    if !nested {
        report_fatal(sig);
        let _ = IN_FATAL.try_with(|f| f.set(false));
    }
    set_default(sig);
    // SAFETY: raise is async-signal-safe; the signal is delivered when the handler returns.
    unsafe { libc::raise(sig) };
}

fn wait_until(flag: &AtomicBool, max_ms: u64) {
    let step = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..max_ms {
        if flag.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: nanosleep is async-signal-safe; step is valid.
        unsafe { libc::nanosleep(&step, std::ptr::null_mut()) };
    }
}

fn diag_line(line: &[u8]) {
    // SAFETY: a valid buffer; write(2) is async-signal-safe.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// In a forked child: a fatal signal there gets its own report.
pub fn after_fork_child() {
    CLAIMED.store(false, Ordering::Release);
    DONE.store(false, Ordering::Release);
    super::held::after_fork_child();
}
