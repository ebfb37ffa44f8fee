//! The diff itself: [`Diff`], what changed between two runs, site by site and event kind by
//! event kind, compared from their summaries; the output formats ([`super::text`],
//! [`super::json`], …) write it. [`leak_places`] finds where a report's leak sites are in the
//! source, for the formats that point at code.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use serde::Serialize;

use crate::check::places::Place;
use crate::sites::{SiteIndex, SiteKind};
use crate::summary::Summary;
use cuguard_format::Report;

/// How a site changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Only in NEW.
    New,
    /// More in NEW.
    Grown,
    /// Less in NEW.
    Shrunk,
    /// Only in BASE.
    Fixed,
    /// The same.
    Unchanged,
}

/// One site's change.
#[derive(Clone, Debug, Serialize)]
pub struct SiteChange {
    /// Site key.
    pub site: String,
    /// `file:line`, when known.
    pub location: Option<String>,
    /// How it changed.
    pub change: Change,
    /// Bytes in BASE.
    pub base_bytes: u64,
    /// Leaks in BASE.
    pub base_leaks: u64,
    /// Bytes in NEW.
    pub new_bytes: u64,
    /// Leaks in NEW.
    pub new_leaks: u64,
    /// NEW − BASE bytes.
    pub delta_bytes: i128,
    /// NEW − BASE leaks.
    pub delta_leaks: i128,
    /// The site for people, its location once.
    pub label: String,
    /// What kind of frame it is, when the report says.
    pub kind: Option<SiteKind>,
    /// Its largest stack's frames in the mixed native and Python order, when it has Python
    /// frames (as the side that saw it first has it: BASE, else NEW).
    pub stack: Vec<String>,
}

/// One event kind's change.
#[derive(Clone, Debug, Serialize)]
pub struct EventChange {
    /// Kind.
    pub kind: String,
    /// Count in BASE.
    pub base: u64,
    /// Count in NEW.
    pub new: u64,
}

/// One side's totals.
#[derive(Clone, Debug, Serialize)]
pub struct Side {
    /// Process reports.
    pub reports: usize,
    /// Bytes leaked.
    pub leaked_bytes: u64,
    /// Leaks.
    pub leaks: u64,
}

/// The difference of two runs. Serialized as the `--format json` output (see [`super::json::Json`]).
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    /// BASE's totals.
    pub base: Side,
    /// NEW's totals.
    pub new: Side,
    /// NEW − BASE bytes.
    pub delta_bytes: i128,
    /// NEW − BASE leaks.
    pub delta_leaks: i128,
    /// Sites: new, grown, shrunk, fixed, unchanged; each group largest change first.
    pub sites: Vec<SiteChange>,
    /// Event kinds whose counts differ or not, by kind.
    pub events: Vec<EventChange>,
    /// The runs' peaks compared, the whole run's and each phase occurrence's, where each side
    /// is one process with a history, or each pair of the two sides' processes where a side
    /// has several ([`crate::history::compare`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peaks: Option<crate::history::compare::Peaks>,
    /// Why the peaks were not compared, when one side has histories and the other not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peaks_not_compared: Option<String>,
    /// Where NEW's leak sites are in the source, by site key ([`leak_places`]), for the formats
    /// that point at code; empty unless the command read them. Not in the JSON.
    #[serde(skip)]
    pub places: HashMap<String, Place>,
    /// The directory the formats that point at code name files relative to (`--source-root`,
    /// made absolute by [`crate::check::places::source_root`]); `None`: the current directory.
    /// Not in the JSON.
    #[serde(skip)]
    pub source_root: Option<PathBuf>,
}

/// Where each site of `report`'s leaks is in the source, by site key (as [`Summary`] keys its
/// sites): one [`Place`] per site, from the first of its stacks met.
pub fn leak_places(report: &Report) -> HashMap<String, Place> {
    let index = SiteIndex::new(report);
    let stacks: BTreeSet<Option<u64>> = report.leaks.iter().map(|l| l.stack).collect();
    let mut places = HashMap::new();
    for stack in stacks {
        let site = index.site(stack);
        if !places.contains_key(&site.key) {
            let place = Place::of(index.stack(stack), &site);
            places.insert(site.key.clone(), place);
        }
    }
    places
}

