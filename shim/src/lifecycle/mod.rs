//! How the shim starts and ends inside a process, as one sequence. The phases and every
//! transition between them are in [`crate::phase`]; this module makes the transitions happen and
//! does what each promises.
//!
//! 1. Load (`Loading`): the constructor reads the configuration and nothing else
//!    (`CUGUARD_DISABLE=1` makes the shim `Inert`).
//! 2. First use ([`first_use`]): a hook creates the tracker; the one `pthread_atfork` child
//!    handler is registered ([`after_fork_child`]: a forked child becomes `ForkedChild`, with
//!    every module's state reset). The driver table resolves when first needed.
//! 3. First allocation ([`note_allocation`]) arms the rest (`Armed`), once per process (again in
//!    a forked child, at its own first allocation):
//!    - `atexit` and `at_quick_exit` handlers (once per image; they are inherited across
//!      fork). The CUDA runtime registers its own teardown
//!      during its initialization, which comes before any allocation, so this handler runs
//!      first at exit and the report sees the program's memory before the runtime releases its
//!      contexts;
//!    - the emergency report is prepared ([`crate::writer::emergency`]);
//!    - the cuguard thread starts ([`reporter`]): checkpoints, snapshots on request, the
//!      report for signals, and the stats page ([`page`]);
//!    - signal handlers are installed where the program has none ([`signals`]); from then on, a
//!      program's `sigaction`/`signal` calls go through the shim's ([`interpose`]).
//! 4. End (`Writing`, then `Final`): exactly one final report, whichever way the process ends
//!    ([`final_report`]): `exit`
//!    from any thread (and so return from main, Rust's `process::exit`, Python's `sys.exit`),
//!    `quick_exit`, `_exit` ([`immediate_exit`]: Python's `os._exit`), or a fatal or terminating
//!    signal; a terminating signal that comes while it is written is held until it is in place
//!    ([`held`]). Checkpoints and snapshots on request are
//!    interim reports ([`report::interim_report`]); each replaces the previous one of the same process.
//! 5. Fallback: a process that never allocated but used contexts gets its report from the
//!    library's destructor, which does not call the driver (it may already be finalized).
//!
//! Reports are written one at a time (the writer's turn, a lock a forked child resets:
//! [`report`]). The final report removes the stats page. The modules below live here because
//! they are the lifecycle's parts: [`signals`], [`reporter`] (the cuguard thread), [`page`] (the
//! stats page it keeps), [`drain`] (the history's file, into which that thread drains the
//! threads' rings of [`crate::recorder`]), [`alerts`] (`CUGUARD_WARN_AT`, and where alerts go),
//! [`sites`] (the sites holding memory now, named once, for the page and the alerts) and
//! [`python_bootstrap`] (the end of a Python program's code, armed by the shim where `cuguard
//! run`'s bootstrap did not run).

pub mod alerts;
pub mod drain;
pub mod held;
pub mod immediate_exit;
// Under ThreadSanitizer (`--cfg cuguard_tsan`, tests/it/reliability_race.rs) the program's
// `sigaction` is libc's: libtsan takes the next definition after its own as the real one, which
// would be the shim's, instrumented code it calls while it initializes, before anything else.
#[cfg(not(cuguard_tsan))]
pub mod interpose;
pub mod oom_line;
pub mod page;
pub mod python_bootstrap;
pub mod report;
pub mod reporter;
pub mod reporter_thread;
pub mod signals;
pub mod sites;

use std::sync::atomic::{AtomicBool, Ordering};

use report::final_report;
pub use report::with_writer_turn;

use crate::phase;
use crate::writer::{self, Occasion};

