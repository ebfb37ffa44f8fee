//! `--format text`: the diff for a terminal: the totals, then sites grouped as new, grown,
//! shrunk, fixed (unchanged ones only counted), then event counts that changed. A site is
//! printed with its location once; one whose stack has Python frames has its mixed native and
//! Python stack on the next line (`at::native::empty_cuda ← step (train.py:7) ← <module>
//! (train.py:12)`), as `py-spy --native` reads. Then the peaks, where compared: one process's
//! against another's, or two jobs' pair by pair (`rank 3`), those whose peaks are the same
//! counted in one line.

use std::io::{self, Write};

use super::model::{Change, Diff};
use crate::history::compare::{JobPeaks, PeakDiff, Peaks};
use crate::output::{Format, Options};
use crate::style::Table;
use crate::wording::{bytes, delta_bytes, one_line, plural};

/// `--format text`, the default.
pub struct Text;

impl Format<Diff> for Text {
    const NAME: &'static str = "text";
    const HELP: &'static str = "For a terminal";

    /// Writes the diff, coloured as `options.style` says, listing at most `options.top` sites
    /// per group.
    fn write(diff: &Diff, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        let (style, top) = (options.style, options.top);
        writeln!(
            out,
            "{} base {} in {} ({}) → new {} in {} ({}): {}, {:+} leaks",
            style.bold("cuguard diff:"),
            bytes(diff.base.leaked_bytes),
            plural(diff.base.leaks, "leak", "leaks"),
            plural(diff.base.reports as u64, "report", "reports"),
            bytes(diff.new.leaked_bytes),
            plural(diff.new.leaks, "leak", "leaks"),
            plural(diff.new.reports as u64, "report", "reports"),
            delta_bytes(diff.delta_bytes),
            diff.delta_leaks
        )?;
        for (change, title) in [
            (Change::New, "new sites"),
            (Change::Grown, "grown"),
            (Change::Shrunk, "shrunk"),
            (Change::Fixed, "fixed"),
        ] {
            let group: Vec<_> = diff.sites.iter().filter(|s| s.change == change).collect();
            if group.is_empty() {
                continue;
            }
            let title = match change {
                Change::New | Change::Grown => style.bad(title),
                _ => style.good(title),
            };
            writeln!(out, "{title}")?;
            let mut t = Table::new(&[true, true, false, false]);
            let shown: Vec<_> = group.iter().take(top).collect();
            for s in &shown {
                let site = one_line(&s.label);
                t.row([
                    delta_bytes(s.delta_bytes),
                    format!(
                        "{:+} {}",
                        s.delta_leaks,
                        if s.delta_leaks.abs() == 1 {
                            "leak"
                        } else {
                            "leaks"
                        }
                    ),
                    site,
                    format!("{} → {}", bytes(s.base_bytes), bytes(s.new_bytes)),
                ]);
            }
            for (line, s) in t.render("  ").lines().zip(&shown) {
                writeln!(out, "{line}")?;
                if !s.stack.is_empty() {
                    writeln!(out, "    {}", one_line(&s.stack.join(" ← ")))?;
                }
            }
            if group.len() > top {
                writeln!(out, "  … {} more (see --top)", group.len() - top)?;
            }
        }
        let unchanged = diff
            .sites
            .iter()
            .filter(|s| s.change == Change::Unchanged)
            .count();
        if unchanged > 0 {
            writeln!(
                out,
                "{} unchanged",
                plural(unchanged as u64, "site", "sites")
            )?;
        }
        let changed: Vec<_> = diff.events.iter().filter(|e| e.base != e.new).collect();
        if !changed.is_empty() {
            writeln!(out, "{}", style.bold("events"))?;
            let mut t = Table::new(&[false, true, false, true]);
            for e in changed {
                t.row([
                    one_line(&e.kind),
                    e.base.to_string(),
                    "→".into(),
                    e.new.to_string(),
                ]);
            }
            out.write_all(t.render("  ").as_bytes())?;
        }
        if let Some(p) = &diff.peaks {
            match p {
                Peaks::One(p) => {
                    writeln!(
                        out,
                        "{} {} → {}",
                        options.style.bold("peaks"),
                        one_line(&p.base_process),
                        one_line(&p.new_process)
                    )?;
                    peaks(p, out, options)?;
                }
                Peaks::Job(job) => job_peaks(job, out, options)?,
            }
        } else if let Some(why) = &diff.peaks_not_compared {
            writeln!(out, "peaks: {}", one_line(why))?;
        }
        Ok(())
    }
}

