//! The program's phases in a history, command side: `summary --by phase` (each phase name's
//! peak, what its occurrences allocated and what stayed, and each occurrence's), and the
//! moments a phase names: `phase:NAME[#N]` for `--at` (the occurrence's peak) and `--between`
//! (the occurrence itself: what it kept).
//!
//! Phases are NVTX ranges and `cuguard.phase`s, as the history records them
//! ([`cuguard_history::phases`]). Live memory is counted as the history's peak counts it: the
//! program's allocations on every device together, pinned host memory aside.

use std::collections::HashMap;

use cuguard_format::MemoryKind;
use cuguard_history::bounded::Step;
use cuguard_history::phases::{Odd, Phase, Phases};
use cuguard_history::replay::{Block, Replay};
use serde::Serialize;

use super::Opened;
use super::moment::{LostWindow, merged_windows};
use crate::input::InputError;

/// What a moment's text names a phase by: `phase:NAME` or `phase:NAME#N`.
pub const PREFIX: &str = "phase:";

/// A phase asked for by name: `NAME` (its first occurrence) or `NAME#N` (its `N`th from 1, or
/// the one whose NVTX payload is `N` where its ranges carry payloads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Asked {
    pub name: String,
    pub n: Option<u64>,
}

impl Asked {
    /// `phase:NAME[#N]`, or `None` for text that names no phase.
    pub fn parse(text: &str) -> Option<Result<Asked, String>> {
        let spec = text.trim().strip_prefix(PREFIX)?;
        let (name, n) = match spec.rsplit_once('#') {
            Some((name, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                match n.parse::<u64>() {
                    Ok(n) => (name, Some(n)),
                    Err(_) => return Some(Err(format!("{text:?}: the occurrence is too large"))),
                }
            }
            _ => (spec, None),
        };
        if name.is_empty() {
            return Some(Err(format!(
                "{text:?} names no phase: phase:NAME or phase:NAME#N (`summary --by phase` lists them)"
            )));
        }
        Some(Ok(Asked {
            name: name.to_string(),
            n,
        }))
    }

    /// The phase asked for, or why there is none.
    pub fn find<'a>(&self, phases: &'a Phases) -> Result<&'a Phase, String> {
        if let Some(p) = phases.find(&self.name, self.n) {
            return Ok(p);
        }
        let count = phases.named(&self.name).count();
        Err(match (count, self.n) {
            (0, _) => {
                let mut known: Vec<&str> = phases.list.iter().map(|p| phases.name(p)).collect();
                known.sort_unstable();
                known.dedup();
                if phases.list.is_empty() {
                    format!(
                        "no phase {:?}: this history has no phases (NVTX ranges or cuguard.phase; \
                         `cuguard run` makes the shim NVTX's tool unless NVTX_INJECTION64_PATH names another)",
                        self.name
                    )
                } else {
                    format!(
                        "no phase {:?} in this history; it has {}",
                        self.name,
                        crate::wording::one_line(&known.join(", "))
                    )
                }
            }
            (_, Some(n)) if phases.named(&self.name).any(|p| p.payload.is_some()) => format!(
                "no occurrence of {:?} carries the number {n} (its ranges carry NVTX payloads: #N names the payload)",
                self.name
            ),
            (count, Some(n)) => format!(
                "{:?} occurred {count} time{} in this history: #{n} is not one of them",
                self.name,
                if count == 1 { "" } else { "s" }
            ),
            (_, None) => unreachable!("a name that occurs has a first occurrence"),
        })
    }
}

/// `--between phase:NAME#N PATH`: the option takes one or two values, so the path after a phase
/// lands in it; moved back to the paths (`between` is left with the phase alone).
pub fn untangle(between: &mut Option<Vec<String>>, paths: &mut Vec<std::path::PathBuf>) {
    if let Some(values) = between
        && values.len() == 2
        && values[0].trim_start().starts_with(PREFIX)
    {
        let path = values.pop().expect("two values");
        paths.insert(0, path.into());
    }
}

