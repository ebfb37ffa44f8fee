//! The page of `cuguard view`: HTML with its CSS (`page.css`), script (`page.js`) and data
//! inline, and a Content-Security-Policy that forbids any network access.
//!
//! The sections, in order, each shown only when the reports have what it needs:
//! - `#oom` "Out of memory": each refusal as `cuguard summary` prints it (the request and its
//!   site, who refused, the device's free and total memory, live bytes by owner, the pool, the
//!   top sites then, the asking stack);
//! - "Device memory over time": the timeline charts (`svg.timeline`, a `polyline.live` and a
//!   `polyline.reserved` each, a `line.marker.peak` at the peak's breakdown, a
//!   `line.marker.end` at the end of a Python program's code and a `line.marker.oom` at each
//!   refusal, each with a dot at the live bytes then, and a `circle.sample` per sample when
//!   there are few);
//! - `#peaks` "At the peak": per device, bytes by owner and the top sites then;
//! - `#growth` "What grows": per process, a chart of its top sites' live bytes over time
//!   (`svg.growth`, one `polyline.series` per site, labelled in the legend below it, and a
//!   `line.marker.end` at the end of a Python program's code) and the table of growing sites,
//!   or why growth could not be told;
//! - `#owners` "Held at exit, by owner" (when an owner other than the program holds bytes),
//!   with what a framework cache's memory means;
//! - `#sites` "Top sites" (site label and who holds it), the flame graph (`#flame .frame`
//!   boxes, callers above callees, in the mixed native and Python order; click a box to zoom),
//!   and the processes ([`super::processes`]: every one, or over [`super::MAX_LISTED`] the top
//!   ones, the others added up, a search box and the compressed list of them all).
//!
//! Tables and text are plain HTML, sizes as `cuguard summary` prints them; the script draws the
//! charts and the flame graph from the JSON in `<script id="data">`, then sets
//! `data-rendered="yes"` on `<body>`.

use std::io::{self, Write};

use super::escape::esc;
use super::model::View;
use crate::growth::GrowingSite;
use crate::owners::{OwnerKind, OwnerShare};
use crate::summary::ReportSummary;
use crate::summary::attribution::{OomSummary, PeakSummary, SiteBytes, peak_when};
use crate::wording::{bytes, delta_bytes, millis, plural};

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

/// JSON that is safe inside `<script>`: no `<`, `>`, `&` or line separators left raw.
fn script_json(view: &View) -> io::Result<String> {
    let charts: Vec<&super::model::Chart> = view.charts.iter().chain(&view.merged).collect();
    let json = serde_json::to_string(&serde_json::json!({
        "charts": charts,
        "growth": view.growth,
        "flame": view.flame,
        "timelines": view.timelines,
    }))?;
    Ok(json
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029"))
}

/// The colours owners are drawn in: the program's first, the others' by their id.
const OWNER_COLOURS: [&str; 8] = [
    "#1f5fbf", "#d9822b", "#8e44ad", "#2a9d8f", "#c0392b", "#7f8c8d", "#b8860b", "#e377c2",
];

/// An owner's colour: the program's blue, the others' by their id.
fn owner_colour(id: &str, kind: OwnerKind) -> &'static str {
    if kind == OwnerKind::Program && id == crate::owners::PROGRAM {
        return OWNER_COLOURS[0];
    }
    let h = id
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    OWNER_COLOURS[1 + (h as usize) % (OWNER_COLOURS.len() - 1)]
}

/// A colour swatch for an owner.
fn swatch(id: &str, kind: OwnerKind) -> String {
    format!(
        "<span class=\"swatch\" style=\"background:{}\"></span>",
        owner_colour(id, kind)
    )
}

/// `(held by PyTorch's caching allocator)` for people: the owner's label, in a cell.
fn owner_cell(id: &str, kind: OwnerKind, label: &str) -> String {
    format!(
        "<td class=\"owner owner-{}\">{}{}</td>",
        kind.as_str(),
        swatch(id, kind),
        esc(label)
    )
}

