//! Comparing the processes of one job site by site: which process holds or grows much more than
//! the others at some site.
//!
//! The comparison works from per-process totals per site only: for every site, the bytes each
//! process leaked there (held at the end) and the bytes its series there grew by (see
//! [`crate::growth`]). [`Comparison`] is fed those totals one process at a time, sites by number
//! (the caller numbers them, one numbering per measure).
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
//! most bytes first (then by process, then by measure, then by site).
//!
//! # Memory
//!
//! The comparison keeps, per measure and site, only how many processes have a value there (not
//! 0); the values themselves go to a log (a temporary file for [`Comparison::on_disk`]; see
//! [`crate::spill`]) that [`Comparison::outliers`] reads back: the sites where at most half the
//! processes have a value have a median of 0, so only their values of at least
//! `min_excess_bytes` matter and are taken as they are read; the others' medians need all their
//! values, gathered in passes of at most [`BATCH`] values. So memory does not grow with the
//! number of processes or of sites' values, only with the distinct sites (four bytes each).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::io;

use serde::Serialize;

use crate::compact::Column;
use crate::record::{Dec, Enc};
use crate::spill::{Log, Spill};

/// The most values gathered at once for the medians of the sites most processes have.
pub const BATCH: usize = 1 << 17;

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

impl Measure {
    fn index(self) -> usize {
        match self {
            Measure::Held => 0,
            Measure::Grown => 1,
        }
    }
}

/// One process called out at one site, the site by number (see [`Comparison`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The process's number, in the order [`Comparison::add_process`] gave it.
    pub process: usize,
    /// What was compared.
    pub measure: Measure,
    /// The site's number (in the caller's numbering for the measure).
    pub site: u32,
    /// The process's bytes there.
    pub bytes: u64,
    /// The median of all processes' bytes there.
    pub median_bytes: u64,
    /// How many processes were compared.
    pub processes: usize,
}

/// One process called out at one site, the site named.
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
#[derive(Debug)]
pub struct Comparison {
    processes: usize,
    /// By measure, then site number: how many processes have a value there.
    counts: [Column<u32>; 2],
    /// One record per process with values: its number, then (site << 1 | measure, bytes) pairs.
    log: Spill,
    /// The first error writing the log.
    error: Option<io::Error>,
    record: Enc,
    values: Vec<(Measure, u32, u64)>,
}

impl Default for Comparison {
    fn default() -> Self {
        Comparison::with_log(Spill::Memory(Vec::new()))
    }
}

impl Comparison {
    /// An empty comparison, its values kept in memory.
    pub fn new() -> Comparison {
        Comparison::default()
    }

    /// An empty comparison, its values kept in a temporary file (in memory where none can be
    /// made).
    pub fn on_disk() -> Comparison {
        Comparison::with_log(Spill::new())
    }

    fn with_log(log: Spill) -> Comparison {
        Comparison {
            processes: 0,
            counts: [Column::new(), Column::new()],
            log,
            error: None,
            record: Enc::new(),
            values: Vec::new(),
        }
    }

    /// Adds the next process, its `values` (measure, site number, bytes: a site given twice adds
    /// up, bytes 0 are no value); returns its number.
    pub fn add_process(&mut self, values: impl IntoIterator<Item = (Measure, u32, u64)>) -> usize {
        let process = self.processes;
        self.processes += 1;
        let v = &mut self.values;
        v.clear();
        v.extend(values.into_iter().filter(|&(_, _, b)| b > 0));
        if v.is_empty() {
            return process;
        }
        v.sort_unstable_by_key(|&(m, s, _)| (m, s));
        v.dedup_by(|later, first| {
            let same = (later.0, later.1) == (first.0, first.1);
            if same {
                first.2 = first.2.saturating_add(later.2);
            }
            same
        });
        self.record.clear().u64(process as u64);
        for &(measure, site, bytes) in v.iter() {
            let counts = &mut self.counts[measure.index()];
            while counts.len() <= site as usize {
                counts.push(0);
            }
            *counts.get_mut(site as usize) += 1;
            self.record
                .u64((u64::from(site) << 1) | measure.index() as u64)
                .u64(bytes);
        }
        if self.error.is_none()
            && let Err(e) = self.record.write_to(&mut self.log)
        {
            self.error = Some(e);
        }
        process
    }

