//! `cuguard export`: a process's history in another tool's format. `memory-viz`: PyTorch's
//! memory snapshot (the pickle <https://pytorch.org/memory_viz> and `torch.cuda._memory_viz`
//! read), with every owner's memory, not only PyTorch's cache.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use cuguard_report::Stack;

use super::{CliError, exit, write_output};
use crate::export::{VizFrame, memory_viz};

/// The formats `cuguard export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// PyTorch's memory snapshot: a pickle for pytorch.org/memory_viz and torch.cuda._memory_viz.
    #[value(name = "memory-viz")]
    MemoryViz,
}

/// Arguments of `cuguard export`.
#[derive(Debug, Args)]
#[command(after_help = "\
The history is the report's (history.files) or the file given. The snapshot holds the segments
and blocks live at the end (of the window, with --between) and every event of the run (of the
window) in device_traces; open it at https://pytorch.org/memory_viz (drag the file in).

Examples:
  cuguard export --format memory-viz cuguard.train.4242.json -o train.pickle
  cuguard export --format memory-viz train.history --between 12s 14s -o step.pickle")]
pub struct ExportArgs {
    /// The format.
    #[arg(long, value_enum, default_value = "memory-viz")]
    pub format: ExportFormat,
    /// Only the events between two moments (12.5s, 840ms, peak, oom, end), for a history too
    /// large for the viewer.
    #[arg(long, num_args = 2, value_names = ["T1", "T2"])]
    pub between: Option<Vec<String>>,
    /// Where to write it (a pickle is binary: required).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// One process's report, or its history file.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

/// Past this size, PyTorch's viewer in a browser lags (pytorch#155889); the command says so.
const VIEWER_COMFORT_BYTES: u64 = 500 << 20;

/// Runs `cuguard export`.
pub fn run(args: ExportArgs) -> Result<u8, CliError> {
    let loaded = crate::history::load(&args.path)?;
    let window = match &args.between {
        Some(pair) => {
            let t = |s: &str| {
                crate::history::parse_time(s, &loaded.replay)
                    .map_err(|why| CliError::Usage(format!("--between {why}")))
            };
            let (from, to) = (t(&pair[0])?, t(&pair[1])?);
            if from > to {
                return Err(CliError::Usage(format!(
                    "--between {} {}: the first moment is after the second",
                    pair[0], pair[1]
                )));
            }
            Some((from, to))
        }
        None => None,
    };
    let stacks = crate::history::stacks_by_id(&loaded.report);
    let frames = |id: u32| {
        stacks
            .get(&u64::from(id))
            .map_or_else(Vec::new, |s| viz_frames(s))
    };
    let bytes = match args.format {
        ExportFormat::MemoryViz => memory_viz(&loaded.replay, &frames, window),
    };
    write_output(Some(&args.output), |w| w.write_all(&bytes))?;
    let size = bytes.len() as u64;
    let mut line = format!(
        "cuguard: wrote {} ({}, {} allocations{})",
        crate::text::one_line(&args.output.display().to_string()),
        crate::text::bytes(size),
        loaded.replay.blocks.len(),
        match window {
            Some((a, b)) => format!(
                ", events from {} to {}",
                crate::history::span_text(a),
                crate::history::span_text(b)
            ),
            None => String::new(),
        }
    );
    if size > VIEWER_COMFORT_BYTES {
        line.push_str("; the viewer lags past 500 MB: export a window with --between");
    }
    eprintln!("{line}");
    Ok(exit::OK)
}

/// A stack's frames as PyTorch's snapshots have them, innermost first: in the mixed native and
/// Python order when the stack has one, else the native frames and then the Python ones.
fn viz_frames(stack: &Stack) -> Vec<VizFrame> {
    let native = |i: usize| {
        stack.frames.get(i).map(|f| VizFrame {
            name: f
                .function
                .as_deref()
                .map_or_else(|| format!("{:#x}", f.ip.0), str::to_string),
            filename: f
                .file
                .as_deref()
                .map_or_else(|| f.module.to_string(), str::to_string),
            line: f.line.unwrap_or(0),
        })
    };
    let python = |j: usize| {
        stack.python.get(j).map(|p| VizFrame {
            name: p.function.clone(),
            filename: p.file.clone(),
            line: p.line.unwrap_or(0),
        })
    };
    if !stack.mixed.is_empty() {
        return stack
            .mixed
            .iter()
            .filter_map(|m| match (m.native, m.python) {
                (Some(i), _) => native(i),
                (_, Some(j)) => python(j),
                _ => None,
            })
            .collect();
    }
    (0..stack.frames.len())
        .filter_map(native)
        .chain((0..stack.python.len()).filter_map(python))
        .collect()
}
