//! `check --max-peak-growth`: a change that makes a run need more memory, caught before it
//! merges. The new run's peak (and, with `--by phase`, each phase occurrence's) against the
//! baseline's ([`crate::history::compare`]); one that grew past the limit fails the check, with
//! the sites new or grown at it, their lines in SARIF results and workflow annotations.

use serde::Serialize;

use crate::history::compare::{PeakChange, PeakDiff};
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

/// The peaks judged.
#[derive(Clone, Debug, Serialize)]
pub struct PeakVerdict {
    /// `--max-peak-growth` as given, for people.
    pub limit: String,
    /// Whether phase occurrences were judged (`--by phase`), or the whole run's peak alone.
    pub by_phase: bool,
    pub base_process: String,
    pub new_process: String,
    /// The whole run's peak first, then the phase occurrences, the most grown first.
    pub peaks: Vec<PeakJudged>,
    pub notes: Vec<String>,
}

/// One peak judged.
#[derive(Clone, Debug, Serialize)]
pub struct PeakJudged {
    #[serde(flatten)]
    pub change: PeakChange,
    /// Whether it grew past the limit.
    pub failing: bool,
}

impl PeakVerdict {
    /// Judges `diff` against `limit`.
    pub fn new(diff: PeakDiff, limit: PeakLimit, by_phase: bool) -> PeakVerdict {
        PeakVerdict {
            limit: limit.to_string(),
            by_phase,
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

    /// The failing peaks.
    pub fn failing(&self) -> impl Iterator<Item = &PeakJudged> {
        self.peaks.iter().filter(|p| p.failing)
    }

    /// Why the check fails, one line per failing peak.
    pub fn failures(&self) -> Vec<String> {
        self.failing()
            .map(|p| {
                format!(
                    "{}, over --max-peak-growth {}",
                    growth_words(&p.change),
                    self.limit
                )
            })
            .collect()
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
}
