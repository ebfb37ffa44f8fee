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
    // History files (a process killed before its report) are read as histories.
    let (histories, reports): (Vec<PathBuf>, Vec<PathBuf>) =
        args.paths.iter().cloned().partition(|p| is_history(p));
    let mut processes: Vec<ProcessView> = Vec::new();
    if !reports.is_empty() {
        processes.extend(
            input::map_paths(&reports, |source, report| ProcessView::new(source, &report))?
                .into_iter()
                .map(|(_, p)| p),
        );
    }
    // The histories the reports name: the first few drawn (each is read whole).
    let mut drawn = 0;
    let mut left_out = 0;
    for p in &mut processes {
        if p.history.is_some() {
            if drawn < crate::view::MAX_TIMELINES {
                p.draw_history();
                drawn += 1;
            } else {
                left_out += 1;
            }
        }
    }
    for path in histories {
        let loaded = crate::history::load(&path)?;
        let source = input::Source { path, index: None };
        processes.push(ProcessView::from_history(&source, &loaded));
    }
    let top = if args.top == 0 { usize::MAX } else { args.top };
    let mut view = View::new(processes, top);
    if left_out > 0 {
        view.timeline_notes.push(format!(
            "{left_out} more processes have a history: view them one at a time (at most {} are drawn on a page)",
            crate::view::MAX_TIMELINES
        ));
    }
    write_output(Some(&args.output), |out| html::write(&view, out))?;
    Ok(exit::OK)
}

/// Whether `path` is a history file (it begins as one).
fn is_history(path: &std::path::Path) -> bool {
    use std::io::Read as _;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    let mut head = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && &head == cuguard_history::MAGIC
}
