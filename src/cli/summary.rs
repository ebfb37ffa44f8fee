//! `cuguard summary`: read reports, print what leaked where.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{CliError, exit, write_stdout};
use crate::input;
use crate::style::Style;
use crate::summary::{self, ReportSummary, Summary};

/// Output formats of `summary`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For a terminal (colour on a TTY unless NO_COLOR is set).
    #[default]
    Text,
    /// One JSON document (see docs/cli.md).
    Json,
    /// Markdown, for a pull-request comment.
    Markdown,
}

/// Arguments of `cuguard summary`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  cuguard summary cuguard.train.4242.json
  cuguard summary --top 5 reports/                  # every *.json below reports/
  cuguard summary --format markdown 'reports/*.json' > comment.md")]
pub struct SummaryArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// How many sites and leaks to list per process (0: all).
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// Reports: files, directories (every *.json below them) or globs.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// Runs `cuguard summary`.
pub fn run(args: SummaryArgs) -> Result<u8, CliError> {
    let top = if args.top == 0 { usize::MAX } else { args.top };
    let processes = input::map_paths(&args.paths, |source, report| {
        ReportSummary::new(source, &report, top)
    })?;
    let summary = Summary::new(processes.into_iter().map(|(_, s)| s).collect(), top);
    let style = Style::for_stdout();
    write_stdout(|out| match args.format {
        Format::Text => summary::text::write(&summary, out, style),
        Format::Json => summary::json::write(&summary, out),
        Format::Markdown => summary::markdown::write(&summary, out),
    })?;
    Ok(exit::OK)
}
