//! What `cuguard export` asks of a format ([`Request`]: every option but `--format`) and what
//! a format makes of it ([`Made`]).

use std::path::PathBuf;

use clap::Args;

use crate::cli::CliError;

/// What a format is asked: the options of `cuguard export` after `--format`.
#[derive(Debug, Args)]
pub struct Request {
    /// memory-viz: only the events between two moments (12.5s, 840ms, peak, oom, end), or of
    /// one phase (phase:NAME#N, an NVTX range), for a history too large for the viewer.
    #[arg(long, num_args = 1..=2, value_names = ["T1", "T2"])]
    pub between: Option<Vec<String>>,
    /// pprof: what was in use at this moment of each process's history (12.5s, 840ms, peak,
    /// oom, end, phase:NAME#N: that phase's peak), and allocated until then, rather than at
    /// the end.
    #[arg(long, value_name = "T")]
    pub at: Option<String>,
    /// Where to write it (both formats are binary: required).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// memory-viz: write a whole run's snapshot past 500 MB anyway (PyTorch's viewer lags past
    /// it; without --force such a snapshot is refused, and a --between window suggested).
    #[arg(long)]
    pub force: bool,
    /// memory-viz: one process's report, or its history file. pprof: reports (merged or not),
    /// or history files.
    #[arg(value_name = "PATH", required_unless_present = "between")]
    pub paths: Vec<PathBuf>,
}

/// A file made for another tool: its bytes, and the line that says what it holds (written to
/// stderr once the file is).
pub struct Made {
    /// The file.
    pub bytes: Vec<u8>,
    /// What was written, for people.
    pub said: String,
}

/// How a format makes its file from the command's arguments (refusing the options that are
/// not its own): the part of its row in [`super::FORMATS`].
pub type Make = fn(&Request) -> Result<Made, CliError>;