/// A phase for people: `step #3` (its payload when it has one, else its occurrence).
pub fn label(phases: &Phases, p: &Phase) -> String {
    format!(
        "{} #{}",
        phases.name(p),
        p.payload.unwrap_or(u64::from(p.occurrence))
    )
}

/// `summary --by phase`'s answer.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseSummary {
    pub process: String,
    /// What the history covers; `complete` false when events were lost (a figure may then be
    /// off) or the history was cut short.
    pub span: super::moment::Span,
    /// By name, the highest peak first.
    pub names: Vec<NameRow>,
    /// What did not pair: pops with nothing pushed, ends never started, ranges never ended.
    pub odd: OddCounts,
}

/// One phase name.
#[derive(Clone, Debug, Serialize)]
pub struct NameRow {
    pub name: String,
    pub occurrences: usize,
    /// The highest peak of its occurrences, and which.
    pub peak_bytes: u64,
    pub peak_occurrence: String,
    /// Bytes its occurrences allocated, in all.
    pub allocated_bytes: u64,
    /// Bytes its occurrences allocated that were still live at each one's end, in all.
    pub stayed_bytes: u64,
    /// Its occurrences, in the order they began (at most `top`).
    pub list: Vec<OccurrenceRow>,
    /// Occurrences not listed.
    pub more: usize,
}

/// One occurrence of a phase.
#[derive(Clone, Debug, Serialize)]
pub struct OccurrenceRow {
    /// `step #3`.
    pub label: String,
    pub occurrence: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<u64>,
    pub thread: u32,
    pub start_ms: f64,
    /// `None`: it never ended (the figures run to the history's end).
    pub end_ms: Option<f64>,
    /// The most live memory while it ran, and when first reached.
    pub peak_bytes: u64,
    pub peak_ms: f64,
    /// Live when it began.
    pub live_at_start_bytes: u64,
    pub allocated_bytes: u64,
    pub allocations: u64,
    /// What it allocated still live at its end: what it kept.
    pub stayed_bytes: u64,
}

/// [`Odd`], for the answer.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct OddCounts {
    pub pops_without_push: u64,
    pub ends_without_start: u64,
    pub never_ended: u64,
    pub ended_on_another_thread: u64,
    pub not_read: u64,
}

impl From<Odd> for OddCounts {
    fn from(o: Odd) -> OddCounts {
        OddCounts {
            pops_without_push: o.pops_without_push,
            ends_without_start: o.ends_without_start,
            never_ended: o.never_ended,
            ended_on_another_thread: o.ended_elsewhere,
            not_read: o.unread,
        }
    }
}

/// What one occurrence gathers as the history is walked.
#[derive(Clone, Copy, Default)]
struct Tally {
    peak: u64,
    peak_ns: u64,
    /// Cache-block bytes (a cache's tensors) live at the peak: of the moments with the most
    /// live memory, the peak is the first with the most of them (as the history's peak).
    peak_tensors: u64,
    at_start: u64,
    allocated: u64,
    allocations: u64,
    stayed: u64,
}

/// Whether a block counts as live memory (the history's peak's rule).
fn counted(b: &Block) -> bool {
    b.memory != MemoryKind::HostPinned
}

