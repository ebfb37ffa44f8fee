//! The view's active-memory timeline, from a process's history: live device memory over the run
//! stacked by site, the largest allocations as bands over time, and what was live at any moment.
//!
//! Levels of detail, computed here so that the page stays small and opens at once whatever the
//! history's size:
//! - the sites: the [`SERIES`] sites with the most bytes × time, each its own colour, and the
//!   rest as `other`;
//! - level 0: the whole run in [`COLUMNS`] columns; then [`WINDOWS`] levels, each an equal
//!   window of the run in as many columns, which the page uses once zoomed in that far. Each
//!   column holds the bytes of each series at the column's highest moment, so a spike shorter
//!   than a column still shows at its height, and that moment;
//! - the [`BANDS`] largest allocations by size, each with its times, size, site and the
//!   program's tag (`cuguard.tag`, `cuguard_tag_push`, `cuguard.annotate`): drawn as bands,
//!   described when hovered, listed when a moment is clicked;
//! - the program's phases (NVTX ranges, `cuguard.phase`s), at most
//!   [`MAX_PHASES`](super::MAX_PHASES), each with its span and peak ([`super::phases`]): drawn
//!   as bands above the memory.
//!
//! Two walks over the history's steps in time order ([`History::walk`]): time that grows with
//! the history, memory with what is live at once, the stacks and the columns.

use std::collections::HashMap;

use cuguard_format::MemoryKind;
use cuguard_history::bounded::{History, Source, Step};
use cuguard_history::replay::{Block, Replay};
use serde::Serialize;

use super::phases::{Chosen, Peaks, PhaseBand};

/// Sites drawn apart; the rest are `other`.
pub const SERIES: usize = 12;
/// Columns per level.
pub const COLUMNS: usize = 800;
/// Windows of the finer level.
pub const WINDOWS: usize = 16;
/// Allocations drawn as bands.
pub const BANDS: usize = 1500;

/// A site as the page names it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SiteInfo {
    /// `train_step (train.py:42)`.
    pub label: String,
    /// Its callers, innermost first.
    pub stack: Vec<String>,
}

/// The most lost windows a timeline carries (a few KiB of the page).
pub const MAX_LOST_WINDOWS: usize = 200;

/// One process's timeline.
#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    /// `train[4242]`.
    pub process: String,
    pub begins_ms: f64,
    pub ends_ms: f64,
    /// The sites drawn, then `other` (last).
    pub series: Vec<SiteInfo>,
    /// Level 0, then the windows.
    pub levels: Vec<Level>,
    /// The largest allocations: `[start ms, end ms or -1 (live at the end), bytes, series,
    /// stream]` (the stream's handle; 0: the default stream).
    pub bands: Vec<(f64, f64, u64, usize, u64)>,
    /// The tags of the bands' allocations, each once (none: the key is left out).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Each band's tag, by band: 0 for none, else 1 + its place in `tags` (left out with
    /// `tags`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub band_tags: Vec<u32>,
    /// Allocations in the history, and those drawn as bands.
    pub allocations: usize,
    /// The history's peak: (ms, bytes).
    pub peak: (f64, u64),
    /// Events lost while recording.
    pub lost_events: u64,
    /// The windows they were lost in, by time, overlapping ones made one (at most
    /// [`MAX_LOST_WINDOWS`]): the page says, at each moment, what was lost before it.
    pub lost: Vec<crate::history::moment::LostWindow>,
    /// Whether the history ended whole.
    pub whole: bool,
    /// The program's phases drawn, by start (none: the key is left out).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseBand>,
    /// Phases left out (past [`MAX_PHASES`](super::MAX_PHASES) or its lanes).
    #[serde(skip_serializing_if = "is_zero")]
    pub phases_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The history's lost windows for the page: at most [`MAX_LOST_WINDOWS`], the later ones
/// folded into the last (its end and count take theirs), so that the events lost before any
/// moment are counted whole.
fn lost_windows(replay: &Replay) -> Vec<crate::history::moment::LostWindow> {
    let mut all = crate::history::moment::merged_windows(&replay.lost.iter().collect::<Vec<_>>());
    if all.len() > MAX_LOST_WINDOWS {
        let rest: Vec<_> = all.split_off(MAX_LOST_WINDOWS);
        if let Some(last) = all.last_mut() {
            for w in rest {
                last.to_ms = last.to_ms.max(w.to_ms);
                last.events += w.events;
            }
        }
    }
    all
}

