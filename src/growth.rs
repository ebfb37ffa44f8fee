//! What grows: the sites whose live bytes were still rising at the end of the program's run
//! (for a Python program whose end was recorded, the end of its code: `python.end.time_ms`),
//! read from the report's `stack_samples` (live device bytes per stack over time), even when the
//! memory was freed at shutdown and so is no leak. Set-up is not growth: a rise followed by a
//! long plateau (a framework's cache filled in the first step, weights loaded once), even one
//! that gives a little back, does not grow; a list that gains a buffer per step, or an
//! allocation leaked in every iteration, does.
//!
//! # The criterion
//!
//! [`growth`] reads one series (live bytes at sample times; the run is the samples' span, up to
//! the last sample, which the shim takes at the report's end time). Let *max* be its largest
//! value, the *rise* end at the first sample that reaches it, and start at the *low before the
//! rise* (the last sample, at or before that one, holding the smallest value so far). The
//! series grows when, by the default [`Criterion`], all of these hold:
//! - **the rise** is at least 1 MiB and at least 10% of the maximum;
//! - **it is a trend**, over the samples from the low to the last that reaches the maximum: at
//!   least 5 of them, the value goes up from one sample to the next at least 3 times during the
//!   rise (a single spike or one or two steps is not growth), and Kendall's τ-b of the values
//!   against time is at least 0.6 (sorting by time and by value mostly agree: a list that gains
//!   a buffer per iteration gives τ near 1; a temporary allocated and freed in every iteration
//!   sampled at random moments (0 or its size), noise around a level, and a sawtooth that keeps
//!   going back down give τ well below);
//! - **it is still rising in the last part of the run**: take the samples from the low to the
//!   end of the run, and their *last part*, those in its last third of time (at least the last
//!   3 samples, never the low itself). The largest value in the last part must exceed the
//!   largest value before it by at least 1/8 of the rise: the series reached new heights late.
//!
//! The last part is measured by time, not cut at the maximum, so a rise that ends early and
//! then holds (or gives a little back: a cache returning one block) is set-up however the
//! plateau ends. It compares maxima, not the last value, so memory freed at shutdown (a
//! Python program's module globals, a C++ program's destructors) does not hide growth, as long
//! as the stretch after that free is short: under 5/21 (24%) of the time from the low, by the
//! line below.
//!
//! Where the line falls, for a steady rise that stops and then holds (or is freed): the last
//! third gains `(x − 2/3) / x` of the rise when the rise lasted the first `x` of the time from
//! the low to the end, so it grows when `x ≥ 16/21` (the rise went on over the first 76%) and
//! not below. A rise over the first half and then held is set-up; so is GPT-2's cache, filled
//! in 0.6 s of a 15 s run. A staircase grows when its steps are shorter than about a third of
//! the run (a step up falls in the last part); one whose last step is held for more than a
//! third does not. A genuine leak at a site whose set-up was much larger (the same line filled a
//! cache and then leaks a little per step) grows only once the last third's new heights reach
//! 1/8 of the whole rise. A rise confined to the very end (flat, then rising over the last few
//! samples) grows when it has the samples and increases above.
//!
//! How much it grew is the rise (bytes from the low to the maximum) and over what time is the
//! rise's (from the low's sample to the maximum's); [`Growth`] also says when the last part
//! began and the new heights it reached.
//!
//! A run with fewer sample times than any series needs (5, from the shim's first sample to the
//! end) cannot be told at all: [`not_told`] says so, so that the summary, the view and
//! `check --max-growth` do not read "no site grew" into it.
//!
//! [`growing_sites`] adds up the series of the stacks that share a site (all devices) and runs
//! the criterion on each site's sum. The shim samples every `CUGUARD_TIMELINE_MS` (100 ms by
//! default) from its first tracked allocation and keeps at most 256 sample times and 128 series
//! (when full, every other time is dropped and the interval doubles, so a long run keeps an even
//! picture of its whole life; the last third is then still a third of it). Samples may be
//! missing early in a run: the shim's thread takes none while it makes the stats page, in its
//! first turn (a second on a loaded machine). A report with more (hand-made or hostile) is read
//! within bounds: the first [`MAX_SERIES`] series, and at most [`MAX_TIMES`] sample times,
//! evenly spread over the run when there are more (the criterion's cost is quadratic in the
//! samples).

