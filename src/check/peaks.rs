//! `check --max-peak-growth`: a change that makes a run need more memory, caught before it
//! merges. The new run's peak (and, with `--by phase`, each phase occurrence's) against the
//! baseline's ([`crate::history::compare`]); one that grew past the limit fails the check, with
//! the sites new or grown at it, their lines in SARIF results and workflow annotations. Merged
//! reports are judged pair by pair (rank by rank), each failing peak named by its pair.

use serde::Serialize;

use crate::history::compare::{JobPeaks, PeakChange, PeakDiff};
use crate::wording::bytes;

/// How much a peak may grow: a fraction of the baseline's peak (`5%`), or bytes (`256MiB`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PeakLimit {
    Ratio(f64),
    Bytes(u64),
}

impl PeakLimit {
    /// `5%`, `0.5%`, or a size, read by `size` (as `--max-growth` reads it: `256MiB`).
    pub fn parse(text: &str, size: fn(&str) -> Result<u64, String>) -> Result<PeakLimit, String> {
        let t = text.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("{text:?} is not a percentage (5%) or a size (256MiB)"))?;
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{text:?}: a percentage of 0 or more"));
            }
            return Ok(PeakLimit::Ratio(v / 100.0));
        }
        size(t).map(PeakLimit::Bytes)
    }

    /// Whether `c` grew no more than this (any growth of a peak that was 0 is over a ratio).
    fn allows(self, c: &PeakChange) -> bool {
        match self {
            PeakLimit::Bytes(b) => c.delta_bytes <= b as i64,
            PeakLimit::Ratio(r) => c.delta_bytes as f64 <= r * c.base_peak_bytes as f64,
        }
    }
}

impl std::fmt::Display for PeakLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeakLimit::Ratio(r) => write!(f, "{}%", r * 100.0),
            PeakLimit::Bytes(b) => f.write_str(&bytes(*b)),
        }
    }
}

/// The peaks judged: `--max-peak-growth` and how it was applied, then one process's peaks
/// against another's, or two jobs' pair by pair (the JSON's `peaks`; for one process a side,
/// `{limit, by_phase, base_process, new_process, peaks[], notes[]}`).
#[derive(Clone, Debug, Serialize)]
pub struct PeakVerdict {
    /// `--max-peak-growth` as given, for people.
    pub limit: String,
    /// Whether phase occurrences were judged (`--by phase`), or the whole run's peak alone.
    pub by_phase: bool,
    #[serde(flatten)]
    pub judged: Judged,
}

/// What was judged: one pair of processes, or two jobs' pairs.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Judged {
    /// One process each side.
    One(ProcessJudged),
    /// Several processes on a side (merged reports): each pair judged, paired by rank, else
    /// worker, else order ([`crate::history::compare::compare_job`]).
    Job(JobPeaks<ProcessJudged>),
}

/// One process's peaks against another's, judged.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessJudged {
    pub base_process: String,
    pub new_process: String,
    /// The whole run's peak first, then the phase occurrences, the most grown first.
    pub peaks: Vec<PeakJudged>,
    pub notes: Vec<String>,
}

impl ProcessJudged {
    fn new(diff: PeakDiff, limit: PeakLimit) -> ProcessJudged {
        ProcessJudged {
            base_process: diff.base_process,
            new_process: diff.new_process,
            peaks: diff
                .peaks
                .into_iter()
                .map(|change| PeakJudged {
                    failing: !limit.allows(&change),
                    change,
                })
                .collect(),
            notes: diff.notes,
        }
    }

    /// Whether any of its peaks fails.
    pub fn fails(&self) -> bool {
        self.peaks.iter().any(|p| p.failing)
    }
}

/// One peak judged.
#[derive(Clone, Debug, Serialize)]
pub struct PeakJudged {
    #[serde(flatten)]
    pub change: PeakChange,
    /// Whether it grew past the limit.
    pub failing: bool,
}

/// A failing peak, with whose it is.
pub struct FailingPeak<'v> {
    /// The pair (`rank 3`), where two jobs were judged.
    pub who: Option<&'v str>,
    pub process: &'v ProcessJudged,
    pub peak: &'v PeakJudged,
}

/// The most lines [`PeakVerdict::failures`] gives for two jobs, the last saying how many more
/// fail.
pub const FAILURE_LINES: usize = 20;

impl PeakVerdict {
    /// Judges `diff` (one process's peaks against another's) against `limit`.
    pub fn new(diff: PeakDiff, limit: PeakLimit, by_phase: bool) -> PeakVerdict {
        PeakVerdict {
            limit: limit.to_string(),
            by_phase,
            judged: Judged::One(ProcessJudged::new(diff, limit)),
        }
    }

    /// Judges each pair of `job` against `limit`.
    pub fn job(job: JobPeaks<PeakDiff>, limit: PeakLimit, by_phase: bool) -> PeakVerdict {
        PeakVerdict {
            limit: limit.to_string(),
            by_phase,
            judged: Judged::Job(job.map(|d| ProcessJudged::new(d, limit))),
        }
    }

