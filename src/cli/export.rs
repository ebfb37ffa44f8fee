//! `cuguard export`: a run in another tool's format. `memory-viz`: a process's history as
//! PyTorch's memory snapshot (the pickle <https://pytorch.org/memory_viz> and
//! `torch.cuda._memory_viz` read), with every owner's memory, not only PyTorch's cache.
//! `pprof`: reports (and their histories) as a heap profile for `go tool pprof` and every pprof
//! reader.
//!
//! Each format is one file, `export/memory_viz.rs` and `export/pprof.rs`, listed in
//! [`FORMATS`]: its row makes the file from what is asked ([`Request`], `export/request.rs`) and
//! writes it.

mod memory_viz;
mod pprof;
mod request;

use clap::Args;

use super::common::write_output;
use super::error::CliError;
use super::exit;
use crate::output::{Options, Registry, Row};
pub use request::{Made, Make, Request};

/// The formats of `cuguard export --format`, the default first, each with how it makes its file
/// (see [`crate::output`]).
pub const FORMATS: Registry<Made, Make> = Registry::new(&[
    Row::with::<memory_viz::MemoryViz>(memory_viz::make),
    Row::with::<pprof::Pprof>(pprof::make),
]);

/// Arguments of `cuguard export`.
#[derive(Debug, Args)]
#[command(after_help = "\
memory-viz: the history is the report's (history.files) or the file given. The snapshot holds
the segments and blocks live at the end (of the window, with --between) and every event of the
run (of the window) in device_traces; open it at https://pytorch.org/memory_viz (drag the file
in).

pprof: device memory by call stack as Go's heap profiles have it: inuse_space and
inuse_objects at the end (the report's live allocations; a Python program's when its code
ended; --at a moment of the history), and
alloc_space and alloc_objects over the run (from the history; without one, inuse only). Stacks
hold native frames (with their mappings) and Python frames, in cuguard's mixed order; samples
are labelled device, owner, process and rank. Give one process's report, a merged report, a
history file, or several.

Examples:
  cuguard export --format memory-viz cuguard.train.4242.json -o train.pickle
  cuguard export --format memory-viz train.history --between 12s 14s -o step.pickle
  cuguard export --format memory-viz --force long.json -o whole.pickle   # past 500 MB anyway
  cuguard export --format pprof cuguard.train.4242.json -o train.pb.gz
  go tool pprof -top -sample_index=alloc_space train.pb.gz
  go tool pprof -top -diff_base=before.pb.gz after.pb.gz")]
pub struct ExportArgs {
    /// The format.
    #[arg(long, value_parser = FORMATS, default_value = FORMATS.default_format().name())]
    pub format: &'static Row<Made, Make>,
    /// What the format is asked.
    #[command(flatten)]
    pub request: Request,
    /// Allocation helpers (see `--helper`).
    #[command(flatten)]
    pub helpers: super::common::HelperArgs,
}

/// Runs `cuguard export`.
pub fn run(mut args: ExportArgs) -> Result<u8, CliError> {
    let r = &mut args.request;
    crate::history::phases::untangle(&mut r.between, &mut r.paths);
    if r.paths.is_empty() {
        return Err(CliError::Usage(
            "give the report or history file to export (see cuguard export --help)".into(),
        ));
    }
    let made = (args.format.parts())(&args.request)?;
    write_output(Some(&args.request.output), |w| {
        args.format.write(&made, w, &Options::default())
    })?;
    eprintln!("{}", made.said);
    Ok(exit::OK)
}