use std::collections::{BTreeSet, HashMap, HashSet};

use cuguard_format::{PyCache, PyCacheLine};

use serde::Serialize;

use crate::owners::OwnerIndex;
use crate::sites::frames_site;
use crate::sites::{SiteIndex, SiteKind};
use cuguard_format::Report;

/// The most series [`growing_sites`] reads.
pub const MAX_SERIES: usize = 1024;
/// The most sample times [`growing_sites`] reads.
pub const MAX_TIMES: usize = 1024;

/// The thresholds of the growth criterion (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Criterion {
    /// The least rise, bytes.
    pub min_bytes: u64,
    /// The least rise, as a fraction of the maximum.
    pub min_fraction: f64,
    /// The least Kendall τ-b over the window.
    pub min_trend: f64,
    /// The fewest samples in the window.
    pub min_samples: usize,
    /// The fewest sample-to-sample increases during the rise.
    pub min_increases: usize,
    /// The last part of the run, as a fraction of the time from the low to the last sample.
    pub last_part: f64,
    /// The fewest samples in the last part.
    pub min_last_samples: usize,
    /// How far the last part must rise above every value before it, as a fraction of the rise.
    pub min_last_rise: f64,
}

impl Default for Criterion {
    fn default() -> Criterion {
        Criterion {
            min_bytes: 1 << 20,
            min_fraction: 0.1,
            min_trend: 0.6,
            min_samples: 5,
            min_increases: 3,
            last_part: 1.0 / 3.0,
            min_last_samples: 3,
            min_last_rise: 1.0 / 8.0,
        }
    }
}

/// How a series grew.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Growth {
    /// Bytes at the low before the rise.
    pub from_bytes: u64,
    /// Bytes at the maximum.
    pub to_bytes: u64,
    /// `to_bytes − from_bytes`.
    pub grown_bytes: u64,
    /// When the rise started (the low's sample), milliseconds since process start.
    pub from_ms: u64,
    /// When it reached the maximum.
    pub to_ms: u64,
    /// Kendall's τ-b of the window (−1 to 1).
    pub trend: f64,
    /// Sample-to-sample increases during the rise.
    pub increases: usize,
    /// When the last part of the run began (its first sample).
    pub last_part_ms: u64,
    /// How far the last part rose above every value before it, bytes.
    pub last_part_grown_bytes: u64,
}

/// Whether the series `bytes` (at `times`, same length; extra values of either are ignored)
/// grew, by `criterion` (see the module doc).
pub fn growth(times: &[u64], bytes: &[u64], criterion: &Criterion) -> Option<Growth> {
    let n = times.len().min(bytes.len());
    let (times, v) = (&times[..n], &bytes[..n]);
    let max = *v.iter().max()?;
    if max == 0 {
        return None;
    }
    let first_max = v.iter().position(|&b| b == max)?;
    let last_max = v.iter().rposition(|&b| b == max)?;
    let low = *v[..=first_max].iter().min()?;
    let low_at = v[..=first_max].iter().rposition(|&b| b == low)?;
    let rise = max - low;
    let fraction = (max as f64 * criterion.min_fraction).ceil();
    if rise < criterion.min_bytes || (rise as f64) < fraction {
        return None;
    }
    let window = &v[low_at..=last_max];
    if window.len() < criterion.min_samples {
        return None;
    }
    let increases = v[low_at..=first_max]
        .windows(2)
        .filter(|w| w[1] > w[0])
        .count();
    if increases < criterion.min_increases {
        return None;
    }
    let (last_at, last_grown) = last_part(times, v, low_at, criterion)?;
    if last_grown == 0 || (last_grown as f64) < rise as f64 * criterion.min_last_rise {
        return None;
    }
    let trend = kendall_tau_b(window);
    if trend < criterion.min_trend {
        return None;
    }
    Some(Growth {
        from_bytes: low,
        to_bytes: max,
        grown_bytes: rise,
        from_ms: times[low_at],
        to_ms: times[first_max],
        trend,
        increases,
        last_part_ms: times[last_at],
        last_part_grown_bytes: last_grown,
    })
}

impl Criterion {
    /// The fewest sample times a series needs before it can grow: the window's
    /// [`Criterion::min_samples`], and a last part of [`Criterion::min_last_samples`] after the
    /// low.
    pub fn fewest_samples(&self) -> usize {
        self.min_samples.max(self.min_last_samples.max(1) + 1)
    }
}

