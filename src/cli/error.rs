//! Why a subcommand failed: [`CliError`], with the errors of `run` ([`RunError`]) and
//! `snapshot` ([`SnapshotError`]) it carries, and the exit code each ends the command with.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use super::exit;
use crate::input::InputError;
use crate::wording::one_line;

/// Why a subcommand failed.
#[derive(Debug)]
pub enum CliError {
    /// The reports could not be read.
    Input(InputError),
    /// Output could not be written.
    Output {
        /// Where to.
        what: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// `run` failed before the program ran.
    Run(RunError),
    /// A suppressions file could not be read or parsed.
    Suppressions(crate::check::suppressions::ParseError),
    /// `snapshot` got no report.
    Snapshot(Box<SnapshotError>),
    /// `top`, `exporter`: the stats page directory could not be read.
    Scan(crate::live::ScanError),
    /// `exporter`: the address could not be listened on.
    Listen(crate::exporter::server::BindError),
    /// `top`: the terminal could not be used.
    Terminal(io::Error),
    /// An argument the command cannot answer (a moment outside the history), in words.
    Usage(String),
    /// `check`: its PATHs hold no report (empty directories, globs that match nothing).
    NoReport(Vec<std::path::PathBuf>),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Input(e) => e.fmt(f),
            CliError::Output { what, source } => write!(f, "writing {what}: {source}"),
            CliError::Run(e) => e.fmt(f),
            CliError::Suppressions(e) => e.fmt(f),
            CliError::Snapshot(e) => e.fmt(f),
            CliError::Scan(e) => e.fmt(f),
            CliError::Listen(e) => e.fmt(f),
            CliError::Terminal(e) => write!(f, "the terminal: {e}"),
            CliError::Usage(why) => f.write_str(why),
            CliError::NoReport(paths) => {
                const SHOWN: usize = 3;
                let shown: Vec<String> = paths
                    .iter()
                    .take(SHOWN)
                    .map(|p| crate::wording::one_line(&p.display().to_string()))
                    .collect();
                write!(f, "no report in {}", shown.join(", "))?;
                if paths.len() > SHOWN {
                    write!(f, " and {} more", paths.len() - SHOWN)?;
                }
                f.write_str(
                    " (did the program run under cuguard? --allow-empty passes an empty input)",
                )
            }
        }
    }
}

impl std::error::Error for CliError {}

impl CliError {
    /// The exit code this error ends the command with.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Run(e) => e.exit_code(),
            _ => exit::USAGE,
        }
    }

    pub(crate) fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
    }
}

impl From<InputError> for CliError {
    fn from(e: InputError) -> Self {
        CliError::Input(e)
    }
}

/// Why `run` could not start the program.
#[derive(Debug)]
pub enum RunError {
    /// A library (shim or simulated driver) was not found.
    NotFound {
        /// Which library.
        what: &'static str,
        /// Where it was looked for.
        looked: Vec<PathBuf>,
    },
    /// A path that `LD_PRELOAD` or `LD_LIBRARY_PATH` cannot hold (it has a space or colon).
    UnusablePath(PathBuf),
    /// No directory for the simulated driver's links could be made.
    SimDir {
        /// The directory tried last.
        dir: PathBuf,
        /// Why it failed.
        source: io::Error,
    },
    /// No directory for the Python bootstrap could be made.
    PythonDir {
        /// The directory tried last.
        dir: PathBuf,
        /// Why it failed.
        source: io::Error,
    },
    /// PROGRAM not found.
    ProgramNotFound(OsString),
    /// PROGRAM could not be executed.
    ProgramNotExecutable(OsString, io::Error),
    /// Waiting for PROGRAM failed.
    Wait(io::Error),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |p: &Path| one_line(&p.display().to_string());
        match self {
            RunError::NotFound { what, looked } => {
                let looked: Vec<String> = looked.iter().map(|p| show(p)).collect();
                write!(f, "{what} not found (looked at {})", looked.join(", "))
            }
            RunError::UnusablePath(p) => write!(
                f,
                "{}: the dynamic loader cannot take a path with a space or colon",
                show(p)
            ),
            RunError::SimDir { dir, source } => write!(
                f,
                "cannot make the simulated driver's directory {}: {source}",
                show(dir)
            ),
            RunError::PythonDir { dir, source } => write!(
                f,
                "cannot make the directory of cuguard's Python bootstrap {}: {source} \
                 (CUGUARD_PYTHON_END=0 runs without it)",
                show(dir)
            ),
            RunError::ProgramNotFound(p) => {
                write!(f, "{}: program not found", one_line(&p.to_string_lossy()))
            }
            RunError::ProgramNotExecutable(p, e) => {
                write!(f, "{}: cannot execute: {e}", one_line(&p.to_string_lossy()))
            }
            RunError::Wait(e) => write!(f, "waiting for the program: {e}"),
        }
    }
}

impl RunError {
    /// The exit code (see [`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::ProgramNotFound(_) => exit::NOT_FOUND,
            RunError::ProgramNotExecutable(..) => exit::NOT_EXECUTABLE,
            _ => exit::USAGE,
        }
    }
}

impl From<RunError> for CliError {
    fn from(e: RunError) -> Self {
        CliError::Run(e)
    }
}

/// Why a snapshot could not be had.
#[derive(Debug)]
pub enum SnapshotError {
    /// The process does not exist or cannot be read.
    NoProcess(u32, String),
    /// The shim is not loaded in it.
    NoShim(u32),
    /// The shim is loaded but has not armed (no allocation yet) or is disabled.
    NotArmed(u32),
    /// The shim is armed but answers no snapshot signal.
    NoSignal(u32),
    /// The signal could not be sent.
    Send(u32, std::io::Error),
    /// No report appeared in time: where it looked, with why a file found there was not read.
    TimedOut {
        pid: u32,
        looked: Vec<(PathBuf, Option<String>)>,
    },
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::NoProcess(pid, why) => write!(f, "process {pid}: {why}"),
            SnapshotError::NoShim(pid) => {
                write!(
                    f,
                    "process {pid} does not run under cuguard (libcuguard.so is not loaded)"
                )
            }
            SnapshotError::NotArmed(pid) => write!(
                f,
                "process {pid} has not started tracking yet (cuguard starts at the first CUDA allocation), or CUGUARD_DISABLE is set"
            ),
            SnapshotError::NoSignal(pid) => write!(
                f,
                "process {pid} takes no snapshot signal (the program handles CUGUARD_SNAPSHOT_SIGNAL itself, or it is off); restart it with another CUGUARD_SNAPSHOT_SIGNAL"
            ),
            SnapshotError::Send(pid, e) => write!(f, "signalling process {pid}: {e}"),
            SnapshotError::TimedOut { pid, looked } => {
                write!(f, "process {pid} wrote no report in time; looked at ")?;
                let names: Vec<String> = looked
                    .iter()
                    .take(4)
                    .map(|(p, why)| {
                        let p = one_line(&p.display().to_string());
                        match why {
                            Some(why) => format!("{p} ({why})"),
                            None => p,
                        }
                    })
                    .collect();
                write!(f, "{}", names.join(", "))?;
                if looked.len() > 4 {
                    write!(f, " and {} more", looked.len() - 4)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for SnapshotError {}
