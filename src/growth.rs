//! What grows: the sites whose live bytes kept rising while the program ran, read from the
//! report's `stack_samples` (live device bytes per stack over time), even when the memory was
//! freed at shutdown and so is no leak.
//!
//! # The criterion
//!
//! [`growth`] reads one series (live bytes at sample times). Let *max* be its largest value,
//! the *rise* end at the first sample that reaches it, and start at the *low before the rise*
//! (the last sample, at or before that one, holding the smallest value so far). The *window*
//! runs from that low to the last sample that reaches the maximum, so a plateau held at the
//! maximum belongs to it and what comes after (freeing at shutdown) does not. The series grows
//! when, by the default [`Criterion`]:
//! - the rise is at least 1 MiB and at least 10% of the maximum;
//! - the window holds at least 5 samples, and the value goes up from one sample to the next at
//!   least 3 times during the rise (a single spike or one or two steps is not growth);
//! - the window's rank trend is strongly positive: Kendall's τ-b of the values against time is
//!   at least 0.6. Sorting by time and by value must mostly agree: a list that gains a buffer
//!   per iteration gives τ near 1; a temporary allocated and freed in every iteration of a loop
//!   sampled at random moments (0 or its size), noise, a sawtooth that keeps going back down,
//!   and a rise followed by a long plateau (set-up, then steady work) give τ well below. Where
//!   the line falls: a steady rise over the first half of the window and then held is growth
//!   (τ ≈ 0.86), over its first tenth and then held is not (τ ≈ 0.42).
//!
//! How much it grew is the rise (bytes from the low to the maximum) and over what time is the
//! rise's (from the low's sample to the maximum's).
//!
//! [`growing_sites`] adds up the series of the stacks that share a site (all devices) and runs
//! the criterion on each site's sum. The shim keeps at most 256 sample times and 128 series; a
//! report with more (hand-made or hostile) is read within bounds: the first [`MAX_SERIES`]
//! series, and at most [`MAX_TIMES`] sample times, evenly spread over the run when there are
//! more (the criterion's cost is quadratic in the samples).

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;

use crate::owners::OwnerIndex;
use crate::report::Report;
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
}

impl Default for Criterion {
    fn default() -> Criterion {
        Criterion {
            min_bytes: 1 << 20,
            min_fraction: 0.1,
            min_trend: 0.6,
            min_samples: 5,
            min_increases: 3,
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
}

/// Whether the series `bytes` (at `times`, same length; extra values of either are ignored)
/// grew, by `criterion` (see the module doc).
pub fn growth(times: &[u64], bytes: &[u64], criterion: &Criterion) -> Option<Growth> {
    let n = times.len().min(bytes.len());
    let v = &bytes[..n];
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
    })
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

/// The sites of `report` that grew (see the module doc), most grown first; only stacks whose
/// owner `include` accepts are added up.
pub fn growing_sites(
    report: &Report,
    sites: &SiteIndex<'_>,
    owners: &mut OwnerIndex<'_>,
    include: impl Fn(&crate::owners::Owner) -> bool,
    criterion: &Criterion,
) -> Vec<GrowingSite> {
    let Some(samples) = &report.stack_samples else {
        return Vec::new();
    };
    // The sample times read: all of them, or MAX_TIMES spread evenly (first and last kept).
    let all = samples.times_ms.len();
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
        return Vec::new();
    }
    struct Acc {
        sum: Vec<u64>,
        devices: BTreeSet<u32>,
        /// The stack whose series reached the most, and that most.
        largest: (Option<u64>, u64),
    }
    let mut by_site: HashMap<String, Acc> = HashMap::new();
    for series in samples.series.iter().take(MAX_SERIES) {
        let owner = owners.of_stack(series.stack, Some("device"));
        if !include(owners.owner(owner)) {
            continue;
        }
        let key = sites.site(series.stack).key.clone();
        let acc = by_site.entry(key).or_insert_with(|| Acc {
            sum: vec![0; n],
            devices: BTreeSet::new(),
            largest: (series.stack, 0),
        });
        let bytes = |k: usize| series.bytes.get(picks[k]).copied().unwrap_or(0);
        let mut top = 0;
        for (k, s) in acc.sum.iter_mut().enumerate() {
            let b = bytes(k);
            *s = s.saturating_add(b);
            top = top.max(b);
        }
        acc.devices.insert(series.device);
        if top > acc.largest.1 {
            acc.largest = (series.stack, top);
        }
    }
    let mut out: Vec<GrowingSite> = by_site
        .into_values()
        .filter_map(|acc| {
            let g = growth(&times, &acc.sum, criterion)?;
            let stack = acc.largest.0;
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
                devices: acc.devices.into_iter().collect(),
                growth: g,
                stack: sites.chain(stack),
            })
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

