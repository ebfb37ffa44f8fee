//! `--format text`: the summary for a terminal, coloured only when [`Style`] says so.
//!
//! It leads with the answer. With several reports it opens with the totals, the sites across
//! all of them, bytes by owner and cuguard's own cost (summed, when the reports give it); then
//! the job section when there is one ([`job_section`]); then one section per process
//! ([`process`]): what the run left behind (what leaked; for a Python program what was held
//! and lost at the end of its code), the sites (largest first), who holds the bytes (by owner,
//! when not all of it is the program's) and each out-of-memory refusal; then who the process
//! was, how its report was written and its versions (one line, and each known mismatch), what
//! leaked per device and context, the largest leaks, what was live at each device's peak, what
//! grew, what the device says is used against what cuguard can explain, the events and the
//! shim's faults; last, growth that could not be told
//! (one line) and cuguard's own cost: one short line ([`super::cost_short`]), the whole bill
//! with `--cost` ([`super::cost_line`]).
//!
//! Sections are a heading at the start of a line with their entries indented under it; every
//! site is printed with its location once (`name (file:line)`), and a site whose stack has
//! Python frames has its mixed native and Python stack on the next line
//! (`at::native::empty_cuda ← step (train.py:7) ← <module> (train.py:12)`). The exact text of
//! each section is documented on the function that writes it.
//!
//! The job section is in `text/job.rs`, a Python program's end in `text/python.rs`, and what the
//! sections share (the leaked phrase, who holds a site, tables with their stacks) in
//! `text/lines.rs`.

mod job;
mod lines;
mod python;

use std::io::{self, Write};

use super::attribution::{OomSummary, PeakSummary, ReconciliationSummary, SiteBytes};
use super::model::Summary;
use super::report::ReportSummary;
use super::sections::Sections;
use crate::growth::GrowingSite;
use crate::output::{Format, Options};
use crate::owners::{OwnerKind, OwnerShare};
use crate::style::{Style, Table};
use crate::wording::{bytes, delta_bytes, millis, one_line, plural};
pub use job::job_section;
pub(super) use lines::{held_by, write_with_chains};
use lines::{leaked_phrase, more, site_held_by};
use python::{end_line, python_sections};

/// `--format text`, the default.
pub struct Text;

impl Format<Summary> for Text {
    const NAME: &'static str = "text";
    const HELP: &'static str = "For a terminal (colour on a TTY unless NO_COLOR is set)";

    /// Writes the summary as text, coloured as `options.style` says. Its lists were cut to
    /// `--top` when it was made.
    fn write(summary: &Summary, out: &mut dyn Write, options: &Options) -> io::Result<()> {
        super::sections::write_in_sections::<Text>(summary, out, options)
    }
}

impl Sections for Text {
    fn head(summary: &Summary, out: &mut dyn Write, options: &Options) -> io::Result<()> {
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
                let mut t = Table::new(&[true, true, true, false, false]);
                for s in &summary.sites {
                    t.row([
                        bytes(s.leaked_bytes),
                        plural(s.leaks, "leak", "leaks"),
                        plural(s.processes, "process", "processes"),
                        one_line(&s.label),
                        site_held_by(s.owner_kind, &s.owner_label, s.owner_bytes, s.leaked_bytes),
                    ]);
                }
                let chains: Vec<&[String]> = summary.sites.iter().map(|s| &s.stack[..]).collect();
                write_with_chains(out, &t, &chains)?;
                more(out, summary.sites_total, summary.sites.len(), "sites")?;
            }
            if summary.owners.iter().any(|o| o.kind != OwnerKind::Program) {
                owners_section(out, &summary.owners, "by owner, all reports", style)?;
            }
            if let Some(c) = &summary.cost {
                writeln!(out, "{}", cost_text(c, options))?;
            }
            writeln!(out)?;
        }
        if let Some(job) = &summary.job {
            job_section(out, job, style)?;
            writeln!(out)?;
        }
        Ok(())
    }

    fn process(
        i: usize,
        p: &ReportSummary,
        out: &mut dyn Write,
        options: &Options,
    ) -> io::Result<()> {
        if i > 0 {
            writeln!(out)?;
        }
        process(p, out, options)
    }

    fn tail(_: usize, _: &mut dyn Write, _: &Options) -> io::Result<()> {
        Ok(())
    }
}

