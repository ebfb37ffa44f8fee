//! `summary --by phase`: one process's history phase by phase
//! ([`crate::history::phases::PhaseSummary`]) as text, Markdown or JSON: each summary format's
//! [`PhasesFormat`].
//!
//! ```text
//! == r.json  train[4242]
//! 3 phase names, 26 occurrences (the history spans 0 ms to 2.31 s, whole)
//!   phase      occurrences  peak                        allocated   stayed
//!   step       12           1.2 GiB at step #7          3.0 GiB     256.0 MiB
//!     step #1  0 ms–101 ms  peak 512.0 MiB at 40 ms  allocated 256.0 MiB in 2  stayed 0 B
//! ```

use std::io::{self, Write};

use crate::history::phases::{NameRow, OccurrenceRow, OddCounts, PhaseSummary};
use crate::output::Options;
use crate::style::Table;
use crate::wording::{bytes, one_line, plural};

/// A summary format's answer to `--by phase`: every format of [`super::FORMATS`] is one.
pub trait PhasesFormat {
    /// Writes `s`, asked of the history of `source`. Of `options`, only the style applies.
    fn phases(
        s: &PhaseSummary,
        source: &str,
        out: &mut dyn Write,
        options: &Options,
    ) -> io::Result<()>;
}

/// A [`PhasesFormat`]'s writer, as a row holds it.
pub type PhasesWriter = fn(&PhaseSummary, &str, &mut dyn Write, &Options) -> io::Result<()>;

impl PhasesFormat for super::text::Text {
    fn phases(s: &PhaseSummary, source: &str, out: &mut dyn Write, o: &Options) -> io::Result<()> {
        text(s, source, out, o)
    }
}

impl PhasesFormat for super::markdown::Markdown {
    fn phases(s: &PhaseSummary, source: &str, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        markdown(s, source, out)
    }
}

impl PhasesFormat for super::json::Json {
    fn phases(s: &PhaseSummary, source: &str, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            source: &'a str,
            #[serde(flatten)]
            phases: &'a PhaseSummary,
        }
        serde_json::to_writer_pretty(&mut *out, &Doc { source, phases: s })?;
        writeln!(out)
    }
}

/// A moment in milliseconds for people.
fn at(ms: f64) -> String {
    crate::wording::moment(ms.round() as u64)
}

/// The headline: how many phases, and what the history covers.
fn headline(s: &PhaseSummary) -> String {
    let occurrences: usize = s.names.iter().map(|n| n.occurrences).sum();
    let mut span = format!(
        "the history spans {} to {}",
        at(s.span.begins_ms),
        at(s.span.ends_ms)
    );
    if s.span.begins_ms > 0.0 {
        span.push_str(
            ", what came before was let go to stay within CUGUARD_HISTORY: phases begun then are not counted",
        );
    }
    if let Some(why) = &s.span.stopped {
        span.push_str(&format!(
            ", up to where the recording stopped: {}",
            one_line(why)
        ));
    } else if !s.span.whole {
        span.push_str(", without its end: the process was killed or is still running");
    } else if s.span.complete {
        span.push_str(", whole");
    }
    if s.span.lost_events > 0 {
        span.push_str(&format!(
            "; NOT WHOLE: {} lost (the threads made them faster than they were written): a \
             phase's figures may miss what they did",
            plural(s.span.lost_events, "event", "events")
        ));
    }
    format!(
        "{}, {} ({span})",
        plural(s.names.len() as u64, "phase name", "phase names"),
        plural(occurrences as u64, "occurrence", "occurrences")
    )
}

/// What did not pair, in words; empty when everything did.
fn odd_text(o: &OddCounts) -> Vec<String> {
    let mut out = Vec::new();
    let mut say = |n: u64, one: &str, many: &str| {
        if n > 0 {
            out.push(plural(n, one, many));
        }
    };
    say(
        o.never_ended,
        "range never ended (its figures run to the history's end)",
        "ranges never ended (their figures run to the history's end)",
    );
    say(
        o.pops_without_push,
        "pop with no range pushed on its thread (not counted)",
        "pops with no range pushed on their thread (not counted)",
    );
    say(
        o.ends_without_start,
        "end of a range never started (not counted)",
        "ends of ranges never started (not counted)",
    );
    say(
        o.ended_on_another_thread,
        "range started on one thread and ended on another (counted)",
        "ranges started on one thread and ended on another (counted)",
    );
    say(
        o.not_read,
        "phase event past the reader's bound (not read)",
        "phase events past the reader's bound (not read)",
    );
    out
}

