//! Comparing the processes of one job site by site: which process holds or grows much more than
//! the others at some site.
//!
//! The comparison works from per-process totals per site only: for every site, the bytes each
//! process leaked there (held at the end) and the bytes its series there grew by (see
//! [`crate::growth`]). [`Comparison`] is fed those totals one process at a time and keeps
//! nothing else, so its memory is bounded by (distinct sites × processes), never by reports.
//!
//! # The criterion
//!
//! With `N` processes in the job (`N ≥` [`Criterion::min_processes`], 3 by default), at each
//! site, for each measure (held, grown) separately: let `v` be each process's value there (`0`
//! for a process that has none) and `m` the median of the `N` values (for even `N`, the mean of
//! the two middle ones, rounded down). A process is *called out* at the site when
//!
//! - `v ≥` [`Criterion::ratio`] `× m` (4 by default), and
//! - `v − m ≥` [`Criterion::min_excess_bytes`] (64 MiB by default).
//!
//! So with 8 ranks of which seven hold 512 MiB at `train.py:88` and one holds 4 GiB, that one is
//! called out (8× the median, 3.5 GiB more); a site only one process of many has is called out
//! when that process holds at least 64 MiB there (the median is 0). Called-out sites are listed
//! most bytes first (then by process, then by site).

use std::collections::HashMap;

use serde::Serialize;

/// When a process is called out (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub struct Criterion {
    /// The fewest processes a comparison needs.
    pub min_processes: usize,
    /// How many times the median a value must be, at least.
    pub ratio: u64,
    /// How many bytes more than the median a value must be, at least.
    pub min_excess_bytes: u64,
}

impl Default for Criterion {
    fn default() -> Self {
        Criterion {
            min_processes: 3,
            ratio: 4,
            min_excess_bytes: 64 << 20,
        }
    }
}

/// What is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Bytes leaked at the site (held at the end).
    Held,
    /// Bytes the site grew by while the process ran.
    Grown,
}

/// One process called out at one site.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outlier {
    /// The process's number, in the order [`Comparison::add_process`] gave it.
    pub process: usize,
    /// What was compared.
    pub measure: Measure,
    /// The site's key.
    pub site: String,
    /// The site for people.
    pub label: String,
    /// The process's bytes there.
    pub bytes: u64,
    /// The median of all processes' bytes there.
    pub median_bytes: u64,
    /// How many processes were compared.
    pub processes: usize,
}

impl Outlier {
    /// `bytes / median_bytes`; `None` when the median is 0.
    pub fn ratio(&self) -> Option<f64> {
        (self.median_bytes > 0).then(|| self.bytes as f64 / self.median_bytes as f64)
    }
}

/// Per-process totals per site, fed one process at a time (see the module doc).
#[derive(Debug, Default)]
pub struct Comparison {
    processes: usize,
    /// By (measure, site key): the site's label and each process's bytes (sparse).
    sites: HashMap<(Measure, String), SiteValues>,
}

/// One site's label and each process's bytes there, by process number (only those not 0).
type SiteValues = (String, Vec<(usize, u64)>);

impl Comparison {
    /// An empty comparison.
    pub fn new() -> Comparison {
        Comparison::default()
    }

    /// Adds a process; returns its number for [`Comparison::add`].
    pub fn add_process(&mut self) -> usize {
        self.processes += 1;
        self.processes - 1
    }

    /// Adds `bytes` of `measure` at `site` (key; `label` for people) for `process`.
    pub fn add(&mut self, process: usize, measure: Measure, site: &str, label: &str, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let (_, values) = self
            .sites
            .entry((measure, site.to_string()))
            .or_insert_with(|| (label.to_string(), Vec::new()));
        match values.last_mut() {
            Some((p, b)) if *p == process => *b = b.saturating_add(bytes),
            _ => values.push((process, bytes)),
        }
    }

    /// How many processes were added.
    pub fn processes(&self) -> usize {
        self.processes
    }

