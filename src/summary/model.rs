//! The summary of several reports, [`Summary`]: the totals across processes, the sites that
//! leaked most, the job, and each process's summary (`report.rs`).

use serde::Serialize;

use super::groups;
use super::overall::OverallSite;
use super::report::{EventCount, ReportSummary};
use crate::owners::OwnerShare;
use cuguard_format::Cost;

/// The summary of several reports. Serialized as the `--format json` output (see
/// [`json::Json`](super::json::Json)).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// How many process reports were read.
    pub reports: usize,
    /// How many of them are complete (`complete: true`).
    pub complete_reports: usize,
    /// Bytes leaked, all processes together.
    pub leaked_bytes: u64,
    /// Leaks, all processes together.
    pub leaks: u64,
    /// Events by kind, all processes together, most frequent first.
    pub events: Vec<EventCount>,
    /// Sites across all processes, most bytes first, at most `--top` of them.
    pub sites: Vec<OverallSite>,
    /// How many distinct sites there are in all.
    pub sites_total: usize,
    /// Bytes leaked (held at the end) by owner, all processes together, most first
    /// (`count`: leaks).
    pub owners: Vec<OwnerShare>,
    /// What cuguard itself cost, all processes that say together (`null` when none does).
    pub cost: Option<Cost>,
    /// The processes as one job: grouped (`--by`), compared, incomplete and missing (see
    /// [`groups`]); left out when not grouped and nothing is called out or missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<groups::Job>,
    /// One summary per process, in input order. Last: the JSON format streams it (see
    /// [`json::Json`](super::json::Json)).
    pub processes: Vec<ReportSummary>,
}

impl Summary {
    /// Total events of every kind.
    pub fn event_total(&self) -> u64 {
        self.events.iter().map(|e| e.count).sum()
    }
}
