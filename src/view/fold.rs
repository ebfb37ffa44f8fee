//! [`ViewFold`]: the page's [`View`] built one process at a time, in input order, with memory
//! bounded whatever the number of processes (as `cuguard summary` streams them).
//!
//! Each process is counted into a [`SummaryFold`] (the totals, the sites across processes, the
//! job's outliers; its per-process parts in temporary files) and written, as one row, to the
//! page's compressed list of every process ([`processes::AllProcesses`]). What the page draws of
//! single processes is kept by bounded heaps ([`Best`]): the [`MAX_LISTED`] processes that leaked
//! most (past that many, the [`TOP_PROCESSES`] the page lists then, and the next), the
//! [`MAX_PROCESS_ENTRIES`] with the highest peaks, that grew most, the first with
//! out-of-memory refusals, the [`MAX_CHARTS`] timelines with the highest peaks. The timelines
//! left out are merged per device into one chart of bounded points ([`Envelope`]); the flame
//! graph is pruned whenever it passes [`MAX_FLAME_NODES`].

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};
use std::io;

use super::condense::ProcessView;
use super::limits::{
    MAX_CHARTS, MAX_LISTED, MAX_PROCESS_ENTRIES, MAX_TIMELINES, MIN_FRACTION, TOP_PROCESSES,
};
use super::model::{Chart, GrowthChart, Node, View};
use super::processes;
use crate::summary::{ReportSummary, SummaryFold};

/// Most flame-graph nodes kept while processes are added: past it, the narrowest are pruned
/// (their bytes stay counted in their callers).
pub const MAX_FLAME_NODES: usize = 10_000;

/// Points of a merged timeline ([`Envelope`]).
pub const MERGED_POINTS: usize = 500;

/// The `keep` best items by a score (ties: the earliest in input order), among those offered.
#[derive(Debug)]
pub struct Best<T> {
    keep: usize,
    heap: BinaryHeap<Reverse<Ranked<T>>>,
}

/// An item with its score and its place in the input: greater is better.
#[derive(Debug)]
struct Ranked<T> {
    score: u64,
    index: usize,
    item: T,
}

impl<T> PartialEq for Ranked<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T> Eq for Ranked<T> {}
impl<T> PartialOrd for Ranked<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Ranked<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .cmp(&other.score)
            .then(other.index.cmp(&self.index))
    }
}

impl<T> Best<T> {
    /// Keeps the `keep` best.
    pub fn new(keep: usize) -> Best<T> {
        Best {
            keep,
            heap: BinaryHeap::new(),
        }
    }

    /// Whether an item of this score and place would be kept now.
    pub fn wants(&self, score: u64, index: usize) -> bool {
        if self.keep == 0 {
            return false;
        }
        if self.heap.len() < self.keep {
            return true;
        }
        let worst = &self.heap.peek().expect("full").0;
        (score, Reverse(index)) > (worst.score, Reverse(worst.index))
    }

    /// Offers an item; gives back the one dropped (this one, or the worst kept before it).
    pub fn offer(&mut self, score: u64, index: usize, item: T) -> Option<T> {
        if !self.wants(score, index) {
            return Some(item);
        }
        self.heap.push(Reverse(Ranked { score, index, item }));
        (self.heap.len() > self.keep).then(|| self.heap.pop().expect("over").0.item)
    }

    /// How many are kept.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// From now on keeps only the `keep` best (dropping the others kept).
    pub fn shrink(&mut self, keep: usize) {
        self.keep = self.keep.min(keep);
        while self.heap.len() > self.keep {
            self.heap.pop();
        }
    }

    /// The kept items with their scores and places, best first.
    pub fn best_first(self) -> Vec<(u64, usize, T)> {
        let mut v: Vec<Ranked<T>> = self.heap.into_iter().map(|r| r.0).collect();
        v.sort_by(|a, b| b.cmp(a));
        v.into_iter().map(|r| (r.score, r.index, r.item)).collect()
    }

    /// The kept items with their places, in input order.
    pub fn in_input_order(self) -> Vec<(usize, T)> {
        let mut v: Vec<(usize, T)> = self
            .heap
            .into_iter()
            .map(|r| (r.0.index, r.0.item))
            .collect();
        v.sort_by_key(|(i, _)| *i);
        v
    }
}