/// Two jobs' peaks, pair by pair, under a line that says how they were paired: each pair whose
/// peaks changed (at most `options.top`) headed by its name (`rank 3`) with its processes, as
/// one process's are ([`peaks`]); then how many have the same peaks, and what was not compared.
///
/// ```text
/// peaks rank by rank (3 processes in BASE, 3 in NEW)
/// rank 1  phase_steps[1913] → phase_steps[1917]
///   the run  144.0 MiB  → 384.0 MiB  +240.0 MiB  (+166.7%)
///       +256.0 MiB  new     heavy_site (phase_steps.c:50)  0 B → 256.0 MiB
///   …
/// 2 ranks with the same peaks: rank 0, rank 2
/// ```
fn job_peaks(job: &JobPeaks<PeakDiff>, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let (style, top) = (options.style, options.top);
    writeln!(
        out,
        "{} {} ({} in BASE, {} in NEW)",
        style.bold("peaks"),
        job.by.heading(),
        plural(job.base_processes as u64, "process", "processes"),
        job.new_processes
    )?;
    let (same, changed): (Vec<_>, Vec<_>) = job.processes.iter().partition(|n| n.peaks.unchanged());
    for n in changed.iter().take(top) {
        writeln!(
            out,
            "{}  {} → {}",
            style.bold(&one_line(&n.name)),
            one_line(&n.peaks.base_process),
            one_line(&n.peaks.new_process)
        )?;
        peaks(&n.peaks, out, options)?;
    }
    for line in [
        job.more_changed_line(changed.len(), top),
        job.same_line(&same),
    ]
    .into_iter()
    .flatten()
    {
        writeln!(out, "{}", one_line(&line))?;
    }
    for line in job.uncompared_lines() {
        writeln!(out, "{}", one_line(&line))?;
    }
    Ok(())
}

/// The runs' peaks (after their heading): the whole run's, then each phase occurrence that
/// changed (the most grown first), each with the sites that changed at it.
fn peaks(p: &PeakDiff, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let top = options.top;
    let changed: Vec<_> = p
        .peaks
        .iter()
        .filter(|c| c.phase.is_none() || c.delta_bytes != 0)
        .collect();
    let shown: Vec<_> = changed.iter().take(top.saturating_add(1)).collect();
    let mut t = Table::new(&[false, true, false, true, true, false]);
    for c in &shown {
        let pct = c
            .growth_ratio()
            .map_or(String::new(), |r| format!("({:+.1}%)", r * 100.0));
        let stayed = match (c.base_stayed_bytes, c.new_stayed_bytes) {
            (Some(b), Some(n)) if b != n => format!("kept {} → {}", bytes(b), bytes(n)),
            _ => String::new(),
        };
        t.row([
            one_line(&c.what),
            bytes(c.base_peak_bytes),
            format!("→ {}", bytes(c.new_peak_bytes)),
            delta_bytes(i128::from(c.delta_bytes)),
            pct,
            stayed,
        ]);
    }
    for (line, c) in t.render("  ").lines().zip(&shown) {
        writeln!(out, "{line}")?;
        let sites = crate::history::compare::sites_table(&c.sites, "      ");
        out.write_all(sites.as_bytes())?;
    }
    if changed.len() > shown.len() {
        writeln!(out, "  … {} more (see --top)", changed.len() - shown.len())?;
    }
    let same = p
        .peaks
        .iter()
        .filter(|c| c.phase.is_some() && c.delta_bytes == 0)
        .count();
    if same > 0 {
        writeln!(
            out,
            "  {} with the same peak",
            plural(same as u64, "phase occurrence", "phase occurrences")
        )?;
    }
    for n in &p.notes {
        writeln!(out, "  note: {}", one_line(n))?;
    }
    Ok(())
}
