//! `cuguard symbolize REPORT`: fill in function, file and line for frames the shim could not name
//! (the process exited before its symbols could be read, ran out of the symbolization time, or ran
//! where the binaries' debug information was not), and recompute what depends on the names: each
//! stack's mixed native and Python order (`stacks[].mixed`), its site and the site's kind
//! (`stacks[].site`), its owner (`stacks[].owner`; for the memory kind its leaks share), each
//! leak's owner where the report has one (`leaks[].owner`; without them readers take the
//! stack's), and the owners the report describes (`owners[]`), with the built-in rules of
//! `cuguard_symbolize::rules` plus `--plumbing` and `--owner-rule`.
//!
//! It reads the binaries named in the report's frames (checking their build-id against the
//! report's `modules`, so a rebuilt binary is never trusted), plus separate debug files under
//! `--debug-dir` and the usual places. Stacks are rewritten through the report's types
//! (`cuguard_format::edit`), leaks' owners and `owners[]` key by key; everything else in the
//! report is kept as it was. A merged report is symbolized process by process.

use std::path::{Path, PathBuf};

use clap::Args;
use cuguard_format::merged::processes_mut;
use cuguard_symbolize::Symbolizer;
use cuguard_symbolize::site::Plumbing;
use serde_json::Value;

use super::common::write_output;
use super::error::CliError;
use super::exit;
use crate::input::InputError;
use crate::naming::symbolize_report;
use cuguard_format::{Document, ReadError};

/// Arguments of `cuguard symbolize`.
#[derive(Debug, Args)]
#[command(after_help = "\
Frames already named are kept. The report is rewritten in place (atomically) unless -o is given.

Examples:
  cuguard symbolize cuguard.train.4242.json
  cuguard symbolize --debug-dir /srv/debug -o named.json cuguard.train.4242.json")]
pub struct SymbolizeArgs {
    /// The report (single or merged).
    pub report: PathBuf,
    /// Where to write the result (default: replace REPORT).
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// More directories of separate debug files (by build-id: DIR/xx/yyyy.debug, or by name).
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    /// More frames that are not the user's code, for sites (module:GLOB, function:GLOB, file:GLOB;
    /// repeatable or comma-separated), as CUGUARD_PLUMBING.
    #[arg(long, value_name = "PATTERN")]
    pub plumbing: Vec<String>,
    /// More owner rules (OWNER=CONDITION[&CONDITION…], OWNER an owner id or NEW_ID:KIND;
    /// repeatable or comma-separated), as CUGUARD_OWNERS.
    #[arg(long = "owner-rule", value_name = "RULE")]
    pub owner_rules: Vec<String>,
}

/// Runs `cuguard symbolize`.
pub fn run(args: SymbolizeArgs) -> Result<u8, CliError> {
    // Read (and validate) through the ordinary reader first, for its one-line errors.
    let doc = Document::read_with_limit(&args.report, crate::input::max_report_bytes())
        .map_err(|e| CliError::Input(InputError::from(e)))?;
    drop(doc);
    // Read again as the reader did: a regular file, to its size when opened (the name may have
    // been replaced meanwhile by a FIFO, which would block).
    let text = {
        use std::io::Read as _;
        let (file, size) = cuguard_format::read::open_regular(&args.report)
            .map_err(|e| read_error(&args.report, e.to_string()))?;
        let mut text = Vec::new();
        file.take(size.min(crate::input::max_report_bytes()))
            .read_to_end(&mut text)
            .map_err(|e| read_error(&args.report, e.to_string()))?;
        text
    };
    let mut value: Value =
        serde_json::from_slice(&text).map_err(|e| read_error(&args.report, e.to_string()))?;
    let mut plumbing = Plumbing::builtin();
    for p in args
        .plumbing
        .iter()
        .flat_map(|p| p.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        plumbing
            .add(p)
            .map_err(|e| read_error(Path::new("--plumbing"), e.to_string()))?;
    }
    let mut rules = plumbing.into_rules();
    for spec in &args.owner_rules {
        rules
            .add_owner_spec(spec)
            .map_err(|e| read_error(Path::new("--owner-rule"), e.to_string()))?;
    }
    let plumbing = Plumbing::from(rules);
    let mut symbolizer = Symbolizer::new(None).with_debug_dirs(args.debug_dirs.clone());
    if let Some(processes) = processes_mut(&mut value) {
        for p in processes {
            symbolize_report(p, &mut symbolizer, &plumbing);
        }
    } else {
        symbolize_report(&mut value, &mut symbolizer, &plumbing);
    }
    let out = args.output.as_deref().unwrap_or(&args.report);
    write_output(Some(out), |w| {
        serde_json::to_writer(&mut *w, &value)?;
        w.write_all(b"\n")
    })?;
    Ok(exit::OK)
}

fn read_error(path: &Path, reason: String) -> CliError {
    CliError::Input(InputError::from(ReadError::Invalid {
        path: path.to_path_buf(),
        process: None,
        reason,
    }))
}
