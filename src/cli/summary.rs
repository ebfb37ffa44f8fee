//! `cuguard summary`: read reports, print what leaked where.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, exit, write_stdout};
use crate::format::{Options, Row};
use crate::input;
use crate::style::Style;
use crate::summary::{FORMATS, ReportSummary, Summary, SummaryFold};

/// Arguments of `cuguard summary`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  cuguard summary cuguard.train.4242.json
  cuguard summary --top 5 reports/                  # every *.json below reports/
  cuguard summary --format markdown 'reports/*.json' > comment.md")]
pub struct SummaryArgs {
    /// Output format.
    #[arg(long, value_parser = FORMATS, default_value = FORMATS.default_format().name())]
    pub format: &'static Row<Summary>,
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
    let files = input::expand(&args.paths)?;
    let mut fold = SummaryFold::new(top);
    input::for_each_folded(
        &files,
        top,
        |source, report, leaks| ReportSummary::folded(source, &report, &leaks, top),
        |_, process| fold.add(process),
    )?;
    let summary = fold.finish();
    let options = Options {
        style: Style::for_stdout(),
        top,
    };
    write_stdout(|out| args.format.write(&summary, out, &options))?;
    Ok(exit::OK)
}
