//! [`CheckFold`]: a [`Verdict`] built one process at a time, as the reports are read, and
//! decided against the [`Limits`] and the [`Baseline`] (see the rule in the module doc of
//! `check`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;

use super::condense::ProcessCheck;
use super::entries::{
    EventVerdict, GrowthNotTold, GrowthVerdict, HeldAtEnd, RuleUse, SiteStatus, SuppressedFinding,
};
use super::kept;
use super::places::Place;
use super::suppressions::Suppressions;
use super::verdict::{Limits, Verdict};
use crate::owners::OwnerShare;

/// What a baseline holds: leaks per site and events per (kind, site), all processes together.
#[derive(Debug, Default)]
pub struct Baseline {
    /// Site keys, numbered.
    keys: crate::compact::Strings,
    /// (bytes, leaks) by site number.
    sites: crate::compact::Column<(u64, u64)>,
    events: HashMap<(String, String), u64>,
}

impl Baseline {
    /// Adds up condensed processes (with the same suppressions as the checked reports).
    pub fn new<'a>(processes: impl IntoIterator<Item = &'a ProcessCheck>) -> Baseline {
        let mut b = Baseline::default();
        for p in processes {
            b.add(p);
        }
        b
    }

    /// Adds one condensed process.
    pub fn add(&mut self, p: &ProcessCheck) {
        for (key, s) in &p.sites {
            let id = self.keys.id(key) as usize;
            if id == self.sites.len() {
                self.sites.push((0, 0));
            }
            let e = self.sites.get_mut(id);
            e.0 = e.0.saturating_add(s.bytes);
            e.1 += s.leaks;
        }
        for (key, n) in &p.events {
            *self.events.entry(key.clone()).or_default() += n;
        }
    }

    /// The baseline's (bytes, leaks) at the site keyed `key`, if it has it.
    pub fn site(&self, key: &str) -> Option<(u64, u64)> {
        self.keys.find(key).map(|id| *self.sites.get(id as usize))
    }
}

impl Verdict {
    /// Decides. `suppressions` must be the ones the processes were condensed with.
    pub fn new(
        processes: &[ProcessCheck],
        baseline: Option<&Baseline>,
        suppressions: &Suppressions,
        limits: Limits,
    ) -> Verdict {
        let mut fold = CheckFold::new(suppressions);
        for p in processes {
            fold.add(p.clone());
        }
        fold.finish(baseline, suppressions, limits)
            .expect("a check kept in memory reads back what it kept")
    }
}

/// A [`Verdict`] built one process at a time, in input order: each process's sites are added to
/// those across processes ([`kept::Sites`]: compact tables) and the process itself goes to a log
/// ([`kept::ProcessLog`]: its totals per site by site number), so memory holds the distinct
/// sites, a few words each, never the processes' leaks or their per-site totals.
#[derive(Debug)]
pub struct CheckFold {
    sites: kept::Sites,
    /// Event kinds and sites, numbered.
    event_names: crate::compact::Strings,
    /// Events by (kind, site) numbers.
    events: HashMap<(u32, u32), u64>,
    hits: Vec<u64>,
    suppressed_bytes: u64,
    suppressed_leaks: u64,
    suppressed_events: u64,
    /// Bytes of other owners (each owner's label is the first process's).
    other_owners: HashMap<String, OwnerShare>,
    /// What Python objects held at the end and was not counted (without `--held`).
    held_at_end: Option<(u64, u64)>,
    /// The sources of incomplete reports, in input order.
    incomplete: Vec<String>,
    /// The reports whose growth could not be told, in input order.
    growth_not_told: Vec<GrowthNotTold>,
    processes: kept::ProcessLog,
    /// Where the sites are, by key.
    places: HashMap<String, Place>,
    /// Suppressed findings by (kind, site key).
    suppressed_sites: BTreeMap<(String, String), SuppressedFinding>,
}

impl CheckFold {
    /// An empty check of processes condensed with `suppressions`, keeping the processes in
    /// memory.
    pub fn new(suppressions: &Suppressions) -> CheckFold {
        CheckFold::with_log(suppressions, false)
    }

