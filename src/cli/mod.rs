//! The `cuguard` command: argument parsing (clap) and one module per subcommand.
//!
//! - [`run`](run/index.html): run a program under the shim;
//! - `summary`: read reports and summarize them;
//! - `check`: the CI gate, with suppressions and baselines;
//! - `suppressions`: generate suppressions from reports;
//! - `merge`: many processes' reports in one;
//! - `diff`: what changed between two runs;
//! - `view`: a self-contained HTML page;
//! - `replay`: a process's history replayed against models of allocators: what would have fit.
//!
//! - `symbolize`: name the frames the shim could not, and recompute sites;
//! - `snapshot`: make a running process write its report now;
//! - `top`: the processes under the shim, live; `exporter`: their Prometheus metrics.
//!
//! What the subcommands share: `common.rs` (`--helper`, writing output) and `error.rs` (why a
//! subcommand failed, [`CliError`], with `run`'s and `snapshot`'s errors). Exit codes are
//! documented in [`exit`].

mod check;
mod common;
mod diff;
mod error;
pub mod exit;
pub(crate) mod export;
mod exporter;
mod merge;
mod pages;
mod replay;
mod run;
mod sanitizer;
mod snapshot;
mod summary;
mod suppressions;
pub(crate) mod symbolize;
mod top;
mod view;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

pub use common::HelperArgs;
pub use error::CliError;

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
    /// Pass or fail reports against limits, suppressions and a baseline (for CI).
    Check(check::CheckArgs),
    /// Write a suppressions file covering every leak and event in the reports.
    Suppressions(suppressions::SuppressionsArgs),
    /// Combine many processes' reports into one merged report.
    Merge(merge::MergeArgs),
    /// Show sites that are new, fixed, grown or shrunk between two runs.
    Diff(diff::DiffArgs),
    /// Write one self-contained HTML page: memory over time, top sites, flame graph.
    View(view::ViewArgs),
    /// Write a process's history in another tool's format (PyTorch's memory_viz).
    Export(export::ExportArgs),
    /// Replay a process's history against models of allocators at a capacity: what would have fit.
    Replay(replay::ReplayArgs),
    /// Make a running process (under the shim) write its report now; prints its path.
    Snapshot(snapshot::SnapshotArgs),
    /// Name the frames the shim could not (function, file, line) and recompute sites.
    Symbolize(symbolize::SymbolizeArgs),
    /// Watch this user's processes under the shim, live (like top); --once prints one frame.
    Top(top::TopArgs),
    /// Serve this user's processes' live memory as Prometheus metrics (or write a textfile).
    Exporter(exporter::ExporterArgs),
}

/// Runs a parsed command line; returns the exit code.
pub fn dispatch(cli: Cli) -> Result<u8, CliError> {
    let helpers = match &cli.command {
        Command::Summary(a) => Some(&a.helpers),
        Command::Check(a) => Some(&a.helpers),
        Command::Suppressions(a) => Some(&a.helpers),
        Command::Diff(a) => Some(&a.helpers),
        Command::View(a) => Some(&a.helpers),
        Command::Export(a) => Some(&a.helpers),
        _ => None,
    };
    crate::call_path::configure(helpers.map_or(&[][..], |h| &h.helper[..]));
    match cli.command {
        Command::Run(args) => match args.sanitizer {
            Some(tool) => sanitizer::run(&args, tool),
            None => run::run(args),
        },
        Command::Summary(args) => summary::run(args),
        Command::Check(args) => check::run(args),
        Command::Suppressions(args) => suppressions::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Diff(args) => diff::run(args),
        Command::View(args) => view::run(args),
        Command::Export(args) => export::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Snapshot(args) => snapshot::run(args),
        Command::Symbolize(args) => symbolize::run(args),
        Command::Top(args) => top::run(args),
        Command::Exporter(args) => exporter::run(args),
    }
}

