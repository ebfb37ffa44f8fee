//! The `cuguard` command: argument parsing (clap) and one module per subcommand.
//!
//! - [`run`](run/index.html): run a program under the shim;
//! - `summary`: read reports and summarize them.
//!
//! A `symbolize` subcommand (turning `module+offset` frames into functions and lines, and
//! reading Python frames) belongs next to these as `cli/symbolize.rs`, a variant of [`Command`],
//! and an arm in [`dispatch`]; its library side would sit beside [`crate::sites`].
//!
//! Exit codes are documented in [`exit`].

pub mod exit;
mod run;
mod summary;

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::input::InputError;

/// Find, explain and gate CUDA device-memory leaks.
#[derive(Debug, Parser)]
#[command(
    name = "cuguard",
    version,
    about = "Find, explain and gate CUDA device-memory leaks",
    long_about = "Find, explain and gate CUDA device-memory leaks.\n\n\
        `cuguard run -- PROGRAM` runs PROGRAM with the libcuguard.so shim preloaded; the shim \
        writes a JSON report per process when it ends. The other subcommands read those reports \
        (files, directories of *.json, or globs; merged reports too).",
    after_help = exit::HELP
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a program with the cuguard shim preloaded.
    Run(run::RunArgs),
    /// Summarize reports: leaks by device, context and site; events.
    Summary(summary::SummaryArgs),
}

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
    Run(run::RunError),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Input(e) => e.fmt(f),
            CliError::Output { what, source } => write!(f, "writing {what}: {source}"),
            CliError::Run(e) => e.fmt(f),
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

    fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Output { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
    }
}

impl From<InputError> for CliError {
    fn from(e: InputError) -> Self {
        CliError::Input(e)
    }
}

/// Writes to standard output through a buffer; errors name standard output.
pub(crate) fn write_stdout(
    f: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), CliError> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    f(&mut out)
        .and_then(|()| out.flush())
        .map_err(|source| CliError::Output {
            what: "standard output".into(),
            source,
        })
}

/// Runs a parsed command line; returns the exit code.
pub fn dispatch(cli: Cli) -> Result<u8, CliError> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Summary(args) => summary::run(args),
    }
}

/// The whole command: parses `std::env::args`, runs, prints errors as one line on standard
/// error, and returns the exit code (see [`exit`]).
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    match dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.is_broken_pipe() => ExitCode::from(exit::OK),
        Err(e) => {
            eprintln!("cuguard: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