/// A site's label, with its mixed stack under it when it has one.
fn site_cell(label: &str, stack: &[String]) -> String {
    if stack.is_empty() {
        format!("<td class=\"site\">{}</td>", esc(label))
    } else {
        format!(
            "<td class=\"site\">{}<div class=\"chain\">{}</div></td>",
            esc(label),
            esc(&stack.join(" ← "))
        )
    }
}

/// A bar of bytes by owner, each owner's share its width.
fn owner_bar(out: &mut dyn Write, shares: &[OwnerShare]) -> io::Result<()> {
    let total = shares
        .iter()
        .map(|s| s.bytes)
        .fold(0u64, u64::saturating_add);
    if total == 0 {
        return Ok(());
    }
    write!(out, "<div class=\"bar\">")?;
    for s in shares.iter().filter(|s| s.bytes > 0) {
        let pct = s.bytes as f64 / total as f64 * 100.0;
        write!(
            out,
            "<span style=\"width:{pct:.3}%;background:{}\" title=\"{}: {}\"></span>",
            owner_colour(&s.owner, s.kind),
            esc(&s.label),
            bytes(s.bytes)
        )?;
    }
    writeln!(out, "</div>")
}

/// Bytes by owner as a bar and a table (with the counts under the heading `count`, when
/// given), and a line per owner with a hint saying what its memory means (`at`: `at exit`,
/// `then`).
fn owner_table(
    out: &mut dyn Write,
    shares: &[OwnerShare],
    count: Option<&str>,
    at: &str,
) -> io::Result<()> {
    owner_bar(out, shares)?;
    write!(
        out,
        "<table class=\"owners\">\n<thead><tr><th class=\"num\">bytes</th>"
    )?;
    if let Some(heading) = count {
        write!(out, "<th class=\"num\">{heading}</th>")?;
    }
    writeln!(out, "<th>owner</th></tr></thead>\n<tbody>")?;
    for s in shares {
        write!(
            out,
            "<tr class=\"owner\"><td class=\"num\" title=\"{} bytes\">{}</td>",
            s.bytes,
            bytes(s.bytes)
        )?;
        if count.is_some() {
            write!(out, "<td class=\"num\">{}</td>", s.count)?;
        }
        writeln!(out, "{}</tr>", owner_cell(&s.owner, s.kind, &s.label))?;
    }
    writeln!(out, "</tbody>\n</table>")?;
    for s in shares.iter().filter(|s| s.bytes > 0) {
        if let Some(hint) = &s.hint {
            writeln!(
                out,
                "<p class=\"hint\">{} held by {} {at}: {}</p>",
                bytes(s.bytes),
                esc(&s.label),
                esc(hint)
            )?;
        }
    }
    Ok(())
}

/// Live bytes by site and owner, as `cuguard summary` lists them.
fn site_bytes_table(out: &mut dyn Write, sites: &[SiteBytes], total: usize) -> io::Result<()> {
    if sites.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "<table class=\"sitebytes\">\n<thead><tr><th class=\"num\">live</th><th class=\"num\">allocations</th><th>site</th><th>held by</th></tr></thead>\n<tbody>"
    )?;
    for s in sites {
        writeln!(
            out,
            "<tr><td class=\"num\" title=\"{} bytes\">{}</td><td class=\"num\">{}</td>{}{}</tr>",
            s.bytes,
            bytes(s.bytes),
            s.allocations,
            site_cell(&s.site.label, &[]),
            owner_cell(&s.owner, s.owner_kind, &s.owner_label)
        )?;
    }
    writeln!(out, "</tbody>\n</table>")?;
    if total > sites.len() {
        writeln!(
            out,
            "<p class=\"note\">{} more sites not shown.</p>",
            total - sites.len()
        )?;
    }
    Ok(())
}

