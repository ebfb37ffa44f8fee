//! `cuguard symbolize REPORT`: fill in function, file and line for frames the shim could not name
//! (the process exited before its symbols could be read, ran out of the symbolization time, or ran
//! where the binaries' debug information was not), and recompute each stack's site.
//!
//! It reads the binaries named in the report's frames (checking their build-id against the
//! report's `modules`, so a rebuilt binary is never trusted), plus separate debug files under
//! `--debug-dir` and the usual places. Everything else in the report is kept as it was. A merged
//! report is symbolized process by process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use clap::Args;
use cuguard_symbolize::Symbolizer;
use cuguard_symbolize::site::{Plumbing, SiteFrame, find_site};
use serde_json::{Map, Value, json};

use super::{CliError, exit, write_output};
use crate::input::InputError;
use crate::report::{Document, ReadError};

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
    if let Some(processes) = value.get_mut("processes").and_then(Value::as_array_mut) {
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

/// Names the frames of one process's report and recomputes its stacks' sites.
pub fn symbolize_report(report: &mut Value, symbolizer: &mut Symbolizer, plumbing: &Plumbing) {
    let build_ids: HashMap<String, Option<String>> = report
        .get("modules")
        .and_then(Value::as_array)
        .map(|mods| {
            mods.iter()
                .filter_map(|m| {
                    let path = m.get("path")?.as_str()?.to_string();
                    Some((
                        path,
                        m.get("build_id")
                            .and_then(Value::as_str)
                            .map(str::to_string),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let Some(stacks) = report.get_mut("stacks").and_then(Value::as_array_mut) else {
        return;
    };
    for stack in stacks {
        let Some(frames) = stack.get("frames").and_then(Value::as_array).cloned() else {
            continue;
        };
        let mut named = Vec::with_capacity(frames.len());
        for frame in frames {
            let unnamed = frame.get("function").is_none_or(Value::is_null);
            let module = frame
                .get("module")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let offset = frame
                .get("offset")
                .and_then(Value::as_str)
                .and_then(|o| u64::from_str_radix(o.trim_start_matches("0x"), 16).ok());
            match (unnamed, offset) {
                (true, Some(offset)) if !module.is_empty() => {
                    let build_id = build_ids.get(&module).cloned().flatten();
                    let found =
                        symbolizer.symbolize(Path::new(&module), build_id.as_deref(), offset);
                    if found.is_empty() {
                        named.push(frame);
                        continue;
                    }
                    let last = found.len().saturating_sub(1);
                    for (i, f) in found.into_iter().enumerate() {
                        let mut out = frame.as_object().cloned().unwrap_or_else(Map::new);
                        out.insert("function".into(), json!(f.function));
                        out.insert("file".into(), json!(f.file));
                        out.insert("line".into(), json!(f.line));
                        if i < last {
                            out.insert("inlined".into(), json!(true));
                        } else {
                            out.remove("inlined");
                        }
                        named.push(Value::Object(out));
                    }
                }
                _ => named.push(frame),
            }
        }
        let site = site_of(
            &named,
            stack.get("python").and_then(Value::as_array),
            plumbing,
        );
        if let Some(obj) = stack.as_object_mut() {
            obj.insert("frames".into(), Value::Array(named));
            obj.insert("site".into(), site);
        }
    }
}

fn is_interpreter(module: &str) -> bool {
    let name = module.rsplit('/').next().unwrap_or(module);
    name.starts_with("libpython") || name.starts_with("python")
}

/// The site of a stack, as the shim picks it: native frames above the Python interpreter, then
/// the Python frames, then the rest of the native frames.
fn site_of(frames: &[Value], python: Option<&Vec<Value>>, plumbing: &Plumbing) -> Value {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let native: Vec<(String, Option<String>, Option<String>, Option<u32>, u64)> = frames
        .iter()
        .map(|f| {
            let offset = s(f, "offset")
                .and_then(|o| u64::from_str_radix(o.trim_start_matches("0x"), 16).ok())
                .unwrap_or(0);
            let line = f.get("line").and_then(Value::as_u64).map(|l| l as u32);
            (
                s(f, "module").unwrap_or_default(),
                s(f, "function"),
                s(f, "file"),
                line,
                offset,
            )
        })
        .collect();
    let py: Vec<(Option<String>, Option<String>, Option<u32>)> = python
        .map(|p| {
            p.iter()
                .map(|f| {
                    (
                        s(f, "function"),
                        s(f, "file"),
                        f.get("line").and_then(Value::as_u64).map(|l| l as u32),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let split = if py.is_empty() {
        native.len()
    } else {
        native
            .iter()
            .position(|f| is_interpreter(&f.0))
            .unwrap_or(native.len())
    };
    // (which list, index in it) in the order the rule walks them.
    let mut order: Vec<(&str, usize)> = (0..split).map(|i| ("frames", i)).collect();
    order.extend((0..py.len()).map(|i| ("python", i)));
    order.extend((split..native.len()).map(|i| ("frames", i)));
    let site_frames: Vec<SiteFrame> = order
        .iter()
        .map(|&(list, i)| {
            if list == "frames" {
                let f = &native[i];
                SiteFrame {
                    module: &f.0,
                    function: f.1.as_deref(),
                    file: f.2.as_deref(),
                    line: f.3,
                    offset: f.4,
                }
            } else {
                let f = &py[i];
                SiteFrame {
                    module: "",
                    function: f.0.as_deref(),
                    file: f.1.as_deref(),
                    line: f.2,
                    offset: 0,
                }
            }
        })
        .collect();
    match find_site(&site_frames, plumbing) {
        Some(site) => {
            let (list, index) = order[site.index];
            json!({"in": list, "index": index, "fingerprint": site.fingerprint})
        }
        None => Value::Null,
    }
}
