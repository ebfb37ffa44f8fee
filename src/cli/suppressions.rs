//! `cuguard suppressions`: write a suppressions file that covers every leak and event in the
//! reports, like Valgrind's `--gen-suppressions`.

use std::path::PathBuf;

use clap::Args;

use super::common::write_output;
use super::error::CliError;
use super::exit;
use crate::check::suppressions::{combine, propose, write_file};
use crate::input;

/// Arguments of `cuguard suppressions`.
#[derive(Debug, Args)]
#[command(after_help = "\
Each rule is preceded by a comment saying what it covers. Leaks without a stack get a
commented-out rule (it would suppress every leak of that driver entry).

Examples:
  cuguard suppressions cuguard.*.json > .cuguard-supp
  cuguard suppressions -o .cuguard-supp reports/
  cuguard check --suppressions .cuguard-supp reports/")]
pub struct SuppressionsArgs {
    /// Write to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Reports: files, directories (every *.json below them) or globs.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Allocation helpers (see `--helper`).
    #[command(flatten)]
    pub helpers: super::common::HelperArgs,
}

/// Runs `cuguard suppressions`.
pub fn run(args: SuppressionsArgs) -> Result<u8, CliError> {
    let per_report = input::map_paths(&args.paths, |_, report| propose(&report))?;
    let reports = per_report.len();
    let proposals = combine(per_report.into_iter().flat_map(|(_, p)| p));
    write_output(args.output.as_deref(), |out| {
        write_file(&proposals, reports, out)
    })?;
    Ok(exit::OK)
}
