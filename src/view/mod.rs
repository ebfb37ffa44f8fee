//! `cuguard view`: one self-contained HTML page (no network) with what each out-of-memory
//! refusal saw, device memory over time per device (live and reserved, from each report's
//! `timeline`, its peak and out-of-memory moments marked), what was live at each device's peak,
//! what grows (the top sites' live bytes over time, from `stack_samples`), bytes held at exit by
//! owner, the top sites table, and a flame graph of leaked bytes by stack in the mixed native and
//! Python order.
//!
//! [`ProcessView::new`] condenses one report in the input workers: its summary (the sections on
//! who held memory and when come from [`crate::summary::attribution`] and [`crate::growth`], as
//! `cuguard summary` prints them), timelines downsampled to at most [`MAX_POINTS`] points per
//! device (keeping peaks), the top sites' series over time ([`GrowthChart`]), and stacks reduced
//! to frame-name paths ([`flame_path`]). [`View::new`] combines them; [`html::write`] writes the
//! page; with several processes, [`processes`] writes the per-process view.

mod escape;
pub mod fold;
pub mod html;
pub mod processes;
pub mod timeline;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::input::Source;
use cuguard_format::{LeakFold, Report, Stack};
use crate::sites::{SiteIndex, frame_name, mixed_names};
use crate::summary::{ReportSummary, Summary};
use crate::wording::{bytes, millis};

/// Most points kept per device timeline.
pub const MAX_POINTS: usize = 2000;
/// Most timeline charts on a page; also the most growth charts.
pub const MAX_CHARTS: usize = 32;
/// Flame-graph nodes narrower than total/`MIN_FRACTION` are left out.
pub const MIN_FRACTION: u64 = 1000;
/// How many out-of-memory records, and sites in each out-of-memory and peak breakdown, a
/// process keeps for the page (as `cuguard summary --top` does).
pub const SECTION_TOP: usize = 10;
/// Most processes whose out-of-memory records, peaks and growing sites the page lists.
pub const MAX_PROCESS_ENTRIES: usize = 32;
/// Most markers (the peak, out-of-memory refusals) on one timeline chart.
pub const MAX_MARKERS: usize = 64;
/// Most lines on a growth chart.
pub const MAX_GROWTH_LINES: usize = 8;
/// Most points per line on a growth chart (the shim keeps at most 256 sample times).
pub const MAX_GROWTH_POINTS: usize = 256;

/// One device's timeline of one process.
#[derive(Clone, Debug, Serialize)]
pub struct Chart {
    /// `exe[pid]` and host.
    pub process: String,
    /// Device ordinal.
    pub device: u32,
    /// Device name, if listed.
    pub name: Option<String>,
    /// Points `[time_ms, live_bytes, reserved_bytes]`, time ascending.
    pub points: Vec<[u64; 3]>,
    /// Moments marked on the chart: the peak, the end of a Python program's code, then
    /// out-of-memory refusals in order. Each knows the live bytes at its moment, which the
    /// live line passes through.
    pub markers: Vec<Marker>,
}

/// A moment marked on a timeline chart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Marker {
    /// `peak`, `end` (of a Python program's code) or `oom`.
    pub kind: &'static str,
    /// Milliseconds since process start.
    pub time_ms: u64,
    /// The program's live bytes then (the timeline's samples may have missed the moment).
    pub live_bytes: u64,
    /// Its text on the chart (`peak 420.0 MiB`, `OOM 2.0 GiB`).
    pub short: String,
    /// What happened, for people (`at the peak of 420.0 MiB (at 6.6 s)`).
    pub label: String,
}

/// One process's top sites' live bytes over time, from its `stack_samples`: the series of the
/// stacks that share a site added up (all devices), and inside a cache whose history gave each
/// program line's bytes, those lines in place of its segments, as
/// [`crate::growth::growing_sites`] reads them.
#[derive(Clone, Debug, Serialize)]
pub struct GrowthChart {
    /// `exe[pid]` and host.
    pub process: String,
    /// The process's place in the page's list of processes (set by [`View::new`]).
    pub process_index: usize,
    /// Sample times, milliseconds since process start, ascending.
    pub times: Vec<u64>,
    /// When a Python program's code ended, if its end was recorded: growth is judged up to it,
    /// and what follows is the interpreter's teardown.
    pub end_ms: Option<u64>,
    /// At most [`MAX_GROWTH_LINES`] lines: the growing sites first (most grown first), then the
    /// largest by bytes.
    pub lines: Vec<GrowthLine>,
}