/// Why a report's growth cannot be told: its run has fewer sample times than any series needs
/// ([`Criterion::fewest_samples`]), so that no site grew says nothing. The shim samples from its
/// first tracked allocation, so what counts is the time from then to the end: a 50 ms loop
/// leaking a buffer per step has one sample at 100 ms intervals, however long the imports and
/// the device's start-up before it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NotTold {
    /// The sample times in the run (up to the end of a Python program's code).
    pub samples: usize,
    /// The fewest the criterion needs.
    pub needed: usize,
    /// Where the run ended, milliseconds since process start: the end of a Python program's
    /// code, else the report.
    pub end_ms: u64,
    /// From the first sample to the end, milliseconds; `None` when no sample came before it.
    pub span_ms: Option<u64>,
    /// Whether the end is a Python program's end of code.
    pub code_end: bool,
    /// The shim's sampling interval at the end (`stack_samples.interval_ms`); `None` when
    /// sampling was off (`CUGUARD_TIMELINE_MS=0`).
    pub interval_ms: Option<u64>,
}

impl NotTold {
    /// Why, for people: `1 sample in the 48 ms from the first to the end of the code (at
    /// 62 ms); 5 are needed, one every 100 ms`.
    pub fn why(&self) -> String {
        use crate::wording::{millis, plural};
        let end = if self.code_end {
            "the end of the code"
        } else {
            "the end"
        };
        let at = millis(self.end_ms);
        match (self.interval_ms, self.span_ms) {
            (None, _) => "no samples: sampling was off (CUGUARD_TIMELINE_MS=0)".to_string(),
            (Some(every), Some(span)) => format!(
                "{} in the {} from the first to {end} (at {at}); {} are needed, one every {}",
                plural(self.samples as u64, "sample", "samples"),
                millis(span),
                self.needed,
                millis(every)
            ),
            (Some(every), None) => format!(
                "no sample before {end} (at {at}); {} are needed, one every {} from the first allocation",
                self.needed,
                millis(every)
            ),
        }
    }
}

impl NotTold {
    /// Why, in a few words for the summary's last lines: `2 samples in 31 ms; 5 are needed`,
    /// `sampling was off`.
    pub fn short(&self) -> String {
        use crate::wording::{millis, plural};
        match (self.interval_ms, self.span_ms) {
            (None, _) => "sampling was off".to_string(),
            (Some(_), Some(span)) => format!(
                "{} in {}; {} are needed",
                plural(self.samples as u64, "sample", "samples"),
                millis(span),
                self.needed
            ),
            (Some(_), None) => format!("no sample; {} are needed", self.needed),
        }
    }
}

/// Whether `report`'s growth cannot be told by `criterion` (see [`NotTold`]): `None` when its
/// run has the samples, when it allocated nothing (nothing could grow), or when it is older
/// than sampling (no `stack_samples`, and sampling not said to be off).
pub fn not_told(report: &Report, criterion: &Criterion) -> Option<NotTold> {
    if report.stats.devices.iter().all(|d| d.allocations == 0) {
        return None;
    }
    let off = report.config.as_ref().and_then(|c| c.timeline_ms) == Some(0);
    if report.stack_samples.is_none() && !off {
        return None;
    }
    let code_end = python_end_ms(report);
    let process = &report.process;
    let end_ms =
        code_end.unwrap_or_else(|| process.end_unix_ms.saturating_sub(process.start_unix_ms));
    let times: &[u64] = report
        .stack_samples
        .as_ref()
        .map_or(&[], |s| &s.times_ms[..]);
    let samples = match code_end {
        Some(end) => times.iter().take_while(|&&t| t <= end).count(),
        None => times.len(),
    };
    let needed = criterion.fewest_samples();
    if samples >= needed {
        return None;
    }
    Some(NotTold {
        samples,
        needed,
        end_ms,
        span_ms: times
            .first()
            .filter(|_| samples > 0)
            .map(|&first| end_ms.saturating_sub(first)),
        code_end: code_end.is_some(),
        interval_ms: report.stack_samples.as_ref().map(|s| s.interval_ms),
    })
}

/// Where a Python program's code ended, milliseconds since process start, when its end was
/// recorded: its run ends there (what comes after, the look at what held its memory and the
/// interpreter's teardown, is flat or falling, and would read as a plateau).
pub fn python_end_ms(report: &Report) -> Option<u64> {
    report
        .python
        .as_ref()
        .filter(|p| p.end.recorded)
        .and_then(|p| p.end.time_ms)
}

