//! `--format text`: the verdict for a terminal or a CI log.
//!
//! First line: `cuguard check: PASS` or `cuguard check: FAIL`, with the reasons; then the sites
//! that count (and, with a baseline, those it covers), the leaks not checked because of their
//! owner, the sites that grew (and with `--max-growth`, the reports too short to tell), the
//! events, what suppressions set aside, unused suppressions,
//! and incomplete reports. With several processes (a merged run), the processes that failed
//! come right after the reasons, each named by its worker or rank, host and pid
//! ([`failed_processes`]).
//!
//! ```text
//! cuguard check: FAIL: 1 report, 3.0 MiB leaked in 2 leaks
//!   ✗ 3.0 MiB in leaks exceeds --max-leaked-bytes 0 B
//!   ✗ append_batch (train.py:7) grew by 400.0 MiB over 10.0 s in python3[4242] (more than --max-growth 100.0 MiB)
//! leak sites
//!   3.0 MiB  2 leaks  make_buffers (train.c:42)  train[4242]
//! not checked (--owners to include them)
//!   2.7 GiB  52 leaks  PyTorch's caching allocator
//! growing
//!   +400.0 MiB  over 10.0 s  append_batch (train.py:7)  python3[4242]  fails
//! ```

use std::io::{self, Write};

use super::entries::SiteStatus;
use super::peaks::{Judged, ProcessJudged};
use super::verdict::Verdict;
use crate::history::compare::some_names;
use crate::output::{Format, Options};
use crate::style::Table;
use crate::wording::{bytes, delta_bytes, millis, one_line, plural};

/// `--format text`, the default.
pub struct Text;

impl Format<Verdict> for Text {
    const NAME: &'static str = "text";
    const HELP: &'static str = "For a terminal or CI log";

    /// Writes the verdict as text, coloured as `options.style` says, listing at most
    /// `options.top` sites.
    fn write(verdict: &Verdict, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        headline(verdict, out, options)?;
        failed_processes(out, verdict, options)?;
        leak_sites(verdict, out, options)?;
        not_checked(verdict, out, options)?;
        growing(verdict, out, options)?;
        peaks(verdict, out, options)?;
        growth_not_told(verdict, out, options)?;
        events(verdict, out, options)?;
        suppressed(verdict, out, options)?;
        unused_and_incomplete(verdict, out, options)
    }
}

/// The first line, PASS or FAIL with the totals, and the reasons of a failure.
fn headline(verdict: &Verdict, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let style = options.style;
    let head = if verdict.passed {
        style.good("PASS")
    } else {
        style.bad("FAIL")
    };
    writeln!(
        out,
        "{} {head}: {}, {} leaked in {}{}",
        style.bold("cuguard check:"),
        plural(verdict.reports as u64, "report", "reports"),
        bytes(verdict.leaked_bytes),
        plural(verdict.leaks, "leak", "leaks"),
        if verdict.baseline {
            format!(
                ", {} in {} new or grown since the baseline",
                bytes(verdict.counted_bytes),
                plural(verdict.counted_leaks, "leak", "leaks")
            )
        } else {
            String::new()
        }
    )?;
    for f in &verdict.failures {
        writeln!(out, "  {} {}", style.bad("✗"), one_line(f))?;
    }
    Ok(())
}

/// The sites that count (at most `--top`), and how many the baseline covers.
fn leak_sites(verdict: &Verdict, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let (style, top) = (options.style, options.top);
    let counting = verdict.sites.counting();
    if counting > 0 {
        writeln!(out, "{}", style.bold("leak sites"))?;
        let mut t = Table::new(&[true, true, false, false, false]);
        for s in verdict.sites.iter().take(counting.min(top)) {
            let mut row = vec![bytes(s.leaked_bytes), plural(s.leaks, "leak", "leaks")];
            match s.status {
                SiteStatus::Leak => {}
                SiteStatus::New => row.push("new".into()),
                SiteStatus::Grown => row.push(format!(
                    "grown {} / +{}",
                    delta_bytes(i128::from(s.leaked_bytes) - i128::from(s.baseline_bytes)),
                    s.leaks.saturating_sub(s.baseline_leaks)
                )),
                SiteStatus::Baselined => {}
            }
            let site = one_line(&s.label);
            let mut names: Vec<&str> = s.processes.iter().map(String::as_str).collect();
            names.dedup();
            let mut whose = names.join(", ");
            if s.process_count > s.processes.len() as u64 {
                whose.push_str(&format!(" +{}", s.process_count - s.processes.len() as u64));
            }
            row.push(site);
            row.push(one_line(&whose));
            t.row(row);
        }
        out.write_all(t.render("  ").as_bytes())?;
        if counting > top {
            writeln!(out, "  … {} more sites (see --top)", counting - top)?;
        }
    }
    let baselined = verdict.sites.len() - counting;
    if baselined > 0 {
        writeln!(
            out,
            "{}",
            style.dim(&format!(
                "{} no larger than in the baseline",
                plural(baselined as u64, "site", "sites")
            ))
        )?;
    }
    Ok(())
}