/// One site's line on a growth chart.
#[derive(Clone, Debug, Serialize)]
pub struct GrowthLine {
    /// The site for people, its location once.
    pub label: String,
    /// Whether the site grew (by [`crate::growth`]'s criterion).
    pub growing: bool,
    /// Live bytes at each of the chart's times.
    pub bytes: Vec<u64>,
}

/// A flame-graph node: a frame, the bytes leaked below it, its callees.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Node {
    /// Frame name (function, or `module+0xoffset`; `function (file:line)` in mixed stacks).
    #[serde(rename = "n")]
    pub name: String,
    /// Bytes leaked in stacks through this node.
    #[serde(rename = "v")]
    pub bytes: u64,
    /// Callees, largest first.
    #[serde(rename = "c", skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Node>,
}

impl Node {
    /// Adds `bytes` along `path`; returns how many nodes were made.
    fn add(&mut self, path: &[String], bytes: u64) -> usize {
        self.bytes = self.bytes.saturating_add(bytes);
        let Some((first, rest)) = path.split_first() else {
            return 0;
        };
        let (child, made) = match self.children.iter().position(|c| c.name == *first) {
            Some(i) => (&mut self.children[i], 0),
            None => {
                self.children.push(Node {
                    name: first.clone(),
                    ..Node::default()
                });
                (self.children.last_mut().expect("just pushed"), 1)
            }
        };
        made + child.add(rest, bytes)
    }

    /// Drops nodes below `min` bytes and sorts callees largest first; returns nodes kept.
    fn prune(&mut self, min: u64) -> usize {
        self.children.retain(|c| c.bytes >= min);
        self.children
            .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
        1 + self
            .children
            .iter_mut()
            .map(|c| c.prune(min))
            .sum::<usize>()
    }
}

/// A stack's path in the flame graph, outermost frame first. A stack with Python frames reads
/// like `py-spy --native`: each evaluation frame replaced by the Python frames it ran, the
/// interpreter's, allocators' and driver's own frames left out, as
/// [`crate::sites::mixed_names`] (the summary's chains at full depth) gives them:
/// `<module> (train.py:12)` → `step (train.py:7)` → `at::native::empty_cuda (EmptyTensor.cpp:51)`.
/// Other stacks keep every frame, by [`frame_name`].
pub fn flame_path(stack: &Stack) -> Vec<String> {
    match mixed_names(stack) {
        Some(mut names) if !names.is_empty() => {
            names.reverse();
            names
        }
        _ if stack.frames.is_empty() => vec!["<empty stack>".to_string()],
        _ => stack.frames.iter().rev().map(frame_name).collect(),
    }
}

/// One process, condensed for the page.
#[derive(Clone, Debug)]
pub struct ProcessView {
    /// Its summary (sites, totals, out-of-memory records, peaks, growing sites), lists cut to
    /// [`SECTION_TOP`].
    pub summary: ReportSummary,
    /// Its timelines, one per device.
    pub charts: Vec<Chart>,
    /// Its top sites' live bytes over time, when the report has `stack_samples`.
    pub growth: Option<GrowthChart>,
    /// Leaked bytes per stack path (outermost frame first).
    pub paths: Vec<(Vec<String>, u64)>,
    /// Its active-memory timeline, from its history ([`timeline`]); or why its history could
    /// not be read. Filled by [`ProcessView::draw_history`], for a few processes only.
    pub timeline: Option<Result<timeline::Timeline, String>>,
    /// The report that names this process's history, when it does.
    pub history: Option<std::path::PathBuf>,
    /// The files of that history, as the report names them beside it.
    pub history_files: Vec<std::path::PathBuf>,
}

impl ProcessView {
    /// Condenses one report.
    pub fn new(source: &Source, report: &Report) -> ProcessView {
        ProcessView::folded(source, report, &LeakFold::of(&report.leaks, SECTION_TOP))
    }