    /// As [`CheckFold::new`], keeping the processes in a temporary file (see [`kept`]): memory
    /// does not grow with their number.
    pub fn on_disk(suppressions: &Suppressions) -> CheckFold {
        CheckFold::with_log(suppressions, true)
    }

    fn with_log(suppressions: &Suppressions, on_disk: bool) -> CheckFold {
        CheckFold {
            sites: kept::Sites::default(),
            event_names: crate::compact::Strings::new(),
            events: HashMap::new(),
            hits: vec![0; suppressions.rules().len()],
            suppressed_bytes: 0,
            suppressed_leaks: 0,
            suppressed_events: 0,
            other_owners: HashMap::new(),
            held_at_end: None,
            incomplete: Vec::new(),
            growth_not_told: Vec::new(),
            processes: kept::ProcessLog::new(on_disk),
            places: HashMap::new(),
            suppressed_sites: BTreeMap::new(),
        }
    }

    /// Adds the next process (in input order).
    pub fn add(&mut self, p: ProcessCheck) {
        let number = self.sites.add_process(&p.name);
        let mut sites = Vec::with_capacity(p.sites.len());
        for (key, s) in &p.sites {
            let id = self.sites.add(number, key, s);
            sites.push((id, s.bytes, s.leaks));
        }
        for ((kind, site), n) in &p.events {
            let key = (self.event_names.id(kind), self.event_names.id(site));
            *self.events.entry(key).or_default() += n;
        }
        for (h, n) in self.hits.iter_mut().zip(&p.rule_hits) {
            *h += n;
        }
        self.suppressed_bytes = self.suppressed_bytes.saturating_add(p.suppressed.0);
        self.suppressed_leaks += p.suppressed.1;
        self.suppressed_events += p.suppressed_events;
        if let Some((b, n)) = p.held_at_end {
            let t = self.held_at_end.get_or_insert((0, 0));
            *t = (t.0.saturating_add(b), t.1 + n);
        }
        for share in p.other_owners {
            match self.other_owners.get_mut(&share.owner) {
                Some(t) => {
                    t.bytes = t.bytes.saturating_add(share.bytes);
                    t.count = t.count.saturating_add(share.count);
                }
                None => {
                    self.other_owners.insert(share.owner.clone(), share);
                }
            }
        }
        for (key, place) in p.places {
            match self.places.get_mut(&key) {
                Some(known) => known.merge(place),
                None => {
                    self.places.insert(key, place);
                }
            }
        }
        for ((kind, site), s) in p.suppressed_sites {
            let f = self
                .suppressed_sites
                .entry((kind.clone(), site.clone()))
                .or_insert_with(|| SuppressedFinding {
                    kind,
                    site,
                    bytes: 0,
                    count: 0,
                    rule: s.rule,
                    processes: Vec::new(),
                    process_count: 0,
                });
            f.bytes = f.bytes.saturating_add(s.bytes);
            f.count += s.count;
            f.process_count += 1;
            if f.processes.len() < 5 {
                f.processes.push(p.name.clone());
            }
        }
        if !p.complete {
            self.incomplete.push(p.source.clone());
        }
        if let Some(why) = p.growth_not_told {
            self.growth_not_told.push(GrowthNotTold {
                source: p.source.clone(),
                why,
            });
        }
        let condensed = kept::Condensed {
            source: p.source,
            name: p.name,
            hostname: p.hostname,
            rank: p.rank,
            worker: p.worker,
            who: p.who,
            complete: p.complete,
            sites,
            events: p.events.into_iter().collect(),
        };
        self.processes.add(&condensed, p.growing);
    }

