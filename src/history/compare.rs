//! Two runs' histories compared at their peaks: the whole run's peak, and each phase
//! occurrence's (aligned by name and occurrence, `step #4` with `step #4`), with the sites whose
//! memory at that peak is new, gone, grown or shrunk. What `cuguard diff` shows beside the leaks
//! and `cuguard check --max-peak-growth` gates on.
//!
//! Runs are aligned by their phases' occurrences where both have phases; the whole run's peak
//! is compared always. An occurrence only one run has is said, not compared.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::Opened;
use super::phases::{self, PhaseSummary};
use crate::check::places::Place;
use crate::input::InputError;

/// Sites listed per compared peak.
pub const SITES_PER_PEAK: usize = 5;

/// Two runs' peaks.
#[derive(Clone, Debug, Serialize)]
pub struct PeakDiff {
    pub base_process: String,
    pub new_process: String,
    /// The whole run first, then phase occurrences, the most grown first.
    pub peaks: Vec<PeakChange>,
    /// What could not be compared (an occurrence only one run has, a history not whole), one
    /// line each.
    pub notes: Vec<String>,
}

/// One peak in both runs.
#[derive(Clone, Debug, Serialize)]
pub struct PeakChange {
    /// `the run`, or the occurrence (`step #4`).
    pub what: String,
    /// The phase's name; `None` for the whole run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    pub base_peak_bytes: u64,
    pub new_peak_bytes: u64,
    pub delta_bytes: i64,
    /// What the occurrence kept (allocated in it, live at its end), each run; `None` for the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_stayed_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_stayed_bytes: Option<u64>,
    /// When each peak was, ms since each run's start.
    pub base_peak_ms: f64,
    pub new_peak_ms: f64,
    /// The sites whose memory at the peak changed, the largest change first (at most
    /// [`SITES_PER_PEAK`]; only for peaks that changed).
    pub sites: Vec<PeakSite>,
}

impl PeakChange {
    /// Growth as a fraction of the base peak (`None` when the base peak is 0).
    pub fn growth_ratio(&self) -> Option<f64> {
        (self.base_peak_bytes > 0).then(|| self.delta_bytes as f64 / self.base_peak_bytes as f64)
    }
}

/// A site's memory at a compared peak.
#[derive(Clone, Debug, Serialize)]
pub struct PeakSite {
    /// The site for people (`step (train.py:42) via alloc (train.py:9)`).
    pub label: String,
    /// The site's key (what groups it).
    pub site: String,
    /// `file:line`, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    pub base_bytes: u64,
    pub new_bytes: u64,
    pub delta_bytes: i64,
    /// `new`, `gone`, `grown` or `shrunk`.
    pub change: &'static str,
    /// Where it is in the source (its frames with files, the site's first), for the results
    /// that point at code (not in the JSON).
    #[serde(skip)]
    pub place: crate::check::places::Place,
}

/// The sites that changed at a peak as a text table (change, how, site, base → new), as `diff`
/// and `check` print them under each peak, at `indent`.
pub fn sites_table(sites: &[PeakSite], indent: &str) -> String {
    use crate::wording::{bytes, delta_bytes, one_line};
    let mut t = crate::style::Table::new(&[true, false, false, false]);
    for s in sites {
        t.row([
            delta_bytes(i128::from(s.delta_bytes)),
            s.change.to_string(),
            one_line(&s.label),
            format!("{} → {}", bytes(s.base_bytes), bytes(s.new_bytes)),
        ]);
    }
    t.render(indent)
}

/// Compares `base` and `new`: the whole run's peak, and with `by_phase` each phase occurrence's.
pub fn compare(base: &Opened, new: &Opened, by_phase: bool) -> Result<PeakDiff, InputError> {
    let name = |o: &Opened| o.names_of(std::iter::empty()).process_name();
    let mut out = PeakDiff {
        base_process: name(base),
        new_process: name(new),
        peaks: Vec::new(),
        notes: Vec::new(),
    };
    for (o, which) in [(base, "BASE"), (new, "NEW")] {
        let m = o.meta();
        if m.lost.iter().any(|l| l.count > 0) {
            out.notes.push(format!(
                "{which}'s history lost events: its peaks may be off (see `cuguard summary --at peak`)"
            ));
        }
    }
    let (bt, bb) = base.history.peak();
    let (nt, nb) = new.history.peak();
    let mut run = PeakChange {
        what: "the run".into(),
        phase: None,
        base_peak_bytes: bb,
        new_peak_bytes: nb,
        delta_bytes: nb as i64 - bb as i64,
        base_stayed_bytes: None,
        new_stayed_bytes: None,
        base_peak_ms: bt as f64 / 1e6,
        new_peak_ms: nt as f64 / 1e6,
        sites: Vec::new(),
    };
    if run.delta_bytes != 0 {
        run.sites = sites_changed(base, bt, new, nt)?;
    }
    out.peaks.push(run);
    if by_phase {
        let (b, n) = (
            phases::summary(base, String::new(), usize::MAX)?,
            phases::summary(new, String::new(), usize::MAX)?,
        );
        let mut changed = aligned(&b, &n, &mut out.notes);
        changed.sort_by(|x, y| {
            y.delta_bytes
                .cmp(&x.delta_bytes)
                .then_with(|| x.what.cmp(&y.what))
        });
        for c in &mut changed {
            if c.delta_bytes != 0 {
                let bt = (c.base_peak_ms * 1e6).round() as u64;
                let nt = (c.new_peak_ms * 1e6).round() as u64;
                c.sites = sites_changed(base, bt, new, nt)?;
            }
        }
        out.peaks.extend(changed);
    }
    Ok(out)
}