/// One device's timelines merged: time cut into at most [`MERGED_POINTS`] buckets of equal
/// width (doubled, neighbours merged, when a later time comes), each keeping its last time and
/// the largest live and reserved bytes any of the timelines had in it.
#[derive(Debug)]
pub struct Envelope {
    width: u64,
    buckets: Vec<Option<[u64; 3]>>,
    processes: usize,
    name: Option<String>,
}

impl Envelope {
    fn new() -> Envelope {
        Envelope {
            width: 1,
            buckets: Vec::new(),
            processes: 0,
            name: None,
        }
    }

    fn add(&mut self, chart: &Chart) {
        self.processes += 1;
        if self.name.is_none() {
            self.name = chart.name.clone();
        }
        for p in &chart.points {
            while p[0] / self.width >= MERGED_POINTS as u64 {
                self.widen();
            }
            let b = (p[0] / self.width) as usize;
            if self.buckets.len() <= b {
                self.buckets.resize(b + 1, None);
            }
            let slot = &mut self.buckets[b];
            *slot = Some(match *slot {
                None => *p,
                Some(q) => [q[0].max(p[0]), q[1].max(p[1]), q[2].max(p[2])],
            });
        }
    }

    /// Doubles the width: each pair of buckets becomes one.
    fn widen(&mut self) {
        let merged = self
            .buckets
            .chunks(2)
            .map(|pair| {
                pair.iter()
                    .flatten()
                    .fold(None, |acc: Option<[u64; 3]>, p| {
                        Some(match acc {
                            None => *p,
                            Some(q) => [q[0].max(p[0]), q[1].max(p[1]), q[2].max(p[2])],
                        })
                    })
            })
            .collect();
        self.buckets = merged;
        self.width = self.width.saturating_mul(2);
    }

    fn chart(self, device: u32) -> Chart {
        Chart {
            process: format!(
                "{} more processes merged (the most any of them had)",
                processes::grouped(self.processes as u64)
            ),
            device,
            name: self.name,
            points: self.buckets.into_iter().flatten().collect(),
            markers: Vec::new(),
        }
    }
}

/// A [`View`] built one process at a time (see the module doc).
#[derive(Debug)]
pub struct ViewFold {
    summary: SummaryFold,
    index: usize,
    listed: Best<ReportSummary>,
    /// Processes listed with their leaked bytes, as added: the smallest, the incomplete.
    min_leaked: Option<u64>,
    incomplete: usize,
    charts: Best<Chart>,
    merged: BTreeMap<u32, Envelope>,
    ooms: Vec<ReportSummary>,
    ooms_total: usize,
    oom_refusals: u64,
    peaks: Best<ReportSummary>,
    peaks_total: usize,
    growing: Best<(ReportSummary, Option<GrowthChart>)>,
    growing_total: usize,
    growth_omitted: usize,
    flame: Node,
    flame_nodes: usize,
    timelines: Vec<super::timeline::Timeline>,
    timeline_notes: Vec<String>,
    all: processes::AllWriter,
}

impl ViewFold {
    /// An empty view that will list `top` sites.
    pub fn new(top: usize) -> ViewFold {
        ViewFold {
            summary: SummaryFold::on_disk(top, None),
            index: 0,
            listed: Best::new(MAX_LISTED),
            min_leaked: None,
            incomplete: 0,
            charts: Best::new(MAX_CHARTS),
            merged: BTreeMap::new(),
            ooms: Vec::new(),
            ooms_total: 0,
            oom_refusals: 0,
            peaks: Best::new(MAX_PROCESS_ENTRIES),
            peaks_total: 0,
            growing: Best::new(MAX_PROCESS_ENTRIES),
            growing_total: 0,
            growth_omitted: 0,
            flame: Node {
                name: "all".into(),
                ..Node::default()
            },
            flame_nodes: 1,
            timelines: Vec::new(),
            timeline_notes: Vec::new(),
            all: processes::AllWriter::new(),
        }
    }

