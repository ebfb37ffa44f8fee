//! The text of a Python program's end: its line after the report's ([`end_line`]) and its
//! sections, what was held, lost and inside the caches ([`python_sections`]).

use std::io::{self, Write};

use super::lines::{more, write_with_chains};
use crate::style::{Style, Table};
use crate::summary::python::{ClassSite, HeldLine, PythonSummary};
use crate::wording::{bytes, millis, one_line, plural};

/// The line on a Python program's end, after `report`:
///
/// ```text
/// the end  the program's code finished at 657 ms: held 6.0 MiB in 3 allocations, lost 4.0 MiB in 1 (3 freed later, by the interpreter's teardown)
/// the end  the program's code finished at 69 ms: 50.0 MiB in 50 allocations not told apart (held or lost)
/// the end  not recorded: cuguard's Python bootstrap did not run in this interpreter (…)
/// ```
pub(super) fn end_line(out: &mut dyn Write, py: &PythonSummary, style: Style) -> io::Result<()> {
    if !py.recorded && py.at.as_deref() != Some("snapshot") {
        let why = py.why.as_deref().unwrap_or("the report does not say why");
        return writeln!(
            out,
            "the end  {}",
            style.warn(&format!("not recorded: {}", one_line(why)))
        );
    }
    let moment = if py.at.as_deref() == Some("snapshot") {
        format!("at the snapshot ({})", millis(py.time_ms.unwrap_or(0)))
    } else {
        format!(
            "the program's code {} at {}",
            py.how_it_ended(),
            millis(py.time_ms.unwrap_or(0))
        )
    };
    // What was not classified (the package not importable, the walk cut short) is neither held
    // nor lost: "held 0 B, lost nothing" would be false about it.
    let untold = &py.unclassified;
    let mut parts = Vec::new();
    if py.held_count() > 0 || untold.allocations == 0 {
        parts.push(format!(
            "held {} in {}",
            bytes(py.held_bytes()),
            plural(py.held_count(), "allocation", "allocations")
        ));
    }
    if py.lost.allocations > 0 {
        parts.push(style.bad(&format!(
            "lost {} in {}",
            bytes(py.lost.bytes),
            plural(py.lost.allocations, "allocation", "allocations")
        )));
    } else if untold.allocations == 0 {
        parts.push(style.good("lost nothing"));
    }
    if py.pending_free.allocations > 0 {
        parts.push(format!(
            "{} in {} waiting in numba's queue of frees",
            bytes(py.pending_free.bytes),
            plural(py.pending_free.allocations, "allocation", "allocations")
        ));
    }
    if untold.allocations > 0 {
        parts.push(style.warn(&format!(
            "{} in {} not told apart (held or lost)",
            bytes(untold.bytes),
            plural(untold.allocations, "allocation", "allocations")
        )));
    }
    let idle: u64 = py.caches.iter().map(|c| c.idle_bytes).sum();
    if !py.caches.is_empty() {
        parts.push(format!("idle in caches {}", bytes(idle)));
    }
    let mut line = format!("the end  {moment}: {}", parts.join(", "));
    if py.freed_after > 0 {
        line.push_str(&format!(
            " ({} freed later, by the interpreter's teardown)",
            py.freed_after
        ));
    }
    writeln!(out, "{line}")?;
    for note in &py.notes {
        writeln!(out, "         {}", style.warn(&one_line(note)))?;
    }
    Ok(())
}