/// The last part of the run from the sample `low_at` on (see the module doc): where it starts,
/// and how far its largest value rose above the largest before it (0 when it did not). `None`
/// when there are too few samples for a part and something before it.
fn last_part(
    times: &[u64],
    v: &[u64],
    low_at: usize,
    criterion: &Criterion,
) -> Option<(usize, u64)> {
    let n = v.len();
    let min_last = criterion.min_last_samples.max(1);
    if n < low_at + 1 + min_last {
        return None;
    }
    let (start, end) = (times[low_at], times[n - 1]);
    let span = end.saturating_sub(start) as f64;
    let cut = end.saturating_sub((span * criterion.last_part).round() as u64);
    // The first sample at or after the cut (a suffix even where times are out of order),
    // holding at least `min_last` samples and leaving the low before it.
    let at = (low_at + 1..n).find(|&k| times[k] >= cut).unwrap_or(n - 1);
    let at = at.min(n - min_last).max(low_at + 1);
    let before = *v[low_at..at].iter().max()?;
    let last = *v[at..].iter().max()?;
    Some((at, last.saturating_sub(before)))
}

/// Kendall's τ-b of `values` against their order (ties in value allowed; none in order): 1 when
/// they only go up, −1 when they only go down, 0 for no trend or fewer than two distinct values.
/// Quadratic; the shim keeps at most 256 samples.
pub fn kendall_tau_b(values: &[u64]) -> f64 {
    let n = values.len();
    let (mut concordant, mut discordant, mut tied) = (0u64, 0u64, 0u64);
    for i in 0..n {
        for j in i + 1..n {
            match values[j].cmp(&values[i]) {
                std::cmp::Ordering::Greater => concordant += 1,
                std::cmp::Ordering::Less => discordant += 1,
                std::cmp::Ordering::Equal => tied += 1,
            }
        }
    }
    let pairs = (concordant + discordant + tied) as f64;
    let untied = (concordant + discordant) as f64;
    if untied == 0.0 {
        return 0.0;
    }
    (concordant as f64 - discordant as f64) / (pairs * untied).sqrt()
}

/// A site that grew.
#[derive(Clone, Debug, Serialize)]
pub struct GrowingSite {
    /// The site's key (see [`crate::sites`]).
    pub site: String,
    /// The site for people, its location once.
    pub label: String,
    /// `file:line`, when known.
    pub location: Option<String>,
    /// What kind of frame the site is, when the report says.
    pub kind: Option<SiteKind>,
    /// Who holds what it allocated (the owner of its largest stack): id.
    pub owner: String,
    /// The owner for people.
    pub owner_label: String,
    /// The owner's kind.
    pub owner_kind: crate::owners::OwnerKind,
    /// The devices its series are on.
    pub devices: Vec<u32>,
    /// How it grew.
    #[serde(flatten)]
    pub growth: Growth,
    /// Its largest stack's frames in the mixed native and Python order, when it has Python
    /// frames (see [`crate::sites::chain`]).
    pub stack: Vec<String>,
}

/// The owner whose segments hold the blocks the shim samples by stack (`cache_blocks`
/// series): PyTorch's caching allocator, the only cache whose blocks the shim's hook records.
const BLOCKS_OWNER: &str = "pytorch_caching_allocator";

/// Where a site's largest series came from: a stack of the shim's samples, or a line of a
/// cache's history (`python.view.caches[].lines[]`).
#[derive(Clone, Copy, Debug)]
pub enum SeriesFrom<'a> {
    /// A stack id of `stack_samples.series[]`.
    Stack(Option<u64>),
    /// A stack id of `stack_samples.series[]` that made a cache's blocks (`cache_blocks`: the
    /// program's tensors inside PyTorch's cache).
    Blocks(Option<u64>),
    /// A line of a cache's history.
    Line(&'a PyCacheLine),
}

/// One site's live bytes over time: the series of its stacks and cache lines added up.
#[derive(Debug)]
pub struct SiteSeries<'a> {
    /// The site's key (see [`crate::sites`]).
    pub key: String,
    /// Live bytes at each of [`SitesOverTime::times`].
    pub bytes: Vec<u64>,
    /// The devices its series are on.
    pub devices: BTreeSet<u32>,
    /// The series that reached the most, and that most.
    pub largest: (SeriesFrom<'a>, u64),
    /// Its place in the order the sites were first met.
    pub first: usize,
}

