//! The outcome of a check, [`Verdict`], and the [`Limits`] it applied (with the event kinds
//! that fail it, [`FailingEvents`]).

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Serialize;

use super::entries::{
    EventVerdict, GrowthNotTold, GrowthVerdict, HeldAtEnd, RuleUse, SuppressedFinding,
};
use super::kept;
use super::places::Place;
use crate::owners::{OwnerFilter, OwnerShare};

/// The event kinds that fail a check unless told otherwise.
pub const DEFAULT_FAILING_EVENTS: [&str; 3] =
    ["double_free", "invalid_free", "free_in_wrong_context"];

/// Which event kinds fail the check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailingEvents {
    /// No kind fails.
    None,
    /// Every kind fails.
    All,
    /// These kinds fail.
    Kinds(Vec<String>),
}

impl FailingEvents {
    /// Whether events of `kind` fail the check.
    pub fn includes(&self, kind: &str) -> bool {
        match self {
            FailingEvents::None => false,
            FailingEvents::All => true,
            FailingEvents::Kinds(kinds) => kinds.iter().any(|k| k == kind),
        }
    }
}

/// The limits of a check.
///
/// The two leak limits combine: the check fails when either measure is over its limit, and a
/// measure without a limit (`None`) never fails it. [`Limits::leaks`] gives the command's
/// defaults: with neither limit given both are 0 (any leak fails); with one given, the other
/// measure is not limited.
#[derive(Clone, Debug, Serialize)]
pub struct Limits {
    /// Counted bytes allowed; `None`: not limited.
    pub max_leaked_bytes: Option<u64>,
    /// Counted leaks allowed; `None`: not limited.
    pub max_leaks: Option<u64>,
    /// The most a site of a checked owner may grow in one process (bytes, see
    /// [`crate::growth`]); `None`: growth is not checked.
    pub max_growth: Option<u64>,
    /// Whose leaks are checked.
    pub owners: OwnerFilter,
    /// Event kinds that fail.
    pub fail_on_events: FailingEvents,
    /// Whether an incomplete report fails.
    pub require_complete: bool,
    /// Whether what Python objects held at the end of a Python program's code counts too
    /// (`--held`; by default only what nothing held, the lost, counts).
    pub held: bool,
}

impl Limits {
    /// The leak limits from what was given: neither, both 0 (any leak fails); one, that one
    /// alone (the other measure is not limited); both, both.
    pub fn leaks(
        max_leaked_bytes: Option<u64>,
        max_leaks: Option<u64>,
    ) -> (Option<u64>, Option<u64>) {
        match (max_leaked_bytes, max_leaks) {
            (None, None) => (Some(0), Some(0)),
            given => given,
        }
    }
}

impl Default for Limits {
    /// Any leak of the program's fails; growth is not checked; the default failing events.
    fn default() -> Self {
        Limits {
            max_leaked_bytes: Some(0),
            max_leaks: Some(0),
            max_growth: None,
            owners: OwnerFilter::default(),
            fail_on_events: FailingEvents::Kinds(
                DEFAULT_FAILING_EVENTS
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            ),
            require_complete: false,
            held: false,
        }
    }
}

/// The outcome of a check. Serialized as the `--format json` output (see
/// [`json::Json`](super::json::Json)).
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// Whether the reports pass.
    pub passed: bool,
    /// Why they fail, one line each (empty when they pass).
    pub failures: Vec<String>,
    /// The limits applied.
    pub limits: Limits,
    /// Whether a baseline was used.
    pub baseline: bool,
    /// Process reports read.
    pub reports: usize,
    /// Those that are incomplete (their sources).
    pub incomplete: Vec<String>,
    /// Those whose growth could not be told (too few samples), in input order: `--max-growth`
    /// did not check them.
    pub growth_not_told: Vec<GrowthNotTold>,
    /// Unsuppressed bytes leaked.
    pub leaked_bytes: u64,
    /// Unsuppressed leaks.
    pub leaks: u64,
    /// Bytes that count against the limit.
    pub counted_bytes: u64,
    /// Leaks that count against the limit.
    pub counted_leaks: u64,
    /// Suppressed bytes.
    pub suppressed_bytes: u64,
    /// Suppressed leaks.
    pub suppressed_leaks: u64,
    /// Suppressed events.
    pub suppressed_events: u64,
    /// Unsuppressed leaks not checked because of their owner (see `limits.owners`), by owner,
    /// all processes together (`count`: leaks).
    pub other_owners: Vec<OwnerShare>,
    /// What Python objects held at the end of Python programs' code and was not counted
    /// (`--held` counts it); `null` when no report is checked on its end, or with `--held`.
    pub held_at_end: Option<HeldAtEnd>,
    /// Sites: counting ones first (most counted bytes first), then the rest; made one at a time
    /// when read (see [`kept::SiteVerdicts`]).
    pub sites: kept::SiteVerdicts,
    /// Sites of checked owners that grew, per process: failing ones first, then most grown.
    pub growing: Vec<GrowthVerdict>,
    /// Unsuppressed events by kind and site: failing ones first.
    pub events: Vec<EventVerdict>,
    /// Every suppression rule with its matches.
    pub suppressions: Vec<RuleUse>,
    /// Per process, in input order; read back one at a time (see [`kept::ProcessVerdicts`]).
    pub processes: kept::ProcessVerdicts,
    /// The peaks against the baseline's (`--max-peak-growth`); absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peaks: Option<super::peaks::PeakVerdict>,
    /// Where the sites of leaks and events are, by site key (not in the JSON).
    #[serde(skip)]
    pub places: HashMap<String, Place>,
    /// Suppressed leaks and events by kind and site, in (kind, site) order (not in the JSON).
    #[serde(skip)]
    pub suppressed_sites: Vec<SuppressedFinding>,
    /// The directory the `sarif` and `github` formats name files relative to, absolute (see
    /// [`super::places::source_root`]); `None`: the current directory. Not in the JSON.
    #[serde(skip)]
    pub source_root: Option<PathBuf>,
    /// Whether the text lists each suppressed site with its rule (`--show-suppressed`). Not in
    /// the JSON.
    #[serde(skip)]
    pub show_suppressed: bool,
}

impl Verdict {
    /// Whether the leaks that count exceed a limit (then every counting site fails).
    pub fn leaks_fail(&self) -> bool {
        self.limits
            .max_leaked_bytes
            .is_some_and(|m| self.counted_bytes > m)
            || self
                .limits
                .max_leaks
                .is_some_and(|m| self.counted_leaks > m)
    }

    /// The rules that matched nothing.
    pub fn unused_suppressions(&self) -> impl Iterator<Item = &RuleUse> {
        self.suppressions.iter().filter(|r| r.matched == 0)
    }
}