    /// Decides. `suppressions` must be the ones the processes were condensed with. Fails only
    /// when what was kept in a temporary file cannot be read back (or could not be written).
    pub fn finish(
        self,
        baseline: Option<&Baseline>,
        suppressions: &Suppressions,
        limits: Limits,
    ) -> io::Result<Verdict> {
        let CheckFold {
            sites,
            event_names,
            events,
            hits,
            suppressed_bytes,
            suppressed_leaks,
            suppressed_events,
            other_owners,
            held_at_end,
            incomplete,
            growth_not_told,
            processes,
            places,
            suppressed_sites,
        } = self;
        let process_count = processes.len();
        let mut growing: Vec<GrowthVerdict> =
            kept::growth_verdicts(&processes, |i| sites.process_name(i), limits.max_growth);
        sort_growing(&mut growing);
        let (totals, base) = SiteTotals::of(&sites, baseline);
        let events = event_verdicts(events, &event_names, baseline, &limits);
        let (failures, leaks_fail) = failures(
            &totals,
            &growing,
            &events,
            incomplete.len(),
            baseline.is_some(),
            &limits,
        );
        let failing = kept::Failing {
            leaks_fail,
            counting: totals.counting,
            events: events
                .iter()
                .filter(|e| e.failing)
                .map(|e| (e.kind.clone(), e.site.clone()))
                .collect::<HashSet<_>>(),
            max_growth: limits.max_growth,
            require_complete: limits.require_complete,
        };
        let site_verdicts = kept::SiteVerdicts::new(sites, base);
        let process_verdicts =
            kept::ProcessVerdicts::new(processes, site_verdicts.clone(), failing)?;
        Ok(Verdict {
            passed: failures.is_empty(),
            failures,
            baseline: baseline.is_some(),
            reports: process_count,
            incomplete,
            growth_not_told,
            leaked_bytes: totals.leaked_bytes,
            leaks: totals.leaks,
            counted_bytes: totals.counted_bytes,
            counted_leaks: totals.counted_leaks,
            suppressed_bytes,
            suppressed_leaks,
            suppressed_events,
            other_owners: crate::owners::combine(other_owners.into_values()),
            held_at_end: held_at_end.map(|(bytes, allocations)| HeldAtEnd { bytes, allocations }),
            sites: site_verdicts,
            growing,
            events,
            suppressions: rule_uses(suppressions, hits),
            processes: process_verdicts,
            peaks: None,
            limits,
            places,
            suppressed_sites: suppressed_sites.into_values().collect(),
            source_root: None,
            show_suppressed: false,
        })
    }
}

/// The totals across sites, and which sites count (by number).
struct SiteTotals {
    leaked_bytes: u64,
    leaks: u64,
    counted_bytes: u64,
    counted_leaks: u64,
    /// By site number: whether any of its bytes or leaks count.
    counting: Vec<bool>,
}

/// The baseline's totals of the sites it has, by site number.
type BaseTotals = HashMap<u32, (u64, u64)>;

impl SiteTotals {
    /// Adds up every site, each compared with `baseline` when given (see the module doc, step
    /// 4); also gives the baseline's totals by site number.
    fn of(sites: &kept::Sites, baseline: Option<&Baseline>) -> (SiteTotals, Option<BaseTotals>) {
        let base: Option<BaseTotals> = baseline.map(|b| {
            (0..sites.len() as u32)
                .filter_map(|id| b.site(sites.key(id)).map(|t| (id, t)))
                .collect()
        });
        let mut t = SiteTotals {
            leaked_bytes: 0,
            leaks: 0,
            counted_bytes: 0,
            counted_leaks: 0,
            counting: Vec::with_capacity(sites.len()),
        };
        for id in 0..sites.len() as u32 {
            let totals = sites.totals(id);
            let (status, b) = match &base {
                None => (SiteStatus::Leak, (0, 0)),
                Some(base) => match base.get(&id) {
                    None => (SiteStatus::New, (0, 0)),
                    Some(&(bb, bl)) if totals.0 > bb || totals.1 > bl => {
                        (SiteStatus::Grown, (bb, bl))
                    }
                    Some(&b) => (SiteStatus::Baselined, b),
                },
            };
            let (cb, cl) = kept::counted(status, totals, b);
            t.leaked_bytes = t.leaked_bytes.saturating_add(totals.0);
            t.leaks += totals.1;
            t.counted_bytes = t.counted_bytes.saturating_add(cb);
            t.counted_leaks += cl;
            t.counting.push(cb > 0 || cl > 0);
        }
        (t, base)
    }
}

