//! `--format markdown`: the summary as GitHub-flavoured Markdown, for a pull-request comment.
//!
//! A heading with the totals, a table of sites across all reports, then per process a line
//! saying who it was, its out-of-memory refusals (first), a table of its sites, bytes by owner,
//! its versions (a line, and each known mismatch as an item), what was live at each device's
//! peak, what grew and the device memory split, each under a heading of its own; events as a
//! list. Sites carry their location once. Before the
//! processes, the job section when there is one ([`job_section`]).

use std::io::{self, Write};

use super::attribution::SiteBytes;
use super::groups::Job;
use super::model::Summary;
use super::report::ReportSummary;
use super::sections::Sections;
use crate::output::{Format, Options};
use crate::owners::{OwnerKind, OwnerShare};
use crate::wording::{bytes, delta_bytes, millis, one_line};

/// Escapes text for a table cell or inline text.
pub(crate) fn cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in one_line(text).chars() {
        if matches!(c, '|' | '`' | '*' | '_' | '<' | '>' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `--format markdown`.
pub struct Markdown;

impl Format<Summary> for Markdown {
    const NAME: &'static str = "markdown";
    const HELP: &'static str = "Markdown, for a pull-request comment";

    /// Writes the summary as Markdown.
    fn write(summary: &Summary, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        super::sections::write_in_sections::<Markdown>(summary, out, options)
    }
}

impl Sections for Markdown {
    fn head(summary: &Summary, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        writeln!(out, "## cuguard summary")?;
        writeln!(out)?;
        let verdict = if summary.leaks == 0 {
            "nothing leaked".to_string()
        } else {
            format!(
                "**{}** leaked in **{}** leaks",
                bytes(summary.leaked_bytes),
                summary.leaks
            )
        };
        writeln!(
            out,
            "{} reports ({} complete): {verdict}, {} events.",
            summary.reports,
            summary.complete_reports,
            summary.event_total()
        )?;
        if !summary.sites.is_empty() {
            writeln!(out)?;
            writeln!(out, "| leaked | leaks | processes | site |")?;
            writeln!(out, "|---:|---:|---:|---|")?;
            for s in &summary.sites {
                writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    bytes(s.leaked_bytes),
                    s.leaks,
                    s.processes,
                    cell(&s.label)
                )?;
            }
            if summary.sites_total > summary.sites.len() {
                writeln!(
                    out,
                    "\n_{} more sites not shown._",
                    summary.sites_total - summary.sites.len()
                )?;
            }
        }
        if summary.reports != 1 {
            owners(out, &summary.owners)?;
        }
        if !summary.events.is_empty() {
            writeln!(out)?;
            for e in &summary.events {
                writeln!(out, "- {} × {}", e.count, cell(&e.kind))?;
            }
        }
        if let Some(job) = &summary.job {
            job_section(out, job)?;
        }
        Ok(())
    }

    fn process(
        _: usize,
        p: &ReportSummary,
        out: &mut dyn Write,
        options: &Options,
    ) -> io::Result<()> {
        {
            writeln!(out)?;
            let id = p.identity();
            let mut rank = id.rank.map(|r| format!(", rank {r}")).unwrap_or_default();
            if let Some(w) = &id.worker {
                rank.push_str(&format!(", worker {}", cell(w)));
            }
            let status = if p.complete {
                String::new()
            } else {
                format!(" — **incomplete** ({})", cell(&p.reason))
            };
            writeln!(
                out,
                "### {} (pid {}{rank}, {}){status}",
                cell(p.exe_name()),
                p.process.pid,
                cell(&p.process.hostname)
            )?;
            writeln!(out)?;
            ooms(out, p)?;
            let source = p.source.replace('`', "'");
            if p.leaks == 0 {
                writeln!(out, "Report `{source}`: nothing leaked.")?;
            } else {
                writeln!(
                    out,
                    "Report `{source}`: {} leaked in {} leaks.",
                    bytes(p.leaked_bytes),
                    p.leaks
                )?;
                writeln!(out)?;
                writeln!(out, "| leaked | leaks | site | api |")?;
                writeln!(out, "|---:|---:|---|---|")?;
                for s in &p.sites {
                    writeln!(
                        out,
                        "| {} | {} | {} | {} |",
                        bytes(s.leaked_bytes),
                        s.leaks,
                        site_cell(
                            &s.label,
                            s.owner_kind,
                            &s.owner_label,
                            s.owner_bytes < s.leaked_bytes,
                            &s.stack
                        ),
                        cell(&s.apis.join(", "))
                    )?;
                }
                owners(out, &p.owners)?;
            }
            if let Some(v) = &p.versions {
                versions(out, v)?;
            }
            sections(out, p)?;
            if p.growing.is_empty()
                && let Some(n) = &p.growth_not_told
            {
                writeln!(out)?;
                writeln!(out, "Growth not told ({}).", cell(&n.short()))?;
            }
            if let Some(c) = &p.cost {
                let cost = if options.cost {
                    super::cost::cost_line(c)
                } else {
                    super::cost::cost_short(c)
                };
                writeln!(out)?;
                writeln!(out, "{}.", cell(&cost))?;
            }
            if !p.events.is_empty() {
                writeln!(out)?;
                let list: Vec<String> = p
                    .events
                    .iter()
                    .map(|e| format!("{} × {}", e.count, cell(&e.kind)))
                    .collect();
                writeln!(out, "Events: {}.", list.join(", "))?;
            }
        }
        Ok(())
    }

    fn tail(_: usize, _: &mut dyn Write, _: &Options) -> io::Result<()> {
        Ok(())
    }
}

/// `Versions: …` (the versions line), and one item per known mismatch, its rule's id linked to
/// the page that states the rule.
fn versions(out: &mut dyn Write, v: &crate::versions::VersionsSummary) -> io::Result<()> {
    writeln!(out)?;
    // Cell by cell: the line grows with the frameworks present, and a cell is cut at 300.
    let line: Vec<String> = v.line.split(" · ").map(cell).collect();
    writeln!(out, "Versions: {}.", line.join(" · "))?;
    if !v.mismatches.is_empty() {
        writeln!(out)?;
    }
    for m in &v.mismatches {
        let id = match m.citations.first() {
            Some(url) => format!("[{}]({url})", cell(m.rule)),
            None => cell(m.rule),
        };
        writeln!(out, "- **mismatch** ({id}): {}", cell(&m.message))?;
    }
    Ok(())
}

/// A site's cell: its label, who holds it when not the program, and its mixed stack.
pub(super) fn site_cell(
    label: &str,
    kind: OwnerKind,
    owner: &str,
    mostly: bool,
    stack: &[String],
) -> String {
    let mut text = cell(label);
    if kind != OwnerKind::Program {
        let mostly = if mostly { "mostly " } else { "" };
        text.push_str(&format!(" ({mostly}held by {})", cell(owner)));
    }
    if !stack.is_empty() {
        text.push_str(&format!("<br>{}", cell(&stack.join(" ← "))));
    }
    text
}

/// `#### Out of memory`: one item per refusal, first in a process's part.
fn ooms(out: &mut dyn Write, p: &ReportSummary) -> io::Result<()> {
    if p.ooms.is_empty() && p.ooms_dropped == 0 {
        return Ok(());
    }
    writeln!(out, "#### Out of memory")?;
    writeln!(out)?;
    for o in &p.ooms {
        if let Some(line) = super::attribution::within_words(&o.refused_by, o.within.as_deref()) {
            writeln!(
                out,
                "- {} asking **{}** on device {} at {}: {} — {line}",
                cell(&o.api),
                bytes(o.size),
                o.device,
                crate::wording::moment(o.time_ms),
                cell(&o.site.label),
            )?;
            continue;
        }
        let free = match (o.device_free_bytes, o.device_total_bytes) {
            (Some(f), Some(t)) => format!("{} free of {}", bytes(f), bytes(t)),
            _ => "free memory unknown".to_string(),
        };
        let who = super::attribution::refuser(&o.refused_by)
            .map_or_else(|| cell(&o.refused_by), |(words, _)| words.to_string());
        writeln!(
            out,
            "- {} asking **{}** on device {} at {}: {} — refused by {who}; {free}, {} live",
            cell(&o.api),
            bytes(o.size),
            o.device,
            crate::wording::moment(o.time_ms),
            cell(&o.site.label),
            bytes(cuguard_format::verdict::live_outside_idle(
                o.live_bytes,
                &o.idle
            ))
        )?;
        writeln!(out, "  - **verdict**: {}", cell(&o.verdict.text))?;
        if let Some(line) = super::attribution::other_processes_line(o) {
            writeln!(out, "  - {}", cell(&line))?;
        }
        if let Some(line) = super::attribution::device_bytes_line(o) {
            writeln!(out, "  - {}", cell(&line))?;
        }
        for h in &o.idle {
            writeln!(
                out,
                "  - idle: {}",
                cell(&super::attribution::idle_words(h))
            )?;
            if let Some(p) = super::attribution::pinning_words(h) {
                writeln!(out, "    - {}", cell(&p))?;
            }
        }
        if !o.by_owner.is_empty() {
            writeln!(out, "  - live by owner: {}", owner_list(&o.by_owner))?;
        }
        if !o.sites.is_empty() {
            writeln!(out, "  - live by site: {}", site_list(&o.sites))?;
        }
        if let Some(pool) = o
            .pool
            .as_ref()
            .filter(|_| super::attribution::pool_line_wanted(o))
        {
            writeln!(
                out,
                "  - pool: {} reserved, {} free, largest free block {}",
                bytes(pool.reserved_bytes),
                bytes(pool.free_bytes),
                bytes(pool.largest_free_block)
            )?;
        }
        if !o.stack.is_empty() {
            writeln!(out, "  - stack: {}", cell(&o.stack.join(" ← ")))?;
        }
    }
    if p.ooms_dropped > 0 {
        writeln!(out, "- and {} more not shown", p.ooms_dropped)?;
    }
    writeln!(out)
}

pub(super) fn owner_list(owners: &[OwnerShare]) -> String {
    owners
        .iter()
        .map(|o| format!("{} {}", cell(&o.label), bytes(o.bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn site_list(sites: &[SiteBytes]) -> String {
    sites
        .iter()
        .map(|s| {
            let owner = if s.owner_kind == OwnerKind::Program {
                String::new()
            } else {
                format!(" (held by {})", cell(&s.owner_label))
            };
            format!("{} {}{owner}", bytes(s.bytes), cell(&s.site.label))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Bytes held by owner, when not all of it is the program's, with each framework cache's note.
fn owners(out: &mut dyn Write, owners: &[OwnerShare]) -> io::Result<()> {
    if owners.iter().all(|o| o.kind == OwnerKind::Program) {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "| held at exit | leaks | owner |")?;
    writeln!(out, "|---:|---:|---|")?;
    for o in owners {
        writeln!(
            out,
            "| {} | {} | {} |",
            bytes(o.bytes),
            o.count,
            cell(&o.label)
        )?;
    }
    for o in owners.iter().filter(|o| o.bytes > 0) {
        if let Some(hint) = &o.hint {
            writeln!(out)?;
            writeln!(
                out,
                "{} held by {} at exit: {}.",
                bytes(o.bytes),
                cell(&o.label),
                cell(hint)
            )?;
        }
    }
    Ok(())
}

/// At the peak, growing, device memory: a heading each.
fn sections(out: &mut dyn Write, p: &ReportSummary) -> io::Result<()> {
    if !p.peaks.is_empty() {
        writeln!(out)?;
        writeln!(out, "#### At the peak")?;
        writeln!(out)?;
        for peak in &p.peaks {
            writeln!(
                out,
                "- device {}: at the peak of {}: {}",
                peak.device,
                super::attribution::peak_when(peak),
                owner_list(&peak.by_owner)
            )?;
            if !peak.sites.is_empty() {
                writeln!(out, "  - by site: {}", site_list(&peak.sites))?;
            }
        }
    }
    if !p.growing.is_empty() {
        writeln!(out)?;
        writeln!(out, "#### Growing")?;
        writeln!(out)?;
        writeln!(out, "| grew | over | from → to | site |")?;
        writeln!(out, "|---:|---:|---|---|")?;
        for g in &p.growing {
            writeln!(
                out,
                "| {} | {} | {} → {} | {} |",
                delta_bytes(i128::from(g.growth.grown_bytes)),
                millis(g.growth.to_ms.saturating_sub(g.growth.from_ms)),
                bytes(g.growth.from_bytes),
                bytes(g.growth.to_bytes),
                site_cell(&g.label, g.owner_kind, &g.owner_label, false, &g.stack)
            )?;
        }
    }
    if !p.reconciliation.is_empty() {
        writeln!(out)?;
        writeln!(out, "#### Device memory")?;
        writeln!(out)?;
        for r in &p.reconciliation {
            let used = r.used_bytes.map_or("unknown".to_string(), bytes);
            let unexplained = r.unexplained_bytes.map_or("unknown".to_string(), bytes);
            let parts: Vec<String> = r
                .parts()
                .into_iter()
                .map(|(label, value)| format!("{} {}", cell(&label), bytes(value)))
                .collect();
            writeln!(
                out,
                "- device {}: used {used}: {}, unexplained {unexplained}",
                r.device,
                parts.join(", ")
            )?;
            if r.used_by == Some("device") {
                let note = r
                    .process_used_note
                    .as_deref()
                    .map(|n| format!(": {}", cell(n)))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "  - used is the whole device's, other processes included{note}"
                )?;
            }
            for note in r.notes() {
                writeln!(out, "  - {}", cell(&note))?;
            }
        }
    }
    Ok(())
}

/// The job section (see [`super::groups`]): a table of the groups (`### By rank`), the
/// processes called out, the incomplete and the missing reports, each only when it has entries.
pub fn job_section(out: &mut dyn Write, job: &Job) -> io::Result<()> {
    if let Some(by) = job.by {
        writeln!(out)?;
        writeln!(out, "### By {}", by.as_str())?;
        writeln!(out)?;
        writeln!(
            out,
            "| {} | processes | leaked | leaks | program | others | peak | grew | largest sites |",
            by.as_str()
        )?;
        writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---|")?;
        for g in &job.groups {
            let sites: Vec<String> = g
                .sites
                .iter()
                .map(|s| format!("{} {}", bytes(s.leaked_bytes), cell(&s.label)))
                .collect();
            writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                cell(&g.name),
                g.processes.len(),
                bytes(g.leaked_bytes),
                g.leaks,
                bytes(g.own_bytes),
                bytes(g.others_bytes),
                bytes(g.peak_bytes),
                bytes(g.grown_bytes),
                sites.join("; ")
            )?;
        }
    }
    if !job.outliers.is_empty() {
        writeln!(out)?;
        writeln!(out, "**Called out** ({}):", cell(&job.criterion))?;
        writeln!(out)?;
        for o in &job.outliers {
            writeln!(out, "- {}", cell(&o.sentence))?;
        }
        if job.outliers_total > job.outliers.len() {
            writeln!(out, "- _{} more_", job.outliers_total - job.outliers.len())?;
        }
    }
    if !job.incomplete.is_empty() {
        writeln!(out)?;
        writeln!(out, "**Incomplete reports:**")?;
        writeln!(out)?;
        for p in &job.incomplete {
            writeln!(
                out,
                "- {}: {}, `{}`",
                cell(&p.name),
                cell(&p.reason),
                p.source.replace('`', "'")
            )?;
        }
    }
    if !job.missing_ranks.is_empty() {
        let ranks: Vec<String> = job.missing_ranks.iter().map(u32::to_string).collect();
        writeln!(out)?;
        writeln!(
            out,
            "**Missing reports** (WORLD_SIZE {}): rank {}.",
            job.world_size.unwrap_or(0),
            ranks.join(", ")
        )?;
    }
    Ok(())
}