/// Walks the history once, in time order, keeping each open occurrence's tally.
fn tally(opened: &Opened, phases: &Phases) -> Result<Vec<Tally>, InputError> {
    let end_ns = opened.meta().ends_ns;
    let list = &phases.list;
    let ends: Vec<u64> = list.iter().map(|p| p.end_ns.unwrap_or(end_ns)).collect();
    let mut tallies = vec![Tally::default(); list.len()];
    // Phases by start (the list is), then those open: begun, not yet ended.
    let mut next = 0usize;
    let mut open: Vec<usize> = Vec::new();
    let mut live = 0u64;
    let mut tensors = 0u64;
    let mut advance =
        |t: u64, (live, tensors): (u64, u64), open: &mut Vec<usize>, tallies: &mut [Tally]| {
            // Phases that ended before `t` close with the memory as it stood; those begun by `t`
            // open with it.
            open.retain(|&i| ends[i] >= t);
            while next < list.len() && list[next].start_ns <= t {
                // Nothing happened since the last event: what is live now was live when it began
                // (and all through it, for a phase that also ended before `t`).
                let tl = &mut tallies[next];
                tl.at_start = live;
                tl.peak = live;
                tl.peak_ns = list[next].start_ns;
                tl.peak_tensors = tensors;
                if ends[next] >= t {
                    open.push(next);
                }
                next += 1;
            }
        };
    let mut visit = |step: Step| {
        let (t, b, made) = match step {
            Step::Restated(b) => {
                if counted(&b) {
                    live += b.size;
                }
                return;
            }
            Step::Made(b) => (b.start_ns, b, true),
            Step::Ended(b) => (b.end_ns.unwrap_or(b.start_ns), b, false),
            Step::CacheMade(b) | Step::CacheEnded(b) => {
                let t = b.end_ns.unwrap_or(b.start_ns);
                advance(t, (live, tensors), &mut open, &mut tallies);
                if b.end_ns.is_some() {
                    tensors = tensors.saturating_sub(b.size);
                    return;
                }
                tensors += b.size;
                for &i in &open {
                    let tl = &mut tallies[i];
                    if live == tl.peak && tensors > tl.peak_tensors {
                        tl.peak_tensors = tensors;
                        tl.peak_ns = t;
                    }
                }
                return;
            }
            _ => return,
        };
        advance(t, (live, tensors), &mut open, &mut tallies);
        if !counted(&b) {
            return;
        }
        if made {
            live += b.size;
            for &i in &open {
                let tl = &mut tallies[i];
                tl.allocated += b.size;
                tl.allocations += 1;
                tl.stayed += b.size;
                if live > tl.peak {
                    tl.peak = live;
                    tl.peak_ns = t;
                    tl.peak_tensors = tensors;
                }
            }
        } else {
            live = live.saturating_sub(b.size);
            for &i in &open {
                // Made while it was open, gone before it ended: it did not stay.
                if b.start_ns >= list[i].start_ns && t <= ends[i] {
                    tallies[i].stayed = tallies[i].stayed.saturating_sub(b.size);
                }
            }
        }
    };
    opened
        .history
        .walk(&mut visit)
        .map_err(|e| opened.invalid(e))?;
    advance(u64::MAX, (live, tensors), &mut open, &mut tallies);
    Ok(tallies)
}

/// `summary --by phase` of `opened`: at most `top` occurrences listed per name.
pub fn summary(opened: &Opened, process: String, top: usize) -> Result<PhaseSummary, InputError> {
    let meta = opened.meta();
    let phases = &meta.phases;
    let tallies = tally(opened, phases)?;
    let mut names: HashMap<u32, NameRow> = HashMap::new();
    for (p, t) in phases.list.iter().zip(&tallies) {
        let label = label(phases, p);
        let row = names.entry(p.name).or_insert_with(|| NameRow {
            name: phases.name(p).to_string(),
            occurrences: 0,
            peak_bytes: 0,
            peak_occurrence: label.clone(),
            allocated_bytes: 0,
            stayed_bytes: 0,
            list: Vec::new(),
            more: 0,
        });
        row.occurrences += 1;
        if t.peak > row.peak_bytes {
            row.peak_bytes = t.peak;
            row.peak_occurrence = label.clone();
        }
        row.allocated_bytes += t.allocated;
        row.stayed_bytes += t.stayed;
        if row.list.len() < top {
            row.list.push(OccurrenceRow {
                label,
                occurrence: p.occurrence,
                payload: p.payload,
                thread: p.thread,
                start_ms: ms(p.start_ns),
                end_ms: p.end_ns.map(ms),
                peak_bytes: t.peak,
                peak_ms: ms(t.peak_ns),
                live_at_start_bytes: t.at_start,
                allocated_bytes: t.allocated,
                allocations: t.allocations,
                stayed_bytes: t.stayed,
            });
        } else {
            row.more += 1;
        }
    }
    let mut names: Vec<NameRow> = names.into_values().collect();
    names.sort_by(|a, b| b.peak_bytes.cmp(&a.peak_bytes).then(a.name.cmp(&b.name)));
    let lost: Vec<&cuguard_history::replay::Lost> = meta.lost.iter().collect();
    let lost_events: u64 = lost.iter().map(|l| l.count).sum();
    let windows: Vec<LostWindow> = merged_windows(&lost)
        .into_iter()
        .take(super::moment::MAX_WINDOWS)
        .collect();
    Ok(PhaseSummary {
        process,
        span: super::moment::Span {
            begins_ms: ms(meta.begins_ns),
            ends_ms: ms(meta.ends_ns),
            whole: meta.whole,
            stopped: opened.stopped.clone(),
            cache_blocks_unrecorded: opened.cache_blocks_unrecorded.clone(),
            allocations: opened.history.allocations() as usize,
            lost_events,
            lost_windows: windows,
            complete: lost_events == 0 && meta.whole,
        },
        names,
        odd: phases.odd.into(),
    })
}