/// A process's heading inside a section, when the page shows several processes.
fn process_heading(out: &mut dyn Write, p: &ReportSummary, several: bool) -> io::Result<()> {
    if several {
        writeln!(
            out,
            "<h3 class=\"process\">{}[{}] on {} <span class=\"note\">{}</span></h3>",
            esc(p.exe_name()),
            p.process.pid,
            esc(&p.process.hostname),
            esc(&p.source)
        )?;
    }
    Ok(())
}

/// `N more processes not shown` when a section lists `shown` of `total`.
fn more_processes(out: &mut dyn Write, shown: usize, total: usize) -> io::Result<()> {
    if total > shown {
        writeln!(
            out,
            "<p class=\"note\">{} more processes not shown.</p>",
            total - shown
        )?;
    }
    Ok(())
}

/// `text` with its first letter in upper case.
fn capitalized(text: &str) -> String {
    let mut c = text.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// One out-of-memory refusal.
fn oom_entry(out: &mut dyn Write, o: &OomSummary) -> io::Result<()> {
    writeln!(out, "<div class=\"oom\">")?;
    writeln!(
        out,
        "<p class=\"request\"><b>{} asking {} on device {} at {}</b>: <span class=\"site\">{}</span></p>",
        esc(&o.api),
        bytes(o.size),
        o.device,
        crate::wording::moment(o.time_ms),
        esc(&o.site.label)
    )?;
    if let Some(line) =
        crate::summary::attribution::within_words(&o.refused_by, o.within.as_deref())
    {
        writeln!(out, "<p class=\"note\">{}.</p>", esc(&capitalized(&line)))?;
        return writeln!(out, "</div>");
    }
    let who = crate::summary::attribution::refuser_with_setting(&o.refused_by)
        .unwrap_or_else(|| esc(&o.refused_by));
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
        "<p class=\"verdict\"><b>Verdict</b>: {}</p>",
        esc(&o.verdict.text)
    )?;
    writeln!(
        out,
        "<p>Refused by {who}: {free}; {} live.</p>",
        bytes(cuguard_format::verdict::live_outside_idle(
            o.live_bytes,
            &o.idle
        ))
    )?;
    if let Some(m) = &o.message {
        writeln!(out, "<p class=\"note\">{}</p>", esc(m))?;
    }
    if let Some(line) = crate::summary::attribution::other_processes_line(o) {
        writeln!(out, "<p>{}.</p>", esc(&capitalized(&line)))?;
    }
    if let Some(line) = crate::summary::attribution::device_bytes_line(o) {
        writeln!(out, "<p>{}.</p>", esc(&capitalized(&line)))?;
    }
    for h in &o.idle {
        writeln!(
            out,
            "<p>Idle: {}.</p>",
            esc(&crate::summary::attribution::idle_words(h))
        )?;
        if let Some(p) = crate::summary::attribution::pinning_words(h) {
            writeln!(out, "<p>{}.</p>", esc(&capitalized(&p)))?;
        }
    }
    if let Some(pool) = o
        .pool
        .as_ref()
        .filter(|_| crate::summary::attribution::pool_line_wanted(o))
    {
        writeln!(
            out,
            "<p>Pool: {} reserved, {} free, largest free block {}.</p>",
            bytes(pool.reserved_bytes),
            bytes(pool.free_bytes),
            bytes(pool.largest_free_block)
        )?;
    }
    if !o.stack.is_empty() {
        writeln!(
            out,
            "<p class=\"chain\">stack: {}</p>",
            esc(&o.stack.join(" ← "))
        )?;
    }
    writeln!(out, "<div class=\"cols\">")?;
    if !o.by_owner.is_empty() {
        writeln!(out, "<div><h4>Live by owner then</h4>")?;
        owner_table(out, &o.by_owner, None, "then")?;
        writeln!(out, "</div>")?;
    }
    if !o.sites.is_empty() {
        writeln!(out, "<div class=\"wide\"><h4>Live by site then</h4>")?;
        site_bytes_table(out, &o.sites, o.sites_total)?;
        writeln!(out, "</div>")?;
    }
    writeln!(out, "</div>\n</div>")
}