/// The events by (kind, site), each against the baseline's count, failing ones first.
fn event_verdicts(
    events: HashMap<(u32, u32), u64>,
    names: &crate::compact::Strings,
    baseline: Option<&Baseline>,
    limits: &Limits,
) -> Vec<EventVerdict> {
    let mut verdicts: Vec<EventVerdict> = events
        .into_iter()
        .map(|((kind, site), count)| {
            let (kind, site) = (names.get(kind).to_string(), names.get(site).to_string());
            let baseline_count = baseline
                .and_then(|b| b.events.get(&(kind.clone(), site.clone())).copied())
                .unwrap_or(0);
            let counted = count.saturating_sub(baseline_count);
            EventVerdict {
                failing: counted > 0 && limits.fail_on_events.includes(&kind),
                kind,
                site,
                count,
                baseline_count,
                counted,
            }
        })
        .collect();
    verdicts.sort_by(|a, b| {
        b.failing
            .cmp(&a.failing)
            .then(b.counted.cmp(&a.counted))
            .then(a.kind.cmp(&b.kind))
            .then(a.site.cmp(&b.site))
    });
    verdicts
}

/// Failing growth first, then most grown.
fn sort_growing(growing: &mut [GrowthVerdict]) {
    growing.sort_by(|a, b| {
        b.failing
            .cmp(&a.failing)
            .then(
                b.growth
                    .growth
                    .grown_bytes
                    .cmp(&a.growth.growth.grown_bytes),
            )
            .then(a.process.cmp(&b.process))
            .then(a.growth.site.cmp(&b.growth.site))
    });
}

/// Why the check fails, in words (empty: it passes), and whether the leaks fail it.
fn failures(
    totals: &SiteTotals,
    growing: &[GrowthVerdict],
    events: &[EventVerdict],
    incomplete: usize,
    with_baseline: bool,
    limits: &Limits,
) -> (Vec<String>, bool) {
    let mut failures = Vec::new();
    let what = if with_baseline {
        "new or grown leaks"
    } else {
        "leaks"
    };
    let (counted_bytes, counted_leaks) = (totals.counted_bytes, totals.counted_leaks);
    let bytes_over = limits.max_leaked_bytes.is_some_and(|m| counted_bytes > m);
    let leaks_over = limits.max_leaks.is_some_and(|m| counted_leaks > m);
    if let (true, Some(max)) = (bytes_over, limits.max_leaked_bytes) {
        failures.push(format!(
            "{} in {what} exceeds --max-leaked-bytes {}",
            crate::wording::bytes(counted_bytes),
            crate::wording::bytes(max),
        ));
    }
    if let (true, Some(max)) = (leaks_over, limits.max_leaks) {
        failures.push(format!("{counted_leaks} {what} exceed --max-leaks {max}"));
    }
    if let Some(max) = limits.max_growth {
        for g in growing.iter().filter(|g| g.failing) {
            let grown = &g.growth.growth;
            failures.push(format!(
                "{} grew by {} over {} in {} (more than --max-growth {})",
                g.growth.label,
                crate::wording::bytes(grown.grown_bytes),
                crate::wording::millis(grown.to_ms.saturating_sub(grown.from_ms)),
                g.process,
                crate::wording::bytes(max),
            ));
        }
    }
    let mut failing_events: BTreeMap<&str, u64> = BTreeMap::new();
    for e in events.iter().filter(|e| e.failing) {
        *failing_events.entry(e.kind.as_str()).or_default() += e.counted;
    }
    for (kind, n) in &failing_events {
        failures.push(format!(
            "{n} {kind} event{}",
            if *n == 1 { "" } else { "s" }
        ));
    }
    if limits.require_complete && incomplete > 0 {
        failures.push(format!(
            "{incomplete} incomplete report{} (--require-complete)",
            if incomplete == 1 { "" } else { "s" }
        ));
    }
    (failures, bytes_over || leaks_over)
}

/// How often each suppression rule matched.
fn rule_uses(suppressions: &Suppressions, hits: Vec<u64>) -> Vec<RuleUse> {
    suppressions
        .rules()
        .iter()
        .zip(hits)
        .map(|(r, matched)| RuleUse {
            file: r.file.clone(),
            line: r.line,
            rule: r.text.clone(),
            matched,
        })
        .collect()
}
