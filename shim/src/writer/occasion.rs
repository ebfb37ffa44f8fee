//! What a report is written for ([`Occasion`]: its [`Reason`], whether it is complete, the
//! signal), the names of signals, and how the report writes the tracker's ids ([`id`]): shared
//! by the report ([`super`]), its `python` section ([`super::python`]) and the emergency report
//! ([`super::emergency`]).

use cuguard_format as format;

use crate::tracker::NONE;

/// Why a report is written (the report's `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The process is ending normally (return from main, `exit` from any thread).
    Exit,
    /// Periodic (`CUGUARD_CHECKPOINT_SECS`); the process goes on.
    Checkpoint,
    /// A fatal or terminating signal.
    Signal,
    /// `cuguard snapshot PID`; the process goes on.
    Request,
    /// An allocation was refused for lack of memory; the process goes on.
    Oom,
}

impl From<Reason> for format::Reason {
    fn from(r: Reason) -> format::Reason {
        match r {
            Reason::Exit => format::Reason::Exit,
            Reason::Checkpoint => format::Reason::Checkpoint,
            Reason::Signal => format::Reason::Signal,
            Reason::Request => format::Reason::Request,
            Reason::Oom => format::Reason::Oom,
        }
    }
}

/// What a report is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Occasion {
    pub reason: Reason,
    /// Whether the report is final and holds everything (the report's `complete`).
    pub complete: bool,
    /// The signal, for [`Reason::Signal`].
    pub signal: Option<i32>,
    /// Why the report is not complete (the report's `cut_short`).
    pub cut_short: Option<&'static str>,
}

impl Occasion {
    /// The final report of a process that exits.
    pub const EXIT: Occasion = Occasion {
        reason: Reason::Exit,
        complete: true,
        signal: None,
        cut_short: None,
    };
    /// The final report of a process that a signal ends.
    #[cfg_attr(test, allow(dead_code))] // its caller, `_exit`, is not in the unit tests' binary
    pub fn signal(sig: i32) -> Occasion {
        Occasion {
            reason: Reason::Signal,
            complete: true,
            signal: Some(sig),
            cut_short: None,
        }
    }
    /// A checkpoint.
    pub const CHECKPOINT: Occasion = Occasion {
        reason: Reason::Checkpoint,
        complete: false,
        signal: None,
        cut_short: Some("checkpoint: the process was still running"),
    };
    /// A snapshot on request.
    pub const REQUEST: Occasion = Occasion {
        reason: Reason::Request,
        complete: false,
        signal: None,
        cut_short: Some("snapshot on request: the process was still running"),
    };
    /// A checkpoint at an out-of-memory.
    pub const OOM: Occasion = Occasion {
        reason: Reason::Oom,
        complete: false,
        signal: None,
        cut_short: Some("written at an out-of-memory: the process was still running"),
    };
}

/// The name of signal `sig` (`"SIGSEGV"`), or `"signal"` for others.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "signal",
    }
}

/// A tracker's id (its [`NONE`] for none) as the report's optional id.
pub(super) fn id(v: u32) -> Option<u32> {
    (v != NONE).then_some(v)
}
