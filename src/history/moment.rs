//! What a history says of one moment (`summary --at`: what was live then) or one window
//! (`summary --between`: what was made in it and still live at its end), by device, owner and
//! call path (each row a site and the callers that reached it): the shape of the summary's "at
//! the peak" section.

use std::collections::HashMap;

use cuguard_history::replay::{Block, Replay};
use serde::Serialize;

use super::{Loaded, stack_key};
use crate::owners::{OwnerIndex, OwnerKind, OwnerShare, by_owner};
use crate::sites::{SiteIndex, SiteRef};

/// A moment or a window, answered.
#[derive(Clone, Debug, Serialize)]
pub struct Moment {
    /// The process, for people: `train[4242]`.
    pub process: String,
    /// `at` or `between`.
    pub question: &'static str,
    /// The moment asked (`--at`), milliseconds since the start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<f64>,
    /// The window asked (`--between`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<f64>,
    /// The moment or window asked in microseconds, rounded up, for people (`at_ms`, `from_ms`
    /// and `to_ms` keep JSON's precision, 10 µs).
    #[serde(skip)]
    pub asked_us: [Option<u64>; 3],
    /// The phase asked about (`--at phase:step#3`: its peak; `--between phase:step#3`: what
    /// it kept), for people: `step #3`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// What the history covers.
    pub span: Span,
    /// By device, the device with the most bytes first.
    pub devices: Vec<DeviceMoment>,
    /// `--at oom` of a report: the out-of-memory card of the refusal asked about (the report's
    /// first `ooms[]` record), printed before what was live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oom: Option<crate::summary::attribution::OomSummary>,
}

/// What the history covers, and its gaps.
#[derive(Clone, Debug, Serialize)]
pub struct Span {
    /// From when it holds every event (later than 0 when older segments were let go).
    pub begins_ms: f64,
    /// The last moment it knows.
    pub ends_ms: f64,
    /// Whether it ended whole (false: the process was killed, or is still running, or the
    /// recording stopped: see `stopped`).
    pub whole: bool,
    /// Why the shim stopped recording before the end (a full disk), as the report says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Why a framework cache's blocks (PyTorch's tensors) are not in it, as the report says:
    /// the cache's segments are then answered whole, at the lines that grew the cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_blocks_unrecorded: Option<String>,
    /// Allocations it holds.
    pub allocations: usize,
    /// Events lost up to the moment asked (the window's end for `--between`): a thread made them
    /// faster than they were drained. Any of them can change the answer: a lost free leaves a
    /// block live here that was freed, a lost allocation leaves one out.
    pub lost_events: u64,
    /// The windows those events were lost in, oldest first (at most [`MAX_WINDOWS`]; the
    /// count covers them all).
    pub lost_windows: Vec<LostWindow>,
    /// Whether the answer is whole: no event was lost up to the moment asked, and the history
    /// is not cut short before it.
    pub complete: bool,
}

/// A window in which events were lost.
#[derive(Clone, Debug, Serialize)]
pub struct LostWindow {
    pub from_ms: f64,
    pub to_ms: f64,
    pub events: u64,
}

/// The most lost windows an answer lists.
pub const MAX_WINDOWS: usize = 5;

/// One device's part.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceMoment {
    /// Device ordinal; `null` when unknown.
    pub device: Option<u32>,
    pub bytes: u64,
    pub allocations: u64,
    /// By owner, most first.
    pub by_owner: Vec<OwnerShare>,
    /// By call path (a site and its callers) and owner, most first, at most `--top`.
    pub sites: Vec<SiteMoment>,
    /// How many (call path, owner) pairs there were.
    pub sites_total: usize,
}

/// One site's part.
#[derive(Clone, Debug, Serialize)]
pub struct SiteMoment {
    #[serde(flatten)]
    pub site: SiteRef,
    pub owner: String,
    pub owner_label: String,
    pub owner_kind: OwnerKind,
    pub bytes: u64,
    pub allocations: u64,
    /// When its oldest allocation here was made, ms since the start.
    pub first_ms: f64,
    /// Of its allocations, those made before a window in which events were lost ended (up to
    /// the moment asked): each is live here, or was freed in a lost window.
    pub unsure_allocations: u64,
    pub unsure_bytes: u64,
    /// The streams its allocations here were made on (the `CUstream` handles; 0: the legacy
    /// default stream, or a call that takes none), in order.
    pub streams: Vec<u64>,
    /// The call path: the site and its callers, innermost first.
    pub stack: Vec<String>,
    /// The program's tag of its allocations (`cuguard.tag`, `cuguard_tag_push`,
    /// `cuguard.annotate`): a site's allocations of another tag are another row. Absent when
    /// they have none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The row is a framework cache's idle memory: the part of its segments no block (tensor)
    /// held then, kept for reuse after the program freed it; `allocations` counts the segments,
    /// the site and stack are those of the largest. Absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub idle: bool,
    /// The report's id of the stack of its largest allocation (not in the JSON).
    #[serde(skip)]
    pub stack_id: Option<u64>,
}

fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e4).round() / 100.0
}

/// What an answer adds up: an allocation, a block inside a framework's cache (a tensor), or the
/// idle part of one of the cache's segments.
#[derive(Clone, Copy)]
pub(crate) struct Piece {
    pub block: Block,
    /// The idle part of a cache's segment (its bytes: `block.size`), not an allocation.
    pub idle: bool,
}

/// The pieces of `blocks` (those asked about): each of a framework cache's segments among them
/// is the blocks of `cache` (those asked about) and its part that no cache block live at
/// `upto` held (its idle bytes; none when every byte is held).
pub(crate) fn pieces<'a>(
    r: &Replay,
    blocks: impl Iterator<Item = &'a Block>,
    cache: impl Iterator<Item = &'a Block>,
    upto: u64,
) -> Vec<Piece> {
    let mut live: Vec<(u64, u64)> = r.cache_live_at(upto).map(|b| (b.addr, b.size)).collect();
    live.sort_unstable();
    // The blocks' bytes inside the segment: a block of an expandable segment can begin in the
    // memory mapped before this one, or go on into the next.
    let held = |seg: &Block| -> u64 {
        let end = seg.addr.saturating_add(seg.size);
        let before = live.partition_point(|&(a, _)| a < seg.addr);
        let from = before.saturating_sub(1);
        live[from..]
            .iter()
            .take_while(|&&(a, _)| a < end)
            .map(|&(a, size)| {
                a.saturating_add(size)
                    .min(end)
                    .saturating_sub(a.max(seg.addr))
            })
            .sum()
    };
    let mut out: Vec<Piece> = Vec::new();
    for b in blocks {
        if !b.carved {
            out.push(Piece {
                block: *b,
                idle: false,
            });
            continue;
        }
        let idle = b.size.saturating_sub(held(b));
        if idle > 0 {
            let block = Block { size: idle, ..*b };
            out.push(Piece { block, idle: true });
        }
    }
    out.extend(cache.map(|b| Piece {
        block: *b,
        idle: false,
    }));
    out
}

/// What was live at `at_ns`.
pub fn at(loaded: &Loaded, at_ns: u64, top: usize) -> Moment {
    let r = &loaded.replay;
    let blocks = pieces(r, r.live_at(at_ns), r.cache_live_at(at_ns), at_ns);
    let mut m = answer(loaded, &blocks, top, at_ns);
    m.question = "at";
    m.at_ms = Some(ms(at_ns));
    m.asked_us = [Some(at_ns.div_ceil(1000)), None, None];
    m
}

/// What was made in `[from_ns, to_ns]` and still live at `to_ns`.
pub fn between(loaded: &Loaded, from_ns: u64, to_ns: u64, top: usize) -> Moment {
    let r = &loaded.replay;
    let kept_cache = r
        .cache_blocks
        .iter()
        .filter(|b| b.start_ns >= from_ns && b.live_at(to_ns));
    let blocks = pieces(r, r.kept_between(from_ns, to_ns), kept_cache, to_ns);
    let mut m = answer(loaded, &blocks, top, to_ns);
    m.question = "between";
    m.from_ms = Some(ms(from_ns));
    m.to_ms = Some(ms(to_ns));
    m.asked_us = [
        None,
        Some(from_ns.div_ceil(1000)),
        Some(to_ns.div_ceil(1000)),
    ];
    m
}

/// The windows of lost events that began by `upto`: each can change an answer there.
fn lost_upto(r: &Replay, upto: u64) -> Vec<&cuguard_history::replay::Lost> {
    r.lost.iter().filter(|l| l.from_ns <= upto).collect()
}

/// The lost windows for people: by time, those that overlap (threads lose events at the same
/// moments) made one, at most [`MAX_WINDOWS`].
fn windows(lost: &[&cuguard_history::replay::Lost]) -> Vec<LostWindow> {
    let mut all = merged_windows(lost);
    all.truncate(MAX_WINDOWS);
    all
}

