//! `cuguard symbolize REPORT`: fill in function, file and line for frames the shim could not name
//! (the process exited before its symbols could be read, ran out of the symbolization time, or ran
//! where the binaries' debug information was not), and recompute each stack's site.
//!
//! It reads the binaries named in the report's frames (checking their build-id against the
//! report's `modules`, so a rebuilt binary is never trusted), plus separate debug files under
//! `--debug-dir` and the usual places. Stacks are rewritten through the report's types
//! (`cuguard_report::edit`); everything else in the report is kept as it was. A merged report is
//! symbolized process by process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::Args;
use cuguard_report::edit::edit_stacks;
use cuguard_report::merged::processes_mut;
use cuguard_report::site_list;
use cuguard_symbolize::Symbolizer;
use cuguard_symbolize::site::{Plumbing, SiteFrame, find_site};
use serde_json::Value;

use super::{CliError, exit, write_output};
use crate::input::InputError;
use crate::report::{Document, Frame, PyFrame, ReadError, StackSite};

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
}

/// Runs `cuguard symbolize`.
pub fn run(args: SymbolizeArgs) -> Result<u8, CliError> {
    // Read (and validate) through the ordinary reader first, for its one-line errors.
    let doc = Document::read_with_limit(&args.report, crate::input::max_report_bytes())
        .map_err(|e| CliError::Input(InputError::from(e)))?;
    drop(doc);
    let text = std::fs::read(&args.report).map_err(|e| read_error(&args.report, e.to_string()))?;
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

/// Names the frames of one process's report and recomputes its stacks' sites. The stacks are
/// read and written back through the report's types; every other field is kept as it is.
pub fn symbolize_report(report: &mut Value, symbolizer: &mut Symbolizer, plumbing: &Plumbing) {
    // The report was read as a report first, so its stacks are well-formed.
    let _ = edit_stacks(report, |stacks, modules| {
        let build_ids: HashMap<&str, Option<&str>> = modules
            .iter()
            .map(|m| (m.path.as_str(), m.build_id.as_deref()))
            .collect();
        for stack in stacks {
            let frames = std::mem::take(&mut stack.frames);
            let mut named = Vec::with_capacity(frames.len());
            for frame in frames {
                if frame.function.is_some() || frame.module.is_empty() {
                    named.push(frame);
                    continue;
                }
                let build_id = build_ids.get(&*frame.module).copied().flatten();
                let found =
                    symbolizer.symbolize(Path::new(&*frame.module), build_id, frame.offset.0);
                if found.is_empty() {
                    named.push(frame);
                    continue;
                }
                let last = found.len() - 1;
                for (i, f) in found.into_iter().enumerate() {
                    named.push(Frame {
                        function: f.function.map(Into::into),
                        file: f.file.map(Into::into),
                        line: f.line,
                        inlined: (i < last).then_some(true),
                        ..frame.clone()
                    });
                }
            }
            stack.frames = named;
            stack.site = site_of(&stack.frames, &stack.python, plumbing);
        }
    });
}

fn is_interpreter(module: &str) -> bool {
    let name = module.rsplit('/').next().unwrap_or(module);
    name.starts_with("libpython") || name.starts_with("python")
}

/// The site of a stack, as the shim picks it: native frames above the Python interpreter, then
/// the Python frames, then the rest of the native frames.
fn site_of(frames: &[Frame], python: &[PyFrame], plumbing: &Plumbing) -> Option<StackSite> {
    let split = if python.is_empty() {
        frames.len()
    } else {
        frames
            .iter()
            .position(|f| is_interpreter(&f.module))
            .unwrap_or(frames.len())
    };
    // (which list, index in it) in the order the rule walks them.
    let mut order: Vec<(&str, usize)> = (0..split).map(|i| (site_list::FRAMES, i)).collect();
    order.extend((0..python.len()).map(|i| (site_list::PYTHON, i)));
    order.extend((split..frames.len()).map(|i| (site_list::FRAMES, i)));
    let site_frames: Vec<SiteFrame> = order
        .iter()
        .map(|&(list, i)| {
            if list == site_list::FRAMES {
                let f = &frames[i];
                SiteFrame {
                    module: &f.module,
                    function: f.function.as_deref(),
                    file: f.file.as_deref(),
                    line: f.line,
                    offset: f.offset.0,
                }
            } else {
                let f = &python[i];
                SiteFrame {
                    module: "",
                    function: Some(&f.function),
                    file: Some(&f.file),
                    line: f.line,
                    offset: 0,
                }
            }
        })
        .collect();
    let site = find_site(&site_frames, plumbing)?;
    let (list, index) = order[site.index];
    Some(StackSite {
        in_: list.into(),
        index,
        fingerprint: site.fingerprint,
        kind: None,
    })
}
