//! `--format text`: a replay for people. A line for the process and what was replayed, the
//! history's gaps and notes, then for each capacity a line per allocator:
//!
//! ```text
//! == r.json  limit[4242]: 4 requests on device 0 (1 refused in the run), 900.0 MiB live at most, 0 ms to 207 ms
//! at 1.0 GiB:
//!   driver fits (peak reserved 900.0 MiB)
//!   async fails at event 4, 4 ms: asked 300.0 MiB at main (limit.c:55), live 900.0 MiB, idle 0 B in 0 pieces
//! ```
//!
//! With `--find-capacity`, a line per allocator: `driver fits from 902 MiB (peak reserved
//! 902.0 MiB)`.

use std::io::{self, Write};

use super::answer::{Outcome, Replayed};
use crate::output::{Format, Options};
use crate::wording::{bytes, moment, plural};

/// `--format text`.
pub struct Text;

impl Format<Replayed> for Text {
    const NAME: &'static str = "text";
    const HELP: &'static str = "For people: a line per allocator (the default)";

    fn write(r: &Replayed, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        head(r, out)?;
        if r.question == "smallest" {
            writeln!(out, "the smallest capacity that fits, to 2 MiB:")?;
            for o in &r.allocators {
                match o.capacity_bytes {
                    Some(c) => writeln!(
                        out,
                        "  {} fits from {} MiB (peak reserved {})",
                        o.name,
                        c >> 20,
                        bytes(o.peak_reserved_bytes)
                    )?,
                    None => writeln!(out, "  {} fits at no capacity up to 1 PiB", o.name)?,
                }
            }
            return Ok(());
        }
        let mut capacity = None;
        for o in &r.allocators {
            if capacity != o.capacity_bytes {
                capacity = o.capacity_bytes;
                writeln!(out, "at {}:", bytes(capacity.unwrap_or(0)))?;
            }
            writeln!(out, "  {}", line(o))?;
        }
        Ok(())
    }
}

/// The process line, the history's end and the notes.
fn head(r: &Replayed, out: &mut dyn Write) -> io::Result<()> {
    let source = crate::wording::one_line(&r.source);
    let device = r
        .device
        .map_or_else(|| "no device".to_string(), |d| format!("device {d}"));
    let refused = if r.refusals > 0 {
        format!(" ({} refused in the run)", r.refusals)
    } else {
        String::new()
    };
    writeln!(
        out,
        "== {source}  {}: {} on {device}{refused}, {} live at most, {} to {}",
        r.process,
        plural(r.requests, "request", "requests"),
        bytes(r.peak_live_bytes),
        moment(r.begins_ms.floor() as u64),
        moment(r.ends_ms.floor() as u64),
    )?;
    if let Some(why) = &r.ends_early {
        writeln!(out, "the history ends early: {why}")?;
    }
    for note in &r.notes {
        writeln!(out, "{note}")?;
    }
    Ok(())
}

/// One allocator's line.
fn line(o: &Outcome) -> String {
    let Some(f) = &o.failure else {
        return format!(
            "{} fits (peak reserved {})",
            o.name,
            bytes(o.peak_reserved_bytes)
        );
    };
    let largest = if f.idle_pieces > 1 {
        format!(" (the largest {})", bytes(f.largest_idle_piece_bytes))
    } else {
        String::new()
    };
    format!(
        "{} fails at event {}, {}: asked {} at {}, live {}, idle {} in {}{largest}",
        o.name,
        f.event,
        // Rounded up, as `summary --at` words a moment: `--at` at it finds the request made.
        moment(f.time_ms.ceil() as u64),
        bytes(f.asked_bytes),
        f.site,
        bytes(f.live_bytes),
        bytes(f.idle_bytes),
        plural(f.idle_pieces, "piece", "pieces"),
    )
}