/// The windows of `lost` by time, those that overlap made one.
pub(crate) fn merged_windows(lost: &[&cuguard_history::replay::Lost]) -> Vec<LostWindow> {
    let mut by_time: Vec<(u64, u64, u64)> =
        lost.iter().map(|l| (l.from_ns, l.to_ns, l.count)).collect();
    by_time.sort_unstable();
    let mut merged: Vec<(u64, u64, u64)> = Vec::new();
    for (from, to, count) in by_time {
        match merged.last_mut() {
            Some(last) if from <= last.1 => {
                last.1 = last.1.max(to);
                last.2 += count;
            }
            _ => merged.push((from, to, count)),
        }
    }
    merged
        .into_iter()
        .map(|(from, to, events)| LostWindow {
            from_ms: ms(from),
            to_ms: ms(to),
            events,
        })
        .collect()
}

/// The blocks live at a moment summed by (device, call path, owner, tag): bytes, count, the
/// oldest start, the largest block's stack, those unsure (made before a lost window ended) and
/// the streams.
struct Group {
    site: SiteRef,
    owner: usize,
    tag: Option<String>,
    idle: bool,
    bytes: u64,
    allocations: u64,
    first_ns: u64,
    largest: (u64, Option<u64>),
    unsure: (u64, u64),
    streams: std::collections::BTreeSet<u64>,
}

/// The groups' key: the device, the call path as printed, the owner, the tag (a name id),
/// whether it is a cache's idle memory (then the call path is empty: one row per owner).
type GroupKey = (Option<u32>, Vec<String>, usize, u32, bool);

/// By device, each piece's (owner, bytes, allocations: 1, or 0 for a cache's idle part).
type DeviceItems = HashMap<Option<u32>, Vec<(usize, u64, u64)>>;

/// The answer from `blocks`, as of `upto` (the moment asked, or the window's end).
fn answer(loaded: &Loaded, blocks: &[Piece], top: usize, upto: u64) -> Moment {
    let r = &loaded.replay;
    let lost = lost_upto(r, upto);
    let lost_events: u64 = lost.iter().map(|l| l.count).sum();
    // A block made before the last lost window ended may have been freed in it.
    let unsure_before = lost.iter().map(|l| l.to_ns).max();
    let sites = SiteIndex::new(&loaded.report);
    let mut owners = OwnerIndex::new(&loaded.report);
    let (groups, per_device) = group(r, blocks, &sites, &mut owners, unsure_before);
    let mut devices: Vec<DeviceMoment> = per_device
        .into_iter()
        .map(|(device, items)| {
            let bytes = items.iter().map(|i| i.1).sum();
            let allocations = items.iter().map(|i| i.2).sum();
            DeviceMoment {
                device,
                bytes,
                allocations,
                by_owner: by_owner(&owners, items),
                sites: Vec::new(),
                sites_total: 0,
            }
        })
        .collect();
    for d in &mut devices {
        let list = device_sites(d.device, &groups, &sites, &owners);
        d.sites_total = list.len();
        d.sites = list.into_iter().take(top).collect();
    }
    devices.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.device.cmp(&b.device)));
    Moment {
        process: loaded.report.process_name(),
        question: "at",
        at_ms: None,
        from_ms: None,
        to_ms: None,
        asked_us: [None; 3],
        span: Span {
            begins_ms: ms(r.begins_ns),
            ends_ms: ms(r.ends_ns),
            whole: r.whole,
            stopped: loaded.stopped.clone(),
            cache_blocks_unrecorded: loaded.cache_blocks_unrecorded.clone(),
            allocations: loaded.allocations as usize,
            lost_events,
            lost_windows: windows(&lost),
            complete: lost_events == 0,
        },
        devices,
        oom: None,
        phase: None,
    }
}