/// The leaks set aside by their owner, and what Python objects held at the end.
fn not_checked(verdict: &Verdict, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let style = options.style;
    if !verdict.other_owners.is_empty() {
        writeln!(
            out,
            "{}",
            style.dim("not checked (--owners to include them)")
        )?;
        let mut t = Table::new(&[true, true, false]);
        for o in &verdict.other_owners {
            t.row([
                bytes(o.bytes),
                plural(o.count, "leak", "leaks"),
                one_line(&o.label),
            ]);
        }
        out.write_all(t.render("  ").as_bytes())?;
    }
    if let Some(h) = &verdict.held_at_end
        && h.allocations > 0
    {
        writeln!(
            out,
            "{}",
            style.dim(&format!(
                "not checked: {} in {} held by Python objects at the end (--held to count them)",
                bytes(h.bytes),
                plural(h.allocations, "allocation", "allocations")
            ))
        )?;
    }
    Ok(())
}

/// The sites that grew: listed with `--max-growth`, else counted.
fn growing(verdict: &Verdict, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let (style, top) = (options.style, options.top);
    if verdict.limits.max_growth.is_some() && !verdict.growing.is_empty() {
        writeln!(out, "{}", style.bold("growing"))?;
        let mut t = Table::new(&[true, false, false, false, false]);
        for g in verdict.growing.iter().take(top) {
            let grown = &g.growth.growth;
            let plain = if g.failing { "fails" } else { "" };
            let shown = if g.failing {
                style.bad("fails")
            } else {
                String::new()
            };
            let cell = |s: String| (s.clone(), s);
            t.row_styled(vec![
                cell(delta_bytes(i128::from(grown.grown_bytes))),
                cell(format!(
                    "over {}",
                    millis(grown.to_ms.saturating_sub(grown.from_ms))
                )),
                cell(one_line(&g.growth.label)),
                cell(one_line(&g.process)),
                (plain.to_string(), shown),
            ]);
        }
        out.write_all(t.render("  ").as_bytes())?;
        if verdict.growing.len() > top {
            writeln!(out, "  … {} more (see --top)", verdict.growing.len() - top)?;
        }
    } else if !verdict.growing.is_empty() {
        writeln!(
            out,
            "{}",
            style.dim(&format!(
                "{} grew while running (cuguard summary lists them; --max-growth SIZE fails on them)",
                plural(verdict.growing.len() as u64, "site", "sites")
            ))
        )?;
    }
    Ok(())
}

