//! `--format json`: the [`Diff`] as one JSON document.
//!
//! The format is documented on [`Json`], the type that writes it.

use std::io::{self, Write};

use super::model::Diff;
use crate::output::{Format, Options};

/// `--format json`: the [`Diff`] as one pretty-printed JSON document and a newline.
///
/// ```text
/// base, new      {reports, leaked_bytes, leaks}
/// delta_bytes    new − base (may be negative)
/// delta_leaks    new − base
/// sites[]        {site, location|null, change ("new" | "grown" | "shrunk" | "fixed" | "unchanged"),
///                 base_bytes, base_leaks, new_bytes, new_leaks, delta_bytes, delta_leaks,
///                 label (the site for people, its location once),
///                 kind ("user" | "operation" | "fallback" | null),
///                 stack[] (its mixed native and Python frames, innermost first; empty without
///                 Python frames)}
///                grouped by change in that order, largest change first
/// events[]       {kind, base, new}: counts per kind, by kind
/// peaks          where compared (absent otherwise; peaks_not_compared says why, when one side
///                has histories and the other not); one process each side:
///                {base_process, new_process, peaks[] {what, phase, base_peak_bytes,
///                 new_peak_bytes, delta_bytes, base_stayed_bytes, new_stayed_bytes,
///                 base_peak_ms, new_peak_ms, sites[] {label, site, location, base_bytes,
///                 new_bytes, delta_bytes, change}}, notes[]}
///                several processes on a side (merged reports), pair by pair:
///                {by ("rank" | "worker" | "order"), base_processes, new_processes,
///                 processes[] {name ("rank 3"), rank (by rank), worker (by worker),
///                 base_process, new_process, peaks[], notes[]} in key order,
///                 not_compared[] {name, why}, only_base[], only_new[] (names), notes[]}
/// ```
pub struct Json;

impl Format<Diff> for Json {
    const NAME: &'static str = "json";
    const HELP: &'static str = "One JSON document (see docs/cli.md)";

    /// Writes the diff as pretty-printed JSON and a newline, all of it (`options` do not apply).
    fn write(diff: &Diff, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, diff)?;
        out.write_all(b"\n")
    }
}