/// The whole command: parses `std::env::args`, runs, prints errors as one line on standard
/// error, usage errors included ([`usage_error`]), and returns the exit code (see [`exit`]).
pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // `--help`, `--version`: printed in full on standard output.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(exit::OK);
        }
        // `cuguard` alone: the help is the answer (on standard error, exit 2).
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(exit::USAGE);
        }
        Err(e) => {
            eprintln!("cuguard: error: {}", usage_error(&e, &args));
            return ExitCode::from(exit::USAGE);
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

/// One of clap's usage errors in one line: clap's message (its first paragraph, without the
/// usage and "For more information" lines that follow), its suggestion, and the `--help` to
/// read, the subcommand's when `args` name one: `unexpected argument '--formt' found; did you
/// mean '--format'? (see cuguard check --help)`. Characters that could break the line are
/// escaped.
fn usage_error(error: &clap::Error, args: &[OsString]) -> String {
    use clap::error::{ContextKind, ContextValue};
    let rendered = error.to_string();
    let mut message = rendered
        .lines()
        .map(str::trim)
        .take_while(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(rest) = message.strip_prefix("error: ") {
        message = rest.to_string();
    }
    let quoted = |values: &[String]| {
        values
            .iter()
            .map(|v| format!("'{v}'"))
            .collect::<Vec<_>>()
            .join(" or ")
    };
    for kind in [
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedArg,
        ContextKind::SuggestedValue,
    ] {
        match error.get(kind) {
            Some(ContextValue::String(v)) => message.push_str(&format!(
                "; did you mean {}?",
                quoted(std::slice::from_ref(v))
            )),
            Some(ContextValue::Strings(v)) if !v.is_empty() => {
                message.push_str(&format!("; did you mean {}?", quoted(v)))
            }
            _ => {}
        }
    }
    // Before the subcommand only `--help` and `--version` are options: the first word that is
    // not an option names it.
    let named = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy())
        .find(|a| !a.starts_with('-'));
    let command = Cli::command();
    let help = match named.as_deref().and_then(|n| command.find_subcommand(n)) {
        Some(sub) => format!("cuguard {} --help", sub.get_name()),
        None => "cuguard --help".to_string(),
    };
    format!("{} (see {help})", cuguard_format::escaped(&message))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn no_report_says_where_it_looked_and_what_to_do() {
        let paths = ["reports/", "a b", "r/*.json", "d", "e"].map(std::path::PathBuf::from);
        let error = super::CliError::NoReport(paths.to_vec());
        assert_eq!(
            error.to_string(),
            "no report in reports/, a b, r/*.json and 2 more \
             (did the program run under cuguard? --allow-empty passes an empty input)"
        );
        assert_eq!(error.exit_code(), super::exit::USAGE);
    }

    /// `usage_error` of what clap says to `args`.
    fn said(args: &[&str]) -> String {
        use clap::Parser;
        let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        let error = super::Cli::try_parse_from(&args).unwrap_err();
        super::usage_error(&error, &args)
    }

    #[test]
    fn usage_errors_are_one_line_naming_the_help_to_read() {
        assert_eq!(
            said(&["cuguard", "check", "--top", "x", "r.json"]),
            "invalid value 'x' for '--top <N>': invalid digit found in string \
             (see cuguard check --help)"
        );
        assert_eq!(
            said(&["cuguard", "check", "--format"]),
            "a value is required for '--format <FORMAT>' but none was supplied \
             [possible values: text, json, junit, sarif, github] (see cuguard check --help)"
        );
        assert_eq!(
            said(&["cuguard", "--bogus"]),
            "unexpected argument '--bogus' found (see cuguard --help)"
        );
        assert_eq!(
            said(&["cuguard", "help", "frobnicate"]),
            "unrecognized subcommand 'frobnicate' (see cuguard --help)"
        );
        // What the user typed cannot break the line or drive the terminal: clap drops escape
        // sequences, and what else could break the line is escaped.
        let line = said(&[
            "cuguard",
            "check",
            "--max-leaks",
            "1\u{1b}[31m\r2",
            "r.json",
        ]);
        assert!(
            line.starts_with("invalid value '1\\r2' for '--max-leaks <N>'"),
            "{line}"
        );
        assert!(!line.chars().any(char::is_control), "{line}");
    }
}