/// The occurrences both summaries have, as changes (no sites yet); those only one has, noted.
fn aligned(b: &PhaseSummary, n: &PhaseSummary, notes: &mut Vec<String>) -> Vec<PeakChange> {
    let index = |s: &PhaseSummary| -> BTreeMap<String, (String, phases::OccurrenceRow)> {
        s.names
            .iter()
            .flat_map(|row| {
                row.list
                    .iter()
                    .map(|o| (o.label.clone(), (row.name.clone(), o.clone())))
            })
            .collect()
    };
    let (bi, ni) = (index(b), index(n));
    let mut out = Vec::new();
    let mut only: [Vec<&str>; 2] = [Vec::new(), Vec::new()];
    for (label, (name, bo)) in &bi {
        match ni.get(label) {
            Some((_, no)) => out.push(PeakChange {
                what: label.clone(),
                phase: Some(name.clone()),
                base_peak_bytes: bo.peak_bytes,
                new_peak_bytes: no.peak_bytes,
                delta_bytes: no.peak_bytes as i64 - bo.peak_bytes as i64,
                base_stayed_bytes: Some(bo.stayed_bytes),
                new_stayed_bytes: Some(no.stayed_bytes),
                base_peak_ms: bo.peak_ms,
                new_peak_ms: no.peak_ms,
                sites: Vec::new(),
            }),
            None => only[0].push(label),
        }
    }
    only[1].extend(
        ni.keys()
            .filter(|l| !bi.contains_key(*l))
            .map(String::as_str),
    );
    for (which, list) in ["BASE", "NEW"].iter().zip(&only) {
        if !list.is_empty() {
            let shown: Vec<&str> = list.iter().take(5).copied().collect();
            let more = list.len().saturating_sub(shown.len());
            notes.push(format!(
                "only {which} has {}{}: not compared",
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
    }
    out
}

/// The sites whose live memory at `bt` in BASE and `nt` in NEW differ, the largest change first.
fn sites_changed(
    base: &Opened,
    bt: u64,
    new: &Opened,
    nt: u64,
) -> Result<Vec<PeakSite>, InputError> {
    type Sites = HashMap<String, (String, Option<String>, u64, Place)>;
    let at = |o: &Opened, t: u64| -> Result<Sites, InputError> {
        let loaded = o.read(t, t)?;
        let index = crate::sites::SiteIndex::new(&loaded.report);
        let m = super::moment::at(&loaded, t, usize::MAX);
        let mut by = Sites::new();
        for d in m.devices {
            for s in d.sites {
                let e = by.entry(s.site.label.clone()).or_insert_with(|| {
                    let place = Place::of(index.stack(s.stack_id), &index.site(s.stack_id));
                    (s.site.site.clone(), s.site.location.clone(), 0, place)
                });
                e.2 += s.bytes;
            }
        }
        Ok(by)
    };
    let (b, n) = (at(base, bt)?, at(new, nt)?);
    let mut out: Vec<PeakSite> = Vec::new();
    for label in b.keys().chain(n.keys().filter(|k| !b.contains_key(*k))) {
        let (bb, nb) = (
            b.get(label).map_or(0, |x| x.2),
            n.get(label).map_or(0, |x| x.2),
        );
        if bb == nb {
            continue;
        }
        let (site, location, _, place) = n
            .get(label)
            .or_else(|| b.get(label))
            .cloned()
            .expect("a side has it");
        out.push(PeakSite {
            label: label.clone(),
            site,
            location,
            base_bytes: bb,
            new_bytes: nb,
            delta_bytes: nb as i64 - bb as i64,
            change: match (bb, nb) {
                (0, _) => "new",
                (_, 0) => "gone",
                (b, n) if n > b => "grown",
                _ => "shrunk",
            },
            place,
        });
    }
    out.sort_by(|x, y| {
        y.delta_bytes
            .unsigned_abs()
            .cmp(&x.delta_bytes.unsigned_abs())
            .then_with(|| x.label.cmp(&y.label))
    });
    out.truncate(SITES_PER_PEAK);
    Ok(out)
}