/// One level: columns over `[from_ms, to_ms]`.
#[derive(Clone, Debug, Serialize)]
pub struct Level {
    pub from_ms: f64,
    pub to_ms: f64,
    /// Each column's highest moment, ms.
    pub at: Vec<f64>,
    /// Bytes by series at that moment, column by column (`series.len()` values each).
    pub bytes: Vec<u64>,
}

fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e3).round() / 1e3
}

/// The timeline of `history`; `site` names a stack (`u32::MAX`: none) and groups stacks into
/// sites by its label. Two walks over the history, in memory that does not grow with it: the
/// first weighs each stack (bytes × time) and keeps the largest allocations, the second sweeps
/// the steps into the columns.
pub fn timeline<S: Source>(
    history: &History<S>,
    process: String,
    site: &dyn Fn(u32) -> SiteInfo,
) -> Result<Timeline, cuguard_history::Error> {
    let meta = history.meta();
    let (from, to) = (meta.begins_ns, meta.ends_ns.max(meta.begins_ns + 1));
    let weighed = weigh(history, to)?;
    let (series, series_by_stack) = series(&weighed, site);
    let other = series.len() - 1;
    let series_of = |stack: u32| series_by_stack.get(stack).copied().unwrap_or(other);
    let chosen = Chosen::new(&meta.phases, to);
    let mut peaks = chosen.peaks();
    let (levels, live) = sweep(history, (from, to), series.len(), &series_of, &mut peaks)?;
    let phases_omitted = chosen.omitted;
    let phases = chosen.bands(&meta.phases, &peaks.finish(live), ms);
    let largest = weighed.largest.list();
    let (tags, band_tags) = band_tags(meta, &largest);
    let bands = largest
        .into_iter()
        .map(|b| {
            (
                ms(b.start_ns),
                b.end_ns.map_or(-1.0, ms),
                b.size,
                series_of(b.stack),
                b.stream,
            )
        })
        .collect();
    let peak = history.peak();
    Ok(Timeline {
        process,
        begins_ms: ms(from),
        ends_ms: ms(to),
        series,
        levels,
        bands,
        tags,
        band_tags,
        allocations: weighed.allocations,
        peak: (ms(peak.0), peak.1),
        lost_events: meta.lost_events(),
        lost: lost_windows(meta),
        whole: meta.whole,
        phases,
        phases_omitted,
    })
}

/// The tags of `bands` (named in `meta`), each once, and each band's: 0 for none, else 1 + its
/// place; both empty when no band has a tag.
fn band_tags(meta: &Replay, bands: &[Block]) -> (Vec<String>, Vec<u32>) {
    if bands.iter().all(|b| b.tag == cuguard_history::NONE) {
        return (Vec::new(), Vec::new());
    }
    let mut tags: Vec<String> = Vec::new();
    let mut by_id: HashMap<u32, u32> = HashMap::new();
    let of_band = bands
        .iter()
        .map(|b| match meta.tag_of(b) {
            None => 0,
            Some(name) => *by_id.entry(b.tag).or_insert_with(|| {
                tags.push(name.to_string());
                tags.len() as u32
            }),
        })
        .collect();
    (tags, of_band)
}

/// Whether an allocation is drawn: device memory, not pinned host memory.
fn drawn(b: &Block) -> bool {
    b.memory != MemoryKind::HostPinned
}

/// What the first walk finds: each stack's bytes × time, the allocations, the largest.
struct Weighed {
    /// Bytes × time by stack.
    weight: ByStack<f64>,
    /// The stacks, in the order first seen.
    stacks: Vec<u32>,
    /// Allocations drawn.
    allocations: usize,
    /// The largest allocations, drawn as bands.
    largest: Largest,
}