    /// How many processes so far have a value of `measure` at `site`.
    pub fn count(&self, measure: Measure, site: u32) -> u32 {
        let c = &self.counts[measure.index()];
        if (site as usize) < c.len() {
            *c.get(site as usize)
        } else {
            0
        }
    }

    /// How many processes were added.
    pub fn processes(&self) -> usize {
        self.processes
    }

    /// The processes called out, by `criterion` (see the module doc), most bytes first, then by
    /// process, measure and site (sites of one measure in `site_order`): at most `keep` of them,
    /// and how many in all.
    pub fn outliers(
        self,
        criterion: &Criterion,
        keep: usize,
        site_order: impl Fn(Measure, u32, u32) -> Ordering,
    ) -> io::Result<(Vec<Found>, usize)> {
        let Comparison {
            processes: n,
            counts,
            log,
            error,
            ..
        } = self;
        if let Some(e) = error {
            return Err(e);
        }
        let log = log.into_log()?;
        let order = |a: &Found, b: &Found| {
            b.bytes
                .cmp(&a.bytes)
                .then(a.process.cmp(&b.process))
                .then(a.measure.cmp(&b.measure))
                .then_with(|| site_order(a.measure, a.site, b.site))
        };
        let mut found = Kept::new(keep);
        if n < criterion.min_processes.max(1) {
            return Ok((Vec::new(), 0));
        }
        // A site's median is 0 when its zeros (the processes without a value) reach the middle.
        let zero_median = |k: u32| n - k as usize > n / 2;
        let mut dense: Vec<(Measure, u32, u32)> = Vec::new();
        for measure in [Measure::Held, Measure::Grown] {
            for (site, &k) in counts[measure.index()].iter().enumerate() {
                if k > 0 && !zero_median(k) {
                    dense.push((measure, site as u32, k));
                }
            }
        }
        let floor = criterion.min_excess_bytes.max(1);
        // Every site in the log has a count.
        let is_dense =
            |measure: Measure, site: u32| !zero_median(*counts[measure.index()].get(site as usize));
        // The first pass takes the sparse sites' outliers and the first batch of dense values.
        let mut batches = dense.chunk_by_budget(BATCH).peekable();
        let mut first = true;
        loop {
            let batch: &[(Measure, u32, u32)] = batches.next().unwrap_or(&[]);
            if !first && batch.is_empty() {
                break;
            }
            let mut slots: HashMap<(Measure, u32), (usize, usize)> = HashMap::new();
            let mut start = 0;
            for &(m, s, k) in batch {
                slots.insert((m, s), (start, 0));
                start += k as usize;
            }
            let mut gathered: Vec<(u32, u64)> = vec![(0, 0); start];
            read(&log, |process, measure, site, bytes| {
                if let Some((at, fill)) = slots.get_mut(&(measure, site)) {
                    gathered[*at + *fill] = (process, bytes);
                    *fill += 1;
                } else if first && bytes >= floor && !is_dense(measure, site) {
                    found.push(
                        Found {
                            process: process as usize,
                            measure,
                            site,
                            bytes,
                            median_bytes: 0,
                            processes: n,
                        },
                        &order,
                    );
                }
            })?;
            let mut scratch: Vec<u64> = Vec::new();
            for &(measure, site, k) in batch {
                let (at, fill) = slots[&(measure, site)];
                let values = &gathered[at..at + fill];
                debug_assert_eq!(fill, k as usize);
                scratch.clear();
                scratch.extend(values.iter().map(|&(_, b)| b));
                scratch.sort_unstable();
                let median = median(&scratch, n);
                for &(process, bytes) in values {
                    let excess = bytes.saturating_sub(median);
                    if u128::from(bytes) >= u128::from(median) * u128::from(criterion.ratio)
                        && excess >= criterion.min_excess_bytes
                        && excess > 0
                    {
                        found.push(
                            Found {
                                process: process as usize,
                                measure,
                                site,
                                bytes,
                                median_bytes: median,
                                processes: n,
                            },
                            &order,
                        );
                    }
                }
            }
            first = false;
        }
        Ok(found.finish(&order))
    }
}