    /// Adds the next process (in input order).
    pub fn add(&mut self, mut p: ProcessView) {
        let i = self.index;
        self.index += 1;
        match p.timeline.take() {
            Some(Ok(t)) if self.timelines.len() < MAX_TIMELINES => self.timelines.push(t),
            Some(Ok(t)) => self.timeline_notes.push(format!(
                "{}: its history is not drawn (at most {MAX_TIMELINES} on a page)",
                t.process
            )),
            Some(Err(why)) => self.timeline_notes.push(why),
            None => {}
        }
        for (path, bytes) in &p.paths {
            self.flame_nodes += self.flame.add(path, *bytes);
        }
        if self.flame_nodes > MAX_FLAME_NODES {
            self.flame_nodes = prune_to(&mut self.flame, MAX_FLAME_NODES / 2);
        }
        for c in p.charts {
            let score = c.points.iter().map(|q| q[1].max(q[2])).max().unwrap_or(0);
            let score = c.markers.iter().map(|m| m.live_bytes).fold(score, u64::max);
            if let Some(dropped) = self.charts.offer(score, i, c) {
                self.merged
                    .entry(dropped.device)
                    .or_insert_with(Envelope::new)
                    .add(&dropped);
            }
        }

        let mut s = p.summary;
        self.summary.count(&mut s);
        self.all.add(i, &s);
        if !s.complete {
            self.incomplete += 1;
        }
        self.min_leaked = Some(
            self.min_leaked
                .map_or(s.leaked_bytes, |m| m.min(s.leaked_bytes)),
        );
        let refusals = (s.ooms.len() as u64).saturating_add(s.ooms_dropped);
        self.oom_refusals = self.oom_refusals.saturating_add(refusals);
        if refusals > 0 {
            self.ooms_total += 1;
            if self.ooms.len() < MAX_PROCESS_ENTRIES {
                self.ooms.push(s.clone());
            }
        }
        if !s.peaks.is_empty() {
            self.peaks_total += 1;
            let peak = s
                .peaks
                .iter()
                .map(|p| p.peak_live_bytes.unwrap_or(p.live_bytes))
                .max()
                .unwrap_or(0);
            if self.peaks.wants(peak, i) {
                self.peaks.offer(peak, i, s.clone());
            }
        }
        if let Some(g) = &mut p.growth {
            g.process_index = i;
        }
        if !s.growing.is_empty() || s.growth_not_told.is_some() || p.growth.is_some() {
            self.growing_total += 1;
            let grown = s
                .growing
                .iter()
                .map(|g| g.growth.grown_bytes)
                .fold(0, u64::saturating_add);
            if self.growing.wants(grown, i) {
                if let Some((_, Some(_))) = self.growing.offer(grown, i, (s.clone(), p.growth)) {
                    self.growth_omitted += 1;
                }
            } else if p.growth.is_some() {
                self.growth_omitted += 1;
            }
        }
        if self.index == MAX_LISTED + 1 {
            // The page will list the top ones only (and say the most the next one leaked).
            self.listed.shrink(TOP_PROCESSES + 1);
        }
        if self.listed.wants(s.leaked_bytes, i) {
            self.listed.offer(s.leaked_bytes, i, s);
        }
    }