impl Diff {
    /// Compares two summaries built with every site kept (`top` = `usize::MAX`).
    pub fn new(base: &Summary, new: &Summary) -> Diff {
        let mut sites: BTreeMap<&str, SiteChange> = BTreeMap::new();
        for (side, summary) in [(0, base), (1, new)] {
            for s in &summary.sites {
                let c = sites.entry(&s.site).or_insert_with(|| SiteChange {
                    site: s.site.clone(),
                    location: s.location.clone(),
                    change: Change::Unchanged,
                    base_bytes: 0,
                    base_leaks: 0,
                    new_bytes: 0,
                    new_leaks: 0,
                    delta_bytes: 0,
                    delta_leaks: 0,
                    label: s.label.clone(),
                    kind: s.kind,
                    stack: s.stack.clone(),
                });
                if side == 0 {
                    (c.base_bytes, c.base_leaks) = (s.leaked_bytes, s.leaks);
                } else {
                    (c.new_bytes, c.new_leaks) = (s.leaked_bytes, s.leaks);
                }
            }
        }
        let mut sites: Vec<SiteChange> = sites
            .into_values()
            .map(|mut c| {
                c.delta_bytes = i128::from(c.new_bytes) - i128::from(c.base_bytes);
                c.delta_leaks = i128::from(c.new_leaks) - i128::from(c.base_leaks);
                c.change = if c.base_leaks == 0 {
                    Change::New
                } else if c.new_leaks == 0 {
                    Change::Fixed
                } else if (c.delta_bytes, c.delta_leaks) > (0, 0) {
                    Change::Grown
                } else if (c.delta_bytes, c.delta_leaks) < (0, 0) {
                    Change::Shrunk
                } else {
                    Change::Unchanged
                };
                c
            })
            .collect();
        sites.sort_by(|a, b| {
            a.change
                .cmp(&b.change)
                .then(b.delta_bytes.abs().cmp(&a.delta_bytes.abs()))
                .then(a.site.cmp(&b.site))
        });
        let mut events: BTreeMap<&str, EventChange> = BTreeMap::new();
        for (side, summary) in [(0, base), (1, new)] {
            for e in &summary.events {
                let c = events.entry(&e.kind).or_insert_with(|| EventChange {
                    kind: e.kind.clone(),
                    base: 0,
                    new: 0,
                });
                if side == 0 {
                    c.base = e.count;
                } else {
                    c.new = e.count;
                }
            }
        }
        let side = |s: &Summary| Side {
            reports: s.reports,
            leaked_bytes: s.leaked_bytes,
            leaks: s.leaks,
        };
        Diff {
            delta_bytes: i128::from(new.leaked_bytes) - i128::from(base.leaked_bytes),
            delta_leaks: i128::from(new.leaks) - i128::from(base.leaks),
            base: side(base),
            new: side(new),
            sites,
            events: events.into_values().collect(),
            peaks: None,
            peaks_not_compared: None,
            places: HashMap::new(),
            source_root: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::input::map_reports;
    use crate::summary::ReportSummary;

    fn summary(names: &[&str]) -> Summary {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let files: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
        let p = map_reports(&files, |s, r| ReportSummary::new(s, &r, usize::MAX)).unwrap();
        Summary::new(p.into_iter().map(|(_, s)| s).collect(), usize::MAX)
    }

    #[test]
    fn sites_are_new_fixed_grown_or_unchanged() {
        let d = Diff::new(
            &summary(&["leaks-two-contexts.json", "events.json"]),
            &summary(&["merged.json", "leaks-two-contexts.json"]),
        );
        let got: Vec<(&str, Change, i128)> = d
            .sites
            .iter()
            .map(|s| (s.site.as_str(), s.change, s.delta_bytes))
            .collect();
        assert_eq!(
            got,
            [
                ("<no stack>", Change::New, 2_147_487_744),
                ("make_buffers", Change::Grown, 8_389_120),
                ("libscratch.so+0x1a2b", Change::Grown, 4_194_304),
                ("worker_loop", Change::Grown, 3_145_728),
                ("cupy_cuda_memory_malloc", Change::Fixed, -65_536),
            ]
        );
        let same = Diff::new(&summary(&["events.json"]), &summary(&["events.json"]));
        assert!(same.sites.iter().all(|s| s.change == Change::Unchanged));
        assert_eq!(same.delta_bytes, 0);
    }
}
