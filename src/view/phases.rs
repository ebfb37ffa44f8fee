//! The program's phases on the view's active-memory timeline: each NVTX range and
//! `cuguard.phase` of the history ([`cuguard_history::phases`]) as a band above the memory,
//! labelled as `summary --by phase` labels it (`step #3`), with its span and its peak.
//!
//! Bounded whatever the number of ranges: at most [`MAX_PHASES`] bands, the longest first
//! (an enclosing range is at least as long as those inside it, so the outer ones are kept), in
//! at most [`MAX_PHASE_LANES`] lanes; the page says how many were left out.
//!
//! Lanes: one per thread and nesting depth (a thread's pushed ranges open around the phase), in
//! the order the threads first began one, the outermost first; ranges that overlap at the same
//! depth (started ranges, `nvtxRangeStart`) take the next free lane of their depth.
//!
//! Peaks are counted as `summary --by phase` counts them: live memory, pinned host memory aside,
//! the most it reached while the phase ran (what was live as it began included), when first
//! reached. [`Peaks`] gathers them from the timeline's sweep in memory that grows with the bands
//! drawn, never with the history.

use std::collections::HashMap;

use cuguard_history::phases::{Phase, Phases};
use serde::Serialize;

use super::limits::{MAX_PHASE_LANES, MAX_PHASES};

/// One phase drawn: one occurrence of a named range.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseBand {
    /// `step #3` (its payload when it has one, else its occurrence).
    pub label: String,
    /// When it began, ms since process start.
    pub start_ms: f64,
    /// When it ended; `None`: it never ended (drawn to the history's end).
    pub end_ms: Option<f64>,
    /// Its lane, from 0 (the top).
    pub lane: u32,
    /// The thread that began it, and how many of its ranges were open around it.
    pub thread: u32,
    pub depth: u32,
    /// The most live memory while it ran, and when first reached (ms).
    pub peak_bytes: u64,
    pub peak_ms: f64,
}

/// The phases chosen to be drawn, by start, each with its lane; and how many were left out.
pub struct Chosen {
    list: Vec<(Phase, u32)>,
    /// The end of a phase never ended: the timeline's end (ns).
    to: u64,
    pub omitted: usize,
}

impl Chosen {
    /// The phases of `phases` to draw: at most [`MAX_PHASES`], the longest first (a phase never
    /// ended runs to `to`), in at most [`MAX_PHASE_LANES`] lanes.
    pub fn new(phases: &Phases, to: u64) -> Chosen {
        let span = |p: &Phase| p.end_ns.unwrap_or(to).saturating_sub(p.start_ns);
        let mut order: Vec<usize> = (0..phases.list.len()).collect();
        if order.len() > MAX_PHASES {
            let list = &phases.list;
            // The longest, the earliest among equals (`list` is by start).
            order.select_nth_unstable_by(MAX_PHASES - 1, |&a, &b| {
                span(&list[b]).cmp(&span(&list[a])).then(a.cmp(&b))
            });
            order.truncate(MAX_PHASES);
            order.sort_unstable();
        }
        let kept: Vec<Phase> = order.iter().map(|&i| phases.list[i]).collect();
        let lanes = lanes(&kept, to);
        let mut omitted = phases.list.len() - kept.len();
        let mut list = Vec::with_capacity(kept.len());
        for (p, lane) in kept.into_iter().zip(lanes) {
            match lane {
                Some(l) => list.push((p, l)),
                None => omitted += 1,
            }
        }
        Chosen { list, to, omitted }
    }

    /// Where the [`Peaks`] of these phases are gathered.
    pub fn peaks(&self) -> Peaks {
        Peaks::new(
            self.list
                .iter()
                .map(|(p, _)| (p.start_ns, p.end_ns.unwrap_or(self.to))),
        )
    }