/// The out-of-memory section, first on the page.
fn ooms_section(out: &mut dyn Write, view: &View) -> io::Result<()> {
    let s = &view.summary;
    let with = &view.ooms;
    if with.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "<section id=\"oom\">\n<h2 class=\"bad\">Out of memory</h2>"
    )?;
    for p in with {
        process_heading(out, p, s.reports > 1)?;
        for o in &p.ooms {
            oom_entry(out, o)?;
        }
        if p.ooms_dropped > 0 {
            writeln!(
                out,
                "<p class=\"note\">And {} not shown.</p>",
                plural(
                    p.ooms_dropped,
                    "more out-of-memory refusal",
                    "more out-of-memory refusals"
                )
            )?;
        }
    }
    more_processes(out, with.len(), view.ooms_total)?;
    writeln!(out, "</section>")
}

/// One device's peak.
fn peak_entry(out: &mut dyn Write, peak: &PeakSummary) -> io::Result<()> {
    writeln!(
        out,
        "<div class=\"peak\">\n<h4>Device {}: at the peak of {}</h4>",
        peak.device,
        esc(&peak_when(peak))
    )?;
    writeln!(out, "<div class=\"cols\">")?;
    if !peak.by_owner.is_empty() {
        writeln!(out, "<div>")?;
        owner_table(out, &peak.by_owner, Some("allocations"), "then")?;
        writeln!(out, "</div>")?;
    }
    if !peak.sites.is_empty() {
        writeln!(out, "<div class=\"wide\">")?;
        site_bytes_table(out, &peak.sites, peak.sites_total)?;
        writeln!(out, "</div>")?;
    }
    writeln!(out, "</div>\n</div>")
}

/// What was live at each device's peak.
fn peaks_section(out: &mut dyn Write, view: &View) -> io::Result<()> {
    let s = &view.summary;
    let with = &view.peaks;
    if with.is_empty() {
        return Ok(());
    }
    writeln!(out, "<section id=\"peaks\">\n<h2>At the peak</h2>")?;
    writeln!(
        out,
        "<p class=\"note\">What was live on each device when its live bytes were highest (the shim's breakdown, taken within 1% of the peak).</p>"
    )?;
    for p in with {
        process_heading(out, p, s.reports > 1)?;
        for peak in &p.peaks {
            peak_entry(out, peak)?;
        }
    }
    more_processes(out, with.len(), view.peaks_total)?;
    writeln!(out, "</section>")
}

