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
use cuguard_format::Report;
use crate::sites::frames_site;
use crate::sites::{SiteIndex, SiteKind};

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

/// Where a site's largest series came from: a stack of the shim's samples, or a line of a
/// cache's history (`python.view.caches[].lines[]`).
#[derive(Clone, Copy, Debug)]
pub enum SeriesFrom<'a> {
    /// A stack id of `stack_samples.series[]`.
    Stack(Option<u64>),
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
            SeriesFrom::Stack(stack) => sites.site(stack).label(),
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
/// in place of the cache's segments. The sample times are all of them, or [`MAX_TIMES`] spread
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
    let lined_owners: HashSet<&str> = lined.iter().filter_map(|c| c.owner.as_deref()).collect();
    let mut by_site: HashMap<String, SiteSeries> = HashMap::new();
    for series in samples.series.iter().take(MAX_SERIES) {
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
    if include(owners.owner(owners.program())) {
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
                SeriesFrom::Stack(stack) => {
                    let site = sites.site(stack);
                    let owner = owners.of_stack(stack, Some("device"));
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
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn times(n: usize) -> Vec<u64> {
        (0..n as u64).map(|i| i * 100).collect()
    }

    /// A small deterministic generator (xorshift), for noise.
    struct Noise(u64);
    impl Noise {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn grows(bytes: &[u64]) -> Option<Growth> {
        growth(&times(bytes.len()), bytes, &Criterion::default())
    }

    #[test]
    fn a_list_that_gains_a_buffer_per_iteration_grows_even_when_freed_at_shutdown() {
        // Nothing for 10 samples (start-up), then a buffer of 4 MiB per sample for 100 samples,
        // then everything freed at shutdown.
        let mut v = vec![0; 10];
        v.extend((1..=100).map(|i| i * 4 * MIB));
        v.extend([0, 0]);
        let g = grows(&v).expect("grows");
        assert_eq!(
            (g.from_bytes, g.to_bytes, g.grown_bytes),
            (0, 400 * MIB, 400 * MIB)
        );
        assert_eq!((g.from_ms, g.to_ms), (900, 10_900));
        assert!(g.trend > 0.99, "{g:?}");
        assert_eq!(g.increases, 100);
    }

    #[test]
    fn a_temporary_allocated_and_freed_in_every_iteration_does_not_grow() {
        // Sampled at random moments: either the temporary is live (64 MiB) or it is not.
        let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
        let v: Vec<u64> = (0..200)
            .map(|_| {
                if noise.next().is_multiple_of(2) {
                    64 * MIB
                } else {
                    0
                }
            })
            .collect();
        assert_eq!(grows(&v), None);
        // Live at nearly every sample.
        let mut v = vec![64 * MIB; 200];
        v[0] = 0;
        v[57] = 0;
        assert_eq!(grows(&v), None);
    }

    #[test]
    fn growth_under_noise_still_grows_and_noise_alone_does_not() {
        let mut noise = Noise(42);
        let v: Vec<u64> = (0..150)
            .map(|i| 100 * MIB + i * MIB + noise.next() % (3 * MIB))
            .collect();
        let g = grows(&v).expect("a rising trend under noise");
        assert!(
            g.grown_bytes >= 140 * MIB && g.grown_bytes <= 152 * MIB,
            "{g:?}"
        );
        assert!(g.trend > 0.8, "{g:?}");
        let mut noise = Noise(7);
        let flat: Vec<u64> = (0..150)
            .map(|_| 100 * MIB + noise.next() % (30 * MIB))
            .collect();
        assert_eq!(grows(&flat), None, "noise around a level");
    }

    /// What the criterion says with the last-part condition left out (the rise alone), to show
    /// that a series it rejects is rejected by that condition only.
    fn rises(bytes: &[u64]) -> bool {
        let lenient = Criterion {
            min_last_rise: 0.0,
            ..Criterion::default()
        };
        // Read only up to the first maximum: what the rise looks like on its own.
        let max = bytes.iter().max().copied().unwrap_or(0);
        let first_max = bytes.iter().position(|&b| b == max).unwrap_or(0);
        growth(&times(first_max + 1), &bytes[..=first_max], &lenient).is_some()
    }

    #[test]
    fn set_up_then_a_long_plateau_does_not_grow() {
        // Weights, then optimizer state, then steady work.
        let mut v = vec![0; 5];
        v.extend(vec![500 * MIB; 20]);
        v.extend(vec![1000 * MIB; 200]);
        assert_eq!(grows(&v), None);
        // A framework's cache filled in the first step (6 samples of 150), then flat: GPT-2's
        // 1.5 GiB in 616 ms, then 14 s flat, sampled every 100 ms.
        let mut v = vec![0; 2];
        v.extend((1..=6).map(|i| i * 256 * MIB));
        v.extend(vec![1536 * MIB; 142]);
        assert!(rises(&v), "the rise alone is a trend");
        assert_eq!(grows(&v), None);
        // A rise over the first tenth, then a long plateau at the top, freed at shutdown.
        let mut v: Vec<u64> = (0..=20).map(|i| i * 10 * MIB).collect();
        v.extend(vec![200 * MIB; 200]);
        v.push(0);
        assert_eq!(grows(&v), None);
        // Flat all along.
        assert_eq!(grows(&vec![300 * MIB; 100]), None);
    }

    #[test]
    fn a_rise_that_gives_a_little_back_then_holds_does_not_grow() {
        // The simulated driver's case: 10 buffers of 4 MiB over 1 s, one given back, 8 s flat.
        // Cut at the last maximum, the series is nothing but the rise.
        let mut v = vec![0];
        v.extend((1..=10).map(|i| i * 4 * MIB));
        v.extend(vec![36 * MIB; 80]);
        assert!(rises(&v));
        assert_eq!(grows(&v), None);
        // Gives back a little at a time while it holds.
        let mut v: Vec<u64> = (0..=10).map(|i| i * 40 * MIB).collect();
        v.extend((0..90).map(|i| 400 * MIB - (i / 10) * MIB));
        assert_eq!(grows(&v), None);
        // Gives back most of it, then holds the rest for long.
        let mut v: Vec<u64> = (0..=10).map(|i| i * 40 * MIB).collect();
        v.extend(vec![100 * MIB; 90]);
        assert_eq!(grows(&v), None);
    }

    #[test]
    fn a_steady_rise_grows_and_says_when_its_last_part_began() {
        // The seed's loop: an allocation kept in every iteration, for the whole run (leaked at
        // exit, so no drop at the end). 61 samples 100 ms apart: the last third is 2 s.
        let v: Vec<u64> = (0..=60).map(|i| i * 2 * MIB).collect();
        let g = grows(&v).expect("grows");
        assert_eq!(
            (g.from_bytes, g.to_bytes, g.from_ms, g.to_ms),
            (0, 120 * MIB, 0, 6000)
        );
        assert_eq!(g.last_part_ms, 4000);
        assert_eq!(g.last_part_grown_bytes, 42 * MIB, "from 78 MiB to 120 MiB");
        assert_eq!(g.increases, 60);
        assert_eq!(g.trend, 1.0);
    }

    #[test]
    fn where_the_line_falls_for_a_rise_that_stops() {
        // 211 samples (21 s); a steady rise over the first k samples, then held; or then freed
        // (a list torn down at shutdown, zeros after). It grows when the rise went on over at
        // least 16/21 of the time (160 of the 210 intervals).
        let shape = |k: u64, after: u64| -> Vec<u64> {
            (0..=210)
                .map(|i| if i <= k { i * MIB } else { after.min(k * MIB) })
                .collect()
        };
        for (k, want) in [
            (210, true),
            (175, true),
            (162, true),
            (158, false),
            (140, false),
        ] {
            assert_eq!(grows(&shape(k, u64::MAX)).is_some(), want, "held after {k}");
            assert_eq!(grows(&shape(k, 0)).is_some(), want, "freed after {k}");
        }
        // Freed on the last sample only: as a rise all along.
        let mut v = shape(210, 0);
        v.push(0);
        assert!(grows(&v).is_some());
    }

    #[test]
    fn staircases() {
        // Steps of 4 samples (short pauses): growth.
        let v: Vec<u64> = (0..120).map(|i| (i / 4) * 8 * MIB).collect();
        let g = grows(&v).expect("a staircase that keeps climbing");
        assert_eq!(g.grown_bytes, 29 * 8 * MIB);
        // Five steps over the run, each a fifth of it: the last one falls in the last third.
        let v: Vec<u64> = (0..100).map(|i| (i / 20 + 1) * 16 * MIB).collect();
        assert!(grows(&v).is_some(), "steps of a fifth");
        // Six steps, the last held for 40% of the run: bounded so far.
        let v: Vec<u64> = (0..100).map(|i| ((i / 12).min(5) + 1) * 16 * MIB).collect();
        assert!(rises(&v));
        assert_eq!(grows(&v), None, "last step held for 40%");
    }

    #[test]
    fn sawtooths_do_not_grow() {
        // Keeps going back down to the same low, up to the same height.
        let v: Vec<u64> = (0..200).map(|i| (i % 20) * 10 * MIB).collect();
        assert_eq!(grows(&v), None);
        // Teeth that shrink: the highest is the first, whose rise alone is a trend.
        let v: Vec<u64> = (0..200u64)
            .map(|i| (i % 20) * (20 - i / 20) * MIB)
            .collect();
        assert!(rises(&v));
        assert_eq!(grows(&v), None);
        // Teeth that climb: each falls back a little and then rises higher than the last.
        let v: Vec<u64> = (0..200u64)
            .map(|i| (i / 20) * 10 * MIB + (i % 20) * MIB)
            .collect();
        assert!(grows(&v).is_some());
    }

    #[test]
    fn a_rise_at_the_very_end_grows() {
        // Flat for 90 samples, then 10 MiB more in each of the last 10.
        let mut v = vec![50 * MIB; 90];
        v.extend((1..=10).map(|i| 50 * MIB + i * 10 * MIB));
        let g = grows(&v).expect("grows");
        assert_eq!((g.from_ms, g.to_ms), (8900, 9900));
        assert_eq!((g.grown_bytes, g.increases), (100 * MIB, 10));
        // Then freed at shutdown.
        v.push(0);
        assert!(grows(&v).is_some());
        // Only two steps at the end: too few to tell.
        let mut v = vec![0; 90];
        v.extend([10 * MIB, 20 * MIB]);
        assert_eq!(grows(&v), None);
    }

    #[test]
    fn few_samples() {
        assert_eq!(grows(&[0, 10 * MIB, 20 * MIB, 30 * MIB]), None, "4 samples");
        // 5 rising samples: the fewest that can grow; the last part is the last 3.
        let g = grows(&[0, 10 * MIB, 20 * MIB, 30 * MIB, 40 * MIB]).expect("grows");
        assert_eq!((g.last_part_ms, g.last_part_grown_bytes), (200, 30 * MIB));
        // So few samples cannot tell a rise that holds from one that goes on: the last part is
        // at least the last 3 samples, and these rose above the first two.
        assert!(grows(&[0, 10 * MIB, 20 * MIB, 30 * MIB, 30 * MIB]).is_some());
        // Held for the last 6 of 9: the last part (the last 3) gains nothing.
        let mut v = vec![0, 10 * MIB, 20 * MIB];
        v.extend([30 * MIB; 6]);
        assert_eq!(grows(&v), None);
        // All at one time (a hand-made report): every sample after the low is the last part.
        let v = [0, MIB, 2 * MIB, 3 * MIB, 4 * MIB, 5 * MIB];
        assert!(growth(&[7; 6], &v, &Criterion::default()).is_some());
        // Times out of order do not panic.
        let t = [500, 100, 400, 200, 300, 0];
        let _ = growth(&t, &v, &Criterion::default());
    }

    #[test]
    fn a_single_spike_does_not_grow() {
        let mut v = vec![MIB; 100];
        v[50] = 900 * MIB;
        assert_eq!(grows(&v), None);
        let mut v = vec![0; 100];
        v[99] = 900 * MIB;
        assert_eq!(grows(&v), None, "at the very end");
    }

    #[test]
    fn small_rises_do_not_count() {
        // Below 1 MiB.
        let v: Vec<u64> = (0..100).map(|i| i * 1000).collect();
        assert_eq!(grows(&v), None);
        // Below 10% of the maximum.
        let v: Vec<u64> = (0..100).map(|i| 1000 * MIB + i * MIB / 2).collect();
        assert_eq!(grows(&v), None);
    }

    #[test]
    fn short_or_odd_series() {
        assert_eq!(grows(&[]), None);
        assert_eq!(grows(&[0, 10 * MIB, 20 * MIB, 30 * MIB]), None, "4 samples");
        let t = times(3);
        let v: Vec<u64> = (0..100).map(|i| i * MIB).collect();
        assert_eq!(
            growth(&t, &v, &Criterion::default()),
            None,
            "extra values ignored"
        );
        let big = vec![
            u64::MAX - 5,
            u64::MAX - 4,
            u64::MAX - 3,
            u64::MAX - 2,
            u64::MAX,
        ];
        assert_eq!(grows(&big), None, "no overflow");
    }

    #[test]
    fn tau_b() {
        assert_eq!(kendall_tau_b(&[1, 2, 3, 4]), 1.0);
        assert_eq!(kendall_tau_b(&[4, 3, 2, 1]), -1.0);
        assert_eq!(kendall_tau_b(&[5, 5, 5]), 0.0);
        assert_eq!(kendall_tau_b(&[]), 0.0);
        let t = kendall_tau_b(&[1, 1, 2, 2]);
        assert!((t - (4.0 / (6.0f64 * 4.0).sqrt())).abs() < 1e-12, "{t}");
    }

    fn report_with(times: Vec<u64>, series: Vec<(u64, Vec<u64>)>) -> Report {
        let process = cuguard_format::Process {
            pid: 1,
            ppid: 0,
            exe: "/x".into(),
            argv: vec![],
            hostname: "h".into(),
            rank: None,
            start_unix_ms: 0,
            end_unix_ms: 0,
            labels: None,
        };
        let mut r = Report::new(true, cuguard_format::Reason::Exit, process);
        let frame = |function: &str, line| cuguard_format::Frame {
            ip: cuguard_format::Addr(1),
            module: "/opt/app/train".into(),
            offset: cuguard_format::Addr(1),
            function: Some(function.into()),
            file: Some("/src/train.c".into()),
            line: Some(line),
            inlined: None,
        };
        for (id, _) in &series {
            // Stacks 1 and 2 share a site (same function and line); 3 is elsewhere.
            let (function, line) = if *id < 3 { ("keep", 10) } else { ("other", 20) };
            r.stacks.push(cuguard_format::Stack {
                id: *id,
                frames: vec![frame(function, line)],
                python: vec![],
                site: Some(cuguard_format::StackSite {
                    in_: "frames".into(),
                    index: 0,
                    fingerprint: "f".into(),
                    kind: Some("user".into()),
                }),
                owner: None,
                mixed: vec![],
                origin: None,
            });
        }
        r.stack_samples = Some(cuguard_format::StackSamples {
            interval_ms: 100,
            times_ms: times,
            series: series
                .into_iter()
                .map(|(id, bytes)| cuguard_format::StackSeries {
                    stack: Some(id),
                    device: 0,
                    bytes,
                })
                .collect(),
        });
        r
    }

    #[test]
    fn a_run_with_too_few_samples_is_not_told() {
        let c = Criterion::default();
        assert_eq!(c.fewest_samples(), 5);
        let mut r = report_with(
            vec![100, 200, 300, 400],
            vec![(1, vec![0, MIB, 2 * MIB, 3 * MIB])],
        );
        r.process.end_unix_ms = 450;
        // Nothing allocated: nothing could grow.
        assert_eq!(not_told(&r, &c), None);
        r.stats.devices.push(cuguard_format::DeviceStats {
            device: 0,
            live_bytes: 0,
            peak_live_bytes: 3 * MIB,
            total_allocated_bytes: 3 * MIB,
            allocations: 3,
            frees: 0,
            released_bytes: None,
            host_pinned_live_bytes: None,
            pool: None,
        });
        let four = NotTold {
            samples: 4,
            needed: 5,
            end_ms: 450,
            span_ms: Some(350),
            code_end: false,
            interval_ms: Some(100),
        };
        assert_eq!(not_told(&r, &c), Some(four));
        assert_eq!(
            four.why(),
            "4 samples in the 350 ms from the first to the end (at 450 ms); 5 are needed, one every 100 ms"
        );
        // A fifth sample: told (here, it grew).
        let samples = r.stack_samples.as_mut().unwrap();
        samples.times_ms.push(500);
        samples.series[0].bytes.push(4 * MIB);
        assert_eq!(not_told(&r, &c), None);
        // A report older than sampling: nothing is said.
        r.stack_samples = None;
        assert_eq!(not_told(&r, &c), None);
        // Sampling off.
        r.config = Some(cuguard_format::Config {
            timeline_ms: Some(0),
            ..Default::default()
        });
        let none = NotTold {
            samples: 0,
            span_ms: None,
            interval_ms: None,
            ..four
        };
        assert_eq!(not_told(&r, &c), Some(none));
        assert_eq!(
            none.why(),
            "no samples: sampling was off (CUGUARD_TIMELINE_MS=0)"
        );
        // Samples only after the end (a program whose first allocation came late).
        let late = NotTold {
            samples: 0,
            span_ms: None,
            code_end: true,
            ..four
        };
        assert_eq!(
            late.why(),
            "no sample before the end of the code (at 450 ms); 5 are needed, one every 100 ms from the first allocation"
        );
    }

    fn sites_of(r: &Report) -> Vec<(String, u64)> {
        let sites = SiteIndex::new(r);
        let mut owners = OwnerIndex::new(r);
        growing_sites(r, &sites, &mut owners, |_| true, &Criterion::default())
            .into_iter()
            .map(|g| (g.label, g.growth.grown_bytes))
            .collect()
    }

    #[test]
    fn the_stacks_of_a_site_are_added_up() {
        // Stack 1 rises over the first half and holds; stack 2 rises over the second half; the
        // site of both rose all along, by both. Stack 3, alone at its site, is stack 1 again:
        // a rise over the first half, then held, is set-up.
        let half: Vec<u64> = (0..50).map(|i| i * MIB).collect();
        let a: Vec<u64> = half.iter().copied().chain(vec![49 * MIB; 50]).collect();
        let b: Vec<u64> = vec![0; 50]
            .into_iter()
            .chain(half.iter().copied())
            .collect();
        let r = report_with(times(100), vec![(1, a.clone()), (2, b), (3, a)]);
        assert_eq!(sites_of(&r), [("keep (train.c:10)".to_string(), 98 * MIB)]);
    }

    #[test]
    fn oversized_samples_are_read_within_bounds() {
        let n = 20_000;
        let ramp: Vec<u64> = (0..n as u64).map(|i| i * 1024).collect();
        let mut series = vec![(1, ramp)];
        series.extend((4..3000).map(|id| (id, vec![MIB; 10])));
        let r = report_with(times(n), series);
        let started = std::time::Instant::now();
        let got = sites_of(&r);
        assert_eq!(got.len(), 1);
        assert!(got[0].1 > 19_000 * 1024, "{got:?}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }

    /// A caching allocator whose segments grew at the line that needed a new one ("other",
    /// stack 3) while the program kept a tensor per step at another: with the cache's history,
    /// the kept line grows and the segments' line does not; without it, the segments' line.
    #[test]
    fn growth_inside_a_cache_follows_its_lines() {
        let n = 60usize;
        // The segments: a new 8 MiB segment every 10 samples, charged to stack 3.
        let segments: Vec<u64> = (0..n as u64).map(|i| (i / 10 + 1) * 8 * MIB).collect();
        let mut r = report_with(times(n), vec![(3, segments)]);
        r.stacks[0].owner = Some("pytorch_caching_allocator".into());
        // A tensor kept per step (1 MiB each, one per 100 ms), and a temporary made and freed in
        // every step at another line.
        let kept: Vec<(u64, u64)> = (0..n as u64)
            .map(|i| (i * 100 + 5, (i + 1) * MIB))
            .collect();
        let temporary: Vec<(u64, u64)> = (0..2 * n as u64)
            .map(|i| (i * 50 + 10, if i % 2 == 0 { 4 * MIB } else { 0 }))
            .collect();
        let frame = |line: u32| {
            serde_json::json!([{"file": "/src/train.py", "line": line, "function": "step"},
                               {"file": "/src/train.py", "line": 30, "function": "<module>"}])
        };
        let python = serde_json::json!({
            "end": {"recorded": true, "how": "finished", "time_ms": 6000},
            "view": {"at": "end", "time_ms": 6000, "complete": true, "allocations": [],
                "caches": [{"owner": "pytorch_caching_allocator", "framework": "pytorch",
                    "source": "history", "segment_bytes": 48 * MIB, "live_bytes": 60 * MIB,
                    "idle_bytes": 0,
                    "lines": [{"device": 0, "frames": frame(7), "samples": kept},
                              {"device": 0, "frames": frame(8), "samples": temporary}]}]}
        });
        r.python = Some(serde_json::from_value(python).unwrap());
        let sites = SiteIndex::new(&r);
        let mut owners = OwnerIndex::new(&r);
        let got = growing_sites(&r, &sites, &mut owners, |_| true, &Criterion::default());
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].label, "step (train.py:7)");
        assert_eq!(got[0].owner, "program");
        assert_eq!(
            got[0].stack,
            ["step (train.py:7)", "<module> (train.py:30)"]
        );
        assert_eq!(got[0].growth.grown_bytes, 59 * MIB);
        // Only the cache's lines are the program's: a check of the cache's owner alone sees no
        // growth inside it.
        let mut owners = OwnerIndex::new(&r);
        let cache_only = growing_sites(
            &r,
            &sites,
            &mut owners,
            |o| o.id == "pytorch_caching_allocator",
            &Criterion::default(),
        );
        assert!(cache_only.is_empty(), "{cache_only:?}");

        // Without the history's lines, the segments' line is what grew.
        r.python = None;
        assert_eq!(sites_of(&r), [("other (train.c:20)".to_string(), 40 * MIB)]);
    }
}