    /// The bands, by start, with their peaks ([`Peaks::finish`]ed); `ms` converts ns.
    pub fn bands(
        self,
        phases: &Phases,
        peaks: &[(u64, u64)],
        ms: impl Fn(u64) -> f64,
    ) -> Vec<PhaseBand> {
        self.list
            .iter()
            .zip(peaks)
            .map(|(&(p, lane), &(peak_bytes, peak_ns))| PhaseBand {
                label: crate::history::phases::label(phases, &p),
                start_ms: ms(p.start_ns),
                end_ms: p.end_ns.map(&ms),
                lane,
                thread: p.thread,
                depth: p.depth,
                peak_bytes,
                peak_ms: ms(peak_ns),
            })
            .collect()
    }
}

/// Each phase's lane (`None`: past [`MAX_PHASE_LANES`]): per thread (in the order they first
/// began a phase) and depth, the first lane of that depth free at its start. `kept` is by start.
fn lanes(kept: &[Phase], to: u64) -> Vec<Option<u32>> {
    let mut threads: HashMap<u32, usize> = HashMap::new();
    // Per (thread's order, depth): each of its lanes' end so far.
    let mut ends: HashMap<(usize, u32), Vec<u64>> = HashMap::new();
    let mut at: Vec<((usize, u32), usize)> = Vec::with_capacity(kept.len());
    for p in kept {
        let n = threads.len();
        let thread = *threads.entry(p.thread).or_insert(n);
        let lanes = ends.entry((thread, p.depth)).or_default();
        let end = p.end_ns.unwrap_or(to);
        let sub = match lanes.iter().position(|&e| e <= p.start_ns) {
            Some(s) => {
                lanes[s] = end;
                s
            }
            None => {
                lanes.push(end);
                lanes.len() - 1
            }
        };
        at.push(((thread, p.depth), sub));
    }
    // The lanes in order: by thread, depth, then each depth's own.
    let mut groups: Vec<(usize, u32)> = ends.keys().copied().collect();
    groups.sort_unstable();
    let mut first: HashMap<(usize, u32), usize> = HashMap::new();
    let mut next = 0usize;
    for g in groups {
        first.insert(g, next);
        next += ends[&g].len();
    }
    at.into_iter()
        .map(|(g, sub)| {
            let lane = first[&g] + sub;
            (lane < MAX_PHASE_LANES).then_some(lane as u32)
        })
        .collect()
}

/// The peaks of the phases drawn, gathered from the changes of live memory in time order.
///
/// The phases' starts and ends cut time into points and the gaps between them; each keeps the
/// most live memory reached in it (and when first), and each point what was live just before
/// it. A phase's peak is the most of what was live as it began and of its points and gaps.
pub struct Peaks {
    /// Each phase's first and last point.
    spans: Vec<(usize, usize)>,
    /// The distinct starts and ends, ascending.
    points: Vec<u64>,
    /// What was live before the first change at or after each point (those reached so far).
    before: Vec<u64>,
    /// Slot `2i`: the gap before point `i`; `2i + 1`: point `i` itself. The most live bytes
    /// after a change in it, and when first.
    slots: Vec<(u64, u64)>,
}

impl Peaks {
    /// Peaks of the phases spanning `spans` (start ns, end ns), in this order.
    fn new(spans: impl Iterator<Item = (u64, u64)> + Clone) -> Peaks {
        let mut points: Vec<u64> = spans.clone().flat_map(|(s, e)| [s, e]).collect();
        points.sort_unstable();
        points.dedup();
        let index = |t: u64| points.binary_search(&t).expect("a phase's own point");
        let spans = spans.map(|(s, e)| (index(s), index(e))).collect();
        let slots = vec![(0, 0); 2 * points.len() + 1];
        Peaks {
            spans,
            before: Vec::with_capacity(points.len()),
            points,
            slots,
        }
    }

    /// A change at `t` (ns) took live memory from `before` to `after` bytes.
    pub fn step(&mut self, t: u64, before: u64, after: u64) {
        if self.points.is_empty() {
            return;
        }
        while self.before.len() < self.points.len() && self.points[self.before.len()] <= t {
            self.before.push(before);
        }
        let i = self.points.partition_point(|&p| p < t);
        let slot = if self.points.get(i) == Some(&t) {
            2 * i + 1
        } else {
            2 * i
        };
        if after > self.slots[slot].0 {
            self.slots[slot] = (after, t);
        }
    }

