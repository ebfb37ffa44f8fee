//! `--format json`: the [`Diff`] as one JSON document.
//!
//! ```text
//! base, new      {reports, leaked_bytes, leaks}
//! delta_bytes    new − base (may be negative)
//! delta_leaks    new − base
//! sites[]        {site, location|null, change ("new" | "grown" | "shrunk" | "fixed" | "unchanged"),
//!                 base_bytes, base_leaks, new_bytes, new_leaks, delta_bytes, delta_leaks}
//!                grouped by change in that order, largest change first
//! events[]       {kind, base, new}: counts per kind, by kind
//! ```

use std::io::{self, Write};

use super::Diff;

/// Writes the diff as pretty-printed JSON and a newline.
pub fn write(diff: &Diff, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, diff)?;
    out.write_all(b"\n")
}
