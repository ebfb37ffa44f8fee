//! `cuguard view`: one self-contained HTML page (no network) with device memory over time per
//! device (live and reserved, from each report's `timeline`), the top sites table, and a flame
//! graph of leaked bytes by stack.
//!
//! [`ProcessView::new`] condenses one report in the input workers (timeline downsampled to at
//! most [`MAX_POINTS`] points per device, keeping peaks; stacks reduced to frame-name paths);
//! [`View::new`] combines them; [`html::write`] writes the page.

pub mod html;

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::input::Source;
use crate::report::Report;
use crate::sites::frame_name;
use crate::summary::{ReportSummary, Summary};

/// Most points kept per device timeline.
pub const MAX_POINTS: usize = 2000;
/// Most timeline charts on a page.
pub const MAX_CHARTS: usize = 32;
/// Flame-graph nodes narrower than total/`MIN_FRACTION` are left out.
pub const MIN_FRACTION: u64 = 1000;

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
}

/// A flame-graph node: a frame, the bytes leaked below it, its callees.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Node {
    /// Frame name (function, or `module+0xoffset`).
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
    fn add(&mut self, path: &[String], bytes: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        if let Some((first, rest)) = path.split_first() {
            let child = match self.children.iter().position(|c| c.name == *first) {
                Some(i) => &mut self.children[i],
                None => {
                    self.children.push(Node {
                        name: first.clone(),
                        ..Node::default()
                    });
                    self.children.last_mut().expect("just pushed")
                }
            };
            child.add(rest, bytes);
        }
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

/// One process, condensed for the page.
#[derive(Clone, Debug)]
pub struct ProcessView {
    /// Its summary (sites, totals).
    pub summary: ReportSummary,
    /// Its timelines, one per device.
    pub charts: Vec<Chart>,
    /// Leaked bytes per stack path (outermost frame first).
    pub paths: Vec<(Vec<String>, u64)>,
}

impl ProcessView {
    /// Condenses one report.
    pub fn new(source: &Source, report: &Report) -> ProcessView {
        let summary = ReportSummary::new(source, report, 0);
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
                }
            })
            .collect();
        let mut by_stack: HashMap<Option<u64>, u64> = HashMap::new();
        for leak in &report.leaks {
            let e = by_stack.entry(leak.stack).or_default();
            *e = e.saturating_add(leak.size);
        }
        let stacks: HashMap<u64, &crate::report::Stack> =
            report.stacks.iter().rev().map(|s| (s.id, s)).collect();
        let mut paths: Vec<(Vec<String>, u64)> = by_stack
            .into_iter()
            .map(|(id, bytes)| {
                let path = match id.and_then(|id| stacks.get(&id)) {
                    Some(stack) if !stack.frames.is_empty() => {
                        stack.frames.iter().rev().map(frame_name).collect()
                    }
                    Some(_) => vec!["<empty stack>".to_string()],
                    None => vec!["<no stack>".to_string()],
                };
                (path, bytes)
            })
            .collect();
        paths.sort();
        ProcessView {
            summary,
            charts,
            paths,
        }
    }
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

/// What the page shows. Serialized into the page as its data.
#[derive(Clone, Debug, Serialize)]
pub struct View {
    /// The summary of all processes (sites cut to `top`).
    pub summary: Summary,
    /// Timelines, at most [`MAX_CHARTS`].
    pub charts: Vec<Chart>,
    /// Timelines left out.
    pub charts_omitted: usize,
    /// The flame graph's root (`all`).
    pub flame: Node,
}

impl View {
    /// Combines condensed processes; lists `top` sites.
    pub fn new(processes: Vec<ProcessView>, top: usize) -> View {
        let mut flame = Node {
            name: "all".into(),
            ..Node::default()
        };
        let mut charts = Vec::new();
        let mut omitted = 0;
        let mut summaries = Vec::with_capacity(processes.len());
        for p in processes {
            for (path, bytes) in &p.paths {
                flame.add(path, *bytes);
            }
            for c in p.charts {
                if charts.len() < MAX_CHARTS {
                    charts.push(c);
                } else {
                    omitted += 1;
                }
            }
            summaries.push(p.summary);
        }
        flame.prune((flame.bytes / MIN_FRACTION).max(1));
        View {
            summary: Summary::new(summaries, top),
            charts,
            charts_omitted: omitted,
            flame,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_peaks_and_bounds() {
        let mut points: Vec<[u64; 3]> = (0..10_000).map(|i| [i, i % 7, 1]).collect();
        points[5_000] = [5_000, 1 << 40, 1 << 41];
        let d = downsample(points);
        assert!(d.len() <= MAX_POINTS);
        assert!(d.iter().any(|p| p[1] == 1 << 40 && p[2] == 1 << 41));
        assert_eq!(d.last().unwrap()[0], 9_999);
    }

    #[test]
    fn flame_tree_adds_paths() {
        let mut root = Node::default();
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        root.add(&p(&["main", "a"]), 10);
        root.add(&p(&["main", "b"]), 30);
        root.add(&p(&["main", "a"]), 5);
        root.add(&p(&["other"]), 1);
        assert_eq!(root.prune(2), 4);
        assert_eq!(root.bytes, 46);
        assert_eq!(root.children.len(), 1, "other is below the minimum");
        let main = &root.children[0];
        assert_eq!((main.name.as_str(), main.bytes), ("main", 45));
        let kids: Vec<(&str, u64)> = main
            .children
            .iter()
            .map(|c| (c.name.as_str(), c.bytes))
            .collect();
        assert_eq!(kids, [("b", 30), ("a", 15)]);
    }
}