impl SiteSeries<'_> {
    /// The site for people, its location once.
    pub fn label(&self, sites: &SiteIndex<'_>) -> String {
        match self.largest.0 {
            SeriesFrom::Stack(stack) | SeriesFrom::Blocks(stack) => sites.site(stack).label(),
            SeriesFrom::Line(line) => {
                frames_site(&line.frames).map_or_else(|| self.key.clone(), |s| s.label())
            }
        }
    }
}

/// The sites' live bytes over the run, as the growth criterion reads them.
#[derive(Debug)]
pub struct SitesOverTime<'a> {
    /// The sample times read, milliseconds since process start.
    pub times: Vec<u64>,
    /// One per site, in the order first met.
    pub sites: Vec<SiteSeries<'a>>,
}

/// The live bytes of `report`'s sites over time (see the module doc): the series of the
/// stacks that share a site added up (all devices), only stacks whose owner `include` accepts;
/// inside a cache whose history gave each program line's bytes, those lines (as the program's)
/// in place of the cache's segments; without such lines, the shim's series of PyTorch's blocks
/// by the stacks that made them (`cache_blocks`), likewise. The sample times are all of them, or [`MAX_TIMES`] spread
/// evenly (first and last kept), up to the end of a Python program's code when `to_code_end`;
/// `None` without samples.
pub fn sites_over_time<'a>(
    report: &'a Report,
    sites: &SiteIndex<'_>,
    owners: &mut OwnerIndex<'_>,
    include: impl Fn(&crate::owners::Owner) -> bool,
    to_code_end: bool,
) -> Option<SitesOverTime<'a>> {
    let samples = report.stack_samples.as_ref()?;
    let end_ms = python_end_ms(report).filter(|_| to_code_end);
    let all = match end_ms {
        Some(end) => samples.times_ms.iter().take_while(|&&t| t <= end).count(),
        None => samples.times_ms.len(),
    };
    let picks: Vec<usize> = if all <= MAX_TIMES {
        (0..all).collect()
    } else {
        (0..MAX_TIMES)
            .map(|i| i * (all - 1) / (MAX_TIMES - 1))
            .collect()
    };
    let times: Vec<u64> = picks.iter().map(|&i| samples.times_ms[i]).collect();
    let n = times.len();
    if n == 0 {
        return None;
    }
    fn add<'a>(
        by_site: &mut HashMap<String, SiteSeries<'a>>,
        key: String,
        from: SeriesFrom<'a>,
        device: u32,
        bytes: impl Fn(usize) -> u64,
        n: usize,
    ) {
        let first = by_site.len();
        let acc = by_site.entry(key.clone()).or_insert_with(|| SiteSeries {
            key,
            bytes: vec![0; n],
            devices: BTreeSet::new(),
            largest: (from, 0),
            first,
        });
        let mut top = 0;
        for (k, s) in acc.bytes.iter_mut().enumerate() {
            let b = bytes(k);
            *s = s.saturating_add(b);
            top = top.max(b);
        }
        acc.devices.insert(device);
        if top > acc.largest.1 {
            acc.largest = (from, top);
        }
    }
    // A cache whose history gave each program line's live bytes over time: growth inside it
    // follows those lines (the program's tensors, at the lines that made them), and its
    // segments' series (charged to whichever line grew a segment) are left out.
    let lined: Vec<&PyCache> = report
        .python
        .as_ref()
        .and_then(|p| p.view.as_ref())
        .map(|v| v.caches.iter().filter(|c| !c.lines.is_empty()).collect())
        .unwrap_or_default();
    let mut lined_owners: HashSet<&str> = lined.iter().filter_map(|c| c.owner.as_deref()).collect();
    // Else the shim's own series of PyTorch's blocks by the stacks that made them do the same.
    let blocks = lined.is_empty() && samples.series.iter().any(|s| s.cache_blocks);
    if blocks {
        lined_owners.insert(BLOCKS_OWNER);
    }
    let program_included = include(owners.owner(owners.program()));
    let mut by_site: HashMap<String, SiteSeries> = HashMap::new();
    for series in samples.series.iter().take(MAX_SERIES) {
        if series.cache_blocks {
            if blocks && program_included {
                let key = sites.site(series.stack).key.clone();
                let bytes = |k: usize| series.bytes.get(picks[k]).copied().unwrap_or(0);
                let from = SeriesFrom::Blocks(series.stack);
                add(&mut by_site, key, from, series.device, bytes, n);
            }
            continue;
        }
        let owner = owners.of_stack(series.stack, Some("device"));
        let owner = owners.owner(owner);
        if lined_owners.contains(owner.id.as_str()) || !include(owner) {
            continue;
        }
        let key = sites.site(series.stack).key.clone();
        let bytes = |k: usize| series.bytes.get(picks[k]).copied().unwrap_or(0);
        add(
            &mut by_site,
            key,
            SeriesFrom::Stack(series.stack),
            series.device,
            bytes,
            n,
        );
    }
    if program_included {
        for line in lined.iter().flat_map(|c| c.lines.iter()).take(MAX_SERIES) {
            let Some(site) = frames_site(&line.frames) else {
                continue;
            };
            let bytes = |k: usize| line_bytes_at(&line.samples, times[k]);
            add(
                &mut by_site,
                site.key,
                SeriesFrom::Line(line),
                line.device,
                bytes,
                n,
            );
        }
    }
    let mut sites: Vec<SiteSeries> = by_site.into_values().collect();
    sites.sort_by_key(|s| s.first);
    Some(SitesOverTime { times, sites })
}