/// One process, the answer first: the heading (with the report's state when it is not
/// complete), what the run left behind (the end of a Python program's code, what leaked, what
/// was held and lost then), the sites, who holds the bytes and each out-of-memory refusal; then
/// who the process was, its devices, its largest leaks, what was live at each peak, what grew,
/// what the device says is used, the events and the shim's faults; last, one line on what could
/// not be told and cuguard's own cost (whole with `--cost`).
fn process(p: &ReportSummary, out: &mut dyn Write, options: &Options) -> io::Result<()> {
    let style = options.style;
    heading(p, out, style)?;
    answer(p, out, style)?;
    sites_section(p, out, style)?;
    if p.owners.iter().any(|o| o.kind != OwnerKind::Program) {
        owners_section(out, &p.owners, "by owner", style)?;
    }
    if !p.ooms.is_empty() || p.ooms_dropped > 0 {
        ooms_section(out, p, style)?;
    }
    identity(p, out, style)?;
    devices_table(p, out)?;
    largest_leaks_section(p, out, style)?;
    if !p.peaks.is_empty() {
        writeln!(out, "{}", style.bold("at the peak"))?;
        for peak in &p.peaks {
            peak_entry(out, peak)?;
        }
    }
    if !p.growing.is_empty() {
        growing_section(out, &p.growing, style)?;
    }
    if !p.reconciliation.is_empty() {
        writeln!(out, "{}", style.bold("device memory"))?;
        for r in &p.reconciliation {
            reconciliation_entry(out, r)?;
        }
    }
    events_and_faults(p, out, style)?;
    if p.growing.is_empty()
        && let Some(n) = &p.growth_not_told
    {
        writeln!(out, "growing  not told ({})", n.short())?;
    }
    if let Some(c) = &p.cost {
        writeln!(out, "{}", cost_text(c, options))?;
    }
    Ok(())
}

/// `== SOURCE`, and `(INCOMPLETE, cut short by a signal)` after it when the report is not
/// whole: its figures are then a lower bound, which the reader should know before them.
fn heading(p: &ReportSummary, out: &mut dyn Write, style: Style) -> io::Result<()> {
    let name = style.bold(&format!("== {}", one_line(&p.source)));
    if p.complete {
        writeln!(out, "{name}")
    } else {
        let why = style.warn(&format!("(INCOMPLETE, {})", report_why(p)));
        writeln!(out, "{name}  {why}")
    }
}

/// What the run left behind: the end of a Python program's code (held and lost then), then
/// `leaked` (with the program's own share when other owners hold some), then the Python
/// sections (held, lost, waiting to be freed at the end).
fn answer(p: &ReportSummary, out: &mut dyn Write, style: Style) -> io::Result<()> {
    if let Some(py) = &p.python {
        end_line(out, py, style)?;
    }
    let others = p.owners.iter().any(|o| o.kind != OwnerKind::Program);
    let own = if others && p.leaks > 0 {
        let (b, n) = p
            .owners
            .iter()
            .filter(|o| o.kind == OwnerKind::Program)
            .fold((0u64, 0u64), |(b, n), o| {
                (b.saturating_add(o.bytes), n.saturating_add(o.count))
            });
        format!(
            " (the program's own: {} in {})",
            bytes(b),
            plural(n, "leak", "leaks")
        )
    } else {
        String::new()
    };
    writeln!(
        out,
        "leaked   {}{own}",
        leaked_phrase(p.leaked_bytes, p.leaks, style)
    )?;
    if let Some(py) = &p.python {
        python_sections(out, py, style)?;
    }
    Ok(())
}