/// An occurrence's span: `1.2 s–1.3 s`, or `1.2 s–(never ended)`.
fn span(o: &OccurrenceRow) -> String {
    match o.end_ms {
        Some(e) => format!("{}–{}", at(o.start_ms), at(e)),
        None => format!("{}–(never ended)", at(o.start_ms)),
    }
}

fn text(s: &PhaseSummary, source: &str, out: &mut dyn Write, o: &Options) -> io::Result<()> {
    let style = o.style;
    writeln!(
        out,
        "{}",
        style.bold(&format!(
            "== {}  {}",
            one_line(source),
            one_line(&s.process)
        ))
    )?;
    writeln!(out, "{}", headline(s))?;
    for line in odd_text(&s.odd) {
        writeln!(out, "  note: {line}")?;
    }
    if s.names.is_empty() {
        writeln!(
            out,
            "  no phases: the program marked no NVTX ranges (and no cuguard.phase) while the \
             history recorded; `cuguard run` makes cuguard NVTX's tool unless \
             NVTX_INJECTION64_PATH names another"
        )?;
        return Ok(());
    }
    let mut t = Table::new(&[false, true, true, false, true, true]);
    t.row([
        "phase".to_string(),
        "occurrences".into(),
        "peak".into(),
        String::new(),
        "allocated".into(),
        "stayed".into(),
    ]);
    for n in &s.names {
        t.row([
            one_line(&n.name),
            n.occurrences.to_string(),
            bytes(n.peak_bytes),
            format!("at {}", one_line(&n.peak_occurrence)),
            bytes(n.allocated_bytes),
            bytes(n.stayed_bytes),
        ]);
    }
    write!(out, "{}", t.render("  "))?;
    for n in &s.names {
        occurrences_text(n, out)?;
    }
    Ok(())
}

fn occurrences_text(n: &NameRow, out: &mut dyn Write) -> io::Result<()> {
    writeln!(out, "  {}:", one_line(&n.name))?;
    let mut t = Table::new(&[false, false, true, false, true, false, true]);
    for o in &n.list {
        t.row([
            one_line(&o.label),
            span(o),
            format!("peak {}", bytes(o.peak_bytes)),
            format!("at {}", at(o.peak_ms)),
            format!("allocated {}", bytes(o.allocated_bytes)),
            format!("in {}", o.allocations),
            format!("stayed {}", bytes(o.stayed_bytes)),
        ]);
    }
    write!(out, "{}", t.render("    "))?;
    if n.more > 0 {
        writeln!(
            out,
            "    … {} more (see --top; 0 lists all)",
            plural(n.more as u64, "occurrence", "occurrences")
        )?;
    }
    Ok(())
}

fn markdown(s: &PhaseSummary, source: &str, out: &mut dyn Write) -> io::Result<()> {
    use super::markdown::cell;
    writeln!(
        out,
        "### {} `{}`\n",
        cell(&s.process),
        one_line(source).replace('`', "'")
    )?;
    writeln!(out, "{}\n", cell(&headline(s)))?;
    for line in odd_text(&s.odd) {
        writeln!(out, "- note: {}", cell(&line))?;
    }
    if s.names.is_empty() {
        writeln!(out, "No phases: the program marked no NVTX ranges.")?;
        return Ok(());
    }
    writeln!(out, "| phase | occurrences | peak | allocated | stayed |")?;
    writeln!(out, "|---|---:|---:|---:|---:|")?;
    for n in &s.names {
        writeln!(
            out,
            "| {} | {} | {} at {} | {} | {} |",
            cell(&n.name),
            n.occurrences,
            bytes(n.peak_bytes),
            cell(&n.peak_occurrence),
            bytes(n.allocated_bytes),
            bytes(n.stayed_bytes)
        )?;
    }
    for n in &s.names {
        writeln!(out, "\n**{}**\n", cell(&n.name))?;
        writeln!(out, "| occurrence | span | peak | allocated | stayed |")?;
        writeln!(out, "|---|---|---:|---:|---:|")?;
        for o in &n.list {
            writeln!(
                out,
                "| {} | {} | {} at {} | {} in {} | {} |",
                cell(&o.label),
                span(o),
                bytes(o.peak_bytes),
                at(o.peak_ms),
                bytes(o.allocated_bytes),
                o.allocations,
                bytes(o.stayed_bytes)
            )?;
        }
        if n.more > 0 {
            writeln!(out, "\n… {} more (see --top)", n.more)?;
        }
    }
    Ok(())
}
