//! `summary --at` and `--between`: a history's answer for one moment or window
//! ([`crate::history::moment::Moment`]) as text, Markdown or JSON: each summary format's
//! [`MomentFormat`].
//!
//! ```text
//! == r.json  history_spike[4242]
//! live at 450 ms: 512.0 MiB in 1 allocation (the history spans 0 ms to 1.12 s, whole)
//!   device 0: 512.0 MiB in 1 allocation: the program 512.0 MiB
//!     512.0 MiB  1 allocation  spike_site (history_spike.c:55)  since 301 ms
//!       spike_site (history_spike.c:55) ← main (history_spike.c:80)
//! ```

use std::io::{self, Write};

use crate::history::moment::{DeviceMoment, Moment, SiteMoment, Span};
use crate::output::Options;
use crate::style::{Style, Table};
use crate::wording::{bytes, one_line, plural};

/// A summary format's answer to `--at` and `--between`: every format of
/// [`super::FORMATS`] is one, and its row holds it (see [`super::Parts`]).
pub trait MomentFormat {
    /// Writes `m`, asked of the history of `source`. Of `options`, only the style applies.
    fn moment(m: &Moment, source: &str, out: &mut dyn Write, options: &Options) -> io::Result<()>;
}

/// A [`MomentFormat`]'s writer, as a row holds it.
pub type MomentWriter = fn(&Moment, &str, &mut dyn Write, &Options) -> io::Result<()>;

impl MomentFormat for super::text::Text {
    fn moment(m: &Moment, source: &str, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        text(m, source, out, options.style)
    }
}

impl MomentFormat for super::markdown::Markdown {
    fn moment(m: &Moment, source: &str, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        markdown(m, source, out)
    }
}

impl MomentFormat for super::json::Json {
    fn moment(m: &Moment, source: &str, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        json(m, source, out)
    }
}

/// A moment as `--at` reads it back: exact to the microsecond, rounded up, so that what was made
/// at the moment asked is in the answer at the moment printed ([`crate::wording::moment_us`]:
/// `305 ms`, or `305.123 ms` inside a millisecond, where a short peak may have begun and ended).
fn when(ms: f64) -> String {
    // Less a femtosecond: `ms` is nanoseconds divided, and 305.123 ms times 1000 is not always
    // 305123.0 exactly.
    crate::wording::moment_us((ms * 1000.0 - 1e-6).ceil().max(0.0) as u64)
}

/// The history's last moment, rounded down: `--at` at it is still inside the history.
fn until(ms: f64) -> String {
    crate::wording::moment(ms.floor() as u64)
}

/// The headline: what was asked, the total, and the history's span and gaps.
fn headline(m: &Moment) -> String {
    let bytes_total: u64 = m.devices.iter().map(|d| d.bytes).sum();
    let count: u64 = m.devices.iter().map(|d| d.allocations).sum();
    // To the microsecond where the answer has it.
    let us = |i: usize, ms: Option<f64>| m.asked_us[i].map(|u| u as f64 / 1000.0).or(ms);
    let asked = Asked {
        at_ms: us(0, m.at_ms),
        from_ms: us(1, m.from_ms),
        to_ms: us(2, m.to_ms),
        phase: m.phase.as_deref(),
    };
    window_headline(&asked, &m.span, bytes_total, count, "")
}

/// What a history was asked: a moment (`at_ms`) or a window, and the phase that named it.
pub(super) struct Asked<'a> {
    pub at_ms: Option<f64>,
    pub from_ms: Option<f64>,
    pub to_ms: Option<f64>,
    pub phase: Option<&'a str>,
}

