//! `cuguard export`: a run in another tool's format. `memory-viz`: a process's history as
//! PyTorch's memory snapshot (the pickle <https://pytorch.org/memory_viz> and
//! `torch.cuda._memory_viz` read), with every owner's memory, not only PyTorch's cache.
//! `pprof`: reports (and their histories) as a heap profile for `go tool pprof` and every pprof
//! reader.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use cuguard_format::Stack;

use super::{CliError, exit, write_output};
use crate::export::heap::{HeapError, HistoryAt, Process, When, heap};
use crate::export::{VizFrame, memory_viz, pprof};
use crate::input::InputError;
use cuguard_format::Report;

/// The formats `cuguard export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// PyTorch's memory snapshot: a pickle for pytorch.org/memory_viz and torch.cuda._memory_viz.
    #[value(name = "memory-viz")]
    MemoryViz,
    /// pprof's profile.proto, gzipped: a heap profile (inuse_space, alloc_space…) for go tool
    /// pprof.
    #[value(name = "pprof")]
    Pprof,
}

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
    #[arg(long, value_enum, default_value = "memory-viz")]
    pub format: ExportFormat,
    /// memory-viz: only the events between two moments (12.5s, 840ms, peak, oom, end), for a
    /// history too large for the viewer.
    #[arg(long, num_args = 2, value_names = ["T1", "T2"])]
    pub between: Option<Vec<String>>,
    /// pprof: what was in use at this moment of each process's history (12.5s, 840ms, peak,
    /// oom, end), and allocated until then, rather than at the end.
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
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<PathBuf>,
    /// Allocation helpers (see `--helper`).
    #[command(flatten)]
    pub helpers: super::HelperArgs,
}

/// Past this size, PyTorch's viewer in a browser lags (pytorch#155889); the command says so.
const VIEWER_COMFORT_BYTES: u64 = 500 << 20;

/// Why a whole run's memory-viz snapshot of `size` bytes is not written: past
/// [`VIEWER_COMFORT_BYTES`], without a window (`--between`) and without `--force`; the answer
/// names a window to export instead: the last tenth of the history.
fn too_large(
    size: u64,
    windowed: bool,
    force: bool,
    replay: &cuguard_history::replay::Replay,
) -> Option<String> {
    if windowed || force || size <= VIEWER_COMFORT_BYTES {
        return None;
    }
    let (begins, ends) = (replay.begins_ns, replay.ends_ns);
    let from = ends - (ends - begins) / 10;
    let ms = |ns: u64| ns / 1_000_000;
    Some(format!(
        "the whole run's snapshot would be {}, and PyTorch's viewer lags past 500 MB: export a \
         window (the history spans {} to {}; its last tenth: --between {}ms {}ms), or give \
         --force to write it whole",
        crate::wording::bytes(size),
        crate::history::span_text(begins),
        crate::history::span_text(ends),
        ms(from),
        ms(ends)
    ))
}

/// Runs `cuguard export`.
pub fn run(args: ExportArgs) -> Result<u8, CliError> {
    match args.format {
        ExportFormat::MemoryViz => run_memory_viz(args),
        ExportFormat::Pprof => run_pprof(args),
    }
}