/// The first walk: weighs each stack (bytes × time until `to`) and keeps the largest
/// allocations.
fn weigh<S: Source>(history: &History<S>, to: u64) -> Result<Weighed, cuguard_history::Error> {
    let mut weight: ByStack<f64> = ByStack::default();
    let mut stacks: Vec<u32> = Vec::new();
    let mut allocations = 0usize;
    let mut largest = Largest::default();
    history.walk(&mut |step| match step {
        Step::Restated(b) | Step::Made(b) if drawn(&b) => {
            allocations += 1;
            let (w, new) = weight.slot(b.stack);
            if new {
                stacks.push(b.stack);
            }
            *w += b.size as f64 * (to.max(b.start_ns) - b.start_ns) as f64;
            largest.made(&b);
        }
        Step::Ended(b) if drawn(&b) => {
            let end = b.end_ns.unwrap_or(to).max(b.start_ns);
            *weight.slot(b.stack).0 -=
                b.size as f64 * (to.max(b.start_ns) - end.min(to.max(b.start_ns))) as f64;
            largest.ended(&b);
        }
        Step::Tagged(b) if drawn(&b) => largest.tagged(&b),
        _ => {}
    })?;
    Ok(Weighed {
        weight,
        stacks,
        allocations,
        largest,
    })
}

/// The series: the stacks grouped into sites by label, the [`SERIES`] heaviest sites each one,
/// and `other` last for the rest; with each stack's series.
fn series(weighed: &Weighed, site: &dyn Fn(u32) -> SiteInfo) -> (Vec<SiteInfo>, ByStack<usize>) {
    // Sites by label, and each one's bytes × time.
    let mut site_of_stack: HashMap<u32, usize> = HashMap::new();
    let mut sites: Vec<(SiteInfo, f64)> = Vec::new();
    let mut by_label: HashMap<String, usize> = HashMap::new();
    for &stack in &weighed.stacks {
        let info = site(stack);
        let s = *by_label.entry(info.label.clone()).or_insert_with(|| {
            sites.push((info, 0.0));
            sites.len() - 1
        });
        sites[s].1 += weighed.weight.get(stack).copied().unwrap_or_default();
        site_of_stack.insert(stack, s);
    }
    let mut order: Vec<usize> = (0..sites.len()).collect();
    order.sort_by(|&a, &b| sites[b].1.total_cmp(&sites[a].1));
    let mut series_of_site = vec![SERIES; sites.len()];
    let mut series: Vec<SiteInfo> = Vec::new();
    for (rank, &s) in order.iter().enumerate().take(SERIES) {
        series_of_site[s] = rank;
        series.push(sites[s].0.clone());
    }
    let other = series.len();
    for v in series_of_site.iter_mut() {
        if *v == SERIES {
            *v = other;
        }
    }
    series.push(SiteInfo {
        label: "other".into(),
        stack: Vec::new(),
    });
    let mut series_by_stack: ByStack<usize> = ByStack::default();
    for (&stack, &site) in &site_of_stack {
        *series_by_stack.slot(stack).0 = series_of_site[site];
    }
    (series, series_by_stack)
}

/// The second walk: the steps in time order, frees first at one moment, swept into the columns
/// of the whole span `(from, to)` and of each of its [`WINDOWS`] windows, by the `n` series, and
/// into the phases' `peaks`; with the bytes live at the end.
fn sweep<S: Source>(
    history: &History<S>,
    (from, to): (u64, u64),
    n: usize,
    series_of: &dyn Fn(u32) -> usize,
    peaks: &mut Peaks,
) -> Result<(Vec<Level>, u64), cuguard_history::Error> {
    // Each window's columns before its first step hold what was live when it began.
    let span = (to - from) as f64;
    let window = span / WINDOWS as f64;
    let mut level0 = Sweep::new(from as f64, span, n);
    let mut fine: Vec<Sweep> = (0..WINDOWS)
        .map(|w| Sweep::new(from as f64 + w as f64 * window, window, n))
        .collect();
    let mut live = vec![0i64; n];
    let mut total = 0i64;
    // The first window's columns begin empty; each later one from what was live at its start.
    let mut seeded = 1;
    let mut moment: Vec<(u64, i64, usize)> = Vec::new();
    let mut settle = |moment: &mut Vec<(u64, i64, usize)>, live: &mut Vec<i64>, total: &mut i64| {
        moment.sort_by_key(|&(_, d, _)| d);
        for (t, d, k) in moment.drain(..) {
            while seeded < WINDOWS && (t as f64) >= from as f64 + seeded as f64 * window {
                fine[seeded].seed(live);
                seeded += 1;
            }
            live[k] += d;
            peaks.step(t, (*total).max(0) as u64, (*total + d).max(0) as u64);
            *total += d;
            let t = t.clamp(from, to);
            level0.note(t as f64, *total, live);
            let w = (((t - from) as f64 / window) as usize).min(WINDOWS - 1);
            fine[w].note(t as f64, *total, live);
        }
    };
    history.walk(&mut |step| {
        let (t, d, stack) = match step {
            Step::Restated(b) | Step::Made(b) if drawn(&b) => (b.start_ns, b.size as i64, b.stack),
            Step::Ended(b) if drawn(&b) => {
                (b.end_ns.unwrap_or(b.start_ns), -(b.size as i64), b.stack)
            }
            _ => return,
        };
        if moment.first().is_some_and(|m| m.0 != t) {
            settle(&mut moment, &mut live, &mut total);
        }
        moment.push((t, d, series_of(stack)));
    })?;
    settle(&mut moment, &mut live, &mut total);
    while seeded < WINDOWS {
        fine[seeded].seed(&live);
        seeded += 1;
    }
    let mut levels = vec![level0.finish()];
    levels.extend(fine.into_iter().map(Sweep::finish));
    Ok((levels, total.max(0) as u64))
}