/// What a Python program held at its end (or at the snapshot), after the device table:
///
/// ```text
/// held at the end (Python objects keep them)
///     20.0 MiB  20 allocations  KEPT → [0…19] → .ptr (a number inside it: a weak match)  made at step (held.py:22)
///     step (held.py:22) ← main (held.py:30)
///      3.0 MiB    1 allocation  WEIGHTS → .ptr (a number inside it: a weak match)          made at load (held.py:31)
///     load (held.py:31) ← main (held.py:44)
/// lost at the end (the program's own; nothing holds them)
///      4.0 MiB  1 allocation  load (held.py:34)
/// inside the caches at the end
///   PyTorch's caching allocator: 2.0 GiB in 12 segments: 1.5 GiB live in 40 blocks, 512.0 MiB idle (its memory history)
///      1.2 GiB  30 blocks  train_step (train.py:31)  held by KEEP → [0]
/// ```
pub(super) fn python_sections(
    out: &mut dyn Write,
    py: &PythonSummary,
    style: Style,
) -> io::Result<()> {
    let when = if py.at.as_deref() == Some("snapshot") {
        "at the snapshot"
    } else {
        "at the end"
    };
    if !py.held.lines.is_empty() {
        writeln!(
            out,
            "{}",
            style.bold(&format!("held {when} (Python objects keep them)"))
        )?;
        let mut t = Table::new(&[true, true, false, false]);
        let mut chains = Vec::new();
        for h in &py.held.lines {
            let holder = match &h.path {
                Some(_) => holder_line(h),
                None => format!("a {} that no name reaches", one_line(&h.holder)),
            };
            t.row([
                bytes(h.bytes),
                plural(h.allocations, "allocation", "allocations"),
                one_line(&holder),
                format!("made at {}", one_line(&h.label)),
            ]);
            chains.push(&h.stack[..]);
        }
        write_with_chains(out, &t, &chains)?;
        more(
            out,
            py.held.allocations as usize,
            py.held.lines.iter().map(|h| h.allocations as usize).sum(),
            "held allocations",
        )?;
    }
    if !py.lost.lines.is_empty() {
        writeln!(
            out,
            "{}",
            style.bad(&format!(
                "lost {when} (the program's own; nothing holds them)"
            ))
        )?;
        class_sites(out, &py.lost.lines)?;
    }
    if !py.pending_free.lines.is_empty() {
        writeln!(
            out,
            "{}",
            style.bold(&format!(
                "waiting in numba's queue of frees {when} (numba frees them at its next flush: not leaks)"
            ))
        )?;
        class_sites(out, &py.pending_free.lines)?;
    }
    if !py.unclassified.lines.is_empty() {
        writeln!(out, "{}", style.warn(&format!("not classified {when}")))?;
        class_sites(out, &py.unclassified.lines)?;
    }
    if !py.caches.is_empty() {
        writeln!(out, "{}", style.bold(&format!("inside the caches {when}")))?;
        for c in &py.caches {
            let how = match c.source.as_str() {
                "history" => "its memory history",
                "states" => "its block states; no lines",
                "cuguard" => "its block states, lines from cuguard's record of its blocks",
                "hook" => "the arrays found holding its blocks, lines from cuguard's hook in it",
                "hook_whole" => "cuguard's hook in it, which adds up to CuPy's own figures",
                _ => "the Python objects found holding its blocks",
            };
            writeln!(
                out,
                "  {}: {} in {}: {} live in {}, {} idle (by {how})",
                one_line(&c.label),
                bytes(c.segment_bytes),
                plural(c.segments, "segment", "segments"),
                bytes(c.live_bytes),
                plural(c.live_blocks, "block", "blocks"),
                bytes(c.idle_bytes),
            )?;
            if let Some(note) = &c.note {
                writeln!(out, "    {}", style.warn(&one_line(note)))?;
            }
            let mut t = Table::new(&[true, true, false, false]);
            let mut chains = Vec::new();
            for s in &c.sites {
                let held = match &s.holder {
                    Some(path) => format!("held by {}", one_line(&path.join(" "))),
                    None => "no Python holder found".to_string(),
                };
                t.row([
                    bytes(s.bytes),
                    plural(s.blocks, "block", "blocks"),
                    one_line(&s.label),
                    held,
                ]);
                chains.push(&s.stack[..]);
            }
            let rendered = t.render("  ");
            for (i, line) in rendered.lines().enumerate() {
                writeln!(out, "  {line}")?;
                if let Some(chain) = chains.get(i)
                    && !chain.is_empty()
                {
                    writeln!(out, "      {}", one_line(&chain.join(" ← ")))?;
                }
            }
        }
    }
    Ok(())
}

/// A held allocation's holder: the path from a name, a weak match said as such.
fn holder_line(h: &HeldLine) -> String {
    let Some(steps) = &h.path else {
        return String::new();
    };
    let mut steps = steps.clone();
    if h.weak && steps.len() > 1 {
        steps.pop();
        if let Some(last) = steps.pop() {
            steps.push(format!("{last} (a number inside it: a weak match)"));
        }
    }
    steps.join(" → ")
}

/// The sites of one class of a Python program's end (lost, pending, not told apart), each
/// with its stack.
fn class_sites(out: &mut dyn Write, sites: &[ClassSite]) -> io::Result<()> {
    let mut t = Table::new(&[true, true, false]);
    let mut chains = Vec::new();
    for s in sites {
        t.row([
            bytes(s.bytes),
            plural(s.allocations, "allocation", "allocations"),
            one_line(&s.label),
        ]);
        chains.push(&s.stack[..]);
    }
    write_with_chains(out, &t, &chains)
}
