//! `--format markdown`: the summary as GitHub-flavoured Markdown, for a pull-request comment.
//!
//! A heading with the totals, a table of sites across all reports, then per process a line
//! saying who it was and a table of its sites; events as a list.

use std::io::{self, Write};

use super::Summary;
use crate::format::{Format, Options};
use crate::text::{bytes, one_line};

/// Escapes text for a table cell or inline text.
fn cell(text: &str) -> String {
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
    fn write(summary: &Summary, out: &mut dyn Write, _: &Options) -> io::Result<()> {
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
                    site(&s.site, s.location.as_deref())
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
        if !summary.events.is_empty() {
            writeln!(out)?;
            for e in &summary.events {
                writeln!(out, "- {} × {}", e.count, cell(&e.kind))?;
            }
        }
        for p in &summary.processes {
            writeln!(out)?;
            let rank = p
                .process
                .rank
                .map(|r| format!(", rank {r}"))
                .unwrap_or_default();
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
                        site(&s.site, s.location.as_deref()),
                        cell(&s.apis.join(", "))
                    )?;
                }
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
}

fn site(site: &str, location: Option<&str>) -> String {
    match location {
        Some(l) => format!("{} ({})", cell(site), cell(l)),
        None => cell(site),
    }
}