/// The moment of the most live memory while `p` ran (its start when nothing grew), read from the
/// checkpoint before it.
pub fn peak_in(opened: &Opened, p: &Phase) -> Result<u64, InputError> {
    let end = p.end_ns.unwrap_or(opened.meta().ends_ns);
    let replay = opened
        .history
        .window(p.start_ns, end)
        .map_err(|e| opened.invalid(e))?;
    Ok(peak_between(&replay, p.start_ns, end))
}

/// The moment of the most live memory in `[start, end]` (`start` when nothing grew), from
/// `replay`'s blocks (those neither live at `start` nor made in the span are passed over). Frees
/// first at one moment, as the history's peak counts; of the moments with the most, the first
/// with the most cache-block bytes (a cache's tensors), as the history's peak chooses.
pub fn peak_between(replay: &Replay, start: u64, end: u64) -> u64 {
    let mut steps: Vec<(u64, i64, i64)> = Vec::new();
    let (mut live, mut tensors) = (0i64, 0i64);
    let blocks = replay
        .blocks
        .iter()
        .filter(|b| counted(b))
        .map(|b| (b, false));
    for (b, cached) in blocks.chain(replay.cache_blocks.iter().map(|b| (b, true))) {
        let size = b.size as i64;
        let d = |sign: i64| {
            if cached {
                (0, sign * size)
            } else {
                (sign * size, 0)
            }
        };
        if b.live_at(start) {
            live += d(1).0;
            tensors += d(1).1;
        } else if b.start_ns > start && b.start_ns <= end {
            let (dl, dt) = d(1);
            steps.push((b.start_ns, dl, dt));
        } else {
            continue;
        }
        if let Some(e) = b.end_ns.filter(|&e| e > start && e <= end) {
            let (dl, dt) = d(-1);
            steps.push((e, dl, dt));
        }
    }
    steps.sort_unstable();
    let mut best = (start, live, tensors);
    for (t, dl, dt) in steps {
        live += dl;
        tensors += dt;
        if (live, tensors) > (best.1, best.2) {
            best = (t, live, tensors);
        }
    }
    best.0
}

/// Nanoseconds as milliseconds.
fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_asked_by_name_and_occurrence() {
        assert_eq!(Asked::parse("12s"), None);
        assert_eq!(
            Asked::parse("phase:step#12"),
            Some(Ok(Asked {
                name: "step".into(),
                n: Some(12)
            }))
        );
        assert_eq!(
            Asked::parse("phase:data#loader"),
            Some(Ok(Asked {
                name: "data#loader".into(),
                n: None
            }))
        );
        assert!(Asked::parse("phase:").unwrap().is_err());
        assert!(Asked::parse("phase:#3").unwrap().is_err());
    }
}
