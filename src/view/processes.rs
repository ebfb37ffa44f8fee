//! The page's per-process view. For a merged report or a few reports (several processes, at
//! most [`MAX_LISTED`]): a table with one row per process (its worker or rank, host and pid,
//! whether its report is complete, leaked bytes split into the program's own and the rest, its
//! peak, its largest site); then one `<details id="process-N">` per process, opened by clicking
//! its name, with that process's sites; and first the processes the comparison called out (see
//! [`crate::summary::groups`]). Static HTML: no links (the page loads nothing and has no
//! `href`).
//!
//! For more processes, the table lists the [`super::TOP_PROCESSES`] that leaked most, and a line adds
//! up the others; every process's row is in the page's compressed part ([`AllProcesses`]: gzip'd
//! JSON, base64, in `<script type="application/octet-stream" id="all-processes">`), which the
//! script opens (with the browser's `DecompressionStream`) only when asked: to find a process by
//! pid, rank, host or name, or to show them all.
//!
//! The compressed part is a JSON array with one array per process, in input order:
//! `[index, name, worker, rank, host, pid, complete, reason, leaked, own, others, peak, leaks,
//! events, source, sites]`, `sites` the process's largest [`ROW_SITES`] sites as
//! `[leaked, leaks, label]` (`worker` and `rank` `null` when the process has none).

use std::io::{self, Write};

use flate2::Compression;
use flate2::write::GzEncoder;

use super::escape::esc;
use super::limits::MAX_LISTED;
use crate::owners::OwnerKind;
use crate::spill::{Log, Spill};
use crate::summary::{ReportSummary, Summary};
use crate::wording::{bytes, plural};

/// How many of its sites a process's row in the compressed part carries.
pub const ROW_SITES: usize = 5;

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

/// `10,000`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The processes a page of many does not list, added up.
#[derive(Clone, Debug, PartialEq)]
pub struct Rest {
    /// How many.
    pub processes: usize,
    /// Bytes they leaked.
    pub leaked_bytes: u64,
    /// Their leaks.
    pub leaks: u64,
    /// How many of their reports are incomplete.
    pub incomplete: usize,
    /// The most one of them leaked.
    pub most: u64,
    /// The least one of them leaked.
    pub least: u64,
}

/// Every process's row, gzip'd, in a temporary file (see the module doc), and the processes
/// not listed, added up.
#[derive(Debug)]
pub struct AllProcesses {
    /// How many processes.
    pub processes: usize,
    /// The gzip'd JSON.
    pub gzip: Log,
    /// The processes the page does not list.
    pub rest: Rest,
}

/// Writes the rows of [`AllProcesses`] as processes come (gzip'd as they are written).
#[derive(Debug)]
pub struct AllWriter {
    gz: GzEncoder<Spill>,
    rows: usize,
    /// The first error met, reported by [`AllWriter::finish`].
    error: Option<io::Error>,
}

impl Default for AllWriter {
    fn default() -> AllWriter {
        AllWriter::new()
    }
}

impl AllWriter {
    /// An empty list.
    pub fn new() -> AllWriter {
        AllWriter {
            gz: GzEncoder::new(Spill::new(), Compression::fast()),
            rows: 0,
            error: None,
        }
    }

    /// Writes the row of process `i` (its sites already sorted, most bytes first).
    pub fn add(&mut self, i: usize, p: &ReportSummary) {
        if self.error.is_some() {
            return;
        }
        let id = p.identity();
        let (own, rest) = split(p);
        let sites: Vec<(u64, u64, &str)> = p
            .sites
            .iter()
            .take(ROW_SITES)
            .map(|s| (s.leaked_bytes, s.leaks, s.label.as_str()))
            .collect();
        let row = serde_json::json!([
            i,
            id.name(),
            id.worker,
            id.rank,
            id.host,
            id.pid,
            p.complete,
            p.reason,
            p.leaked_bytes,
            own,
            rest,
            peak(p),
            p.leaks,
            p.events
                .iter()
                .map(|e| e.count)
                .fold(0, u64::saturating_add),
            p.source,
            sites,
        ]);
        let sep: &[u8] = if self.rows == 0 { b"[" } else { b",\n" };
        let written = self
            .gz
            .write_all(sep)
            .and_then(|()| serde_json::to_writer(&mut self.gz, &row).map_err(io::Error::from));
        if let Err(e) = written {
            self.error = Some(e);
        }
        self.rows += 1;
    }