/// The growing sites of a process, as `cuguard summary` lists them.
fn growing_table(out: &mut dyn Write, growing: &[GrowingSite]) -> io::Result<()> {
    writeln!(
        out,
        "<table class=\"growing\">\n<thead><tr><th class=\"num\">grew</th><th class=\"num\">over</th><th class=\"num\">from → to</th><th>site</th><th>devices</th><th>held by</th></tr></thead>\n<tbody>"
    )?;
    for g in growing {
        let devices = format!(
            "{} {}",
            if g.devices.len() == 1 {
                "device"
            } else {
                "devices"
            },
            g.devices
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        writeln!(
            out,
            "<tr class=\"growing\"><td class=\"num\" title=\"{} bytes\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} → {}</td>{}<td>{}</td>{}</tr>",
            g.growth.grown_bytes,
            delta_bytes(i128::from(g.growth.grown_bytes)),
            millis(g.growth.to_ms.saturating_sub(g.growth.from_ms)),
            bytes(g.growth.from_bytes),
            bytes(g.growth.to_bytes),
            site_cell(&g.label, &g.stack),
            devices,
            owner_cell(&g.owner, g.owner_kind, &g.owner_label)
        )?;
    }
    writeln!(out, "</tbody>\n</table>")
}

/// What grows: per process, its growth chart and its growing sites.
fn growth_section(out: &mut dyn Write, view: &View) -> io::Result<()> {
    let s = &view.summary;
    let chart_of = |i: usize| view.growth.iter().position(|g| g.process_index == i);
    let with = &view.growing;
    if with.is_empty() {
        return Ok(());
    }
    writeln!(out, "<section id=\"growth\">\n<h2>What grows</h2>")?;
    writeln!(
        out,
        "<p class=\"note\">Live bytes of the top sites over the run (the growing sites first, then the largest), even when the memory was freed before the end. A site grows when its live bytes were still rising in the last part of the run: a rise followed by a plateau is set-up.</p>"
    )?;
    for (i, p) in with {
        process_heading(out, p, s.reports > 1)?;
        if let Some(k) = chart_of(*i) {
            writeln!(
                out,
                "<div class=\"growth-chart\" data-growth=\"{k}\"></div>"
            )?;
        }
        if !p.growing.is_empty() {
            growing_table(out, &p.growing)?;
        } else if let Some(n) = &p.growth_not_told {
            writeln!(
                out,
                "<p class=\"note\">Growth not told: {}.</p>",
                esc(&n.why())
            )?;
        } else {
            writeln!(out, "<p class=\"good\">No site grew.</p>")?;
        }
    }
    more_processes(out, with.len(), view.growing_total)?;
    if view.growth_omitted > 0 {
        writeln!(
            out,
            "<p class=\"note\">{} more growth charts not shown.</p>",
            view.growth_omitted
        )?;
    }
    writeln!(out, "</section>")
}

/// Bytes held at exit by owner, when an owner other than the program holds some.
fn owners_section(out: &mut dyn Write, view: &View) -> io::Result<()> {
    let owners = &view.summary.owners;
    if !owners.iter().any(|o| o.kind != OwnerKind::Program) {
        return Ok(());
    }
    writeln!(
        out,
        "<section id=\"owners\">\n<h2>Held at exit, by owner</h2>"
    )?;
    owner_table(out, owners, Some("leaks"), "at exit")?;
    writeln!(out, "</section>")
}

/// `#history` "Memory over the run": each process's active-memory timeline from its history
/// (drawn by the script into `div.history`, its phases as `svg.history-phases g.phase` bands
/// above it, each with its `data-label`), and the histories that could not be read.
fn history_section(out: &mut dyn Write, view: &View) -> io::Result<()> {
    if view.timelines.is_empty() && view.timeline_notes.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "<section id=\"history\">\n<h2>Memory over the run, from the history</h2>"
    )?;
    if !view.timelines.is_empty() {
        // Said only where there are phases: a page without them reads as it always did.
        let phases = if view.timelines.iter().any(|t| !t.phases.is_empty()) {
            " The program's phases (NVTX ranges, cuguard.phase) are the bands above it, a lane per thread and depth: hover or click one for its span and peak."
        } else {
            ""
        };
        writeln!(
            out,
            "<p class=\"note\">Live device memory stacked by site, the largest allocations as bands below it.{phases} Drag across the chart to zoom in, double-click to zoom out; hover a band for its allocation; click a moment for what was live then.</p>"
        )?;
    }
    for (i, t) in view.timelines.iter().enumerate() {
        writeln!(
            out,
            "<div class=\"history\" data-timeline=\"{i}\"><h3>{}</h3></div>",
            esc(&t.process)
        )?;
    }
    for note in &view.timeline_notes {
        writeln!(out, "<p class=\"note\">{}</p>", esc(note))?;
    }
    writeln!(out, "</section>")
}

