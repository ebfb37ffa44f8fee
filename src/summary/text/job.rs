//! The text of the job section: the groups of `--by`, the processes called out, incomplete
//! reports and missing ranks ([`job_section`]).

use std::io::{self, Write};

use super::lines::{leaked_phrase, more};
use crate::style::{Style, Table};
use crate::summary::groups::Job;
use crate::wording::{bytes, one_line, plural};

/// The job section (see [`crate::summary::groups`]): the groups, each with its largest sites; the
/// processes called out; the incomplete and the missing reports. Each part only when it has
/// entries:
///
/// ```text
/// by rank: 4 groups
///   rank 0: 1 process, leaked 9.0 MiB in 2 leaks (program 9.0 MiB, others 0 B), peak 18.0 MiB, grew 0 B
///       8.0 MiB  1 leak  make_buffers (train.c:42)
/// called out (at least 4× the median and at least 64.0 MiB more at a site, over at least 3 processes)
///   rank 1 holds 512.0 MiB at make_buffers (train.c:42), 64.0× the median of 8.0 MiB over 4 ranks (host gpu01, pid 5001)
/// incomplete reports
///   rank 4 (host gpu02, pid 5004): checkpoint, merged-ranks.json[3]
/// missing reports (WORLD_SIZE 5)
///   rank 3
/// ```
pub fn job_section(out: &mut dyn Write, job: &Job, style: Style) -> io::Result<()> {
    if let Some(by) = job.by {
        writeln!(
            out,
            "{}",
            style.bold(&format!(
                "by {}: {}",
                by.as_str(),
                plural(job.groups.len() as u64, "group", "groups")
            ))
        )?;
        for g in &job.groups {
            writeln!(
                out,
                "  {}: {}, leaked {} (program {}, others {}), peak {}, grew {}",
                one_line(&g.name),
                plural(g.processes.len() as u64, "process", "processes"),
                leaked_phrase(g.leaked_bytes, g.leaks, style),
                bytes(g.own_bytes),
                bytes(g.others_bytes),
                bytes(g.peak_bytes),
                bytes(g.grown_bytes)
            )?;
            let mut t = Table::new(&[true, true, false]);
            for s in &g.sites {
                t.row([
                    bytes(s.leaked_bytes),
                    plural(s.leaks, "leak", "leaks"),
                    one_line(&s.label),
                ]);
            }
            write!(out, "{}", t.render("      "))?;
            if g.sites_total > g.sites.len() {
                writeln!(out, "      … {} more sites", g.sites_total - g.sites.len())?;
            }
        }
    }
    if !job.outliers.is_empty() {
        writeln!(
            out,
            "{}",
            style.bold(&format!("called out ({})", job.criterion))
        )?;
        for o in &job.outliers {
            writeln!(out, "  {}", style.bad(&one_line(&o.sentence)))?;
        }
        more(out, job.outliers_total, job.outliers.len(), "called out")?;
    }
    if !job.incomplete.is_empty() {
        writeln!(out, "{}", style.bold("incomplete reports"))?;
        for p in &job.incomplete {
            writeln!(
                out,
                "  {}: {}, {}",
                style.warn(&one_line(&p.name)),
                one_line(&p.reason),
                one_line(&p.source)
            )?;
        }
    }
    if !job.missing_ranks.is_empty() {
        writeln!(
            out,
            "{}",
            style.bold(&format!(
                "missing reports (WORLD_SIZE {})",
                job.world_size.unwrap_or(0)
            ))
        )?;
        for r in &job.missing_ranks {
            writeln!(out, "  {}", style.warn(&format!("rank {r}")))?;
        }
    }
    Ok(())
}