    /// The rows written, and the processes not listed.
    pub fn finish(mut self, processes: usize, rest: Rest) -> io::Result<AllProcesses> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.gz
            .write_all(if self.rows == 0 { b"[]" } else { b"]" })?;
        let mut spill = self.gz.finish()?;
        spill.flush()?;
        Ok(AllProcesses {
            processes,
            gzip: spill.into_log()?,
            rest,
        })
    }
}

/// Writes `bytes` read from `from` as base64 (RFC 4648, padded).
pub fn base64(from: &mut dyn io::Read, out: &mut dyn Write) -> io::Result<()> {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut buf = vec![0u8; 3 * 16 * 1024];
    let mut line = Vec::with_capacity(buf.len() / 3 * 4);
    let mut have = 0;
    loop {
        let n = from.read(&mut buf[have..])?;
        have += n;
        let end = n == 0;
        // Whole groups of three, except at the end.
        let whole = if end { have } else { have - have % 3 };
        line.clear();
        for chunk in buf[..whole].chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            line.push(ABC[(v >> 18) as usize & 63]);
            line.push(ABC[(v >> 12) as usize & 63]);
            line.push(if chunk.len() > 1 {
                ABC[(v >> 6) as usize & 63]
            } else {
                b'='
            });
            line.push(if chunk.len() > 2 {
                ABC[v as usize & 63]
            } else {
                b'='
            });
        }
        out.write_all(&line)?;
        buf.copy_within(whole..have, 0);
        have -= whole;
        if end {
            return Ok(());
        }
    }
}

/// Writes the called-out processes and the ranks missing.
fn called_out(out: &mut dyn Write, s: &Summary) -> io::Result<()> {
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
    Ok(())
}

/// Writes the per-process view (`<h2>Per process</h2>`) when `s` has several processes: every
/// one, or (`all` given) the top ones, the others added up, and where to find any one.
pub fn section(out: &mut dyn Write, s: &Summary, all: Option<&AllProcesses>) -> io::Result<()> {
    if let Some(all) = all {
        return many(out, s, all);
    }
    if s.processes.len() < 2 {
        return Ok(());
    }
    writeln!(out, "<h2 id=\"per-process\">Per process</h2>")?;
    called_out(out, s)?;
    table(out, s)
}

/// The table of the processes listed, and each one's sites.
fn table(out: &mut dyn Write, s: &Summary) -> io::Result<()> {
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

/// A page of many processes: the top ones, the others added up, the search and the
/// compressed list of them all.
fn many(out: &mut dyn Write, s: &Summary, all: &AllProcesses) -> io::Result<()> {
    let n = grouped(all.processes as u64);
    writeln!(out, "<h2 id=\"per-process\">Per process</h2>")?;
    called_out(out, s)?;
    writeln!(
        out,
        "<p class=\"note\">The {} processes that leaked most, of {n} (a page lists every process up to {MAX_LISTED}).</p>",
        s.processes.len()
    )?;
    table(out, s)?;
    let r = &all.rest;
    if r.processes > 0 {
        writeln!(
            out,
            "<p class=\"rest\" id=\"process-rest\">{} more {}: {} leaked in {} {}{}{}.</p>",
            grouped(r.processes as u64),
            if r.processes == 1 {
                "process"
            } else {
                "processes"
            },
            bytes(r.leaked_bytes),
            grouped(r.leaks),
            if r.leaks == 1 { "leak" } else { "leaks" },
            if r.processes > 1 {
                format!(" ({} to {} each)", bytes(r.least), bytes(r.most))
            } else {
                String::new()
            },
            if r.incomplete > 0 {
                format!(
                    ", <span class=\"warn\">{} incomplete</span>",
                    grouped(r.incomplete as u64)
                )
            } else {
                String::new()
            }
        )?;
    }
    writeln!(
        out,
        "<div class=\"find\"><label>Find a process: <input type=\"search\" id=\"find-process\" placeholder=\"pid, rank, host or name\" size=\"32\"></label> <button type=\"button\" id=\"show-all\">Show all {n} processes</button> <span id=\"found-note\" class=\"note\"></span></div>\n<div id=\"found\"></div>"
    )?;
    write!(
        out,
        "<script type=\"application/octet-stream\" id=\"all-processes\" data-processes=\"{}\">",
        all.processes
    )?;
    base64(&mut all.gzip.reader(), out)?;
    writeln!(out, "</script>")
}
