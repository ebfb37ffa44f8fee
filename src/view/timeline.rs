//! The view's active-memory timeline, from a process's history: live device memory over the run
//! stacked by site, the largest allocations as bands over time, and what was live at any moment.
//!
//! Levels of detail, computed here so that the page stays small and opens at once whatever the
//! history's size:
//! - the sites: the [`SERIES`] sites with the most bytes × time, each its own colour, and the
//!   rest as `other`. Inside a framework's cache whose blocks were recorded (PyTorch's
//!   tensors), a segment's bytes are its blocks', each at its own site, and the rest the
//!   series [`IDLE`] (before `other`): the cache's memory freed and kept for reuse;
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
/// The series of a framework cache's idle bytes: its segments' bytes no block held.
pub const IDLE: &str = "idle in a cache: freed, kept for reuse";

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
    let idle = weighed.cache.then(|| other - 1);
    let chosen = Chosen::new(&meta.phases, to);
    let mut peaks = chosen.peaks();
    let lanes = Lanes {
        n: series.len(),
        of: &series_of,
        idle,
    };
    let (levels, live) = sweep(history, (from, to), &lanes, &mut peaks)?;
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
    /// Whether a framework cache's blocks were recorded (then its idle bytes are a series).
    cache: bool,
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
    let mut cache = false;
    // The last step's moment: when a segment is found to be a cache's (the step says no time).
    let mut now = 0u64;
    // Bytes × time from `t` to `to` (none past it).
    let rest = |size: u64, t: u64| size as f64 * to.saturating_sub(t) as f64;
    history.walk(&mut |step| match step {
        Step::Restated(b) | Step::Made(b) if drawn(&b) => {
            now = b.start_ns;
            allocations += 1;
            let (w, new) = weight.slot(b.stack);
            if new {
                stacks.push(b.stack);
            }
            // A segment already the cache's where the read began is drawn as idle.
            if !b.carved {
                *w += rest(b.size, b.start_ns);
            }
            largest.made(&b);
        }
        Step::Ended(b) if drawn(&b) => {
            now = b.end_ns.unwrap_or(now);
            if !b.carved {
                *weight.slot(b.stack).0 -= rest(b.size, b.end_ns.unwrap_or(to).max(b.start_ns));
            }
            largest.ended(&b);
        }
        // From now on its bytes are its blocks' and the cache's idle.
        Step::Carved(b) if drawn(&b) => {
            *weight.slot(b.stack).0 -= rest(b.size, now.max(b.start_ns));
        }
        Step::CacheMade(b) => {
            now = b.start_ns;
            cache = true;
            let (w, new) = weight.slot(b.stack);
            if new {
                stacks.push(b.stack);
            }
            *w += rest(b.size, b.start_ns);
        }
        Step::CacheEnded(b) => {
            now = b.end_ns.unwrap_or(now);
            *weight.slot(b.stack).0 -= rest(b.size, b.end_ns.unwrap_or(to).max(b.start_ns));
        }
        Step::Tagged(b) if drawn(&b) => largest.tagged(&b),
        _ => {}
    })?;
    Ok(Weighed {
        cache,
        weight,
        stacks,
        allocations,
        largest,
    })
}

/// The series: the stacks grouped into sites by label, the [`SERIES`] heaviest sites each one,
/// [`IDLE`] when a cache's blocks were recorded, and `other` last for the rest; with each
/// stack's series.
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
    let other = series.len() + usize::from(weighed.cache);
    for v in series_of_site.iter_mut() {
        if *v == SERIES {
            *v = other;
        }
    }
    if weighed.cache {
        series.push(SiteInfo {
            label: IDLE.into(),
            stack: Vec::new(),
        });
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

/// The series the sweep adds bytes to: how many, each stack's, and the cache's idle one.
struct Lanes<'a> {
    n: usize,
    of: &'a dyn Fn(u32) -> usize,
    idle: Option<usize>,
}

/// A change at one moment: (ns, bytes live in all, series, bytes of the series, bytes of
/// the cache's blocks). A cache block made or ended moves bytes between the cache's idle series
/// and its own, the total unchanged.
type Change = (u64, i64, usize, i64, i64);