/// Registered once per image: atexit, at_quick_exit.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// The shim's first use in this image (a hook created the tracker): quiet panics, and the one
/// fork handler. Runs once; a forked child inherits both.
pub fn first_use() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        immediate_exit::note_pid();
        crate::guard::install_panic_hook();
        crate::config::warn_problems_once();
        crate::writer::stacks::read_settings();
        crate::tracker::end::tell_why_not(python_bootstrap::why_not);
        python_bootstrap::offer();
        // SAFETY: the three are plain extern "C" fns without arguments; registering has no other
        // effect.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_parent),
                Some(after_fork_child),
            )
        };
    });
}

/// Called on every tracked allocation: one load; arms the process the first time.
#[inline]
pub fn note_allocation() {
    if !phase::armed() {
        arm_once();
    }
}

#[cold]
fn arm_once() {
    if phase::arm() {
        // Work done once (the exit handlers, the cuguard thread, the emergency report):
        // billed apart from the allocation it happens in.
        crate::process::cost::one_time(|| crate::guard::shield((), arm));
    }
}

fn arm() {
    // First: the other threads record as soon as the process is armed, and a ring that fills
    // before the history's thread runs drains itself through the writer rather than dropping.
    if crate::recorder::on() {
        drain::prepare();
    }
    if !REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: plain extern "C" fns without arguments; registering has no other effect.
        unsafe {
            libc::atexit(at_exit);
            at_quick_exit(at_exit);
        }
    }
    writer::emergency::prepare(&writer::report_path());
    let cfg = crate::config::get();
    let thread = if cfg.signals
        || cfg.snapshot_signal != 0
        || cfg.checkpoint_secs > 0
        || cfg.warn_at.is_some()
        || cfg.page_dir.is_some()
    {
        reporter::start()
    } else {
        false
    };
    signals::install(cfg.signals, if thread { cfg.snapshot_signal } else { 0 });
    if thread {
        let sig = cfg.snapshot_signal;
        reporter::announce(signals::snapshot_installed(sig).then_some(sig));
    }
    if crate::recorder::on() {
        drain::start();
    }
    // Again, for an interpreter that was not running at the first use.
    python_bootstrap::offer();
}

unsafe extern "C" {
    fn at_quick_exit(f: extern "C" fn()) -> libc::c_int;
}

extern "C" fn at_exit() {
    final_report(Occasion::EXIT);
}

extern "C" fn fini() {
    phase::set_unloading();
    final_report(Occasion::EXIT);
}

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = fini;

/// The one fork handler, before the fork: the shim's threads leave the loader's list of modules
/// and stay out of it across the fork (`crate::stack::before_fork`).
extern "C" fn before_fork() {
    crate::stack::before_fork();
}

/// The one fork handler, in the parent after the fork.
extern "C" fn after_fork_parent() {
    crate::stack::after_fork_parent();
}

/// The one fork handler, in the child: the child owns none of the parent's allocations and
/// writes its own report. Nothing of the parent's state carries over but the registrations and
/// the signal handlers; every lock is reset or replaced (its holder does not exist here), and
/// the child arms again at its first allocation (`ForkedChild`).
extern "C" fn after_fork_child() {
    crate::process::clock::reset_thread_id();
    immediate_exit::after_fork_child();
    crate::process::cost::reset_after_fork();
    crate::stack::after_fork_child();
    crate::tracker::counters::reset_after_fork();
    crate::tracker::given_back::reset_after_fork();
    crate::serving::reset_after_fork();
    crate::writer::timeline::reset_after_fork();
    crate::tracker::reset_after_fork();
    crate::recorder::reset_after_fork();
    drain::reset_after_fork();
    phase::forked();
    report::WRITER.store(0, Ordering::Release);
    report::FINAL_WRITER.store(0, Ordering::Release);
    reporter::after_fork_child();
    signals::after_fork_child();
    alerts::after_fork_child();
    page::after_fork_child();
    sites::after_fork_child();
    writer::file::forget_own_after_fork();
    writer::emergency::forget_after_fork();
    writer::reset_after_fork();
    crate::process::labels::after_fork_child();
    crate::process::aliases::after_fork_child();
    crate::tracker::tags::after_fork_child();
}