/// A value by stack id, in a list while ids are small (the shim numbers stacks from 0), in a
/// map past that: looked up at every step of a walk.
struct ByStack<T> {
    dense: Vec<Option<T>>,
    sparse: HashMap<u32, T>,
}

impl<T> Default for ByStack<T> {
    fn default() -> Self {
        ByStack {
            dense: Vec::new(),
            sparse: HashMap::new(),
        }
    }
}

impl<T: Default> ByStack<T> {
    /// Ids below this are kept in the list.
    const DENSE: u32 = 1 << 22;

    /// The value of `id` (made when new), and whether it is new.
    fn slot(&mut self, id: u32) -> (&mut T, bool) {
        if id < Self::DENSE {
            let i = id as usize;
            if i >= self.dense.len() {
                self.dense.resize_with(i + 1, || None);
            }
            let new = self.dense[i].is_none();
            (self.dense[i].get_or_insert_with(T::default), new)
        } else {
            let new = !self.sparse.contains_key(&id);
            (self.sparse.entry(id).or_default(), new)
        }
    }

    fn get(&self, id: u32) -> Option<&T> {
        if id < Self::DENSE {
            self.dense.get(id as usize).and_then(Option::as_ref)
        } else {
            self.sparse.get(&id)
        }
    }
}

/// The [`BANDS`] largest allocations as a walk meets them (the earliest among equals), with
/// their ends once met.
#[derive(Default)]
struct Largest {
    /// (size, order met) of those kept, smallest and latest first.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, std::cmp::Reverse<u64>)>>,
    kept: HashMap<u64, Block>,
    /// A kept allocation's order, by its address and start.
    by_block: HashMap<(u64, u64), u64>,
    met: u64,
}

impl Largest {
    fn made(&mut self, b: &Block) {
        let order = self.met;
        self.met += 1;
        let key = std::cmp::Reverse((b.size, std::cmp::Reverse(order)));
        if self.heap.len() == BANDS {
            match self.heap.peek() {
                Some(smallest) if key < *smallest => {
                    let std::cmp::Reverse((_, std::cmp::Reverse(gone))) =
                        self.heap.pop().expect("peeked");
                    if let Some(g) = self.kept.remove(&gone) {
                        self.by_block.remove(&(g.addr, g.start_ns));
                    }
                }
                _ => return,
            }
        }
        self.heap.push(key);
        self.kept.insert(order, *b);
        self.by_block.insert((b.addr, b.start_ns), order);
    }

    fn ended(&mut self, b: &Block) {
        if let Some(order) = self.by_block.remove(&(b.addr, b.start_ns))
            && let Some(k) = self.kept.get_mut(&order)
        {
            k.end_ns = b.end_ns;
            k.tag = b.tag;
        }
    }

    /// A live allocation named after it was made: its band takes the tag.
    fn tagged(&mut self, b: &Block) {
        if let Some(order) = self.by_block.get(&(b.addr, b.start_ns))
            && let Some(k) = self.kept.get_mut(order)
        {
            k.tag = b.tag;
        }
    }

    /// Those kept, by start.
    fn list(self) -> Vec<Block> {
        let mut all: Vec<(u64, Block)> = self.kept.into_iter().collect();
        all.sort_by_key(|(order, b)| (b.start_ns, *order));
        all.into_iter().map(|(_, b)| b).collect()
    }
}

/// One level being swept: per column, the highest total seen and the series then.
struct Sweep {
    from: f64,
    width: f64,
    n: usize,
    best: Vec<i64>,
    at: Vec<f64>,
    bytes: Vec<u64>,
    /// What was live after each column's last step.
    after: Vec<u64>,
    seen: Vec<bool>,
    seed: Option<Vec<i64>>,
}

