//! `cuguard view PATH… -o report.html`: one self-contained HTML page (see [`crate::view`]).

use std::path::PathBuf;

use clap::Args;

use super::{CliError, exit, write_output};
use crate::input;
use crate::view::{ProcessView, View, html};

/// Arguments of `cuguard view`.
#[derive(Debug, Args)]
#[command(after_help = "\
The page needs no network: styles, script and data are inline. It shows device memory over time
(live and reserved, per device, from the reports' timelines), the top sites, and a flame graph
of leaked bytes by stack.

Examples:
  cuguard view cuguard.train.4242.json -o report.html
  cuguard view --top 50 reports/ -o leaks.html")]
pub struct ViewArgs {
    /// The HTML file to write.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// How many sites the table lists (0: all).
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub top: usize,
    /// Reports: files, directories (every *.json below them) or globs.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// Runs `cuguard view`.
pub fn run(args: ViewArgs) -> Result<u8, CliError> {
    let processes = input::map_paths(&args.paths, |source, report| {
        ProcessView::new(source, &report)
    })?;
    let top = if args.top == 0 { usize::MAX } else { args.top };
    let view = View::new(processes.into_iter().map(|(_, p)| p).collect(), top);
    write_output(Some(&args.output), |out| html::write(&view, out))?;
    Ok(exit::OK)
}