    /// The processes called out, by `criterion` (see the module doc).
    pub fn outliers(&self, criterion: &Criterion) -> Vec<Outlier> {
        let n = self.processes;
        let mut out = Vec::new();
        if n < criterion.min_processes.max(1) {
            return out;
        }
        for ((measure, site), (label, values)) in &self.sites {
            let median = median(values.iter().map(|&(_, b)| b), n);
            for &(process, bytes) in values {
                let excess = bytes.saturating_sub(median);
                if u128::from(bytes) >= u128::from(median) * u128::from(criterion.ratio)
                    && excess >= criterion.min_excess_bytes
                    && excess > 0
                {
                    out.push(Outlier {
                        process,
                        measure: *measure,
                        site: site.clone(),
                        label: label.clone(),
                        bytes,
                        median_bytes: median,
                        processes: n,
                    });
                }
            }
        }
        out.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(a.process.cmp(&b.process))
                .then(a.measure.cmp(&b.measure))
                .then(a.site.cmp(&b.site))
        });
        out
    }
}

/// The median of `n` values of which `nonzero` are the ones not 0 (for even `n`, the mean of the
/// two middle ones, rounded down).
fn median(nonzero: impl Iterator<Item = u64>, n: usize) -> u64 {
    let mut v: Vec<u64> = nonzero.collect();
    v.resize(n.max(v.len()), 0);
    v.sort_unstable();
    let n = v.len();
    if n == 0 {
        0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        ((u128::from(v[n / 2 - 1]) + u128::from(v[n / 2])) / 2) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn job(values: &[u64]) -> Comparison {
        let mut c = Comparison::new();
        for &v in values {
            let p = c.add_process();
            c.add(p, Measure::Held, "k", "train.py:88", v);
        }
        c
    }

    #[test]
    fn the_one_rank_far_above_the_median_is_called_out() {
        let mut v = vec![512 * MIB; 8];
        v[3] = 4096 * MIB;
        let out = job(&v).outliers(&Criterion::default());
        assert_eq!(
            out,
            vec![Outlier {
                process: 3,
                measure: Measure::Held,
                site: "k".into(),
                label: "train.py:88".into(),
                bytes: 4096 * MIB,
                median_bytes: 512 * MIB,
                processes: 8,
            }]
        );
        assert_eq!(out[0].ratio(), Some(8.0));
    }

    #[test]
    fn both_conditions_must_hold() {
        // 4× but only 48 MiB more.
        assert!(
            job(&[16 * MIB, 16 * MIB, 64 * MIB])
                .outliers(&Criterion::default())
                .is_empty()
        );
        // 100 MiB more but under 4×.
        assert!(
            job(&[100 * MIB, 100 * MIB, 200 * MIB])
                .outliers(&Criterion::default())
                .is_empty()
        );
        // Exactly 4×, and exactly 64 MiB more.
        let c = Criterion::default();
        assert_eq!(job(&[32 * MIB, 32 * MIB, 128 * MIB]).outliers(&c).len(), 1);
        assert_eq!(job(&[16 * MIB, 16 * MIB, 80 * MIB]).outliers(&c).len(), 1);
    }

    #[test]
    fn a_site_only_one_process_has_is_compared_against_zero() {
        let mut c = Comparison::new();
        for _ in 0..4 {
            c.add_process();
        }
        c.add(2, Measure::Grown, "g", "g.py:1", 64 * MIB);
        c.add(1, Measure::Grown, "h", "h.py:1", 64 * MIB - 1);
        let out = c.outliers(&Criterion::default());
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].process, out[0].median_bytes, out[0].ratio()),
            (2, 0, None)
        );
    }

    #[test]
    fn fewer_than_three_processes_are_not_compared() {
        assert!(
            job(&[0, 1 << 40])
                .outliers(&Criterion::default())
                .is_empty()
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median([5, 1].into_iter(), 4), 0);
        assert_eq!(median([5, 1, 3].into_iter(), 4), 2);
        assert_eq!(median([5, 1, 3].into_iter(), 3), 3);
    }
}
