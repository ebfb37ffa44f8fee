//! `cuguard export --format memory-viz`: a process's history as PyTorch's memory snapshot.

use std::io::{self, Write};

use cuguard_format::Stack;

use super::request::{Made, Request};
use crate::cli::CliError;
use crate::export::{VizFrame, memory_viz_with_free};
use crate::output::{Format, Options};

/// `--format memory-viz`, the default.
pub struct MemoryViz;

impl Format<Made> for MemoryViz {
    const NAME: &'static str = "memory-viz";
    const HELP: &'static str =
        "PyTorch's memory snapshot: a pickle for pytorch.org/memory_viz and torch.cuda._memory_viz";

    fn write(made: &Made, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        out.write_all(&made.bytes)
    }
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

/// Makes the snapshot of the one process `args` names (its report or history), over the window
/// `--between` when given; refuses `--at`, and a whole run past the viewer's comfort without
/// `--force`.
pub(super) fn make(args: &Request) -> Result<Made, CliError> {
    if args.at.is_some() {
        return Err(CliError::Usage(
            "--at is pprof's: memory-viz takes --between".into(),
        ));
    }
    let [path] = &args.paths[..] else {
        return Err(CliError::Usage(
            "memory-viz takes one process's report or history".into(),
        ));
    };
    let opened = crate::history::load(path)?;
    let window = match &args.between {
        Some(texts) => {
            let (from, to, _) = crate::history::when::parse_window(texts, &opened)
                .map_err(|why| CliError::Usage(format!("--between {why}")))?;
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
    let ooms = report_ooms(path)?;
    let device_free = |t_ns: u64, size: u64| {
        // The report's record of the same refusal: the same size, within 2 ms (the two
        // clocks are read a moment apart).
        ooms.iter()
            .find(|o| o.size == size && (t_ns / 1_000_000).abs_diff(o.time_ms) <= 2)
            .and_then(|o| o.device_free_bytes)
    };
    let bytes = memory_viz_with_free(&loaded.replay, &frames, window, &device_free);
    if let Some(why) = too_large(
        bytes.len() as u64,
        window.is_some(),
        args.force,
        &loaded.replay,
    ) {
        return Err(CliError::Usage(why));
    }
    let size = bytes.len() as u64;
    let mut said = format!(
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
        said.push_str("; the viewer lags past 500 MB: a window (--between) opens faster");
    }
    Ok(Made { bytes, said })
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

/// The out-of-memory records of the report at `path` (none for a history file).
fn report_ooms(path: &std::path::Path) -> Result<Vec<cuguard_format::OomRecord>, CliError> {
    if crate::history::is_history_file(path)? {
        return Ok(Vec::new());
    }
    let read = crate::input::map_reports(&[path.to_path_buf()], |_, report| report.ooms)?;
    Ok(read.into_iter().flat_map(|(_, ooms)| ooms).collect())
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
