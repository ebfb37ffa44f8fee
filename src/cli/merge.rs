//! `cuguard merge -o OUT PATH…`: many processes' reports in one (see [`crate::merge`]).

use std::path::{Path, PathBuf};

use clap::Args;

use super::common::write_output;
use super::error::CliError;
use super::exit;
use crate::identity::GroupBy;
use crate::input;
use crate::merge::{MergeError, merge};

/// Arguments of `cuguard merge`.
#[derive(Debug, Args)]
#[command(after_help = "\
The merged report holds each process's report verbatim (pid, rank and host included) and is
accepted wherever a report is. Merged inputs are flattened. OUT is written atomically and is
never read as an input.

With --by, the processes are written in group order (ranks as numbers, then those without the
label, input order within a group) and the merge records what it grouped by.

Examples:
  cuguard merge -o job-1234.json 'reports/cuguard.*.json'
  cuguard merge -o all.json rank0/ rank1/ && cuguard check all.json
  cuguard merge --by rank -o job.json 'reports/*.json' && cuguard summary --by rank job.json")]
pub struct MergeArgs {
    /// The merged report to write.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Write the processes grouped by worker (label `worker`), rank, host or process.
    #[arg(long, value_enum, value_name = "WHAT")]
    pub by: Option<GroupBy>,
    /// Reports: files, directories (every *.json below them) or globs.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

/// Runs `cuguard merge`.
pub fn run(args: MergeArgs) -> Result<u8, CliError> {
    let out = std::fs::canonicalize(&args.output).ok();
    let files: Vec<PathBuf> = input::expand(&args.paths)?
        .into_iter()
        .filter(|f| out.is_none() || std::fs::canonicalize(f).ok() != out)
        .collect();
    let mut input_error = None;
    let written = write_output(Some(Path::new(&args.output)), |w| {
        match merge(&files, args.by, w) {
            Ok(_) => Ok(()),
            Err(MergeError::Write(e)) => Err(e),
            Err(MergeError::Input(e)) => {
                input_error = Some(e);
                Err(std::io::Error::other("input error"))
            }
        }
    });
    match (input_error, written) {
        (Some(e), _) => Err(e.into()),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Ok(exit::OK),
    }
}