/// `sites (largest first)`: each site's bytes, leaks, place, entry points and holder.
fn sites_section(p: &ReportSummary, out: &mut dyn Write, style: Style) -> io::Result<()> {
    if p.sites.is_empty() {
        return Ok(());
    }
    writeln!(out, "{}", style.bold("sites (largest first)"))?;
    let mut t = Table::new(&[true, true, false, false, false]);
    for s in &p.sites {
        t.row([
            bytes(s.leaked_bytes),
            plural(s.leaks, "leak", "leaks"),
            one_line(&s.label),
            one_line(&s.apis.join(",")),
            site_held_by(s.owner_kind, &s.owner_label, s.owner_bytes, s.leaked_bytes),
        ]);
    }
    let chains: Vec<&[String]> = p.sites.iter().map(|s| &s.stack[..]).collect();
    write_with_chains(out, &t, &chains)?;
    more(out, p.sites_total, p.sites.len(), "sites")
}

/// Why the report was written: `written at exit`, `cut short by a signal`, ….
fn report_why(p: &ReportSummary) -> String {
    match p.reason.as_str() {
        "exit" => "written at exit".to_string(),
        "checkpoint" => "written at a checkpoint".to_string(),
        "signal" => "cut short by a signal".to_string(),
        "request" => "written on request".to_string(),
        "oom" => "written when an allocation ran out of memory".to_string(),
        other => format!("reason {}", one_line(other)),
    }
}

/// `process`, `command` and `report`: who the process was and how its report was written; then
/// `versions`, when the report has them ([`versions_lines`]).
fn identity(p: &ReportSummary, out: &mut dyn Write, style: Style) -> io::Result<()> {
    let mut who = format!(
        "{}  pid {}  ppid {}  host {}",
        one_line(p.exe_name()),
        p.process.pid,
        p.process.ppid,
        one_line(&p.process.hostname)
    );
    let id = p.identity();
    if let Some(rank) = id.rank {
        who.push_str(&format!("  rank {rank}"));
    }
    if let Some(worker) = &id.worker {
        who.push_str(&format!("  worker {}", one_line(worker)));
    }
    writeln!(out, "process  {who}")?;
    writeln!(out, "command  {}", one_line(&p.process.argv.join(" ")))?;
    let why = report_why(p);
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
    match &p.versions {
        Some(v) => versions_lines(out, v, style),
        None => Ok(()),
    }
}

/// `versions`: the driver, each CUDA runtime and each framework in one line, and under it one
/// `mismatch:` line per mismatch the rules found, ending with the rule's id
/// ([`crate::versions::rules::RULES`]):
///
/// ```text
/// versions driver 580.159.04 (CUDA 11.8) · runtime 12.4.127 · torch 2.5.1 (CUDA 12.4)
///   mismatch: torch 2.5.1 is built for CUDA 12.4, the driver supports CUDA 11.8: … [cuda-newer-than-driver]
/// ```
fn versions_lines(
    out: &mut dyn Write,
    v: &crate::versions::VersionsSummary,
    style: Style,
) -> io::Result<()> {
    // Escaped but whole: the line grows with the frameworks present.
    writeln!(out, "versions {}", cuguard_format::escaped(&v.line))?;
    for m in &v.mismatches {
        let line = format!(
            "mismatch: {} [{}]",
            cuguard_format::escaped(&m.message),
            m.rule
        );
        writeln!(out, "  {}", style.warn(&line))?;
    }
    Ok(())
}

/// Each device (name, size, what leaked on it, its limit, peak and pool), and under it each
/// context.
fn devices_table(p: &ReportSummary, out: &mut dyn Write) -> io::Result<()> {
    let mut t = Table::new(&[false, false, true, true, false]);
    for d in &p.devices {
        let mut extra = Vec::new();
        if let Some(limit) = d.limit_bytes {
            extra.push(format!("limit {}", bytes(limit)));
        }
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
    out.write_all(t.render("  ").as_bytes())
}

/// A site for people, with its allocations' tag when they carry one: `kv_site (a.c:12)
/// [kv_cache]`.
pub(super) fn tagged(label: &str, tag: Option<&str>) -> String {
    match tag {
        Some(t) => format!("{} [{}]", one_line(label), one_line(t)),
        None => one_line(label),
    }
}

/// `largest leaks`: size, address, entry point, memory, device, context, thread and place.
fn largest_leaks_section(p: &ReportSummary, out: &mut dyn Write, style: Style) -> io::Result<()> {
    if p.largest_leaks.is_empty() {
        return Ok(());
    }
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
            format!("{} {state}", tagged(&l.label, l.tag.as_deref())),
        ]);
    }
    out.write_all(t.render("  ").as_bytes())?;
    more(out, p.leaks as usize, p.largest_leaks.len(), "leaks")
}

