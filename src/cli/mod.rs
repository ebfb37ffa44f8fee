//! The `cuguard` command: argument parsing (clap) and one module per subcommand.
//!
//! - [`run`](run/index.html): run a program under the shim;
//! - `summary`: read reports and summarize them;
//! - `check`: the CI gate, with suppressions and baselines;
//! - `suppressions`: generate suppressions from reports;
//! - `merge`: many processes' reports in one;
//! - `diff`: what changed between two runs;
//! - `view`: a self-contained HTML page.
//!
//! - `symbolize`: name the frames the shim could not, and recompute sites;
//! - `snapshot`: make a running process write its report now;
//! - `top`: the processes under the shim, live; `exporter`: their Prometheus metrics.
//!
//! Exit codes are documented in [`exit`].

mod check;
mod diff;
pub mod exit;
mod export;
mod exporter;
mod merge;
mod pages;
mod run;
mod sanitizer;
mod snapshot;
mod summary;
mod suppressions;
pub(crate) mod symbolize;
mod top;
mod view;

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

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
    /// Make a running process (under the shim) write its report now; prints its path.
    Snapshot(snapshot::SnapshotArgs),
    /// Name the frames the shim could not (function, file, line) and recompute sites.
    Symbolize(symbolize::SymbolizeArgs),
    /// Watch this user's processes under the shim, live (like top); --once prints one frame.
    Top(top::TopArgs),
    /// Serve this user's processes' live memory as Prometheus metrics (or write a textfile).
    Exporter(exporter::ExporterArgs),
}

/// `--helper`: the allocation helpers the analysis looks through ([`crate::call_path`]).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct HelperArgs {
    /// A function that wraps the allocation (`alloc`, `make_*`; repeat, or comma-separate):
    /// its callers are the sites. Helpers every call path of a site shares are found without
    /// it; `--helper none` turns that off. Adds to CUGUARD_HELPERS.
    #[arg(long = "helper", value_name = "FUNCTION")]
    pub helper: Vec<String>,
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
    /// A suppressions file could not be read or parsed.
    Suppressions(crate::check::suppressions::ParseError),
    /// `snapshot` got no report.
    Snapshot(Box<snapshot::SnapshotError>),
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

/// Writes to `path`, or to standard output when `path` is `None`, as every file cuguard writes
/// is written ([`cuguard_files::replace`]): a temporary file with an unpredictable name in the
/// same directory, created without following links, mode 0600, then renamed into place. A link,
/// another user's file or a non-regular file at `path` is refused, and the error says so.
pub(crate) fn write_output(
    path: Option<&std::path::Path>,
    f: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), CliError> {
    let Some(path) = path else {
        return write_stdout(f);
    };
    // Temporaries of a writer killed before its rename (an hour or more old) are this user's to
    // clear.
    cuguard_files::clean_stale_temps(path, std::time::Duration::from_secs(3600));
    cuguard_files::replace(path, 0o600, |file| {
        let mut out = io::BufWriter::new(file);
        f(&mut out)?;
        out.flush()
    })
    .map_err(|source| CliError::Output {
        what: crate::wording::one_line(&path.display().to_string()),
        source,
    })
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