/// Writes the page.
pub fn write(view: &View, out: &mut dyn Write) -> io::Result<()> {
    let s = &view.summary;
    page_head(out, s)?;
    totals(out, view)?;
    ooms_section(out, view)?;
    charts_section(out, view)?;
    history_section(out, view)?;
    peaks_section(out, view)?;
    growth_section(out, view)?;
    owners_section(out, view)?;
    sites_section(out, s)?;

    writeln!(out, "<h2>Leaked bytes by stack</h2>")?;
    writeln!(
        out,
        "<p class=\"note\">Callers above callees; width is leaked bytes. Stacks with Python frames read like py-spy --native: the Python functions in place of the interpreter, its own frames left out. Click a frame to zoom, the top frame to zoom out.</p>"
    )?;
    writeln!(out, "<div id=\"flame\"></div>")?;

    super::processes::section(out, s, view.all.as_ref())?;
    if view.all.is_none() {
        processes_table(out, s)?;
    }
    writeln!(
        out,
        "<script type=\"application/json\" id=\"data\">{}</script>",
        script_json(view)?
    )?;
    writeln!(out, "<script>\n{JS}</script>\n</body>\n</html>")
}

/// The document's head (its title the leaked total, its style) and the page's heading.
fn page_head(out: &mut dyn Write, s: &crate::summary::Summary) -> io::Result<()> {
    writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">"
    )?;
    writeln!(
        out,
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">"
    )?;
    writeln!(
        out,
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    )?;
    writeln!(
        out,
        "<title>cuguard: {} in {}</title>",
        bytes(s.leaked_bytes),
        plural(s.leaks, "leak", "leaks")
    )?;
    writeln!(out, "<style>\n{CSS}</style>\n</head>\n<body>")?;
    writeln!(out, "<h1>cuguard report</h1>")?;
    Ok(())
}

