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
//! - the [`BANDS`] largest allocations by size, each with its times, size and site: drawn as
//!   bands, listed when a moment is clicked.
//!
//! One sweep over the allocations' starts and ends in time order: O(n log n) time, and memory
//! of two steps per allocation plus the columns.

use std::collections::HashMap;

use cuguard_history::Memory;
use cuguard_history::replay::Replay;
use serde::Serialize;

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
    /// The largest allocations: `[start ms, end ms or -1 (live at the end), bytes, series]`.
    pub bands: Vec<(f64, f64, u64, usize)>,
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

/// The timeline of `replay`; `site` names a stack (`u32::MAX`: none) and groups stacks into
/// sites by its label.
pub fn timeline(replay: &Replay, process: String, site: &dyn Fn(u32) -> SiteInfo) -> Timeline {
    let blocks: Vec<&cuguard_history::replay::Block> = replay
        .blocks
        .iter()
        .filter(|b| b.memory != Memory::HostPinned)
        .collect();
    let (from, to) = (replay.begins_ns, replay.ends_ns.max(replay.begins_ns + 1));
    // Sites by label, and each one's bytes × time.
    let mut site_of_stack: HashMap<u32, usize> = HashMap::new();
    let mut sites: Vec<(SiteInfo, f64)> = Vec::new();
    let mut by_label: HashMap<String, usize> = HashMap::new();
    let mut block_site = Vec::with_capacity(blocks.len());
    for b in &blocks {
        let s = *site_of_stack.entry(b.stack).or_insert_with(|| {
            let info = site(b.stack);
            *by_label.entry(info.label.clone()).or_insert_with(|| {
                sites.push((info, 0.0));
                sites.len() - 1
            })
        });
        let end = b.end_ns.unwrap_or(to).max(b.start_ns);
        sites[s].1 += b.size as f64 * (end - b.start_ns) as f64;
        block_site.push(s);
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
    let n = series.len();

    // Steps in time order, frees first at one moment.
    let mut steps: Vec<(u64, i64, u16)> = Vec::with_capacity(blocks.len() * 2);
    for (b, &s) in blocks.iter().zip(&block_site) {
        let k = series_of_site[s] as u16;
        steps.push((b.start_ns, b.size as i64, k));
        if let Some(e) = b.end_ns {
            steps.push((e, -(b.size as i64), k));
        }
    }
    steps.sort_unstable_by_key(|&(t, d, _)| (t, d));

    let span = (to - from) as f64;
    let window = span / WINDOWS as f64;
    let mut level0 = Sweep::new(from as f64, span, n);
    let mut fine: Vec<Sweep> = (0..WINDOWS)
        .map(|w| Sweep::new(from as f64 + w as f64 * window, window, n))
        .collect();
    let mut live = vec![0i64; n];
    let mut total = 0i64;
    for &(t, d, k) in &steps {
        live[k as usize] += d;
        total += d;
        let t = t.clamp(from, to);
        level0.note(t as f64, total, &live);
        let w = (((t - from) as f64 / window) as usize).min(WINDOWS - 1);
        fine[w].note(t as f64, total, &live);
    }
    let mut levels = vec![level0.finish()];
    // A window's columns before its first step hold what was live when it began: the state
    // at each window's start, found by walking the steps once more.
    let mut state = vec![0i64; n];
    let mut i = 0;
    for (w, sweep) in fine.into_iter().enumerate() {
        let end = from as f64 + (w + 1) as f64 * window;
        let mut s = sweep;
        s.seed(&state);
        while i < steps.len() && (steps[i].0 as f64) < end {
            state[steps[i].2 as usize] += steps[i].1;
            i += 1;
        }
        levels.push(s.finish());
    }

    // The largest allocations, as bands.
    let mut idx: Vec<usize> = (0..blocks.len()).collect();
    if idx.len() > BANDS {
        idx.select_nth_unstable_by(BANDS, |&a, &b| blocks[b].size.cmp(&blocks[a].size));
        idx.truncate(BANDS);
    }
    idx.sort_by_key(|&i| blocks[i].start_ns);
    let bands = idx
        .iter()
        .map(|&i| {
            let b = blocks[i];
            (
                ms(b.start_ns),
                b.end_ns.map_or(-1.0, ms),
                b.size,
                series_of_site[block_site[i]],
            )
        })
        .collect();
    let peak = replay.peak(None);
    Timeline {
        process,
        begins_ms: ms(from),
        ends_ms: ms(to),
        series,
        levels,
        bands,
        allocations: blocks.len(),
        peak: (ms(peak.0), peak.1),
        lost_events: replay.lost_events(),
        lost: lost_windows(replay),
        whole: replay.whole,
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
    use cuguard_history::{Action, Chunk, Header, Memory, Raw, VERSION, kind, write_chunk};

    use super::*;

    /// A history of `blocks` (start ns, end ns, bytes, stack), 1 tsc tick = 1 ns.
    fn replay(blocks: &[(u64, Option<u64>, u64, u32)], end: u64) -> Replay {
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
                kind: kind(action, Memory::Device),
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
        write_chunk(&mut f, &Chunk::End { tsc: end });
        Replay::read(&[&f]).unwrap()
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
        let t = timeline(&replay(&blocks, 1000 * MS), "p[1]".into(), &site);
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
        let t = timeline(&replay(&blocks, 1_000_100 * US), "p[1]".into(), &site);
        assert_eq!(t.allocations, 1_000_000);
        assert_eq!(t.series.len(), SERIES + 1);
        assert_eq!(t.bands.len(), BANDS);
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.len() < 4 << 20, "{} bytes", json.len());
    }
}
