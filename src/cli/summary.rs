//! `cuguard summary`: read reports, print what leaked where.

use std::path::PathBuf;

use clap::Args;

use super::{CliError, exit, write_stdout};
use crate::format::{Options, Row};
use crate::identity::GroupBy;
use crate::input;
use crate::style::Style;
use crate::summary::{FORMATS, ReportSummary, Summary};

/// Arguments of `cuguard summary`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  cuguard summary cuguard.train.4242.json
  cuguard summary --top 5 reports/                  # every *.json below reports/
  cuguard summary --format markdown 'reports/*.json' > comment.md
  cuguard summary --by rank job-1234.json           # a merged report, one group per rank

Across three or more processes, a process that holds (or grew) at least 4x the median and
at least 64 MiB more at a site is called out; incomplete reports and ranks missing from
0..WORLD_SIZE are listed.")]
pub struct SummaryArgs {
    /// Output format.
    #[arg(long, value_parser = FORMATS, default_value = FORMATS.default_format().name())]
    pub format: &'static Row<Summary>,
    /// Group the processes of a job by worker (label `worker`), rank, host or process, with
    /// each group's leaks, peak, growth and largest sites.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub by: Option<GroupBy>,
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
    let summary = Summary::grouped(
        processes.into_iter().map(|(_, s)| s).collect(),
        top,
        args.by,
    );
    let options = Options {
        style: Style::for_stdout(),
        top,
    };
    write_stdout(|out| args.format.write(&summary, out, &options))?;
    Ok(exit::OK)
}