/// The sites of `report` that grew (see the module doc), most grown first; only stacks whose
/// owner `include` accepts are added up.
pub fn growing_sites(
    report: &Report,
    sites: &SiteIndex<'_>,
    owners: &mut OwnerIndex<'_>,
    include: impl Fn(&crate::owners::Owner) -> bool,
    criterion: &Criterion,
) -> Vec<GrowingSite> {
    let Some(over_time) = sites_over_time(report, sites, owners, include, true) else {
        return Vec::new();
    };
    let program = owners.program();
    let times = &over_time.times;
    let mut out: Vec<GrowingSite> = over_time
        .sites
        .into_iter()
        .filter_map(|acc| {
            let g = growth(times, &acc.bytes, criterion)?;
            let devices = acc.devices.into_iter().collect();
            match acc.largest.0 {
                SeriesFrom::Stack(stack) | SeriesFrom::Blocks(stack) => {
                    let site = sites.site(stack);
                    // A cache's blocks are the program's tensors; else the stack's owner.
                    let owner = match acc.largest.0 {
                        SeriesFrom::Blocks(_) => program,
                        _ => owners.of_stack(stack, Some("device")),
                    };
                    let owner = owners.owner(owner);
                    Some(GrowingSite {
                        site: site.key.clone(),
                        label: site.label(),
                        location: site.location.clone(),
                        kind: site.kind,
                        owner: owner.id.clone(),
                        owner_label: owner.label.clone(),
                        owner_kind: owner.kind,
                        devices,
                        growth: g,
                        stack: sites.chain(stack),
                    })
                }
                SeriesFrom::Line(line) => {
                    let site = frames_site(&line.frames)?;
                    let owner = owners.owner(program);
                    Some(GrowingSite {
                        label: site.label(),
                        site: site.key,
                        location: site.location,
                        kind: site.kind,
                        owner: owner.id.clone(),
                        owner_label: owner.label.clone(),
                        owner_kind: owner.kind,
                        devices,
                        growth: g,
                        stack: line.frames.iter().map(frame_text).collect(),
                    })
                }
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.growth
            .grown_bytes
            .cmp(&a.growth.grown_bytes)
            .then(a.site.cmp(&b.site))
    });
    out
}

/// A cache line's live bytes at `t_ms`: its last sample at or before then (0 before its first).
fn line_bytes_at(samples: &[(u64, u64)], t_ms: u64) -> u64 {
    let k = samples.partition_point(|&(t, _)| t <= t_ms);
    if k == 0 { 0 } else { samples[k - 1].1 }
}

/// A Python frame for people: `function (file.py:12)`.
fn frame_text(f: &cuguard_format::PyFrame) -> String {
    let file = crate::sites::file_name(&f.file);
    match f.line {
        Some(line) => format!("{} ({file}:{line})", f.function),
        None => format!("{} ({file})", f.function),
    }
}

#[cfg(test)]
mod tests;
