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
