//! `--format text`: the summary for a terminal, coloured only when [`Style`] says so.
//!
//! With several reports it opens with the totals and the sites across all of them; then one
//! section per process: who it was, whether the report is complete, what leaked per device and
//! context, the sites (largest first), the largest leaks, the events and the shim's faults.

use std::io::{self, Write};

use super::{ReportSummary, Summary};
use crate::format::{Format, Options};
use crate::style::{Style, Table};
use crate::text::{bytes, one_line, plural};

/// `--format text`, the default.
pub struct Text;

impl Format<Summary> for Text {
    const NAME: &'static str = "text";
    const HELP: &'static str = "For a terminal (colour on a TTY unless NO_COLOR is set)";

    /// Writes the summary as text, coloured as `options.style` says. Its lists were cut to
    /// `--top` when it was made.
    fn write(summary: &Summary, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        let style = options.style;
        if summary.reports != 1 {
            let complete = if summary.complete_reports == summary.reports {
                "all complete".to_string()
            } else {
                style.warn(&format!("{} complete", summary.complete_reports))
            };
            let leaked = leaked_phrase(summary.leaked_bytes, summary.leaks, style);
            writeln!(
                out,
                "{} ({complete}), leaked {leaked}, {}",
                style.bold(&plural(summary.reports as u64, "report", "reports")),
                plural(summary.event_total(), "event", "events"),
            )?;
            if !summary.sites.is_empty() {
                writeln!(
                    out,
                    "{}",
                    style.bold("sites across all reports (largest first)")
                )?;
                let mut t = Table::new(&[true, true, true, false]);
                for s in &summary.sites {
                    t.row([
                        bytes(s.leaked_bytes),
                        plural(s.leaks, "leak", "leaks"),
                        plural(s.processes, "process", "processes"),
                        label(&s.site, s.location.as_deref()),
                    ]);
                }
                out.write_all(t.render("  ").as_bytes())?;
                more(out, summary.sites_total, summary.sites.len(), "sites")?;
            }
            writeln!(out)?;
        }
        for (i, p) in summary.processes.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            process(p, out, style)?;
        }
        Ok(())
    }
}

fn leaked_phrase(leaked_bytes: u64, leaks: u64, style: Style) -> String {
    if leaks == 0 {
        style.good("nothing")
    } else {
        style.bad(&format!(
            "{} in {}",
            bytes(leaked_bytes),
            plural(leaks, "leak", "leaks")
        ))
    }
}

fn label(site: &str, location: Option<&str>) -> String {
    match location {
        Some(l) => format!("{} ({})", one_line(site), one_line(l)),
        None => one_line(site),
    }
}

fn more(out: &mut dyn Write, total: usize, shown: usize, what: &str) -> io::Result<()> {
    if total > shown {
        writeln!(out, "  … {} more {what} (see --top)", total - shown)?;
    }
    Ok(())
}