    /// Condenses one report whose leaks are `leaks` (folded while it was parsed; the report's
    /// own `leaks` are not read), as [`ProcessView::new`].
    pub fn folded(source: &Source, report: &Report, leaks: &LeakFold) -> ProcessView {
        let summary = ReportSummary::folded(source, report, leaks, SECTION_TOP);
        let sites = SiteIndex::new(report);
        let who = format!("{} on {}", report.process_name(), report.process.hostname);
        let mut per_device: BTreeMap<u32, Vec<[u64; 3]>> = BTreeMap::new();
        if let Some(t) = &report.timeline {
            for s in &t.samples {
                per_device.entry(s.device).or_default().push([
                    s.time_ms,
                    s.live_bytes,
                    s.reserved_bytes,
                ]);
            }
        }
        let charts = per_device
            .into_iter()
            .map(|(device, mut points)| {
                points.sort_by_key(|p| p[0]);
                Chart {
                    process: who.clone(),
                    device,
                    name: report
                        .devices
                        .iter()
                        .find(|d| d.ordinal == device)
                        .map(|d| d.name.clone()),
                    points: downsample(points),
                    markers: markers(report, &summary, &sites, device),
                }
            })
            .collect();
        let growth = growth_chart(report, &summary, &sites, &who);
        let mut by_stack: HashMap<Option<u64>, u64> = HashMap::new();
        for group in leaks.groups() {
            let e = by_stack.entry(group.leak.stack).or_default();
            *e = e.saturating_add(group.bytes);
        }
        let mut paths: Vec<(Vec<String>, u64)> = by_stack
            .into_iter()
            .map(|(id, bytes)| {
                let path = match id.and_then(|id| sites.stack(Some(id))) {
                    Some(stack) => flame_path(stack),
                    None => vec!["<no stack>".to_string()],
                };
                (path, bytes)
            })
            .collect();
        paths.sort();
        // A single report's history beside it (a merged report's processes name theirs
        // relative to where they were written).
        let history =
            (report.history.is_some() && source.index.is_none()).then(|| source.path.clone());
        let history_files = history
            .as_deref()
            .map(|path| crate::history::files_named(report, path))
            .unwrap_or_default();
        ProcessView {
            summary,
            charts,
            growth,
            paths,
            timeline: None,
            history,
            history_files,
        }
    }

    /// A process known by its history alone (a history file given to `cuguard view`).
    pub fn from_history(source: &Source, opened: &crate::history::Opened) -> ProcessView {
        let report = opened.names();
        let mut p = ProcessView::new(source, &report);
        p.timeline = Some(history_timeline(opened, &report).map_err(|e| e.to_string()));
        p
    }

    /// Reads this process's history, when its report names one, and makes its timeline (or
    /// keeps why it could not be read).
    pub fn draw_history(&mut self) {
        if let Some(path) = &self.history {
            self.timeline = Some(
                crate::history::load(path)
                    .map_err(|e| e.to_string())
                    .and_then(|o| {
                        history_timeline(&o, &o.names()).map_err(|e| {
                            format!("{}: {e}", o.files.last().expect("a file").display())
                        })
                    }),
            );
        }
    }
}

/// The timeline of a history read, its sites named as `summary --at` names them.
fn history_timeline(
    opened: &crate::history::Opened,
    report: &cuguard_format::Report,
) -> Result<timeline::Timeline, cuguard_history::Error> {
    let sites = SiteIndex::new(report);
    timeline::timeline(&opened.history, report.process_name(), &|id| {
        let stack = crate::history::stack_key(id);
        let callers = crate::history::moment::callers(&sites, stack);
        // A site charged to a helper's caller is named as everywhere (`step (…) via alloc
        // (…)`); another with the caller that reached it.
        let site = sites.site(stack);
        let label = match &callers[..] {
            _ if site.via.is_some() => site.label(),
            [site, caller, ..] => format!("{site} ← {caller}"),
            _ => site.label(),
        };
        timeline::SiteInfo {
            label,
            stack: callers,
        }
    })
}

/// Most active-memory timelines on a page.
pub const MAX_TIMELINES: usize = 8;