/// `events` (each kind's count), the events the shim did not keep, and `shim faults`.
fn events_and_faults(p: &ReportSummary, out: &mut dyn Write, style: Style) -> io::Result<()> {
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

/// cuguard's own cost: the one short line ([`super::cost_short`]), or with `--cost` the whole
/// bill ([`super::cost_line`]).
fn cost_text(c: &cuguard_format::Cost, options: &Options) -> String {
    if options.cost {
        super::cost::cost_line(c)
    } else {
        super::cost::cost_short(c)
    }
}

/// Bytes held by owner, a heading and a table:
///
/// ```text
/// by owner
///   2.7 GiB  52 leaks  PyTorch's caching allocator
///   1.0 MiB   3 leaks  the program
///   2.7 GiB held by PyTorch's caching allocator at exit: its cache, not necessarily your tensors; PYTORCH_NO_CUDA_MEMORY_CACHING=1 shows each tensor
/// ```
///
/// One line per framework cache (or other owner with a hint) holding bytes says what its memory
/// means.
fn owners_section(
    out: &mut dyn Write,
    owners: &[OwnerShare],
    heading: &str,
    style: Style,
) -> io::Result<()> {
    writeln!(out, "{}", style.bold(heading))?;
    let mut t = Table::new(&[true, true, false]);
    for o in owners {
        t.row([
            bytes(o.bytes),
            plural(o.count, "leak", "leaks"),
            one_line(&o.label),
        ]);
    }
    out.write_all(t.render("  ").as_bytes())?;
    for o in owners.iter().filter(|o| o.bytes > 0) {
        if let Some(hint) = &o.hint {
            writeln!(
                out,
                "  {} held by {} at exit: {}",
                bytes(o.bytes),
                one_line(&o.label),
                one_line(hint)
            )?;
        }
    }
    Ok(())
}

/// `the program 1.0 GiB, PyTorch's caching allocator 0.6 GiB`.
pub(super) fn owner_list(owners: &[OwnerShare]) -> String {
    owners
        .iter()
        .map(|o| format!("{} {}", one_line(&o.label), bytes(o.bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Live bytes by site and owner, as a table at `indent`:
/// `1.0 GiB  3 allocations  make_buffers (train.c:42)  held by …`.
fn site_bytes_table(
    out: &mut dyn Write,
    sites: &[SiteBytes],
    total: usize,
    indent: &str,
) -> io::Result<()> {
    let mut t = Table::new(&[true, true, false, false]);
    for s in sites {
        t.row([
            bytes(s.bytes),
            plural(s.allocations, "allocation", "allocations"),
            one_line(&s.site.label),
            held_by(s.owner_kind, &s.owner_label),
        ]);
    }
    out.write_all(t.render(indent).as_bytes())?;
    if total > sites.len() {
        writeln!(
            out,
            "{indent}… {} more sites (see --top)",
            total - sites.len()
        )?;
    }
    Ok(())
}

/// The out-of-memory refusals, first in a process's section:
///
/// ```text
/// out of memory
///   cuMemAlloc_v2 asking 2.0 GiB on device 0 at 12.3 s: step (train.py:42)
///     refused by the driver: device 0 had 512.0 MiB free of 16.0 GiB; 15.1 GiB live
///     MESSAGE (when the report gives one)
///     live by owner: the program 12.0 GiB, PyTorch's caching allocator 3.1 GiB
///     pool: 1.0 GiB reserved, 200.0 MiB free, largest free block 64.0 MiB
///     live by site then
///       12.0 GiB  3 allocations  make_buffers (train.c:42)
///        3.1 GiB   1 allocation  c10::… (x.cpp:1)  held by PyTorch's caching allocator
///     stack: at::native::empty_cuda ← step (train.py:42) ← <module> (train.py:50)
///   and 3 more out-of-memory refusals not shown
/// ```
///
/// `refused by the pool's limit (CUGUARD_POOL_LIMIT)` when cuguard's pool refused, `refused by
/// the process's limit (CUGUARD_LIMIT)` when the process's limit did.
fn ooms_section(out: &mut dyn Write, p: &ReportSummary, style: Style) -> io::Result<()> {
    writeln!(out, "{}", style.bad("out of memory"))?;
    for o in &p.ooms {
        oom_entry(out, o)?;
    }
    if p.ooms_dropped > 0 {
        writeln!(
            out,
            "  and {} not shown",
            plural(
                p.ooms_dropped,
                "more out-of-memory refusal",
                "more out-of-memory refusals"
            )
        )?;
    }
    Ok(())
}

pub(crate) fn oom_entry(out: &mut dyn Write, o: &OomSummary) -> io::Result<()> {
    writeln!(
        out,
        "  {} asking {} on device {} at {}: {}",
        one_line(&o.api),
        bytes(o.size),
        o.device,
        crate::wording::moment(o.time_ms),
        one_line(&o.site.label)
    )?;
    if let Some(line) = super::attribution::within_words(&o.refused_by, o.within.as_deref()) {
        writeln!(out, "    {line}")?;
        return Ok(());
    }
    let older = if o.verdict_from_older_report {
        " (an older report: only cuguard's pool's idle memory is known)"
    } else {
        ""
    };
    writeln!(out, "    verdict: {}{older}", one_line(&o.verdict.text))?;
    let who = super::attribution::refuser_with_setting(&o.refused_by)
        .unwrap_or_else(|| one_line(&o.refused_by));
    let free = match (o.device_free_bytes, o.device_total_bytes) {
        (Some(free), Some(total)) => format!(
            "device {} had {} free of {}",
            o.device,
            bytes(free),
            bytes(total)
        ),
        (Some(free), None) => format!("device {} had {} free", o.device, bytes(free)),
        _ => format!("device {}'s free memory unknown", o.device),
    };
    writeln!(
        out,
        "    refused by {who}: {free}; {} live",
        bytes(cuguard_format::verdict::live_outside_idle(
            o.live_bytes,
            &o.idle
        ))
    )?;
    if let Some(m) = &o.message {
        writeln!(out, "    {}", one_line(m))?;
    }
    if let Some(line) = super::attribution::other_processes_line(o) {
        writeln!(out, "    {}", one_line(&line))?;
    }
    if let Some(line) = super::attribution::device_bytes_line(o) {
        writeln!(out, "    {line}")?;
    }
    for h in &o.idle {
        writeln!(out, "    idle: {}", super::attribution::idle_words(h))?;
        if let Some(p) = super::attribution::pinning_words(h) {
            writeln!(out, "      {}", one_line(&p))?;
        }
    }
    if let Some(line) = super::attribution::untold_idle_line(o) {
        writeln!(out, "    {line}")?;
    }
    if !o.by_owner.is_empty() {
        writeln!(out, "    live by owner: {}", owner_list(&o.by_owner))?;
    }
    if let Some(pool) = o
        .pool
        .as_ref()
        .filter(|_| super::attribution::pool_line_wanted(o))
    {
        writeln!(
            out,
            "    pool: {} reserved, {} free, largest free block {}",
            bytes(pool.reserved_bytes),
            bytes(pool.free_bytes),
            bytes(pool.largest_free_block)
        )?;
    }
    if let Some(line) = super::attribution::card_cost_line(o) {
        writeln!(out, "    {}", one_line(&line))?;
    }
    if !o.sites.is_empty() {
        writeln!(out, "    live by site then")?;
        site_bytes_table(out, &o.sites, o.sites_total, "      ")?;
    }
    if !o.stack.is_empty() {
        writeln!(out, "    stack: {}", one_line(&o.stack.join(" ← ")))?;
    }
    Ok(())
}

/// One device's entry of `at the peak`:
///
/// ```text
/// at the peak
///   device 0: at the peak of 1.6 GiB (at 12.3 s): the program 1.0 GiB, PyTorch's caching allocator 614.4 MiB
///   device 1: at the peak of 16.0 GiB (15.9 GiB live at 74 ms, within 1%): the program 15.9 GiB
///     1.0 GiB  3 allocations  make_buffers (train.c:42)
///     614.4 MiB  1 allocation  c10::… (x.cpp:1)  held by PyTorch's caching allocator
///     … 4 more sites (see --top)
/// ```
fn peak_entry(out: &mut dyn Write, peak: &PeakSummary) -> io::Result<()> {
    let owners = if peak.by_owner.is_empty() {
        String::new()
    } else {
        format!(": {}", owner_list(&peak.by_owner))
    };
    writeln!(
        out,
        "  device {}: at the peak of {}{owners}",
        peak.device,
        super::attribution::peak_when(peak),
    )?;
    site_bytes_table(out, &peak.sites, peak.sites_total, "    ")
}

/// The sites that grew, most first:
///
/// ```text
/// growing
///   +400.0 MiB  over 10.0 s  0 B → 400.0 MiB  append_batch (train.py:7)  device 0
///     at::native::empty_cuda ← append_batch (train.py:7) ← <module> (train.py:12)
/// ```
///
/// (`held by …` after the devices when its owner is not the program.)
fn growing_section(out: &mut dyn Write, growing: &[GrowingSite], style: Style) -> io::Result<()> {
    writeln!(out, "{}", style.warn("growing"))?;
    let mut t = Table::new(&[true, false, true, false, false, false]);
    for g in growing {
        let devices = g
            .devices
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(",");
        t.row([
            delta_bytes(i128::from(g.growth.grown_bytes)),
            format!(
                "over {}",
                millis(g.growth.to_ms.saturating_sub(g.growth.from_ms))
            ),
            format!(
                "{} → {}",
                bytes(g.growth.from_bytes),
                bytes(g.growth.to_bytes)
            ),
            one_line(&g.label),
            format!(
                "{} {devices}",
                if g.devices.len() == 1 {
                    "device"
                } else {
                    "devices"
                }
            ),
            held_by(g.owner_kind, &g.owner_label),
        ]);
    }
    let chains: Vec<&[String]> = growing.iter().map(|g| &g.stack[..]).collect();
    write_with_chains(out, &t, &chains)
}

/// One device's entry of `device memory`:
///
/// ```text
/// device memory
///   device 0: used 6.1 GiB: program 1.2 GiB, PyTorch's caching allocator 3.9 GiB, pool idle 512.0 MiB, contexts 512.0 MiB, unexplained 0 B
///     used is the whole device's (cuMemGetInfo), other processes included: NOTE
///     given back: cuguard's pool gave back 3.0 GiB the driver may not have returned yet (…)
///     contexts: estimated at 523.6 MiB when they were created, 3.6 MiB more than what is used leaves for them; 520.0 MiB counted
///     unexplained: NOTE
/// ```
///
/// "used" is the process's own usage where NVML listed the process, else the whole device's
/// (then the second line says so, with the report's note). Parts that are zero are left out,
/// except the program's and the unexplained, which is never negative. The estimated parts'
/// lines ([`ReconciliationSummary::notes`]) come when there is memory given back that the driver
/// may hold, or a contexts' estimate over what is used.
fn reconciliation_entry(out: &mut dyn Write, r: &ReconciliationSummary) -> io::Result<()> {
    let mut parts: Vec<String> = r
        .parts()
        .into_iter()
        .map(|(label, value)| format!("{} {}", one_line(&label), bytes(value)))
        .collect();
    if let Some(u) = r.unexplained_bytes {
        parts.push(format!("unexplained {}", bytes(u)));
    }
    let used = match r.used_bytes {
        Some(u) => format!("used {}", bytes(u)),
        None => "used unknown".to_string(),
    };
    writeln!(out, "  device {}: {used}: {}", r.device, parts.join(", "))?;
    if r.used_by == Some("device") {
        let note = match &r.process_used_note {
            Some(n) => format!(": {}", one_line(n)),
            None => String::new(),
        };
        writeln!(
            out,
            "    used is the whole device's (cuMemGetInfo), other processes included{note}"
        )?;
    }
    for note in r.notes() {
        writeln!(out, "    {note}")?;
    }
    if let Some(n) = &r.unexplained_note {
        writeln!(out, "    unexplained: {}", one_line(n))?;
    }
    Ok(())
}
