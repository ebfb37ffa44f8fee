//! The entries of a check's [`Verdict`](super::verdict::Verdict): each site against the baseline
//! ([`SiteVerdict`], [`SiteStatus`]), each growing site, the events at each site, each process,
//! each suppression rule's matches, and what was set aside (suppressed findings, what Python
//! objects held at the end, the reports whose growth could not be told).

use std::sync::Arc;

use serde::Serialize;

use crate::growth::{GrowingSite, NotTold};
use crate::sites::SiteKind;

/// How a site compares with the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteStatus {
    /// No baseline was given: the site's leaks all count.
    Leak,
    /// Not in the baseline.
    New,
    /// More bytes or leaks than in the baseline.
    Grown,
    /// No more than in the baseline: nothing counts.
    Baselined,
}

/// One site in the verdict.
#[derive(Clone, Debug, Serialize)]
pub struct SiteVerdict {
    /// Site key.
    pub site: String,
    /// `file:line`, when known.
    pub location: Option<String>,
    /// Compared with the baseline.
    pub status: SiteStatus,
    /// Unsuppressed bytes leaked there.
    pub leaked_bytes: u64,
    /// Unsuppressed leaks there.
    pub leaks: u64,
    /// Bytes in the baseline (0 without one).
    pub baseline_bytes: u64,
    /// Leaks in the baseline.
    pub baseline_leaks: u64,
    /// Bytes that count against the limit.
    pub counted_bytes: u64,
    /// Leaks that count against the limit.
    pub counted_leaks: u64,
    /// Driver entries.
    pub apis: Vec<String>,
    /// Processes that leaked there (`exe[pid]`), at most 5.
    pub processes: Vec<String>,
    /// How many processes leaked there.
    pub process_count: u64,
    /// The site for people, its location once.
    pub label: String,
    /// What kind of frame it is, when the report says.
    pub kind: Option<SiteKind>,
}

/// A site that grew in one process.
#[derive(Clone, Debug, Serialize)]
pub struct GrowthVerdict {
    /// The process (`exe[pid]`).
    pub process: String,
    /// The site and how it grew.
    #[serde(flatten)]
    pub growth: GrowingSite,
    /// Whether it grew by more than `--max-growth`.
    pub failing: bool,
}

/// Events of one kind at one site.
#[derive(Clone, Debug, Serialize)]
pub struct EventVerdict {
    /// Kind.
    pub kind: String,
    /// Site key.
    pub site: String,
    /// Unsuppressed events.
    pub count: u64,
    /// Events in the baseline.
    pub baseline_count: u64,
    /// Events that count (beyond the baseline).
    pub counted: u64,
    /// Whether they fail the check (counted, and of a failing kind).
    pub failing: bool,
}

/// A suppression rule and how often it matched.
#[derive(Clone, Debug, Serialize)]
pub struct RuleUse {
    /// File.
    pub file: String,
    /// Line.
    pub line: usize,
    /// The rule.
    pub rule: String,
    /// Leaks and events it suppressed.
    pub matched: u64,
}

/// Memory Python objects held at the end and that was not counted.
#[derive(Clone, Debug, Serialize)]
pub struct HeldAtEnd {
    /// Bytes.
    pub bytes: u64,
    /// Allocations and live cache blocks.
    pub allocations: u64,
}

/// One process in the verdict (JUnit makes a test case of each).
#[derive(Clone, Debug, Serialize)]
pub struct ProcessVerdict {
    /// Report file.
    pub source: String,
    /// `exe[pid]`.
    pub name: String,
    /// Host.
    pub hostname: String,
    /// Rank.
    pub rank: Option<u32>,
    /// The label `worker`, if any; left out of the JSON when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Who it was, for people: `worker tcp://10.0.0.5:4002 (host n1, pid 7002)`,
    /// `rank 3 (host node17, pid 9001)`, `pid 4242 (host gpu01)`.
    pub who: String,
    /// Whether the report is final.
    pub complete: bool,
    /// Unsuppressed bytes leaked.
    pub leaked_bytes: u64,
    /// Unsuppressed leaks.
    pub leaks: u64,
    /// Whether it contributed to a failure: leaks at a counting site, failing events, or an
    /// incomplete report under `--require-complete`.
    pub failed: bool,
    /// The counting sites it leaked at, with its own bytes and leaks there.
    pub failing_sites: Vec<(Arc<str>, u64, u64)>,
    /// The failing events it had: (kind, site, count).
    pub failing_events: Vec<(String, String, u64)>,
    /// The sites that grew by more than `--max-growth` in it: (site, grown bytes).
    pub failing_growth: Vec<(String, u64)>,
}

/// Suppressed leaks or events of one kind at one site, all processes together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuppressedFinding {
    /// `leak`, or the events' kind.
    pub kind: String,
    /// Site key.
    pub site: String,
    /// Bytes (0 for events).
    pub bytes: u64,
    /// Leaks or events.
    pub count: u64,
    /// The rule that matched them first (index into
    /// [`Verdict::suppressions`](super::verdict::Verdict::suppressions)).
    pub rule: usize,
    /// Processes that had them (`exe[pid]`), at most 5.
    pub processes: Vec<String>,
    /// How many processes had them.
    pub process_count: u64,
}

/// A report whose growth could not be told.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GrowthNotTold {
    /// Where the report came from.
    pub source: String,
    /// Why (its samples, the run's length).
    #[serde(flatten)]
    pub why: NotTold,
}