/// Calls `each(process, measure, site, bytes)` for every value of the log, in process order.
fn read(log: &Log, mut each: impl FnMut(u32, Measure, u32, u64)) -> io::Result<()> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the comparison's log is damaged",
        )
    };
    let mut input = log.reader();
    while let Some(record) = crate::record::next(&mut input)? {
        let mut d = Dec::new(&record);
        let process = d.u32()?;
        while !d.is_empty() {
            let tagged = d.u64()?;
            let bytes = d.u64()?;
            let measure = if tagged & 1 == 0 {
                Measure::Held
            } else {
                Measure::Grown
            };
            let site = u32::try_from(tagged >> 1).map_err(|_| bad())?;
            each(process, measure, site, bytes);
        }
    }
    Ok(())
}

/// Splits sites (measure, site, values) into runs of at most `budget` values (a site with more
/// is a run of its own).
trait ChunkByBudget {
    fn chunk_by_budget(&self, budget: usize) -> std::vec::IntoIter<&[(Measure, u32, u32)]>;
}

impl ChunkByBudget for Vec<(Measure, u32, u32)> {
    fn chunk_by_budget(&self, budget: usize) -> std::vec::IntoIter<&[(Measure, u32, u32)]> {
        let mut runs = Vec::new();
        let (mut start, mut sum) = (0, 0usize);
        for (i, &(_, _, k)) in self.iter().enumerate() {
            if i > start && sum + k as usize > budget {
                runs.push(&self[start..i]);
                (start, sum) = (i, 0);
            }
            sum += k as usize;
        }
        if start < self.len() {
            runs.push(&self[start..]);
        }
        runs.into_iter()
    }
}

/// The first `keep` of what is found, in an order, and how many were found.
struct Kept {
    keep: usize,
    items: Vec<Found>,
    total: usize,
}

impl Kept {
    fn new(keep: usize) -> Kept {
        Kept {
            keep,
            items: Vec::new(),
            total: 0,
        }
    }

    fn push(&mut self, f: Found, order: &impl Fn(&Found, &Found) -> Ordering) {
        self.total += 1;
        self.items.push(f);
        if self.items.len() >= self.keep.saturating_mul(2).max(1024) {
            self.cut(order);
        }
    }

    fn cut(&mut self, order: &impl Fn(&Found, &Found) -> Ordering) {
        if self.items.len() > self.keep {
            self.items.select_nth_unstable_by(self.keep, order);
            self.items.truncate(self.keep);
        }
    }

    fn finish(mut self, order: &impl Fn(&Found, &Found) -> Ordering) -> (Vec<Found>, usize) {
        self.cut(order);
        self.items.sort_by(order);
        (self.items, self.total)
    }
}

