//! `--format markdown`: the [`Diff`] for a pull-request comment: the totals, the sites that
//! changed (new and grown first), then the peaks (the run's and each phase occurrence's that
//! changed, with the sites that changed at each).

use std::io::{self, Write};

use super::model::{Change, Diff};
use crate::output::{Format, Options};
use crate::summary::markdown::cell;
use crate::wording::{bytes, delta_bytes, plural};

/// `--format markdown`.
pub struct Markdown;

impl Format<Diff> for Markdown {
    const NAME: &'static str = "markdown";
    const HELP: &'static str = "For a pull-request comment";

    /// Writes the diff as Markdown, at most `options.top` sites and peaks per table.
    fn write(diff: &Diff, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        let top = options.top;
        writeln!(
            out,
            "### cuguard diff\n\nbase {} in {} ({}) → new {} in {} ({}): **{}**, {:+} leaks\n",
            bytes(diff.base.leaked_bytes),
            plural(diff.base.leaks, "leak", "leaks"),
            plural(diff.base.reports as u64, "report", "reports"),
            bytes(diff.new.leaked_bytes),
            plural(diff.new.leaks, "leak", "leaks"),
            plural(diff.new.reports as u64, "report", "reports"),
            delta_bytes(diff.delta_bytes),
            diff.delta_leaks
        )?;
        let changed: Vec<_> = [Change::New, Change::Grown, Change::Shrunk, Change::Fixed]
            .iter()
            .flat_map(|c| diff.sites.iter().filter(move |s| s.change == *c))
            .collect();
        if !changed.is_empty() {
            writeln!(out, "| leaked | change | site | base → new |")?;
            writeln!(out, "|---:|---|---|---|")?;
            for s in changed.iter().take(top) {
                writeln!(
                    out,
                    "| {} | {} | {} | {} → {} |",
                    delta_bytes(s.delta_bytes),
                    change_word(s.change),
                    cell(&s.label),
                    bytes(s.base_bytes),
                    bytes(s.new_bytes)
                )?;
            }
            if changed.len() > top {
                writeln!(out, "\n… {} more (see --top)", changed.len() - top)?;
            }
            writeln!(out)?;
        }
        if let Some(p) = &diff.peaks {
            writeln!(
                out,
                "**Peaks** ({} → {})\n",
                cell(&p.base_process),
                cell(&p.new_process)
            )?;
            writeln!(out, "| peak of | base | new | change | at it |")?;
            writeln!(out, "|---|---:|---:|---:|---|")?;
            let listed = p
                .peaks
                .iter()
                .filter(|c| c.phase.is_none() || c.delta_bytes != 0)
                .take(top.saturating_add(1));
            for c in listed {
                let pct = c
                    .growth_ratio()
                    .map_or(String::new(), |r| format!(" ({:+.1}%)", r * 100.0));
                let sites: Vec<String> = c
                    .sites
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {} ({})",
                            cell(&s.label),
                            s.change,
                            delta_bytes(i128::from(s.delta_bytes))
                        )
                    })
                    .collect();
                writeln!(
                    out,
                    "| {} | {} | {} | {}{pct} | {} |",
                    cell(&c.what),
                    bytes(c.base_peak_bytes),
                    bytes(c.new_peak_bytes),
                    delta_bytes(i128::from(c.delta_bytes)),
                    sites.join("<br>")
                )?;
            }
            for n in &p.notes {
                writeln!(out, "\n- note: {}", cell(n))?;
            }
        } else if let Some(why) = &diff.peaks_not_compared {
            writeln!(out, "Peaks: {}", cell(why))?;
        }
        Ok(())
    }
}

fn change_word(c: Change) -> &'static str {
    match c {
        Change::New => "new",
        Change::Grown => "grown",
        Change::Shrunk => "shrunk",
        Change::Fixed => "fixed",
        Change::Unchanged => "unchanged",
    }
}