/// The totals line: reports (incomplete ones), what leaked (the program's own when others
/// hold some), events and out-of-memory refusals.
fn totals(out: &mut dyn Write, view: &View) -> io::Result<()> {
    let s = &view.summary;
    let leaked = if s.leaks == 0 {
        "<span class=\"good\">nothing leaked</span>".to_string()
    } else {
        format!(
            "<span class=\"bad\">{} leaked in {}</span>",
            bytes(s.leaked_bytes),
            plural(s.leaks, "leak", "leaks")
        )
    };
    let own = if s.leaks > 0 && s.owners.iter().any(|o| o.kind != OwnerKind::Program) {
        let (b, n) = s
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
    let incomplete = s.reports - s.complete_reports;
    let ooms = view.oom_refusals;
    writeln!(
        out,
        "<p class=\"totals\">{}{}: {leaked}{own}, {}{}.</p>",
        plural(s.reports as u64, "process report", "process reports"),
        if incomplete > 0 {
            format!(" (<span class=\"warn\">{incomplete} incomplete</span>)")
        } else {
            String::new()
        },
        plural(s.event_total(), "event", "events"),
        if ooms > 0 {
            format!(
                ", <span class=\"bad\">{}</span>",
                plural(ooms, "out-of-memory refusal", "out-of-memory refusals")
            )
        } else {
            String::new()
        },
    )?;
    Ok(())
}

/// The section of charts of device memory over time: its legend (only the markers drawn),
/// the charts' place, and the timelines left out.
fn charts_section(out: &mut dyn Write, view: &View) -> io::Result<()> {
    writeln!(out, "<h2>Device memory over time</h2>")?;
    write!(
        out,
        "<div class=\"legend\"><span class=\"l\">live (owned by the program)</span><span class=\"r\">reserved (held from the driver, pool included)</span>"
    )?;
    let marked = |kind: &str| {
        view.charts
            .iter()
            .any(|c| c.markers.iter().any(|m| m.kind == kind))
    };
    if marked("peak") {
        write!(
            out,
            "<span class=\"p\">the peak (when its breakdown was taken)</span>"
        )?;
    }
    if marked("end") {
        write!(
            out,
            "<span class=\"e\">the end of the program's code (the interpreter's teardown after it)</span>"
        )?;
    }
    if marked("oom") {
        write!(out, "<span class=\"o\">out of memory</span>")?;
    }
    writeln!(out, "</div>")?;
    writeln!(out, "<div id=\"charts\" class=\"charts\"></div>")?;
    if view.charts_omitted > 0 {
        writeln!(
            out,
            "<p class=\"note\">{} more timelines not shown: the {} with the highest peaks are drawn, the others merged into {} (per device, the most any of them had at each moment).</p>",
            view.charts_omitted,
            view.charts.len(),
            if view.merged.len() == 1 {
                "the last chart"
            } else {
                "the last charts"
            }
        )?;
    }
    Ok(())
}

/// The table of the top sites across processes.
fn sites_section(out: &mut dyn Write, s: &crate::summary::Summary) -> io::Result<()> {
    writeln!(out, "<h2>Top sites</h2>")?;
    if s.sites.is_empty() {
        writeln!(out, "<p>No leaks.</p>")?;
    } else {
        writeln!(
            out,
            "<table id=\"sites\">\n<thead><tr><th class=\"num\">leaked</th><th class=\"num\">leaks</th><th class=\"num\">processes</th><th>site</th><th>held by</th></tr></thead>\n<tbody>"
        )?;
        for site in &s.sites {
            writeln!(
                out,
                "<tr class=\"site\"><td class=\"num\" title=\"{} bytes\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>{}{}</tr>",
                site.leaked_bytes,
                bytes(site.leaked_bytes),
                site.leaks,
                site.processes,
                site_cell(&site.label, &site.stack),
                owner_cell(
                    &site.owner,
                    site.owner_kind,
                    &if site.owner_bytes < site.leaked_bytes {
                        format!("mostly {}", site.owner_label)
                    } else {
                        site.owner_label.clone()
                    }
                )
            )?;
        }
        writeln!(out, "</tbody>\n</table>")?;
        if s.sites_total > s.sites.len() {
            writeln!(
                out,
                "<p class=\"note\">{} more sites not shown (see --top).</p>",
                s.sites_total - s.sites.len()
            )?;
        }
    }
    Ok(())
}

/// The table of processes at the end of a page that lists every one.
fn processes_table(out: &mut dyn Write, s: &crate::summary::Summary) -> io::Result<()> {
    writeln!(out, "<h2>Processes</h2>")?;
    writeln!(
        out,
        "<table id=\"processes\">\n<thead><tr><th>process</th><th>host</th><th class=\"num\">rank</th><th>report</th><th class=\"num\">leaked</th><th class=\"num\">leaks</th><th class=\"num\">events</th><th>source</th></tr></thead>\n<tbody>"
    )?;
    for p in &s.processes {
        writeln!(
            out,
            "<tr><td>{}[{}]</td><td>{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"site\">{}</td></tr>",
            esc(p.exe_name()),
            p.process.pid,
            esc(&p.process.hostname),
            p.process.rank.map(|r| r.to_string()).unwrap_or_default(),
            if p.complete {
                "complete".to_string()
            } else {
                format!(
                    "<span class=\"warn\">incomplete ({})</span>",
                    esc(&p.reason)
                )
            },
            bytes(p.leaked_bytes),
            p.leaks,
            p.events.iter().map(|e| e.count).sum::<u64>(),
            esc(&p.source)
        )?;
    }
    writeln!(out, "</tbody>\n</table>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::Node;

    #[test]
    fn hostile_names_stay_inert() {
        assert_eq!(esc("<script>&\"'"), "&lt;script&gt;&amp;&quot;&#39;");
        let mut view = crate::view::fold::ViewFold::new(10).finish().unwrap();
        view.flame = Node {
            name: "</script><script>alert(1)</script>".into(),
            bytes: 1,
            children: Vec::new(),
        };
        let json = script_json(&view).unwrap();
        assert!(!json.contains('<') && !json.contains('>'));
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["flame"]["n"], "</script><script>alert(1)</script>");
    }
}