    /// The failing peaks, pair by pair (in key order), each pair's in its order.
    pub fn failing(&self) -> Vec<FailingPeak<'_>> {
        fn each<'v>(who: Option<&'v str>, process: &'v ProcessJudged) -> Vec<FailingPeak<'v>> {
            process
                .peaks
                .iter()
                .filter(|p| p.failing)
                .map(|peak| FailingPeak { who, process, peak })
                .collect()
        }
        match &self.judged {
            Judged::One(p) => each(None, p),
            Judged::Job(job) => job
                .processes
                .iter()
                .flat_map(|n| each(Some(n.name.as_str()), &n.peaks))
                .collect(),
        }
    }

    /// Why the check fails, one line per failing peak; for jobs, each naming its pair (`rank 3:
    /// the run's peak grew by …`), at most [`FAILURE_LINES`].
    pub fn failures(&self) -> Vec<String> {
        let failing = self.failing();
        let most = match self.judged {
            Judged::One(_) => usize::MAX,
            Judged::Job(_) => FAILURE_LINES,
        };
        let mut out: Vec<String> = failing
            .iter()
            .take(most)
            .map(|f| {
                format!(
                    "{}{}, over --max-peak-growth {}",
                    f.who.map_or(String::new(), |w| format!("{w}: ")),
                    growth_words(&f.peak.change),
                    self.limit
                )
            })
            .collect();
        if failing.len() > most {
            let more = failing.len() - (most - 1);
            out.truncate(most - 1);
            out.push(format!(
                "… and {more} more peaks over --max-peak-growth {}",
                self.limit
            ));
        }
        out
    }
}

/// `the peak of step #4 grew by 256.0 MiB (+200.0%): 128.0 MiB → 384.0 MiB`.
pub fn growth_words(c: &PeakChange) -> String {
    let what = if c.phase.is_some() {
        format!("the peak of phase {}", c.what)
    } else {
        "the run's peak".to_string()
    };
    let pct = c
        .growth_ratio()
        .map_or(String::new(), |r| format!(" ({:+.1}%)", r * 100.0));
    format!(
        "{what} grew by {}{pct}: {} → {}",
        bytes(c.delta_bytes.max(0) as u64),
        bytes(c.base_peak_bytes),
        bytes(c.new_peak_bytes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(base: u64, new: u64) -> PeakChange {
        PeakChange {
            what: "step #4".into(),
            phase: Some("step".into()),
            base_peak_bytes: base,
            new_peak_bytes: new,
            delta_bytes: new as i64 - base as i64,
            base_stayed_bytes: None,
            new_stayed_bytes: None,
            base_peak_ms: 0.0,
            new_peak_ms: 0.0,
            sites: Vec::new(),
        }
    }

    #[test]
    fn limits_read_as_percentages_or_sizes_and_judge_growth() {
        let size = |t: &str| t.parse::<u64>().map_err(|e| e.to_string());
        assert_eq!(PeakLimit::parse("5%", size), Ok(PeakLimit::Ratio(0.05)));
        assert_eq!(PeakLimit::parse("1024", size), Ok(PeakLimit::Bytes(1024)));
        assert!(PeakLimit::parse("-1%", size).is_err());
        assert!(PeakLimit::parse("lots%", size).is_err());
        let five = PeakLimit::Ratio(0.05);
        assert!(five.allows(&change(100, 105)));
        assert!(!five.allows(&change(100, 106)));
        assert!(five.allows(&change(100, 50)));
        assert!(!five.allows(&change(0, 1)));
        assert!(PeakLimit::Bytes(10).allows(&change(100, 110)));
        assert!(!PeakLimit::Bytes(10).allows(&change(100, 111)));
        assert_eq!(
            growth_words(&change(128 << 20, 384 << 20)),
            "the peak of phase step #4 grew by 256.0 MiB (+200.0%): 128.0 MiB → 384.0 MiB"
        );
    }

    #[test]
    fn a_jobs_failing_peaks_name_their_rank_and_are_bounded() {
        use crate::history::compare::{Named, PairBy};
        let ranks = |n: u32| JobPeaks {
            by: PairBy::Rank,
            base_processes: n as usize,
            new_processes: n as usize,
            processes: (0..n)
                .map(|r| Named {
                    name: format!("rank {r}"),
                    rank: Some(r),
                    worker: None,
                    peaks: PeakDiff {
                        base_process: format!("train[{r}]"),
                        new_process: format!("train[{}]", 100 + r),
                        peaks: vec![change(100, 100 + u64::from(r))],
                        notes: Vec::new(),
                    },
                })
                .collect(),
            not_compared: Vec::new(),
            only_base: Vec::new(),
            only_new: Vec::new(),
            notes: Vec::new(),
        };
        // 5%: ranks 6 and up fail.
        let v = PeakVerdict::job(ranks(8), PeakLimit::Ratio(0.05), true);
        let who: Vec<_> = v.failing().iter().map(|f| f.who).collect();
        assert_eq!(who, [Some("rank 6"), Some("rank 7")]);
        assert_eq!(
            v.failures()[0],
            "rank 6: the peak of phase step #4 grew by 6 B (+6.0%): 100 B → 106 B, over --max-peak-growth 5%"
        );
        // Any growth: ranks 1 to 39 fail, 19 said and the rest counted.
        let many = PeakVerdict::job(ranks(40), PeakLimit::Bytes(0), true);
        let lines = many.failures();
        assert_eq!(lines.len(), FAILURE_LINES);
        assert!(lines[18].starts_with("rank 19: "), "{}", lines[18]);
        assert_eq!(lines[19], "… and 20 more peaks over --max-peak-growth 0 B");
    }
}