/// With `--max-peak-growth`: the run's peak and, with `--by phase`, each phase occurrence's,
/// against the baseline's; the failing ones with the sites that changed at them. For two jobs,
/// each pair with a failing peak so, headed by its name (`rank 3`), then the pairs within the
/// limit in one line and what was not compared.
fn peaks(verdict: &Verdict, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let Some(p) = &verdict.peaks else {
        return Ok(());
    };
    let (style, top) = (options.style, options.top);
    let job = match &p.judged {
        Judged::One(one) => {
            writeln!(
                out,
                "{} against the baseline's ({} → {}; --max-peak-growth {})",
                style.bold("peaks"),
                one_line(&one.base_process),
                one_line(&one.new_process),
                one_line(&p.limit)
            )?;
            return process_peaks(one, "  ", out, options);
        }
        Judged::Job(job) => job,
    };
    writeln!(
        out,
        "{} against the baseline's, {} ({} in BASE, {} in NEW; --max-peak-growth {})",
        style.bold("peaks"),
        job.by.heading(),
        plural(job.base_processes as u64, "process", "processes"),
        job.new_processes,
        one_line(&p.limit)
    )?;
    let (failing, within): (Vec<_>, Vec<_>) = job.processes.iter().partition(|n| n.peaks.fails());
    for n in failing.iter().take(top) {
        writeln!(
            out,
            "  {} ({} → {})",
            style.bold(&one_line(&n.name)),
            one_line(&n.peaks.base_process),
            one_line(&n.peaks.new_process)
        )?;
        process_peaks(&n.peaks, "    ", out, options)?;
    }
    if failing.len() > top {
        writeln!(
            out,
            "  … {} more with a failing peak (see --top)",
            job.by.count(failing.len() - top)
        )?;
    }
    if !within.is_empty() {
        let names: Vec<&str> = within.iter().map(|n| n.name.as_str()).collect();
        writeln!(
            out,
            "  {} within the limit: {}",
            job.by.count(within.len()),
            one_line(&some_names(&names, 5))
        )?;
    }
    for line in job.uncompared_lines() {
        writeln!(out, "  {}", one_line(&line))?;
    }
    Ok(())
}

/// One process's peaks judged, at `indent`: the run's and the failing ones, each with the sites
/// that changed at it; how many phase occurrences are within the limit; the notes.
fn process_peaks(
    p: &ProcessJudged,
    indent: &str,
    out: &mut dyn Write,
    options: &Options,
) -> io::Result<()> {
    let (style, top) = (options.style, options.top);
    let listed: Vec<_> = p
        .peaks
        .iter()
        .filter(|j| j.failing || j.change.phase.is_none())
        .take(top.saturating_add(1))
        .collect();
    for j in &listed {
        let verdict_word = if j.failing {
            style.bad("fails")
        } else {
            style.good("within")
        };
        writeln!(
            out,
            "{indent}{}  {verdict_word}",
            one_line(&super::peaks::growth_words(&j.change))
        )?;
        let sites = crate::history::compare::sites_table(&j.change.sites, &format!("{indent}  "));
        out.write_all(sites.as_bytes())?;
    }
    let within = p
        .peaks
        .iter()
        .filter(|j| !j.failing && j.change.phase.is_some())
        .count();
    if within > 0 {
        writeln!(
            out,
            "{indent}{} within the limit",
            plural(within as u64, "phase occurrence", "phase occurrences")
        )?;
    }
    for n in &p.notes {
        writeln!(out, "{indent}note: {}", one_line(n))?;
    }
    Ok(())
}

/// With `--max-growth`, the reports too short to tell growth.
fn growth_not_told(verdict: &Verdict, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let (style, top) = (options.style, options.top);
    if verdict.limits.max_growth.is_some() && !verdict.growth_not_told.is_empty() {
        writeln!(
            out,
            "{}",
            style.warn("growth not checked (too few samples; a longer run has more)")
        )?;
        for n in verdict.growth_not_told.iter().take(top) {
            writeln!(out, "  {}: {}", one_line(&n.source), n.why.why())?;
        }
        if verdict.growth_not_told.len() > top {
            writeln!(
                out,
                "  … {} more (see --top)",
                verdict.growth_not_told.len() - top
            )?;
        }
    }
    Ok(())
}

/// The events (at most `--top`), with those that fail.
fn events(verdict: &Verdict, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let (style, top) = (options.style, options.top);
    if !verdict.events.is_empty() {
        writeln!(out, "{}", style.bold("events"))?;
        let mut t = Table::new(&[true, false, false, false]);
        for e in verdict.events.iter().take(top) {
            let note = if e.failing {
                style.bad("fails")
            } else if e.counted == 0 {
                "in baseline".into()
            } else {
                String::new()
            };
            let plain = if e.failing {
                "fails".into()
            } else {
                note.clone()
            };
            t.row_styled(vec![
                (e.count.to_string(), e.count.to_string()),
                (one_line(&e.kind), one_line(&e.kind)),
                (
                    format!("at {}", one_line(&e.site)),
                    format!("at {}", one_line(&e.site)),
                ),
                (plain, note),
            ]);
        }
        out.write_all(t.render("  ").as_bytes())?;
        if verdict.events.len() > top {
            writeln!(out, "  … {} more (see --top)", verdict.events.len() - top)?;
        }
    }
    Ok(())
}

