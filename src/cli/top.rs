//! `cuguard top`: this user's processes under the shim, live (see [`crate::top`]), or one frame
//! as plain text with `--once`.

use std::io::{self, IsTerminal};
use std::time::Duration;

use clap::Args;

use super::common::write_stdout;
use super::error::CliError;
use super::exit;
use super::pages::{self, PagesArgs};
use super::snapshot::{self, SnapshotArgs};
use crate::style::Style;
use crate::top::{app::App, once, terminal};

/// Arguments of `cuguard top`.
#[derive(Debug, Args)]
#[command(after_help = "\
One row per process and device: pid, executable, rank or worker, live, peak and reserved bytes,
growth over the page's history, and a sparkline of it. Keys: Up/Down select, Enter shows the
process's top sites and contexts, s asks it for a snapshot report (as cuguard snapshot), q or Esc
quits. Colour follows NO_COLOR. Processes appear once they run under the shim and have made their
first CUDA allocation.

Examples:
  cuguard top
  cuguard top --once                     # one frame as plain text, for scripts
  watch -n 5 cuguard top --once")]
pub struct TopArgs {
    /// Print one frame as plain text and exit: a header line, then one line per process and
    /// device (pid, rank, device, live, peak, reserved, growth, executable).
    #[arg(long)]
    pub once: bool,
    /// Seconds between reads of the pages.
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = pages::interval)]
    pub interval: Duration,
    #[command(flatten)]
    pub pages: PagesArgs,
}

/// Runs `cuguard top`.
pub fn run(args: TopArgs) -> Result<u8, CliError> {
    let mut reader = args.pages.reader();
    if args.once {
        let scan = reader.scan().map_err(CliError::Scan)?;
        pages::say_notes(&scan);
        write_stdout(|out| once::write(&scan.processes, reader.dir(), out))?;
        return Ok(exit::OK);
    }
    if !io::stdout().is_terminal() {
        return Err(CliError::Terminal(io::Error::other(
            "standard output is not a terminal; `cuguard top --once` prints one frame as plain text",
        )));
    }
    // A directory that cannot be read is said before the screen is taken.
    reader.scan().map_err(CliError::Scan)?;
    let app = App::new(
        reader.dir().to_path_buf(),
        args.interval,
        Style::for_stdout().color,
    );
    let app = terminal::run(app, reader, ask_snapshot).map_err(CliError::Terminal)?;
    for note in &app.notes {
        eprintln!("cuguard: {note}");
    }
    Ok(exit::OK)
}

/// Asks `pid` for a snapshot report as `cuguard snapshot PID` does; one line on how it went.
fn ask_snapshot(pid: u32) -> String {
    let args = SnapshotArgs {
        pid,
        wait: 30.0,
        report: None,
        max_size: snapshot::DEFAULT_MAX_SIZE,
    };
    match snapshot::snapshot(&args) {
        Ok(path) => format!("process {pid} wrote its report: {}", path.display()),
        Err(e) => format!("no snapshot: {e}"),
    }
}