/// Sums `blocks` (pinned host memory aside) into [`Group`]s, and by device into (owner, bytes,
/// count) items. By call path (the site and its callers as printed) rather than by site alone:
/// one site reached from several lines (a helper every step calls) shows each line that made
/// memory. Stacks that print the same are one row; allocations of another tag (named in `r`)
/// another.
fn group(
    r: &Replay,
    blocks: &[Piece],
    sites: &SiteIndex<'_>,
    owners: &mut OwnerIndex,
    unsure_before: Option<u64>,
) -> (HashMap<GroupKey, Group>, DeviceItems) {
    let unsure = |b: &Block| unsure_before.is_some_and(|t| b.start_ns <= t);
    let mut groups: HashMap<GroupKey, Group> = HashMap::new();
    let mut paths: HashMap<Option<u64>, Vec<String>> = HashMap::new();
    let mut per_device = DeviceItems::new();
    for &Piece { block, idle } in blocks {
        let b = &block;
        if b.memory == cuguard_format::MemoryKind::HostPinned {
            continue;
        }
        let stack = stack_key(b.stack);
        let o = owners.of_stack(stack, Some("device"));
        let site = sites.site(stack);
        let path = if idle {
            Vec::new()
        } else {
            paths
                .entry(stack)
                .or_insert_with(|| {
                    let c = callers(sites, stack);
                    if c.is_empty() {
                        vec![site.key.clone()]
                    } else {
                        c
                    }
                })
                .clone()
        };
        let tag = if idle { cuguard_history::NONE } else { b.tag };
        let g = groups
            .entry((b.device(), path, o, tag, idle))
            .or_insert_with(|| Group {
                site: SiteRef::from(&*site),
                owner: o,
                tag: if idle {
                    None
                } else {
                    r.tag_of(b).map(str::to_string)
                },
                idle,
                bytes: 0,
                allocations: 0,
                first_ns: b.start_ns,
                largest: (0, stack),
                unsure: (0, 0),
                streams: Default::default(),
            });
        g.streams.insert(b.stream);
        if unsure(b) {
            g.unsure = (g.unsure.0 + 1, g.unsure.1 + b.size);
        }
        g.bytes += b.size;
        g.allocations += 1;
        g.first_ns = g.first_ns.min(b.start_ns);
        if b.size > g.largest.0 {
            g.largest = (b.size, stack);
            if idle {
                // An idle row is named by its largest segment, as its stack is.
                g.site = SiteRef::from(&*site);
            }
        }
        per_device
            .entry(b.device())
            .or_default()
            .push((o, b.size, u64::from(!idle)));
    }
    (groups, per_device)
}

/// The rows of one device's groups, the most bytes first.
fn device_sites(
    device: Option<u32>,
    groups: &HashMap<GroupKey, Group>,
    sites: &SiteIndex<'_>,
    owners: &OwnerIndex,
) -> Vec<SiteMoment> {
    let mut list: Vec<SiteMoment> = groups
        .iter()
        .filter(|((dev, ..), _)| *dev == device)
        .map(|(_, g)| {
            let owner = owners.owner(g.owner);
            SiteMoment {
                site: g.site.clone(),
                owner: owner.id.clone(),
                owner_label: owner.label.clone(),
                owner_kind: owner.kind,
                bytes: g.bytes,
                allocations: g.allocations,
                first_ms: ms(g.first_ns),
                unsure_allocations: g.unsure.0,
                unsure_bytes: g.unsure.1,
                streams: g.streams.iter().copied().collect(),
                stack: callers(sites, g.largest.1),
                tag: g.tag.clone(),
                idle: g.idle,
                stack_id: g.largest.1,
            }
        })
        .collect();
    list.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.allocations.cmp(&a.allocations))
            .then(a.site.site.cmp(&b.site.site))
            .then_with(|| a.tag.cmp(&b.tag))
    });
    list
}

/// The callers of a stack for people: the summary's mixed chain when the stack has Python
/// frames, else its named native frames from the site outward (at most [`MAX_CALLERS`]).
pub(crate) fn callers(sites: &SiteIndex<'_>, stack: Option<u64>) -> Vec<String> {
    let chain = sites.chain(stack);
    if !chain.is_empty() {
        return chain;
    }
    let Some(s) = sites.stack(stack) else {
        return Vec::new();
    };
    let from = s
        .site
        .as_ref()
        .filter(|site| site.in_ == cuguard_format::site_list::FRAMES)
        .map_or(0, |site| site.index);
    let out: Vec<String> = s
        .frames
        .iter()
        .skip(from)
        .filter(|f| f.inlined != Some(true) || f.function.is_some())
        .map_while(|f| {
            let function = f.function.as_deref()?;
            // The language's start-up frames end the chain: the user's callers are above them.
            if RUNTIME_FRAMES.iter().any(|p| function.starts_with(p)) {
                return None;
            }
            Some(match (&f.file, f.line) {
                (Some(file), Some(line)) => format!(
                    "{function} ({}:{line})",
                    file.rsplit('/').next().unwrap_or(file)
                ),
                _ => function.to_string(),
            })
        })
        .take(MAX_CALLERS)
        .collect();
    if out.len() < 2 { Vec::new() } else { out }
}

/// The most native frames a site's callers show.
const MAX_CALLERS: usize = 8;

/// Functions of a language's start-up, where a native chain of callers stops (Rust's `main`
/// shim and backtrace markers, C's start).
const RUNTIME_FRAMES: &[&str] = &[
    "call_once<",
    "core::ops::function::",
    "std::rt::",
    "std::sys::backtrace::",
    "std::panicking::",
    "std::panic::",
    "__libc_start",
    "_start",
];