/// A history's answer's headline: what was `asked` (then `by`, `, by tag`), the total
/// (`bytes_total` in `count` allocations), and the history's `span` and gaps.
pub(super) fn window_headline(
    asked: &Asked<'_>,
    span: &Span,
    bytes_total: u64,
    count: u64,
    by: &str,
) -> String {
    let mut what = match (asked.at_ms, asked.from_ms, asked.to_ms) {
        (Some(at), _, _) => format!("live at {}", when(at)),
        (_, Some(a), Some(b)) => format!("kept from {} to {}", when(a), when(b)),
        _ => "live".into(),
    };
    match (asked.phase, asked.at_ms) {
        (Some(p), Some(_)) => what.push_str(&format!(", the peak of phase {}", one_line(p))),
        (Some(p), None) => what.push_str(&format!(", by phase {}", one_line(p))),
        (None, _) => {}
    }
    what.push_str(by);
    let mut covers = format!(
        "the history spans {} to {}",
        when(span.begins_ms),
        until(span.ends_ms)
    );
    if span.begins_ms > 0.0 {
        covers.push_str(", what came before was let go to stay within CUGUARD_HISTORY");
    }
    match (&span.stopped, span.whole) {
        (Some(why), _) => covers.push_str(&format!(
            ", up to where the recording stopped: {}",
            one_line(why)
        )),
        (None, true) if span.complete => covers.push_str(", whole"),
        (None, true) => {}
        (None, false) => {
            covers.push_str(", without its end: the process was killed or is still running")
        }
    }
    if span.lost_events > 0 {
        covers.push_str(&format!("; NOT WHOLE: {}", lost_text(span)));
    }
    format!(
        "{what}: {} in {} ({covers})",
        bytes(bytes_total),
        plural(count, "allocation", "allocations")
    )
}

/// What was lost up to the moment asked, and what it may change: `12 events lost before this
/// moment, at 1.2 s–1.25 s and 3.1 s–3.2 s: an allocation listed may have been freed in a lost
/// window (`unsure`), one made in it may be missing`.
fn lost_text(span: &Span) -> String {
    let windows: Vec<String> = span
        .lost_windows
        .iter()
        .map(|w| format!("{}–{}", until(w.from_ms), when(w.to_ms)))
        .collect();
    let listed: u64 = span.lost_windows.iter().map(|w| w.events).sum();
    let mut at = windows.join(", ");
    if span.lost_events > listed {
        at.push_str(", and later windows");
    }
    format!(
        "{} lost before this moment (the threads made them faster than they were written), at \
         {at}: an allocation listed may have been freed in a lost window, one made in it may be \
         missing",
        plural(span.lost_events, "event", "events")
    )
}

/// A row's allocations that may have been freed in a lost window, for people.
fn unsure_text(s: &crate::history::moment::SiteMoment) -> String {
    if s.unsure_allocations == 0 {
        return String::new();
    }
    format!(
        "{} of them made before a lost window: live, or freed in it",
        s.unsure_allocations
    )
}

/// A row's count: its allocations, or a cache's idle row's segments.
fn row_count(s: &SiteMoment) -> String {
    if s.idle {
        plural(s.allocations, "segment", "segments")
    } else {
        plural(s.allocations, "allocation", "allocations")
    }
}

/// A row's site as printed: its label (and tag), or what a cache's idle row is.
fn row_label(s: &SiteMoment) -> String {
    if s.idle {
        "idle: freed, kept for reuse".to_string()
    } else {
        super::text::tagged(&s.site.label, s.tag.as_deref())
    }
}

fn device_name(d: &DeviceMoment) -> String {
    d.device
        .map_or_else(|| "device ?".to_string(), |n| format!("device {n}"))
}

/// Text.
pub fn text(m: &Moment, source: &str, out: &mut dyn Write, style: Style) -> io::Result<()> {
    writeln!(
        out,
        "{}",
        style.bold(&format!(
            "== {}  {}",
            one_line(source),
            one_line(&m.process)
        ))
    )?;
    if let Some(o) = &m.oom {
        writeln!(out, "{}", style.bad("out of memory"))?;
        super::text::oom_entry(out, o)?;
    }
    writeln!(out, "{}", headline(m))?;
    for d in &m.devices {
        let owners = if d.by_owner.is_empty() {
            String::new()
        } else {
            format!(": {}", super::text::owner_list(&d.by_owner))
        };
        writeln!(
            out,
            "  {}: {} in {}{owners}",
            device_name(d),
            bytes(d.bytes),
            plural(d.allocations, "allocation", "allocations")
        )?;
        let mut t = Table::new(&[true, true, false, false, false, false]);
        for s in &d.sites {
            t.row([
                bytes(s.bytes),
                row_count(s),
                row_label(s),
                format!("since {}{}", when(s.first_ms), streams_text(&s.streams)),
                super::text::held_by(s.owner_kind, &s.owner_label),
                unsure_text(s),
            ]);
        }
        let chains: Vec<&[String]> = d.sites.iter().map(|s| &s.stack[..]).collect();
        let mut body = Vec::new();
        super::text::write_with_chains(&mut body, &t, &chains)?;
        for line in String::from_utf8_lossy(&body).lines() {
            writeln!(out, "  {line}")?;
        }
        if d.sites_total > d.sites.len() {
            writeln!(
                out,
                "    … {} more sites (see --top)",
                d.sites_total - d.sites.len()
            )?;
        }
    }
    if m.devices.is_empty() {
        writeln!(out, "  nothing")?;
    }
    Ok(())
}

