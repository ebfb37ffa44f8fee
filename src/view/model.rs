//! What the page draws: its [`View`] (the summary and the bounded parts of the processes it
//! shows), each device's timeline [`Chart`] with its [`Marker`]s, the growth charts
//! ([`GrowthChart`], [`GrowthLine`]) and the flame graph's [`Node`]s; serialized into the page
//! as its data.

use serde::Serialize;

use super::{processes, timeline};
use crate::summary::{ReportSummary, Summary};

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
    /// An out-of-memory refusal's card, a line each, the verdict first: the page shows it when
    /// the marker is clicked (empty for the other kinds).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub card: Vec<String>,
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
    /// At most [`MAX_GROWTH_LINES`](super::MAX_GROWTH_LINES) lines: the growing sites first (most grown first), then the
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
    pub(super) fn add(&mut self, path: &[String], bytes: u64) -> usize {
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
    pub(super) fn prune(&mut self, min: u64) -> usize {
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

/// What the page shows: whatever the number of processes, a bounded part of them (see
/// [`fold::ViewFold`](super::fold::ViewFold), which builds it one process at a time). Its charts, growth charts, flame
/// graph and timelines are serialized into the page as its data.
#[derive(Debug)]
pub struct View {
    /// The summary of all processes (sites cut to `top`). Its `processes` are those the page
    /// lists: every process when there are at most [`MAX_LISTED`](super::MAX_LISTED), in input order; else the
    /// [`TOP_PROCESSES`](super::TOP_PROCESSES) that leaked most, most first.
    pub summary: Summary,
    /// Timelines, at most [`MAX_CHARTS`](super::MAX_CHARTS): those of the processes with the highest peaks, in
    /// input order.
    pub charts: Vec<Chart>,
    /// Timelines left out.
    pub charts_omitted: usize,
    /// Per device, the timelines left out merged into one (their largest values over time),
    /// when some were.
    pub merged: Vec<Chart>,
    /// The processes with out-of-memory refusals, at most [`MAX_PROCESS_ENTRIES`](super::MAX_PROCESS_ENTRIES) (the first
    /// ones), in input order.
    pub ooms: Vec<ReportSummary>,
    /// How many processes had out-of-memory refusals.
    pub ooms_total: usize,
    /// Out-of-memory refusals, all processes together (those the shims did not keep included).
    pub oom_refusals: u64,
    /// The processes with a peak's breakdown, at most [`MAX_PROCESS_ENTRIES`](super::MAX_PROCESS_ENTRIES) (the highest
    /// peaks), in input order.
    pub peaks: Vec<ReportSummary>,
    /// How many processes had a peak's breakdown.
    pub peaks_total: usize,
    /// The processes with growing sites, a growth chart, or a note on why growth could not be
    /// told, with their place in the input, at most [`MAX_PROCESS_ENTRIES`](super::MAX_PROCESS_ENTRIES) (those that grew
    /// most), in input order.
    pub growing: Vec<(usize, ReportSummary)>,
    /// How many processes [`View::growing`] could have listed.
    pub growing_total: usize,
    /// Growth charts of the processes in [`View::growing`] (each knows its process's place in
    /// the input), at most [`MAX_CHARTS`](super::MAX_CHARTS).
    pub growth: Vec<GrowthChart>,
    /// Growth charts left out.
    pub growth_omitted: usize,
    /// The flame graph's root (`all`).
    pub flame: Node,
    /// Active-memory timelines from the processes' histories, at most [`MAX_TIMELINES`](super::MAX_TIMELINES).
    pub timelines: Vec<timeline::Timeline>,
    /// Histories left out, or that could not be read (one line each).
    pub timeline_notes: Vec<String>,
    /// Every process's row, when the page lists only some of them (see
    /// [`processes::AllProcesses`]).
    pub all: Option<processes::AllProcesses>,
}