/// The moments marked on one device's chart: its peak (when the moment of the breakdown is
/// known), the end of a Python program's code (when recorded, with the device bytes its view
/// found live then), then its out-of-memory refusals in order; at most [`MAX_MARKERS`].
fn markers(
    report: &Report,
    summary: &ReportSummary,
    sites: &SiteIndex<'_>,
    device: u32,
) -> Vec<Marker> {
    let peak = summary
        .peaks
        .iter()
        .filter(|p| p.device == device)
        .map(|p| Marker {
            kind: "peak",
            time_ms: p.time_ms,
            live_bytes: p.live_bytes,
            short: format!("peak {}", bytes(p.peak_live_bytes.unwrap_or(p.live_bytes))),
            label: format!(
                "at the peak of {}",
                crate::summary::attribution::peak_when(p)
            ),
        });
    let ooms = report
        .ooms
        .iter()
        .filter(|o| o.device == device)
        .map(|o| Marker {
            kind: "oom",
            time_ms: o.time_ms,
            live_bytes: o.live_bytes,
            short: format!("OOM {}", bytes(o.size)),
            label: format!(
                "out of memory at {}: {} asking {} at {}",
                crate::wording::moment(o.time_ms),
                o.api,
                bytes(o.size),
                sites.site(o.stack).label()
            ),
        });
    let end = report.python.as_ref().and_then(|p| {
        let at = crate::growth::python_end_ms(report)?;
        let view = p.view.as_ref().filter(|v| v.at == "end")?;
        let how = summary.python.as_ref()?.how_it_ended();
        let live = view
            .allocations
            .iter()
            .filter(|a| a.device == device && a.memory != cuguard_format::Memory::HostPinned)
            .fold(0u64, |sum, a| sum.saturating_add(a.size));
        Some(Marker {
            kind: "end",
            time_ms: at,
            live_bytes: live,
            short: "end of code".to_string(),
            label: format!(
                "the program's code {how} at {}, {} live: what follows is the interpreter's teardown",
                millis(at),
                bytes(live)
            ),
        })
    });
    peak.chain(end).chain(ooms).take(MAX_MARKERS).collect()
}

/// The process's top sites' live bytes over time (see [`GrowthChart`]); `None` without
/// `stack_samples` or when no site held memory. Reads the series as the growth criterion does
/// ([`crate::growth::sites_over_time`]), over the whole run.
fn growth_chart(
    report: &Report,
    summary: &ReportSummary,
    sites: &SiteIndex<'_>,
    who: &str,
) -> Option<GrowthChart> {
    report.stack_samples.as_ref()?;
    // The series the growth criterion reads (a cache's lines in place of its segments, where
    // its history gave them), over the whole run: the teardown after a Python program's end
    // shows, beside its mark.
    let mut owners = crate::owners::OwnerIndex::new(report);
    let over_time = crate::growth::sites_over_time(report, sites, &mut owners, |_| true, false)?;
    let rank: HashMap<&str, usize> = summary
        .growing
        .iter()
        .enumerate()
        .map(|(i, g)| (g.site.as_str(), i))
        .collect();
    let mut lines: Vec<(Option<usize>, u64, usize, GrowthLine)> = over_time
        .sites
        .iter()
        .filter_map(|site| {
            let max = site.bytes.iter().copied().max().unwrap_or(0);
            (max > 0).then(|| {
                let growing = rank.get(site.key.as_str()).copied();
                let line = GrowthLine {
                    label: site.label(sites),
                    growing: growing.is_some(),
                    bytes: site.bytes.clone(),
                };
                (growing, max, site.first, line)
            })
        })
        .collect();
    // Growing sites first, in the summary's order; then the largest, then the first seen.
    lines.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => b.1.cmp(&a.1).then(a.2.cmp(&b.2)),
    });
    lines.truncate(MAX_GROWTH_LINES);
    if lines.is_empty() {
        return None;
    }
    let times = over_time.times;
    let mut lines: Vec<GrowthLine> = lines.into_iter().map(|l| l.3).collect();
    // At most MAX_GROWTH_POINTS: consecutive times bucketed, each keeping its last time and
    // each line's largest value, so maxima survive.
    let per = times.len().div_ceil(MAX_GROWTH_POINTS);
    let times = times.chunks(per).map(|c| c[c.len() - 1]).collect();
    for line in &mut lines {
        line.bytes = line
            .bytes
            .chunks(per)
            .map(|c| c.iter().copied().max().unwrap_or(0))
            .collect();
    }
    Some(GrowthChart {
        process: who.to_string(),
        process_index: 0,
        times,
        end_ms: crate::growth::python_end_ms(report),
        lines,
    })
}

