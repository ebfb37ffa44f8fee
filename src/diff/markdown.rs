//! `--format markdown`: the [`Diff`] for a pull-request comment: the totals, the sites that
//! changed (new and grown first), then the peaks (the run's and each phase occurrence's that
//! changed, with the sites that changed at each; for two jobs, pair by pair, each row naming
//! its pair: `rank 3`).

use std::io::{self, Write};

use super::model::{Change, Diff};
use crate::history::compare::{JobPeaks, PeakChange, PeakDiff, Peaks};
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
        match &diff.peaks {
            Some(Peaks::One(p)) => {
                writeln!(
                    out,
                    "**Peaks** ({} → {})\n",
                    cell(&p.base_process),
                    cell(&p.new_process)
                )?;
                writeln!(out, "| peak of | base | new | change | at it |")?;
                writeln!(out, "|---|---:|---:|---:|---|")?;
                for c in listed(p, top) {
                    writeln!(out, "| {} |", peak_row(c))?;
                }
                for n in &p.notes {
                    writeln!(out, "\n- note: {}", cell(n))?;
                }
            }
            Some(Peaks::Job(job)) => job_peaks(job, out, top)?,
            None => {
                if let Some(why) = &diff.peaks_not_compared {
                    writeln!(out, "Peaks: {}", cell(why))?;
                }
            }
        }
        Ok(())
    }
}

/// The peaks of `p` listed: the run's, then the phase occurrences that changed, at most `top`.
fn listed(p: &PeakDiff, top: usize) -> impl Iterator<Item = &PeakChange> {
    p.peaks
        .iter()
        .filter(|c| c.phase.is_none() || c.delta_bytes != 0)
        .take(top.saturating_add(1))
}

/// A peak's cells, without the row's outer bars: what, base, new, change, the sites at it.
fn peak_row(c: &PeakChange) -> String {
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
    format!(
        "{} | {} | {} | {}{pct} | {}",
        cell(&c.what),
        bytes(c.base_peak_bytes),
        bytes(c.new_peak_bytes),
        delta_bytes(i128::from(c.delta_bytes)),
        sites.join("<br>")
    )
}

/// Two jobs' peaks: one table of the pairs whose peaks changed (at most `top`), a row per peak
/// listed, the pair named in the first column (`rank 3`); then how many have the same peaks,
/// and what was not compared.
fn job_peaks(job: &JobPeaks<PeakDiff>, out: &mut dyn Write, top: usize) -> io::Result<()> {
    writeln!(
        out,
        "**Peaks**, {} ({} in BASE, {} in NEW)\n",
        job.by.heading(),
        plural(job.base_processes as u64, "process", "processes"),
        job.new_processes
    )?;
    let (same, changed): (Vec<_>, Vec<_>) = job.processes.iter().partition(|n| n.peaks.unchanged());
    if !changed.is_empty() {
        writeln!(
            out,
            "| {} | peak of | base | new | change | at it |",
            job.by.noun()
        )?;
        writeln!(out, "|---|---|---:|---:|---:|---|")?;
        for n in changed.iter().take(top) {
            for c in listed(&n.peaks, top) {
                writeln!(out, "| {} | {} |", cell(&n.name), peak_row(c))?;
            }
        }
        if let Some(line) = job.more_changed_line(changed.len(), top) {
            writeln!(out, "\n{}", cell(&line))?;
        }
    }
    if let Some(line) = job.same_line(&same) {
        writeln!(out, "\n{}", cell(&line))?;
    }
    let lines = job.uncompared_lines();
    if !lines.is_empty() {
        writeln!(out)?;
    }
    for line in lines {
        writeln!(out, "- {}", cell(&line))?;
    }
    Ok(())
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