/// Markdown, for a pull-request comment.
pub fn markdown(m: &Moment, source: &str, out: &mut dyn Write) -> io::Result<()> {
    use super::markdown::{cell, owner_list, site_cell};
    writeln!(
        out,
        "### {} `{}`\n",
        cell(&m.process),
        one_line(source).replace('`', "'")
    )?;
    if let Some(o) = &m.oom {
        writeln!(
            out,
            "**Out of memory**: {} asking {} at {}: {}\n",
            cell(&o.api),
            bytes(o.size),
            crate::wording::moment(o.time_ms),
            cell(&o.site.label)
        )?;
        writeln!(out, "- **verdict**: {}", cell(&o.verdict.text))?;
        if let Some(line) = super::attribution::other_processes_line(o) {
            writeln!(out, "- {}", cell(&line))?;
        }
        if let Some(line) = super::attribution::device_bytes_line(o) {
            writeln!(out, "- {}", cell(&line))?;
        }
        for h in &o.idle {
            writeln!(out, "- idle: {}", cell(&super::attribution::idle_words(h)))?;
            if let Some(p) = super::attribution::pinning_words(h) {
                writeln!(out, "  - {}", cell(&p))?;
            }
        }
        writeln!(out)?;
    }
    writeln!(out, "{}\n", cell(&headline(m)))?;
    for d in &m.devices {
        writeln!(
            out,
            "**{}**: {} in {}: {}\n",
            device_name(d),
            bytes(d.bytes),
            plural(d.allocations, "allocation", "allocations"),
            owner_list(&d.by_owner)
        )?;
        writeln!(out, "| bytes | allocations | since | site |")?;
        writeln!(out, "|---:|---:|---:|---|")?;
        for s in &d.sites {
            let unsure = unsure_text(s);
            writeln!(
                out,
                "| {} | {}{} | {} | {} |",
                bytes(s.bytes),
                s.allocations,
                if unsure.is_empty() {
                    String::new()
                } else {
                    format!(" ({unsure})")
                },
                when(s.first_ms),
                site_cell(&row_label(s), s.owner_kind, &s.owner_label, false, &s.stack)
            )?;
        }
        if d.sites_total > d.sites.len() {
            writeln!(
                out,
                "\n… {} more sites (see --top)",
                d.sites_total - d.sites.len()
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// JSON: the [`Moment`] with the source, one object.
pub fn json(m: &Moment, source: &str, out: &mut dyn Write) -> io::Result<()> {
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        source: &'a str,
        #[serde(flatten)]
        moment: &'a Moment,
    }
    serde_json::to_writer_pretty(&mut *out, &Doc { source, moment: m })?;
    writeln!(out)
}

/// `, on stream 0x5000` when a site's allocations were made on streams other than the default.
fn streams_text(streams: &[u64]) -> String {
    if streams.iter().all(|&s| s == 0) {
        return String::new();
    }
    let names: Vec<String> = streams
        .iter()
        .map(|&s| {
            if s == 0 {
                "the default".into()
            } else {
                format!("{s:#x}")
            }
        })
        .collect();
    let word = if names.len() == 1 {
        "stream"
    } else {
        "streams"
    };
    format!(", on {word} {}", names.join(", "))
}