    /// The view of the processes added. Fails only when what was kept in a temporary file
    /// cannot be read back (or could not be written).
    pub fn finish(self) -> io::Result<View> {
        let mut summary = self.summary.finish()?;
        let reports = summary.reports;
        let listed = self.listed.len();
        let (processes, all) = if reports <= MAX_LISTED {
            let processes = self.listed.in_input_order();
            (processes.into_iter().map(|(_, p)| p).collect(), None)
        } else {
            let ranked = self.listed.best_first();
            let shown: Vec<ReportSummary> = ranked
                .iter()
                .take(TOP_PROCESSES)
                .map(|(_, _, p)| p.clone())
                .collect();
            let shown_bytes = shown
                .iter()
                .map(|p| p.leaked_bytes)
                .fold(0, u64::saturating_add);
            let shown_leaks: u64 = shown.iter().map(|p| p.leaks).sum();
            let shown_incomplete = shown.iter().filter(|p| !p.complete).count();
            let rest = processes::Rest {
                processes: reports - shown.len(),
                leaked_bytes: summary.leaked_bytes.saturating_sub(shown_bytes),
                leaks: summary.leaks.saturating_sub(shown_leaks),
                incomplete: self.incomplete.saturating_sub(shown_incomplete),
                most: ranked.get(TOP_PROCESSES).map_or(0, |r| r.0),
                least: self.min_leaked.unwrap_or(0),
            };
            debug_assert!(listed >= shown.len());
            (shown, Some(self.all.finish(reports, rest)?))
        };
        summary.processes = processes;
        let mut flame = self.flame;
        flame.prune((flame.bytes / MIN_FRACTION).max(1));
        let charts: Vec<Chart> = self
            .charts
            .in_input_order()
            .into_iter()
            .map(|(_, c)| c)
            .collect();
        let charts_omitted = self.merged.values().map(|e| e.processes).sum();
        let merged = self
            .merged
            .into_iter()
            .map(|(device, e)| e.chart(device))
            .collect();
        let mut growing = Vec::new();
        let mut growth = Vec::new();
        for (i, (s, chart)) in self.growing.in_input_order() {
            if let Some(c) = chart {
                growth.push(c);
            }
            growing.push((i, s));
        }
        Ok(View {
            summary,
            charts,
            charts_omitted,
            merged,
            ooms: self.ooms,
            ooms_total: self.ooms_total,
            oom_refusals: self.oom_refusals,
            peaks: self
                .peaks
                .in_input_order()
                .into_iter()
                .map(|(_, p)| p)
                .collect(),
            peaks_total: self.peaks_total,
            growing,
            growing_total: self.growing_total,
            growth,
            growth_omitted: self.growth_omitted,
            flame,
            timelines: self.timelines,
            timeline_notes: self.timeline_notes,
            all,
        })
    }
}

/// Prunes the flame graph until at most `most` nodes are left, the narrowest first (their bytes
/// stay counted in their callers); returns the nodes left.
fn prune_to(root: &mut Node, most: usize) -> usize {
    let mut min = (root.bytes / (MIN_FRACTION * 16)).max(1);
    loop {
        let left = root.prune(min);
        if left <= most || min >= root.bytes {
            return left;
        }
        min = min.saturating_mul(2);
    }
}

impl View {
    /// Combines condensed processes (in input order); lists `top` sites.
    pub fn new(processes: Vec<ProcessView>, top: usize) -> View {
        let mut fold = ViewFold::new(top);
        for p in processes {
            fold.add(p);
        }
        fold.finish()
            .expect("a view kept in temporary files reads back what it kept")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_keeps_the_highest_scores_and_the_earliest_on_ties() {
        let mut b = Best::new(3);
        let mut dropped = Vec::new();
        for (i, score) in [5u64, 1, 9, 5, 7, 5].into_iter().enumerate() {
            dropped.extend(b.offer(score, i, i));
        }
        assert_eq!(
            b.best_first()
                .into_iter()
                .map(|(s, i, _)| (s, i))
                .collect::<Vec<_>>(),
            vec![(9, 2), (7, 4), (5, 0)]
        );
        dropped.sort();
        assert_eq!(dropped, vec![1, 3, 5]);
    }

    #[test]
    fn an_envelope_keeps_bounded_points_and_the_largest_values() {
        let mut e = Envelope::new();
        for k in 0..50u64 {
            let points = (0..10_000u64)
                .map(|t| [t * 10 + k, if t == 7_777 { 1 << 40 } else { t + k }, 0])
                .collect();
            e.add(&Chart {
                process: String::new(),
                device: 0,
                name: None,
                points,
                markers: Vec::new(),
            });
        }
        let chart = e.chart(0);
        assert!(
            chart.points.len() <= MERGED_POINTS,
            "{}",
            chart.points.len()
        );
        assert_eq!(chart.points.iter().map(|p| p[1]).max(), Some(1 << 40));
        assert!(chart.points.windows(2).all(|w| w[0][0] < w[1][0]));
        assert_eq!(chart.points.last().unwrap()[0], 99_990 + 49);
        assert!(chart.process.starts_with("50 more processes merged"));
    }
}