/// Keeps at most [`MAX_POINTS`] points: consecutive points are bucketed and each bucket keeps its
/// last time and its largest live and reserved values, so peaks survive.
fn downsample(points: Vec<[u64; 3]>) -> Vec<[u64; 3]> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let per = points.len().div_ceil(MAX_POINTS);
    points
        .chunks(per)
        .map(|c| {
            let last = c[c.len() - 1][0];
            let live = c.iter().map(|p| p[1]).max().unwrap_or(0);
            let reserved = c.iter().map(|p| p[2]).max().unwrap_or(0);
            [last, live, reserved]
        })
        .collect()
}

/// What the page shows: whatever the number of processes, a bounded part of them (see
/// [`fold::ViewFold`], which builds it one process at a time). Its charts, growth charts, flame
/// graph and timelines are serialized into the page as its data.
#[derive(Debug)]
pub struct View {
    /// The summary of all processes (sites cut to `top`). Its `processes` are those the page
    /// lists: every process when there are at most [`MAX_LISTED`], in input order; else the
    /// [`TOP_PROCESSES`] that leaked most, most first.
    pub summary: Summary,
    /// Timelines, at most [`MAX_CHARTS`]: those of the processes with the highest peaks, in
    /// input order.
    pub charts: Vec<Chart>,
    /// Timelines left out.
    pub charts_omitted: usize,
    /// Per device, the timelines left out merged into one (their largest values over time),
    /// when some were.
    pub merged: Vec<Chart>,
    /// The processes with out-of-memory refusals, at most [`MAX_PROCESS_ENTRIES`] (the first
    /// ones), in input order.
    pub ooms: Vec<ReportSummary>,
    /// How many processes had out-of-memory refusals.
    pub ooms_total: usize,
    /// Out-of-memory refusals, all processes together (those the shims did not keep included).
    pub oom_refusals: u64,
    /// The processes with a peak's breakdown, at most [`MAX_PROCESS_ENTRIES`] (the highest
    /// peaks), in input order.
    pub peaks: Vec<ReportSummary>,
    /// How many processes had a peak's breakdown.
    pub peaks_total: usize,
    /// The processes with growing sites, a growth chart, or a note on why growth could not be
    /// told, with their place in the input, at most [`MAX_PROCESS_ENTRIES`] (those that grew
    /// most), in input order.
    pub growing: Vec<(usize, ReportSummary)>,
    /// How many processes [`View::growing`] could have listed.
    pub growing_total: usize,
    /// Growth charts of the processes in [`View::growing`] (each knows its process's place in
    /// the input), at most [`MAX_CHARTS`].
    pub growth: Vec<GrowthChart>,
    /// Growth charts left out.
    pub growth_omitted: usize,
    /// The flame graph's root (`all`).
    pub flame: Node,
    /// Active-memory timelines from the processes' histories, at most [`MAX_TIMELINES`].
    pub timelines: Vec<timeline::Timeline>,
    /// Histories left out, or that could not be read (one line each).
    pub timeline_notes: Vec<String>,
    /// Every process's row, when the page lists only some of them (see
    /// [`processes::AllProcesses`]).
    pub all: Option<processes::AllProcesses>,
}

/// Up to this many processes, the page lists every one (as it always did); beyond, the
/// [`TOP_PROCESSES`] that leaked most, the others added up and kept in the page's compressed
/// part.
pub const MAX_LISTED: usize = 100;
/// How many processes a page of more than [`MAX_LISTED`] lists.
pub const TOP_PROCESSES: usize = 25;

impl View {
    /// Combines condensed processes (in input order); lists `top` sites.
    pub fn new(processes: Vec<ProcessView>, top: usize) -> View {
        let mut fold = fold::ViewFold::new(top);
        for p in processes {
            fold.add(p);
        }
        fold.finish()
            .expect("a view kept in temporary files reads back what it kept")
    }
}

#[cfg(test)]
mod tests;
