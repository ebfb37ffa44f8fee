//! What a replay answers ([`Replayed`]): the process and device replayed, how much of its run
//! the history holds, and one [`Outcome`] per allocator (per capacity): it fits, or the request
//! it fails at, named by its site.

use serde::Serialize;

use super::find::Found;
use super::requests::Requests;
use super::run::Instance;
use crate::history::{Opened, span_text, stack_key};
use crate::sites::SiteIndex;

/// A replay's answer; `--format json` writes it as it is (see [`super::json::Json`]).
#[derive(Clone, Debug, Serialize)]
pub struct Replayed {
    /// The PATH given.
    pub source: String,
    /// The process, for people: `train[4242]`.
    pub process: String,
    /// `"capacity"` (`--capacity`) or `"smallest"` (`--find-capacity`).
    pub question: &'static str,
    /// The device replayed; `null` when the history allocates on none.
    pub device: Option<u32>,
    /// Its memory as the report records it; `null` for a history file alone.
    pub device_total_bytes: Option<u64>,
    /// Requests replayed: allocations and refusals.
    pub requests: u64,
    /// Of them, the refusals the run met.
    pub refusals: u64,
    /// Of them, blocks inside a framework's cache (PyTorch's tensors), replayed where the
    /// history holds them, in place of the cache's segments that held them.
    pub cache_blocks: u64,
    /// The cache's segments left out for their blocks.
    pub cache_segments: u64,
    /// The most the program held live at once (requests' sizes).
    pub peak_live_bytes: u64,
    /// The moments the history spans, ms since the process started.
    pub begins_ms: f64,
    pub ends_ms: f64,
    /// Why the history ends before the process did (cut short, killed, the recording
    /// stopped); `null` when it ends whole.
    pub ends_early: Option<String>,
    /// What else to know of the replay, a line each.
    pub notes: Vec<String>,
    /// One per allocator per capacity (by capacity, then allocator).
    pub allocators: Vec<Outcome>,
}

/// One allocator at one capacity (or its smallest capacity).
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub name: &'static str,
    /// The capacity replayed; with `--find-capacity` the smallest that fits, `null` when
    /// none does up to 1 PiB.
    pub capacity_bytes: Option<u64>,
    pub fits: bool,
    /// The most device memory it held (up to its failure).
    pub peak_reserved_bytes: u64,
    /// Where it fails.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failed>,
}

/// The request an allocator could not serve.
#[derive(Clone, Debug, Serialize)]
pub struct Failed {
    /// The request's number among those replayed, from 1 (allocations and refusals in time
    /// order).
    pub event: u64,
    /// When it was asked, ms since the process started.
    pub time_ms: f64,
    pub asked_bytes: u64,
    /// Its site, for people (`main (limit.c:55)`).
    pub site: String,
    /// The site's `file:line`, when known.
    pub location: Option<String>,
    /// What the program held live when it asked.
    pub live_bytes: u64,
    /// What the allocator held idle then: bytes, in how many pieces, the largest.
    pub idle_bytes: u64,
    pub idle_pieces: u64,
    pub largest_idle_piece_bytes: u64,
    /// Its stack in the history, to name it.
    #[serde(skip)]
    stack: u32,
}

impl Outcome {
    /// An instance after the walk.
    pub fn of(i: &Instance) -> Outcome {
        Outcome {
            name: i.allocator.name(),
            capacity_bytes: Some(i.capacity),
            fits: i.failure.is_none(),
            peak_reserved_bytes: i.peak_reserved(),
            failure: i.failure.map(|f| Failed {
                event: f.asked.request.id,
                time_ms: ms(f.asked.time_ns),
                asked_bytes: f.asked.request.size,
                site: String::new(),
                location: None,
                live_bytes: f.live_bytes,
                idle_bytes: f.idle.bytes,
                idle_pieces: f.idle.pieces,
                largest_idle_piece_bytes: f.idle.largest,
                stack: f.asked.stack,
            }),
        }
    }

