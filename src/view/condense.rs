//! [`ProcessView`]: one report condensed for the page, in the input workers: its summary, its
//! timelines downsampled with their markers, its top sites' growth chart, its leaks' flame-graph
//! paths ([`flame_path`]) and, for a few processes, its history's active-memory timeline.

use std::collections::{BTreeMap, HashMap};

use super::limits::{MAX_GROWTH_LINES, MAX_GROWTH_POINTS, MAX_MARKERS, MAX_POINTS, SECTION_TOP};
use super::model::{Chart, GrowthChart, GrowthLine, Marker};
use super::timeline;
use crate::input::Source;
use crate::sites::{SiteIndex, frame_name, mixed_names};
use crate::summary::ReportSummary;
use crate::wording::{bytes, millis};
use cuguard_format::{LeakFold, Report, Stack};

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
            card: Vec::new(),
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
            card: crate::summary::attribution::card_lines(o),
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
            card: Vec::new(),
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
pub(super) fn downsample(points: Vec<[u64; 3]>) -> Vec<[u64; 3]> {
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
