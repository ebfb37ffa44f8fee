//! `cuguard view PATH… -o report.html`: one self-contained HTML page (see [`crate::view`]).

use std::collections::HashSet;
use std::path::PathBuf;

use clap::Args;

use super::common::write_output;
use super::error::CliError;
use super::exit;
use crate::input;
use crate::view::fold::ViewFold;
use crate::view::{ProcessView, html};

/// Arguments of `cuguard view`.
#[derive(Debug, Args)]
#[command(after_help = "\
The page needs no network: styles, script and data are inline. It shows device memory over time
(live and reserved, per device, from the reports' timelines), the top sites, and a flame graph
of leaked bytes by stack. Over 100 processes, it lists the 25 that leaked most and adds up the
others; every process is in the page, compressed, opened by its search box (pid, rank, host or
name) or its \"Show all\" button.

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
    /// Allocation helpers (see `--helper`).
    #[command(flatten)]
    pub helpers: super::common::HelperArgs,
}

/// Runs `cuguard view`.
pub fn run(args: ViewArgs) -> Result<u8, CliError> {
    // History files (a process killed before its report) are read as histories.
    let (histories, reports): (Vec<PathBuf>, Vec<PathBuf>) = args
        .paths
        .iter()
        .cloned()
        .partition(|p| input::is_history(p));
    let top = if args.top == 0 { usize::MAX } else { args.top };
    // Each process is condensed as it is read (its leaks folded while parsed) and added to the
    // view, then dropped: memory holds what the page shows, not the processes.
    let mut fold = ViewFold::new(top);
    // The histories the reports name: the first few drawn (each is read whole).
    let mut drawn = 0;
    let mut left_out = 0;
    // The history files the reports name, when history files are given too: a history given
    // beside the report that names it is that report's process, shown once.
    let mut named: HashSet<PathBuf> = HashSet::new();
    if !reports.is_empty() {
        let files = input::expand(&reports)?;
        input::for_each_folded(
            &files,
            crate::view::SECTION_TOP,
            |source, report, leaks| ProcessView::folded(source, &report, &leaks),
            |_, mut p| {
                if !histories.is_empty() {
                    named.extend(p.history_files.iter().filter_map(|f| f.canonicalize().ok()));
                }
                if p.history.is_some() {
                    if drawn < crate::view::MAX_TIMELINES {
                        p.draw_history();
                        drawn += 1;
                    } else {
                        left_out += 1;
                    }
                }
                fold.add(p);
            },
        )?;
    }
    for path in histories {
        if path.canonicalize().is_ok_and(|c| named.contains(&c)) {
            continue;
        }
        let opened = crate::history::load(&path)?;
        let source = input::Source { path, index: None };
        fold.add(ProcessView::from_history(&source, &opened));
    }
    let mut view = fold.finish().map_err(|e| CliError::Output {
        what: "a temporary file".into(),
        source: e,
    })?;
    if left_out > 0 {
        view.timeline_notes.push(format!(
            "{left_out} more processes have a history: view them one at a time (at most {} are drawn on a page)",
            crate::view::MAX_TIMELINES
        ));
    }
    write_output(Some(&args.output), |out| html::write(&view, out))?;
    Ok(exit::OK)
}