    /// An allocator's smallest capacity.
    pub fn found(f: &Found) -> Outcome {
        Outcome {
            name: f.allocator.name(),
            capacity_bytes: f.capacity,
            fits: f.capacity.is_some(),
            peak_reserved_bytes: f.peak_reserved,
            failure: None,
        }
    }
}

/// Milliseconds, to the hundredth.
fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e4).round() / 100.0
}

/// What the walk read, for the answer.
pub struct Walked<'a> {
    pub source: String,
    pub opened: &'a Opened,
    pub requests: &'a Requests,
    pub find: bool,
}

/// The answer: `outcomes` with their failures' sites named, and what the history says of
/// itself.
pub fn answer(w: &Walked<'_>, mut outcomes: Vec<Outcome>) -> Replayed {
    let stacks = outcomes
        .iter()
        .filter_map(|o| o.failure.as_ref().map(|f| f.stack));
    let report = w.opened.names_of(stacks);
    let sites = SiteIndex::new(&report);
    for f in outcomes.iter_mut().filter_map(|o| o.failure.as_mut()) {
        let site = sites.site(stack_key(f.stack));
        f.site = site.label();
        f.location = site.location.clone();
    }
    let meta = w.opened.meta();
    let device = w.requests.device();
    Replayed {
        source: w.source.clone(),
        process: report.process_name(),
        question: if w.find { "smallest" } else { "capacity" },
        device,
        device_total_bytes: device.and_then(|d| {
            w.opened
                .devices
                .iter()
                .find(|x| x.ordinal == d)
                .map(|x| x.total_bytes)
        }),
        requests: w.requests.count(),
        refusals: w.requests.refusals,
        cache_blocks: w.requests.cache_blocks,
        cache_segments: w.requests.cache_segments,
        peak_live_bytes: w.requests.peak_live,
        begins_ms: ms(meta.begins_ns),
        ends_ms: ms(meta.ends_ns),
        ends_early: ends_early(w.opened),
        notes: notes(w),
        allocators: outcomes,
    }
}

/// Why the history ends before the process did, if it does.
fn ends_early(opened: &Opened) -> Option<String> {
    let m = opened.meta();
    let end = span_text(m.ends_ns);
    if let Some(cut) = &m.cut {
        return Some(format!("{cut}: replayed up to {end}"));
    }
    if let Some(why) = &opened.stopped {
        return Some(format!(
            "the recording stopped ({}): replayed up to {end}",
            crate::wording::one_line(why)
        ));
    }
    if !m.whole {
        return Some(format!(
            "it has no end (the process was killed, or is still running): replayed up to its \
             last event, at {end}"
        ));
    }
    None
}

/// What else to know of the replay.
fn notes(w: &Walked<'_>) -> Vec<String> {
    let m = w.opened.meta();
    let r = w.requests;
    let mut out = Vec::new();
    let lost = m.lost_events();
    if lost > 0 {
        out.push(format!(
            "{} lost while the program ran: the replay does not have them",
            crate::wording::plural(lost, "event was", "events were")
        ));
    }
    if r.restated > 0 {
        out.push(format!(
            "the history begins at {} (its older part was let go to stay within \
             CUGUARD_HISTORY): {} live then replayed as made then",
            span_text(m.begins_ns),
            crate::wording::plural(r.restated, "allocation", "allocations")
        ));
    }
    if r.cache_blocks > 0 {
        out.push(format!(
            "{} of PyTorch's cache, replayed in place of the {} it held them in: each \
             allocator serves the tensors as the program asked for them",
            crate::wording::plural(
                r.cache_blocks,
                "request is a tensor",
                "requests are tensors"
            ),
            crate::wording::plural(r.cache_segments, "segment", "segments"),
        ));
    }
    if !r.others.is_empty() {
        let others: Vec<String> = r.others.iter().map(u32::to_string).collect();
        out.push(format!(
            "the history also allocates on device {}: --device {} replays it",
            others.join(", "),
            others[0]
        ));
    }
    if r.device().is_none() {
        out.push("the history holds no device allocation: every allocator fits".into());
    }
    out
}