    /// Each phase's peak (bytes, ns), with `live` the bytes live at the end.
    pub fn finish(mut self, live: u64) -> Vec<(u64, u64)> {
        self.before.resize(self.points.len(), live);
        self.spans
            .iter()
            .map(|&(s, e)| {
                let mut best = (self.before[s], self.points[s]);
                for &slot in &self.slots[2 * s + 1..=2 * e + 1] {
                    if slot.0 > best.0 {
                        best = slot;
                    }
                }
                best
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(thread: u32, start: u64, end: Option<u64>, depth: u32, started: bool) -> Phase {
        Phase {
            name: 1,
            occurrence: 1,
            thread,
            start_ns: start,
            end_ns: end,
            payload: None,
            depth,
            started,
        }
    }

    #[test]
    fn lanes_follow_threads_and_depths_and_overlapping_ranges_take_the_next() {
        let kept = [
            phase(5, 0, Some(10), 0, false),  // load
            phase(5, 20, Some(90), 0, true),  // epoch (started)
            phase(5, 30, Some(40), 0, false), // step #1, inside epoch: the next lane
            phase(5, 32, Some(38), 1, false), // forward
            phase(9, 33, None, 0, false),     // another thread's
            phase(5, 50, Some(60), 0, false), // step #2
            phase(5, 52, Some(58), 1, false), // forward
        ];
        assert_eq!(lanes(&kept, 100), [0, 0, 1, 2, 3, 1, 2].map(Some).to_vec());
    }

    #[test]
    fn past_the_most_phases_the_longest_are_drawn_and_the_rest_counted() {
        let mut phases = Phases::default();
        phases.names.insert(1, "step".into());
        // A long epoch around 5,000 steps of 10 ns, one of them longer.
        phases.list.push(phase(1, 0, Some(100_000), 0, false));
        for i in 0..5_000u64 {
            let len = if i == 4_321 { 50 } else { 10 };
            let mut p = phase(1, 1 + i * 20, Some(1 + i * 20 + len), 1, false);
            p.occurrence = i as u32 + 1;
            phases.list.push(p);
        }
        let chosen = Chosen::new(&phases, 100_000);
        assert_eq!(chosen.list.len(), MAX_PHASES);
        assert_eq!(chosen.omitted, 5_001 - MAX_PHASES);
        // The epoch, the long step, then the earliest steps, by start.
        assert_eq!(chosen.list[0].0.start_ns, 0);
        assert!(chosen.list.iter().any(|(p, _)| p.occurrence == 4_322));
        assert_eq!(chosen.list[1].0.occurrence, 1);
        assert!(
            chosen
                .list
                .windows(2)
                .all(|w| w[0].0.start_ns <= w[1].0.start_ns)
        );
        let peaks = chosen.peaks().finish(0);
        let bands = chosen.bands(&phases, &peaks, |ns| ns as f64 / 1e6);
        assert_eq!(bands[1].label, "step #1");
        assert_eq!((bands[0].lane, bands[1].lane), (0, 1));
    }

    #[test]
    fn a_phase_s_peak_counts_what_was_live_as_it_began_and_each_change_in_it() {
        let spans = [(10, 20), (20, 30), (12, 14), (40, 50)];
        let mut peaks = Peaks::new(spans.iter().copied());
        // 100 live before 10; at 12 up to 300, at 13 down to 50; at 20 up to 80 then 120 at
        // 25; 200 at 35 (between phases); nothing from 40 on.
        for (t, before, after) in [
            (5, 0, 100),
            (12, 100, 300),
            (13, 300, 50),
            (20, 50, 80),
            (25, 80, 120),
            (35, 120, 200),
        ] {
            peaks.step(t, before, after);
        }
        assert_eq!(
            peaks.finish(200),
            [(300, 12), (120, 25), (300, 12), (200, 40)]
        );
    }
}