/// The second walk: the steps in time order, frees first at one moment, swept into the columns
/// of the whole span `(from, to)` and of each of its [`WINDOWS`] windows, by the series of
/// `lanes`, and into the phases' `peaks`; with the bytes live at the end.
fn sweep<S: Source>(
    history: &History<S>,
    (from, to): (u64, u64),
    lanes: &Lanes<'_>,
    peaks: &mut Peaks,
) -> Result<(Vec<Level>, u64), cuguard_history::Error> {
    let n = lanes.n;
    // Each window's columns before its first step hold what was live when it began.
    let span = (to - from) as f64;
    let window = span / WINDOWS as f64;
    let mut level0 = Sweep::new(from as f64, span, n);
    let mut fine: Vec<Sweep> = (0..WINDOWS)
        .map(|w| Sweep::new(from as f64 + w as f64 * window, window, n))
        .collect();
    let mut live = vec![0i64; n];
    let mut total = 0i64;
    let mut tensors = 0i64;
    // The first window's columns begin empty; each later one from what was live at its start.
    let mut seeded = 1;
    let mut moment: Vec<Change> = Vec::new();
    let mut settle = |moment: &mut Vec<Change>, live: &mut Vec<i64>, total: &mut i64| {
        moment.sort_by_key(|&(_, d, ..)| d);
        for (t, d, k, dk, dt) in moment.drain(..) {
            while seeded < WINDOWS && (t as f64) >= from as f64 + seeded as f64 * window {
                fine[seeded].seed(live);
                seeded += 1;
            }
            live[k] += dk;
            peaks.step(t, (*total).max(0) as u64, (*total + d).max(0) as u64);
            *total += d;
            tensors += dt;
            let t = t.clamp(from, to);
            level0.note(t as f64, (*total, tensors), live);
            let w = (((t - from) as f64 / window) as usize).min(WINDOWS - 1);
            fine[w].note(t as f64, (*total, tensors), live);
        }
    };
    // The last step's moment: when a segment is found to be a cache's (the step says no time).
    let mut now = from;
    history.walk(&mut |step| {
        let size = |b: &Block| b.size as i64;
        // A cache's segment is its idle series' (its blocks move bytes out of it).
        let lane = |b: &Block| match lanes.idle {
            Some(idle) if b.carved => idle,
            _ => (lanes.of)(b.stack),
        };
        let changes: [Option<Change>; 2] = match (step, lanes.idle) {
            (Step::Restated(b) | Step::Made(b), _) if drawn(&b) => {
                [Some((b.start_ns, size(&b), lane(&b), size(&b), 0)), None]
            }
            (Step::Ended(b), _) if drawn(&b) => {
                let t = b.end_ns.unwrap_or(b.start_ns);
                [Some((t, -size(&b), lane(&b), -size(&b), 0)), None]
            }
            (Step::Carved(b), Some(idle)) if drawn(&b) => {
                let t = now.max(b.start_ns);
                [
                    Some((t, 0, (lanes.of)(b.stack), -size(&b), 0)),
                    Some((t, 0, idle, size(&b), 0)),
                ]
            }
            (Step::CacheMade(b), Some(idle)) => [
                Some((b.start_ns, 0, idle, -size(&b), 0)),
                Some((b.start_ns, 0, (lanes.of)(b.stack), size(&b), size(&b))),
            ],
            (Step::CacheEnded(b), Some(idle)) => {
                let t = b.end_ns.unwrap_or(b.start_ns);
                [
                    Some((t, 0, (lanes.of)(b.stack), -size(&b), -size(&b))),
                    Some((t, 0, idle, size(&b), 0)),
                ]
            }
            _ => return,
        };
        for c in changes.into_iter().flatten() {
            now = c.0;
            if moment.first().is_some_and(|m| m.0 != c.0) {
                settle(&mut moment, &mut live, &mut total);
            }
            moment.push(c);
        }
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
    /// Per column, its moment's (bytes live, bytes in a cache's blocks).
    best: Vec<(i64, i64)>,
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
            best: vec![(i64::MIN, i64::MIN); COLUMNS],
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

    /// The state after a change at `t`: the bytes live in all and in a cache's blocks, and
    /// by series.
    fn note(&mut self, t: f64, total: (i64, i64), live: &[i64]) {
        let c = self.column(t);
        self.seen[c] = true;
        for (k, v) in live.iter().enumerate() {
            self.after[c * self.n + k] = (*v).max(0) as u64;
        }
        // A column's moment has the most bytes, and of those the most in a cache's blocks
        // (as the history's peak: a segment just taken, its tensor not yet carved, is not
        // the peak). At one moment, the later state is the settled one: frees come first,
        // so a moment that passed the column's best ends at or above where it passed it.
        if total > self.best[c] || t == self.at[c] {
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
mod tests;