/// What suppressions set aside, with their rules under `--show-suppressed`.
fn suppressed(verdict: &Verdict, out: &mut dyn Write, _: &Options) -> io::Result<()> {
    if verdict.suppressed_leaks > 0 || verdict.suppressed_events > 0 {
        writeln!(
            out,
            "suppressed: {} in {}, {}",
            bytes(verdict.suppressed_bytes),
            plural(verdict.suppressed_leaks, "leak", "leaks"),
            plural(verdict.suppressed_events, "event", "events")
        )?;
        if verdict.show_suppressed {
            let mut t = Table::new(&[true, false, false]);
            for s in &verdict.suppressed_sites {
                let what = if s.kind == "leak" {
                    format!("{} in {}", bytes(s.bytes), plural(s.count, "leak", "leaks"))
                } else {
                    format!("{} × {}", s.count, one_line(&s.kind))
                };
                let by = verdict
                    .suppressions
                    .get(s.rule)
                    .map_or_else(String::new, |r| {
                        format!("by {}:{}: {}", one_line(&r.file), r.line, one_line(&r.rule))
                    });
                t.row([what, one_line(&s.site), by]);
            }
            out.write_all(t.render("  ").as_bytes())?;
        } else {
            writeln!(out, "  (--show-suppressed lists them with their rules)")?;
        }
    }
    Ok(())
}

/// The suppressions that matched nothing, and the incomplete reports.
fn unused_and_incomplete(
    verdict: &Verdict,
    out: &mut dyn Write,
    options: &Options,
) -> io::Result<()> {
    let (style, top) = (options.style, options.top);
    let unused: Vec<_> = verdict.unused_suppressions().collect();
    if !unused.is_empty() {
        writeln!(out, "{}", style.warn("unused suppressions"))?;
        for r in unused {
            writeln!(
                out,
                "  {}:{}: {}",
                one_line(&r.file),
                r.line,
                one_line(&r.rule)
            )?;
        }
    }
    if !verdict.incomplete.is_empty() {
        writeln!(out, "{}", style.warn("incomplete reports"))?;
        for s in verdict.incomplete.iter().take(top) {
            writeln!(out, "  {}", one_line(s))?;
        }
    }
    Ok(())
}

/// With more than one process, those that failed (at most `--top`), named by worker or rank
/// with host and pid, and what made each fail:
///
/// ```text
/// failed processes
///   rank 1 (host gpu01, pid 5001) python3[5001]: 512.0 MiB in 1 leak at make_buffers
/// ```
pub fn failed_processes(
    out: &mut dyn Write,
    verdict: &Verdict,
    options: &Options,
) -> io::Result<()> {
    if verdict.processes.len() < 2 {
        return Ok(());
    }
    // The first `--top` that failed, and how many failed.
    let mut failed = Vec::new();
    let mut failed_count = 0usize;
    for p in verdict.processes.iter() {
        let p = p?;
        if p.failed {
            failed_count += 1;
            if failed.len() < options.top {
                failed.push(p);
            }
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    writeln!(out, "{}", options.style.bold("failed processes"))?;
    for p in &failed {
        let mut why = Vec::new();
        for (site, b, n) in &p.failing_sites {
            why.push(format!(
                "{} in {} at {site}",
                bytes(*b),
                plural(*n, "leak", "leaks")
            ));
        }
        for (kind, site, n) in &p.failing_events {
            why.push(format!("{n} × {kind} at {site}"));
        }
        for (site, grown) in &p.failing_growth {
            why.push(format!("{site} grew by {}", bytes(*grown)));
        }
        if !p.complete && why.is_empty() {
            why.push("the report is incomplete".into());
        }
        writeln!(
            out,
            "  {} {}: {}",
            options.style.bad(&one_line(&p.who)),
            one_line(&p.name),
            one_line(&why.join("; "))
        )?;
    }
    if failed_count > options.top {
        writeln!(out, "  … {} more (see --top)", failed_count - options.top)?;
    }
    Ok(())
}