fn process(p: &ReportSummary, out: &mut dyn Write, style: Style) -> io::Result<()> {
    writeln!(
        out,
        "{}",
        style.bold(&format!("== {}", one_line(&p.source)))
    )?;
    let mut who = format!(
        "{}  pid {}  ppid {}  host {}",
        one_line(p.exe_name()),
        p.process.pid,
        p.process.ppid,
        one_line(&p.process.hostname)
    );
    if let Some(rank) = p.process.rank {
        who.push_str(&format!("  rank {rank}"));
    }
    writeln!(out, "process  {who}")?;
    writeln!(out, "command  {}", one_line(&p.process.argv.join(" ")))?;
    let why = match p.reason.as_str() {
        "exit" => "written at exit".to_string(),
        "checkpoint" => "written at a checkpoint".to_string(),
        "signal" => "cut short by a signal".to_string(),
        "request" => "written on request".to_string(),
        other => format!("reason {}", one_line(other)),
    };
    let status = if p.complete {
        format!("complete, {why}")
    } else {
        style.warn(&format!("INCOMPLETE, {why}"))
    };
    writeln!(
        out,
        "report   {status}, by cuguard {} (driver {})",
        one_line(&p.tool_version),
        p.driver_version
    )?;
    writeln!(
        out,
        "leaked   {}",
        leaked_phrase(p.leaked_bytes, p.leaks, style)
    )?;

    let mut t = Table::new(&[false, false, true, true, false]);
    for d in &p.devices {
        let mut extra = Vec::new();
        if let Some(peak) = d.peak_live_bytes {
            extra.push(format!("peak live {}", bytes(peak)));
        }
        if let Some(pool) = d.pool_reserved_bytes {
            extra.push(format!("pool reserved {}", bytes(pool)));
        }
        let name = match (&d.name, d.total_bytes) {
            (Some(n), Some(total)) => format!("{}, {}", one_line(n), bytes(total)),
            _ => "(not listed)".into(),
        };
        t.row([
            format!("device {}", d.device),
            name,
            bytes(d.leaked_bytes),
            plural(d.leaks, "leak", "leaks"),
            extra.join(", "),
        ]);
        for c in p.contexts.iter().filter(|c| c.device == d.device) {
            let id = match c.context {
                Some(id) => format!("  context {id}"),
                None => "  no context".into(),
            };
            let mut what = Vec::new();
            if c.primary {
                what.push("primary".to_string());
            }
            if c.destroyed {
                what.push(match &c.destroyed_by {
                    Some(by) => format!("destroyed by {}", one_line(by)),
                    None => "destroyed".into(),
                });
            }
            if c.context.is_some() && !c.listed {
                what.push("not listed".into());
            }
            t.row([
                id,
                what.join(", "),
                bytes(c.leaked_bytes),
                plural(c.leaks, "leak", "leaks"),
                String::new(),
            ]);
        }
    }
    out.write_all(t.render("  ").as_bytes())?;

    if !p.sites.is_empty() {
        writeln!(out, "{}", style.bold("sites (largest first)"))?;
        let mut t = Table::new(&[true, true, false, false]);
        for s in &p.sites {
            t.row([
                bytes(s.leaked_bytes),
                plural(s.leaks, "leak", "leaks"),
                label(&s.site, s.location.as_deref()),
                one_line(&s.apis.join(",")),
            ]);
        }
        out.write_all(t.render("  ").as_bytes())?;
        more(out, p.sites_total, p.sites.len(), "sites")?;
    }
    if !p.largest_leaks.is_empty() {
        writeln!(out, "{}", style.bold("largest leaks"))?;
        let mut t = Table::new(&[true, false, false, false, false, false, false, false]);
        for l in &p.largest_leaks {
            let ctx = match l.context {
                Some(c) => format!("ctx {c}"),
                None => "ctx -".into(),
            };
            let state = if l.state == "live_at_exit" {
                String::new()
            } else {
                one_line(&l.state)
            };
            t.row([
                bytes(l.size),
                l.address.to_string(),
                one_line(&l.api),
                one_line(&l.memory),
                format!("dev {}", l.device),
                ctx,
                format!("thread {}", l.thread),
                format!("{} {state}", one_line(&l.site)),
            ]);
        }
        out.write_all(t.render("  ").as_bytes())?;
        more(out, p.leaks as usize, p.largest_leaks.len(), "leaks")?;
    }
    if !p.events.is_empty() {
        writeln!(out, "{}", style.bold("events"))?;
        let mut t = Table::new(&[true, false]);
        for e in &p.events {
            t.row([e.count.to_string(), one_line(&e.kind)]);
        }
        out.write_all(t.render("  ").as_bytes())?;
    }
    if p.events_dropped > 0 {
        writeln!(
            out,
            "  {}",
            style.warn(&format!(
                "and {} the shim did not keep",
                plural(p.events_dropped, "event", "events")
            ))
        )?;
    }
    if !p.faults.is_empty() {
        writeln!(out, "{}", style.warn("shim faults"))?;
        for f in &p.faults {
            writeln!(out, "  {}", one_line(f))?;
        }
    }
    Ok(())
}