fn run_memory_viz(args: ExportArgs) -> Result<u8, CliError> {
    if args.at.is_some() {
        return Err(CliError::Usage(
            "--at is pprof's: memory-viz takes --between".into(),
        ));
    }
    let [path]: [PathBuf; 1] = args
        .paths
        .try_into()
        .map_err(|_| CliError::Usage("memory-viz takes one process's report or history".into()))?;
    let opened = crate::history::load(&path)?;
    let window = match &args.between {
        Some(pair) => {
            let t = |s: &str| {
                crate::history::parse_time(s, &opened)
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
    let loaded = match window {
        Some((from, to)) => opened.read(from, to)?,
        None => opened.whole()?,
    };
    let stacks = crate::history::stacks_by_id(&loaded.report);
    let frames = |id: u32| {
        stacks
            .get(&u64::from(id))
            .map_or_else(Vec::new, |s| viz_frames(s))
    };
    let bytes = memory_viz(&loaded.replay, &frames, window);
    if let Some(why) = too_large(
        bytes.len() as u64,
        window.is_some(),
        args.force,
        &loaded.replay,
    ) {
        return Err(CliError::Usage(why));
    }
    write_output(Some(&args.output), |w| w.write_all(&bytes))?;
    let size = bytes.len() as u64;
    let mut line = format!(
        "cuguard: wrote {} ({}, {} allocations{})",
        crate::wording::one_line(&args.output.display().to_string()),
        crate::wording::bytes(size),
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
        line.push_str("; the viewer lags past 500 MB: a window (--between) opens faster");
    }
    eprintln!("{line}");
    Ok(exit::OK)
}

fn run_pprof(args: ExportArgs) -> Result<u8, CliError> {
    if args.between.is_some() {
        return Err(CliError::Usage(
            "--between is memory-viz's: pprof takes --at".into(),
        ));
    }
    let mut processes = Vec::new();
    // Processes without a history, and why, for the one line that says so.
    let mut without: Vec<(String, String)> = Vec::new();
    for path in &args.paths {
        if crate::history::is_history_file(path)? {
            // Read now, so that a file that is not one is said before anything is written.
            crate::history::load(path)?;
            processes.push(Process {
                report: None,
                history: Some(HistoryAt::File(path.clone())),
            });
            continue;
        }
        let doc = cuguard_format::Document::read_with_limit(path, crate::input::max_report_bytes())
            .map_err(|e| CliError::Input(InputError::from(e)))?;
        for r in doc.into_reports() {
            let r: Report = r.map_err(|e| CliError::Input(InputError::from(e)))?;
            let history = match crate::history::of_report(&r, path) {
                Ok(_) => Some(HistoryAt::OfReport(path.clone())),
                Err(e) if args.at.is_some() => return Err(e.into()),
                Err(e) => {
                    without.push((r.process_name(), why_no_history(&r, &e)));
                    None
                }
            };
            processes.push(Process {
                report: Some(r),
                history,
            });
        }
    }
    let when = if args.at.is_some() {
        When::At
    } else {
        When::End
    };
    let alloc = without.is_empty();
    if let Some((first, why)) = without.first() {
        let others = match without.len() {
            1 => String::new(),
            2 => " (and 1 more process)".to_string(),
            n => format!(" (and {} more processes)", n - 1),
        };
        eprintln!(
            "cuguard: {}{others} has no history ({}): the profile holds inuse_space and inuse_objects only, no alloc_*",
            crate::wording::one_line(first),
            crate::wording::one_line(why)
        );
    }
    let profile = heap(&processes, when, args.at.as_deref(), alloc).map_err(|e| match e {
        HeapError::Input(e) => CliError::from(e),
        HeapError::Moment(why) => CliError::Usage(why),
    })?;
    let bytes = pprof::pprof(&profile);
    write_output(Some(&args.output), |w| w.write_all(&bytes))?;
    eprintln!(
        "cuguard: wrote {} ({}, {} sample{} of {} process{}; {})",
        crate::wording::one_line(&args.output.display().to_string()),
        crate::wording::bytes(bytes.len() as u64),
        profile.samples.len(),
        if profile.samples.len() == 1 { "" } else { "s" },
        processes.len(),
        if processes.len() == 1 { "" } else { "es" },
        profile
            .types
            .iter()
            .map(|t| t.kind)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(exit::OK)
}

/// Why a report's history is not at hand, in a few words.
fn why_no_history(r: &Report, e: &InputError) -> String {
    match &r.history {
        None => "CUGUARD_HISTORY=0, or a cuguard without one".into(),
        Some(_) => e.to_string(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_run_past_500_mb_is_refused_with_a_window_to_export_instead() {
        let replay = cuguard_history::replay::Replay {
            begins_ns: 0,
            ends_ns: 10_000_000_000,
            ..Default::default()
        };
        let big = VIEWER_COMFORT_BYTES + 1;
        assert_eq!(
            too_large(big, false, false, &replay).as_deref(),
            Some(
                "the whole run's snapshot would be 500.0 MiB, and PyTorch's viewer lags past \
                 500 MB: export a window (the history spans 0 ms to 10 s; its last tenth: \
                 --between 9000ms 10000ms), or give --force to write it whole"
            )
        );
        // A window, --force, or a snapshot the viewer opens: written.
        assert_eq!(too_large(big, true, false, &replay), None);
        assert_eq!(too_large(big, false, true, &replay), None);
        assert_eq!(too_large(VIEWER_COMFORT_BYTES, false, false, &replay), None);
    }
}