    #[test]
    fn plateaus() {
        // Set-up (weights, then optimizer state), then steady work: not growth.
        let mut v = vec![0; 5];
        v.extend(vec![500 * MIB; 20]);
        v.extend(vec![1000 * MIB; 200]);
        assert_eq!(grows(&v), None);
        // A rise over the first tenth of the run, then a long plateau at the top: bounded.
        let mut v: Vec<u64> = (0..=20).map(|i| i * 10 * MIB).collect();
        v.extend(vec![200 * MIB; 200]);
        assert_eq!(grows(&v), None);
        // Flat all along.
        assert_eq!(grows(&vec![300 * MIB; 100]), None);
        // A rise that goes on, with short pauses between steps: growth.
        let v: Vec<u64> = (0..120).map(|i| (i / 4) * 8 * MIB).collect();
        let g = grows(&v).expect("a staircase that keeps climbing");
        assert_eq!(g.grown_bytes, 29 * 8 * MIB);
    }

    #[test]
    fn a_sawtooth_that_keeps_going_back_down_does_not_grow() {
        let v: Vec<u64> = (0..200).map(|i| (i % 20) * 10 * MIB).collect();
        assert_eq!(grows(&v), None);
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
        let process = crate::report::Process {
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
        let mut r = Report::new(true, crate::report::Reason::Exit, process);
        let frame = |function: &str, line| crate::report::Frame {
            ip: crate::report::Addr(1),
            module: "/opt/app/train".into(),
            offset: crate::report::Addr(1),
            function: Some(function.into()),
            file: Some("/src/train.c".into()),
            line: Some(line),
            inlined: None,
        };
        for (id, _) in &series {
            // Stacks 1 and 2 share a site (same function and line); 3 is elsewhere.
            let (function, line) = if *id < 3 { ("keep", 10) } else { ("other", 20) };
            r.stacks.push(crate::report::Stack {
                id: *id,
                frames: vec![frame(function, line)],
                python: vec![],
                site: Some(crate::report::StackSite {
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
        r.stack_samples = Some(crate::report::StackSamples {
            interval_ms: 100,
            times_ms: times,
            series: series
                .into_iter()
                .map(|(id, bytes)| crate::report::StackSeries {
                    stack: Some(id),
                    device: 0,
                    bytes,
                })
                .collect(),
        });
        r
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
        // site of both rose all along, by both. Stack 3, alone at its site, is stack 1 again.
        let half: Vec<u64> = (0..50).map(|i| i * MIB).collect();
        let a: Vec<u64> = half.iter().copied().chain(vec![49 * MIB; 50]).collect();
        let b: Vec<u64> = vec![0; 50]
            .into_iter()
            .chain(half.iter().copied())
            .collect();
        let r = report_with(times(100), vec![(1, a.clone()), (2, b), (3, a)]);
        assert_eq!(
            sites_of(&r),
            [
                ("keep (train.c:10)".to_string(), 98 * MIB),
                ("other (train.c:20)".to_string(), 49 * MIB)
            ]
        );
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
}
