//! How the shim starts and ends inside a process, as one sequence:
//!
//! 1. Load: the constructor reads the configuration and nothing else.
//! 2. First use: a hook creates the tracker; the driver table resolves when first needed.
//! 3. First allocation: an `atexit` handler is registered. The CUDA runtime registers its own
//!    teardown during its initialization, which comes before any allocation, so this handler runs
//!    first at exit and the report sees the program's memory before the runtime releases its
//!    contexts (memory released by that teardown is not the program's leak to explain).
//! 4. Exit: the report is written once ([`crate::report::write_final`]).
//! 5. Fallback: a process that never allocated but used contexts gets its report from the
//!    library's destructor, which does not call the driver (it may already be finalized).

use std::sync::atomic::{AtomicBool, Ordering};

static EXIT_HANDLER: AtomicBool = AtomicBool::new(false);
static IN_FINI: AtomicBool = AtomicBool::new(false);

/// Called on every tracked allocation; registers the exit handler the first time.
#[inline]
pub fn note_allocation() {
    if !EXIT_HANDLER.load(Ordering::Relaxed) && !EXIT_HANDLER.swap(true, Ordering::AcqRel) {
        // SAFETY: at_exit is a plain extern "C" fn with no arguments.
        unsafe { libc::atexit(at_exit) };
    }
}

extern "C" fn at_exit() {
    crate::report::write_final(crate::report::Reason::Exit);
}

/// Whether the library's destructor is running (the driver must not be called then).
pub fn in_fini() -> bool {
    IN_FINI.load(Ordering::Relaxed)
}

extern "C" fn fini() {
    IN_FINI.store(true, Ordering::Relaxed);
    crate::report::write_final(crate::report::Reason::Exit);
}

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = fini;