impl Sweep {
    fn new(from: f64, span: f64, n: usize) -> Sweep {
        Sweep {
            from,
            width: span / COLUMNS as f64,
            n,
            best: vec![i64::MIN; COLUMNS],
            at: vec![0.0; COLUMNS],
            bytes: vec![0; COLUMNS * n],
            after: vec![0; COLUMNS * n],
            seen: vec![false; COLUMNS],
            seed: None,
        }
    }

    fn seed(&mut self, state: &[i64]) {
        self.seed = Some(state.to_vec());
    }

    fn column(&self, t: f64) -> usize {
        (((t - self.from) / self.width).max(0.0) as usize).min(COLUMNS - 1)
    }

    fn note(&mut self, t: f64, total: i64, live: &[i64]) {
        let c = self.column(t);
        self.seen[c] = true;
        for (k, v) in live.iter().enumerate() {
            self.after[c * self.n + k] = (*v).max(0) as u64;
        }
        if total > self.best[c] {
            self.best[c] = total;
            self.at[c] = t;
            for (k, v) in live.iter().enumerate() {
                self.bytes[c * self.n + k] = (*v).max(0) as u64;
            }
        }
    }

    /// The level, empty columns holding what was live before them.
    fn finish(self) -> Level {
        let Sweep {
            from,
            width,
            n,
            mut at,
            mut bytes,
            after,
            seen,
            seed,
            ..
        } = self;
        let mut carry: Vec<u64> = seed
            .map(|s| s.iter().map(|v| (*v).max(0) as u64).collect())
            .unwrap_or_else(|| vec![0; n]);
        for c in 0..COLUMNS {
            if seen[c] {
                carry.copy_from_slice(&after[c * n..(c + 1) * n]);
            } else {
                bytes[c * n..(c + 1) * n].copy_from_slice(&carry);
                at[c] = from + (c as f64 + 0.5) * width;
            }
        }
        Level {
            from_ms: ms(from.max(0.0) as u64),
            to_ms: ms((from + width * COLUMNS as f64).max(0.0) as u64),
            at: at.into_iter().map(|t| ms(t.max(0.0) as u64)).collect(),
            bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use cuguard_history::{Action, Chunk, Header, Raw, VERSION, kind, write_chunk};

    use super::*;

    /// A history of `blocks` (start ns, end ns, bytes, stack), 1 tsc tick = 1 ns.
    fn history(blocks: &[(u64, Option<u64>, u64, u32)], end: u64) -> History<Vec<u8>> {
        history_with(blocks, end, &[])
    }

    /// A history of `blocks` and of `step` phases pushed on thread 1 (begin ns, end ns).
    fn history_with(
        blocks: &[(u64, Option<u64>, u64, u32)],
        end: u64,
        steps: &[(u64, Option<u64>)],
    ) -> History<Vec<u8>> {
        let mut f = Header {
            version: VERSION,
            pid: 1,
            start_unix_ns: 0,
            segment: 0,
            run: 0,
        }
        .encode()
        .to_vec();
        for t in [0, end] {
            write_chunk(
                &mut f,
                &Chunk::Clock {
                    tsc: t,
                    since_start_ns: t,
                    unix_ns: t,
                },
            );
        }
        let mut events = Vec::new();
        for (i, &(start, stop, size, stack)) in blocks.iter().enumerate() {
            let addr = 0x7000_0000_0000 + i as u64 * 0x1000_0000;
            let ev = |tsc, action, size| Raw {
                tsc,
                addr,
                size,
                stack,
                context: 0,
                kind: kind(action, MemoryKind::Device),
                device: 1,
                stream: 0,
            };
            events.push(ev(start, Action::Alloc, size));
            if let Some(e) = stop {
                events.push(ev(e, Action::Free, 0));
            }
        }
        events.sort_by_key(|e| e.tsc);
        write_chunk(&mut f, &Chunk::Events { thread: 1, events });
        if !steps.is_empty() {
            let mark = |tsc, action, name| Raw {
                tsc,
                addr: cuguard_history::phases::PUSHED,
                size: name,
                stack: u32::MAX,
                context: u16::MAX,
                kind: kind(action, MemoryKind::Device),
                device: 0,
                stream: 0,
            };
            let mut events = Vec::new();
            for &(begin, stop) in steps {
                events.push(mark(begin, Action::PhaseBegin, 1));
                if let Some(e) = stop {
                    events.push(mark(e, Action::PhaseEnd, 0));
                }
            }
            let text = "step".to_string();
            write_chunk(&mut f, &Chunk::Name { id: 1, text });
            write_chunk(&mut f, &Chunk::Phases { thread: 1, events });
        }
        write_chunk(&mut f, &Chunk::End { tsc: end });
        History::open(vec![f]).unwrap()
    }

    fn site(id: u32) -> SiteInfo {
        SiteInfo {
            label: format!("site_{id}"),
            stack: vec![format!("site_{id}"), "main".into()],
        }
    }

    #[test]
    fn a_spike_between_calm_phases_is_drawn_at_its_height_and_as_a_band() {
        const MS: u64 = 1_000_000;
        // Calm: 1 MiB blocks all along; the spike: 512 MiB from 400 to 600 ms.
        let mut blocks: Vec<(u64, Option<u64>, u64, u32)> = (0..100)
            .map(|i| (i * 10 * MS, Some(i * 10 * MS + 5 * MS), 1 << 20, 1))
            .collect();
        blocks.push((400 * MS, Some(600 * MS), 512 << 20, 2));
        let t = timeline(&history(&blocks, 1000 * MS), "p[1]".into(), &site).unwrap();
        let spike = t.series.iter().position(|s| s.label == "site_2").unwrap();
        let n = t.series.len();
        let l0 = &t.levels[0];
        let at = |ms: f64| {
            let c = ((ms - l0.from_ms) / (l0.to_ms - l0.from_ms) * COLUMNS as f64) as usize;
            l0.bytes[c * n + spike]
        };
        assert_eq!(at(500.0), 512 << 20);
        assert_eq!(at(300.0), 0);
        assert_eq!(at(700.0), 0);
        // The largest allocation is a band, with its times and site.
        let band = t.bands.iter().find(|b| b.2 == 512 << 20).unwrap();
        assert_eq!((band.0, band.1, band.3), (400.0, 600.0, spike));
        assert_eq!(
            t.peak,
            (400.0, (512 << 20) + (1 << 20)),
            "with the calm block of 400 ms"
        );
        // Every level has its columns; the windows cover the run in order.
        assert_eq!(t.levels.len(), 1 + WINDOWS);
        assert!(t.levels.iter().all(|l| l.at.len() == COLUMNS));
        assert_eq!(t.levels[1].from_ms, 0.0);
        assert_eq!(t.levels[WINDOWS].to_ms, 1000.0);
        // In the window holding 500 ms, a column there has the spike too.
        let w = &t.levels[1 + 8];
        let c = ((500.0 - w.from_ms) / (w.to_ms - w.from_ms) * COLUMNS as f64) as usize;
        assert_eq!(w.bytes[c * n + spike], 512 << 20);
    }

    #[test]
    fn phases_are_bands_with_their_spans_and_peaks_and_none_leave_the_page_as_it_was() {
        const MS: u64 = 1_000_000;
        const MIB: u64 = 1 << 20;
        let blocks = [
            (0, Some(1000 * MS), 100 * MIB, 1),
            (200 * MS, Some(400 * MS), 50 * MIB, 2),
            (600 * MS, Some(700 * MS), 30 * MIB, 2),
        ];
        let steps = [
            (150 * MS, Some(450 * MS)),
            (500 * MS, Some(800 * MS)),
            (850 * MS, None),
        ];
        let h = history_with(&blocks, 1000 * MS, &steps);
        let t = timeline(&h, "p[1]".into(), &site).unwrap();
        let got: Vec<_> = t
            .phases
            .iter()
            .map(|p| {
                (
                    p.label.as_str(),
                    p.start_ms,
                    p.end_ms,
                    p.lane,
                    p.peak_bytes,
                    p.peak_ms,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("step #1", 150.0, Some(450.0), 0, 150 * MIB, 200.0),
                ("step #2", 500.0, Some(800.0), 0, 130 * MIB, 600.0),
                ("step #3", 850.0, None, 0, 100 * MIB, 850.0),
            ]
        );
        assert_eq!(t.phases_omitted, 0);
        // Without phases, the page's data has no key for them.
        let t = timeline(&history(&blocks, 1000 * MS), "p[1]".into(), &site).unwrap();
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json.get("phases"), None);
        assert_eq!(json.get("phases_omitted"), None);
    }

    #[test]
    fn a_million_allocations_make_a_page_of_bounded_size() {
        const US: u64 = 1_000;
        let blocks: Vec<(u64, Option<u64>, u64, u32)> = (0..1_000_000u64)
            .map(|i| {
                (
                    i * US,
                    Some(i * US + 50 * US),
                    4096 + (i % 997) * 64,
                    (i % 300) as u32,
                )
            })
            .collect();
        let t = timeline(&history(&blocks, 1_000_100 * US), "p[1]".into(), &site).unwrap();
        assert_eq!(t.allocations, 1_000_000);
        assert_eq!(t.series.len(), SERIES + 1);
        assert_eq!(t.bands.len(), BANDS);
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.len() < 4 << 20, "{} bytes", json.len());
    }

    #[test]
    fn a_million_phases_make_a_page_of_bounded_size() {
        const US: u64 = 1_000;
        let steps: Vec<(u64, Option<u64>)> = (0..1_000_000u64)
            .map(|i| (i * US, Some(i * US + US / 2)))
            .collect();
        let blocks = [(0, None, 1 << 20, 1)];
        let t = timeline(
            &history_with(&blocks, 1_000_000 * US, &steps),
            "p[1]".into(),
            &site,
        )
        .unwrap();
        assert_eq!(t.phases.len(), super::super::MAX_PHASES);
        assert_eq!(t.phases_omitted, 1_000_000 - super::super::MAX_PHASES);
        assert_eq!(t.phases[0].label, "step #1");
        let json = serde_json::to_string(&t.phases).unwrap();
        assert!(json.len() < 512 << 10, "{} bytes", json.len());
    }

    #[test]
    fn bands_carry_their_tags_given_as_made_or_after_the_fact() {
        const MS: u64 = 1_000_000;
        let mut f = Header {
            version: VERSION,
            pid: 1,
            start_unix_ns: 0,
            segment: 0,
            run: 0,
        }
        .encode()
        .to_vec();
        for t in [0, 100 * MS] {
            let clock = Chunk::Clock {
                tsc: t,
                since_start_ns: t,
                unix_ns: t,
            };
            write_chunk(&mut f, &clock);
        }
        for (id, text) in [(1, "kv_cache"), (2, "activations")] {
            let text = text.to_string();
            write_chunk(&mut f, &Chunk::Name { id, text });
        }
        let ev = |tsc, action, addr, size| Raw {
            tsc,
            addr,
            size,
            stack: 1,
            context: 0,
            kind: kind(action, MemoryKind::Device),
            device: 1,
            stream: 0,
        };
        let events = vec![
            // Tagged as it was made: its tag right after it, at its moment.
            ev(10 * MS, Action::Alloc, 0x1000_0000, 4 << 20),
            ev(10 * MS, Action::Tag, 0x1000_0000, 1),
            ev(20 * MS, Action::Alloc, 0x2000_0000, 2 << 20),
            ev(30 * MS, Action::Alloc, 0x3000_0000, 1 << 20),
            // Named after the fact, then freed.
            ev(40 * MS, Action::Tag, 0x2000_0000, 2),
            ev(50 * MS, Action::Free, 0x2000_0000, 0),
        ];
        write_chunk(&mut f, &Chunk::Events { thread: 1, events });
        write_chunk(&mut f, &Chunk::End { tsc: 100 * MS });
        let h = History::open(vec![f]).unwrap();
        let t = timeline(&h, "p[1]".into(), &site).unwrap();
        let bands: Vec<(u64, Option<&str>)> = t
            .bands
            .iter()
            .zip(&t.band_tags)
            .map(|(b, &k)| (b.2 >> 20, (k > 0).then(|| t.tags[k as usize - 1].as_str())))
            .collect();
        assert_eq!(
            bands,
            [(4, Some("kv_cache")), (2, Some("activations")), (1, None)]
        );
        assert_eq!(t.tags, ["kv_cache", "activations"]);
        // Without a tag, the page's data is as it was: neither key.
        let plain = history(&[(0, None, 1 << 20, 1)], 10 * MS);
        let json = serde_json::to_string(&timeline(&plain, "p[1]".into(), &site).unwrap()).unwrap();
        assert!(
            !json.contains("\"tags\"") && !json.contains("band_tags"),
            "{json}"
        );
    }
}