/// The median of `n` values of which `nonzero` (sorted, ascending) are the ones not 0 (for
/// even `n`, the mean of the two middle ones, rounded down).
fn median(nonzero: &[u64], n: usize) -> u64 {
    let n = n.max(nonzero.len());
    let zeros = n - nonzero.len();
    let at = |i: usize| if i < zeros { 0 } else { nonzero[i - zeros] };
    if n == 0 {
        0
    } else if n % 2 == 1 {
        at(n / 2)
    } else {
        ((u128::from(at(n / 2 - 1)) + u128::from(at(n / 2))) / 2) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn job(values: &[u64]) -> Comparison {
        let mut c = Comparison::new();
        for &v in values {
            c.add_process([(Measure::Held, 0, v)]);
        }
        c
    }

    fn outliers(c: Comparison) -> Vec<Found> {
        c.outliers(&Criterion::default(), usize::MAX, |_, a, b| a.cmp(&b))
            .unwrap()
            .0
    }

    #[test]
    fn the_one_rank_far_above_the_median_is_called_out() {
        let mut v = vec![512 * MIB; 8];
        v[3] = 4096 * MIB;
        assert_eq!(
            outliers(job(&v)),
            vec![Found {
                process: 3,
                measure: Measure::Held,
                site: 0,
                bytes: 4096 * MIB,
                median_bytes: 512 * MIB,
                processes: 8,
            }]
        );
    }

    #[test]
    fn both_conditions_must_hold() {
        // 4× but only 48 MiB more.
        assert!(outliers(job(&[16 * MIB, 16 * MIB, 64 * MIB])).is_empty());
        // 100 MiB more but under 4×.
        assert!(outliers(job(&[100 * MIB, 100 * MIB, 200 * MIB])).is_empty());
        // Exactly 4×, and exactly 64 MiB more.
        assert_eq!(outliers(job(&[32 * MIB, 32 * MIB, 128 * MIB])).len(), 1);
        assert_eq!(outliers(job(&[16 * MIB, 16 * MIB, 80 * MIB])).len(), 1);
    }

    #[test]
    fn a_site_only_one_process_has_is_compared_against_zero() {
        let mut c = Comparison::on_disk();
        c.add_process([]);
        c.add_process([(Measure::Grown, 1, 64 * MIB - 1)]);
        c.add_process([(Measure::Grown, 0, 64 * MIB)]);
        c.add_process([]);
        let out = outliers(c);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].process, out[0].site, out[0].median_bytes),
            (2, 0, 0)
        );
    }

    #[test]
    fn a_site_given_twice_adds_up() {
        let mut c = Comparison::new();
        c.add_process([(Measure::Held, 5, 40 * MIB), (Measure::Held, 5, 40 * MIB)]);
        c.add_process([(Measure::Held, 5, 0)]);
        c.add_process([]);
        let out = outliers(c);
        assert_eq!((out.len(), out[0].bytes), (1, 80 * MIB));
    }

    #[test]
    fn fewer_than_three_processes_are_not_compared() {
        assert!(outliers(job(&[0, 1 << 40])).is_empty());
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[1, 5], 4), 0);
        assert_eq!(median(&[1, 3, 5], 4), 2);
        assert_eq!(median(&[1, 3, 5], 3), 3);
        assert_eq!(median(&[], 0), 0);
    }

    /// The comparison's answer is the one of every value held in memory and each site's median
    /// taken directly, whatever the batches: many processes, sites most of them have (in more
    /// than one batch) and sites few have, both measures, values around the thresholds.
    #[test]
    fn the_log_and_batches_give_the_direct_answer() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let n = 3000usize;
        let sites = 400u32;
        let mut all: Vec<Vec<(Measure, u32, u64)>> = Vec::new();
        let mut c = Comparison::on_disk();
        for _ in 0..n {
            let mut v = Vec::new();
            for s in 0..sites {
                // Site s is had by about (s % 10) tenths of the processes.
                if next() % 10 < u64::from(s % 10) {
                    let m = if s % 7 == 0 {
                        Measure::Grown
                    } else {
                        Measure::Held
                    };
                    v.push((m, s, next() % (300 * MIB) * u64::from(s % 3)));
                }
            }
            c.add_process(v.iter().copied());
            all.push(v);
        }
        let criterion = Criterion::default();
        let (got, total) = c.outliers(&criterion, 50, |_, a, b| a.cmp(&b)).unwrap();
        let mut want = Vec::new();
        for m in [Measure::Held, Measure::Grown] {
            for s in 0..sites {
                let mut values: Vec<(usize, u64)> = Vec::new();
                for (p, v) in all.iter().enumerate() {
                    for &(vm, vs, b) in v {
                        if (vm, vs) == (m, s) && b > 0 {
                            values.push((p, b));
                        }
                    }
                }
                let mut sorted: Vec<u64> = values.iter().map(|v| v.1).collect();
                sorted.sort_unstable();
                let median = median(&sorted, n);
                for (p, b) in values {
                    let excess = b.saturating_sub(median);
                    if u128::from(b) >= u128::from(median) * 4 && excess >= 64 * MIB {
                        want.push(Found {
                            process: p,
                            measure: m,
                            site: s,
                            bytes: b,
                            median_bytes: median,
                            processes: n,
                        });
                    }
                }
            }
        }
        want.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(a.process.cmp(&b.process))
                .then(a.measure.cmp(&b.measure))
                .then(a.site.cmp(&b.site))
        });
        assert!(want.len() > 50, "{}", want.len());
        assert!(want.iter().any(|f| f.median_bytes > 0));
        assert_eq!(total, want.len());
        want.truncate(50);
        assert_eq!(got, want);
    }
}
