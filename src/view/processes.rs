//! The page's per-process view, for a merged report (several processes): a table with one row
//! per process (its worker or rank, host and pid, whether its report is complete, leaked bytes
//! split into the program's own and the rest, its peak, its largest site); then one
//! `<details id="process-N">` per process, opened by clicking its name, with that process's
//! sites; and first the processes the comparison called out (see [`crate::summary::groups`]).
//! Static HTML: no script and no links (the page loads nothing and has no `href`).

use std::io::{self, Write};

use crate::owners::OwnerKind;
use crate::summary::{ReportSummary, Summary};
use crate::text::{bytes, plural};

fn esc(text: &str) -> String {
    super::html::esc(text)
}

/// The program's own bytes and the rest, of what `p` leaked.
fn split(p: &ReportSummary) -> (u64, u64) {
    p.owners.iter().fold((0, 0), |(own, rest), o| {
        if o.kind == OwnerKind::Program {
            (own.saturating_add(o.bytes), rest)
        } else {
            (own, rest.saturating_add(o.bytes))
        }
    })
}

/// The most bytes live at once, summed over its devices.
fn peak(p: &ReportSummary) -> u64 {
    p.devices
        .iter()
        .filter_map(|d| d.peak_live_bytes)
        .fold(0, u64::saturating_add)
}

/// Writes the per-process view (`<h2>Per process</h2>`) when `s` has several processes.
pub fn section(out: &mut dyn Write, s: &Summary) -> io::Result<()> {
    if s.processes.len() < 2 {
        return Ok(());
    }
    writeln!(out, "<h2 id=\"per-process\">Per process</h2>")?;
    if let Some(job) = &s.job {
        if !job.outliers.is_empty() {
            writeln!(out, "<ul class=\"called-out\">")?;
            for o in &job.outliers {
                writeln!(out, "<li class=\"bad\">{}</li>", esc(&o.sentence))?;
            }
            writeln!(out, "</ul>")?;
        }
        if !job.missing_ranks.is_empty() {
            let ranks: Vec<String> = job.missing_ranks.iter().map(u32::to_string).collect();
            writeln!(
                out,
                "<p class=\"warn\">No report from rank {} (WORLD_SIZE {}).</p>",
                ranks.join(", "),
                job.world_size.unwrap_or(0)
            )?;
        }
    }
    writeln!(
        out,
        "<table id=\"process-table\">\n<thead><tr><th>process</th><th>worker</th><th class=\"num\">rank</th><th>host</th><th class=\"num\">pid</th><th>report</th><th class=\"num\">leaked</th><th class=\"num\">program's own</th><th class=\"num\">others</th><th class=\"num\">peak</th><th>largest site</th></tr></thead>\n<tbody>"
    )?;
    for (i, p) in s.processes.iter().enumerate() {
        let id = p.identity();
        let (own, rest) = split(p);
        writeln!(
            out,
            "<tr id=\"process-row-{i}\"><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"site\">{}</td></tr>",
            esc(&id.name()),
            esc(id.worker.as_deref().unwrap_or("")),
            id.rank.map(|r| r.to_string()).unwrap_or_default(),
            esc(&id.host),
            id.pid,
            if p.complete {
                "complete".to_string()
            } else {
                format!(
                    "<span class=\"warn\">incomplete ({})</span>",
                    esc(&p.reason)
                )
            },
            bytes(p.leaked_bytes),
            bytes(own),
            bytes(rest),
            bytes(peak(p)),
            p.sites.first().map(|s| esc(&s.label)).unwrap_or_default()
        )?;
    }
    writeln!(out, "</tbody>\n</table>")?;
    for (i, p) in s.processes.iter().enumerate() {
        let id = p.identity();
        writeln!(
            out,
            "<details class=\"process\" id=\"process-{i}\">\n<summary>{}</summary>",
            esc(&id.describe())
        )?;
        writeln!(
            out,
            "<p>{}: {} leaked in {}, peak {}.</p>",
            esc(&p.source),
            bytes(p.leaked_bytes),
            plural(p.leaks, "leak", "leaks"),
            bytes(peak(p))
        )?;
        if !p.sites.is_empty() {
            writeln!(
                out,
                "<table class=\"process-sites\">\n<thead><tr><th class=\"num\">leaked</th><th class=\"num\">leaks</th><th>site</th></tr></thead>\n<tbody>"
            )?;
            for site in &p.sites {
                writeln!(
                    out,
                    "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"site\">{}</td></tr>",
                    bytes(site.leaked_bytes),
                    site.leaks,
                    esc(&site.label)
                )?;
            }
            writeln!(out, "</tbody>\n</table>")?;
        }
        writeln!(out, "</details>")?;
    }
    Ok(())
}
