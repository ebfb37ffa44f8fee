//! One process condensed for the check ([`ProcessCheck`]): its leaks and events charged to their
//! sites, suppressed, set aside by owner or checked, with its growth.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::end::{Item, end_items};
use super::places::Place;
use super::suppressions::Suppressions;
use crate::growth::{Criterion, GrowingSite, NotTold, growing_sites, not_told};
use crate::input::Source;
use crate::owners::{OwnerFilter, OwnerIndex, OwnerShare};
use crate::sites::{SiteIndex, SiteKind};
use cuguard_format::{LeakFold, Report, Stack};

/// One process, condensed for the check: its unsuppressed leaks and events by site.
#[derive(Clone, Debug)]
pub struct ProcessCheck {
    /// Where the report came from.
    pub source: String,
    /// `exe[pid]`.
    pub name: String,
    /// Host name.
    pub hostname: String,
    /// Rank, if any (`process.rank`, else a launcher label: see [`crate::identity`]).
    pub rank: Option<u32>,
    /// The label `worker` (a Dask worker), if any.
    pub worker: Option<String>,
    /// Who it was, for people: `rank 3 (host node17, pid 9001)` (see [`crate::identity`]).
    pub who: String,
    /// Whether the report is final.
    pub complete: bool,
    /// Why it was written.
    pub reason: String,
    /// Unsuppressed leaks by site key: (location, bytes, leaks, apis).
    pub sites: BTreeMap<String, SiteLeaks>,
    /// Unsuppressed events by (kind, site key): count.
    pub events: BTreeMap<(String, String), u64>,
    /// Suppressed leaks: (bytes, leaks).
    pub suppressed: (u64, u64),
    /// Suppressed events.
    pub suppressed_events: u64,
    /// Matches per suppression rule, in rule order.
    pub rule_hits: Vec<u64>,
    /// Unsuppressed leaks whose owner is not checked, by owner (`count`: leaks).
    pub other_owners: Vec<OwnerShare>,
    /// The sites of checked owners that grew (see [`crate::growth`]), most grown first.
    pub growing: Vec<GrowingSite>,
    /// Why its growth could not be told (too few samples), if so (see [`not_told`]).
    pub growth_not_told: Option<NotTold>,
    /// For a Python program checked on its end: what Python objects held then that was not
    /// counted (bytes, allocations and cache blocks); `None` for other reports and with
    /// `--held`.
    pub held_at_end: Option<(u64, u64)>,
    /// Where each site of its leaks and events (suppressed ones included) is, by site key;
    /// empty when condensed without places (see [`Condense::places`]).
    pub places: BTreeMap<String, Place>,
    /// Suppressed leaks and events by (finding, site key): the finding is `leak` or the
    /// event's kind.
    pub suppressed_sites: BTreeMap<(String, String), SuppressedSite>,
}

/// Suppressed leaks or events of one kind at one site.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SuppressedSite {
    /// Bytes (0 for events).
    pub bytes: u64,
    /// Leaks or events.
    pub count: u64,
    /// The first rule that matched them (index into the suppressions' rules).
    pub rule: usize,
}

/// Leaks at one site of one process.
#[derive(Clone, Debug, Default)]
pub struct SiteLeaks {
    /// `file:line`, when known.
    pub location: Option<String>,
    /// Bytes.
    pub bytes: u64,
    /// Leaks.
    pub leaks: u64,
    /// Driver entries.
    pub apis: BTreeSet<String>,
    /// The site for people, its location once.
    pub label: String,
    /// What kind of frame it is, when the report says.
    pub kind: Option<SiteKind>,
}

impl ProcessCheck {
    /// Condenses a report, applying `suppressions`, checking the program's own leaks.
    pub fn new(source: &Source, report: &Report, suppressions: &Suppressions) -> ProcessCheck {
        ProcessCheck::with_owners(source, report, suppressions, &OwnerFilter::default())
    }

    /// Condenses a report, applying `suppressions`, checking the leaks of the owners `owners`
    /// selects (the others are counted in `other_owners`).
    pub fn with_owners(
        source: &Source,
        report: &Report,
        suppressions: &Suppressions,
        owners: &OwnerFilter,
    ) -> ProcessCheck {
        let leaks = LeakFold::of(&report.leaks, 0);
        ProcessCheck::folded(source, report, &leaks, suppressions, owners)
    }

    /// Condenses a report whose leaks are `leaks` (folded while it was parsed; the report's own
    /// `leaks` are not read), as [`ProcessCheck::with_owners`].
    pub fn folded(
        source: &Source,
        report: &Report,
        leaks: &LeakFold,
        suppressions: &Suppressions,
        owners: &OwnerFilter,
    ) -> ProcessCheck {
        ProcessCheck::folded_held(source, report, leaks, suppressions, owners, false)
    }

    /// [`ProcessCheck::folded`], counting with `held` also what Python objects held at the end
    /// of a Python program's code (see the module doc).
    pub fn folded_held(
        source: &Source,
        report: &Report,
        leaks: &LeakFold,
        suppressions: &Suppressions,
        owners: &OwnerFilter,
        held: bool,
    ) -> ProcessCheck {
        let how = Condense {
            suppressions,
            owners,
            held,
            places: true,
        };
        ProcessCheck::condensed(source, report, leaks, &how)
    }

    /// Condenses a report whose leaks are `leaks` as `how` says (see [`Condense`]).
    pub fn condensed(
        source: &Source,
        report: &Report,
        leaks: &LeakFold,
        how: &Condense<'_>,
    ) -> ProcessCheck {
        let index = SiteIndex::new(report);
        let mut owner_index = OwnerIndex::new(report);
        // The stacks by id, for the rules that match frames: none are read without rules.
        let stacks: HashMap<u64, &Stack> = if how.suppressions.is_empty() {
            HashMap::new()
        } else {
            report.stacks.iter().rev().map(|s| (s.id, s)).collect()
        };
        let mut check = ProcessCheck::empty(source, report, how.suppressions);
        // A Python program whose end was recorded is checked on what it held then: the lost
        // (and with `held`, the held) allocations of its view, not what teardown left.
        let at_end = report
            .python
            .as_ref()
            .and_then(|p| p.view.as_ref())
            .filter(|v| v.at == "end");
        let items: Vec<Item> = match at_end {
            Some(view) => end_items(view, how.held, &mut check.held_at_end),
            None => leaks
                .groups()
                .iter()
                .map(|g| (g.leak.clone(), g.bytes, g.leaks, None))
                .collect(),
        };
        let others = check.charge_leaks(&items, &index, &mut owner_index, &stacks, how);
        check.charge_events(report, &index, &stacks, how);
        check.other_owners = crate::owners::by_owner(&owner_index, others);
        let criterion = Criterion::default();
        check.growing = growing_sites(
            report,
            &index,
            &mut owner_index,
            |o| how.owners.includes(o),
            &criterion,
        );
        check.growth_not_told = not_told(report, &criterion);
        check
    }

    /// The process of `report`, who it was, with nothing charged yet.
    fn empty(source: &Source, report: &Report, suppressions: &Suppressions) -> ProcessCheck {
        let id = crate::identity::Identity::new(
            report.process.pid,
            &report.process.hostname,
            report.process.rank,
            report.process.labels.as_ref(),
        );
        ProcessCheck {
            source: source.to_string(),
            name: report.process_name(),
            hostname: report.process.hostname.clone(),
            rank: id.rank,
            who: id.describe(),
            worker: id.worker,
            complete: report.complete,
            reason: report.reason.to_string(),
            sites: BTreeMap::new(),
            events: BTreeMap::new(),
            suppressed: (0, 0),
            suppressed_events: 0,
            rule_hits: vec![0; suppressions.rules().len()],
            other_owners: Vec::new(),
            growing: Vec::new(),
            growth_not_told: None,
            held_at_end: None,
            places: BTreeMap::new(),
            suppressed_sites: BTreeMap::new(),
        }
    }

    /// Charges each leak of `items` to its site: suppressed (counted by rule), set aside by its
    /// owner (returned as (owner, bytes, leaks), for `other_owners`), or checked.
    fn charge_leaks<'r>(
        &mut self,
        items: &'r [Item],
        index: &SiteIndex<'_>,
        owner_index: &mut OwnerIndex<'r>,
        stacks: &HashMap<u64, &Stack>,
        how: &Condense<'_>,
    ) -> Vec<(usize, u64, u64)> {
        let Condense {
            suppressions,
            owners,
            places: keep_places,
            ..
        } = *how;
        let stack_of = |id: Option<u64>| id.and_then(|id| stacks.get(&id).copied());
        let mut others: Vec<(usize, u64, u64)> = Vec::new();
        // Leaks sharing a stack, api and memory kind share a verdict: decide once per triple.
        let mut decided: HashMap<(Option<u64>, &str, &str), Option<usize>> = HashMap::new();
        for (leak, size, n, site_of) in items {
            let (size, n) = (*size, *n);
            let site = match site_of {
                Some((s, _)) => std::borrow::Cow::Borrowed(s),
                None => index.site(leak.stack),
            };
            let rule = if suppressions.is_empty() {
                None
            } else {
                *decided
                    .entry((leak.stack, &*leak.api, leak.memory.as_str()))
                    .or_insert_with(|| suppressions.match_leak(leak, stack_of(leak.stack), &site))
            };
            let place = || match site_of {
                Some((_, p)) => p.clone(),
                None => Place::of(index.stack(leak.stack), &site),
            };
            if let Some(rule) = rule {
                self.rule_hits[rule] += n;
                self.suppressed.0 = self.suppressed.0.saturating_add(size);
                self.suppressed.1 += n;
                if keep_places {
                    self.places.entry(site.key.clone()).or_insert_with(place);
                }
                let s = self
                    .suppressed_sites
                    .entry(("leak".to_string(), site.key.clone()))
                    .or_insert(SuppressedSite {
                        rule,
                        ..SuppressedSite::default()
                    });
                s.bytes = s.bytes.saturating_add(size);
                s.count += n;
                continue;
            }
            let owner = owner_index.of_leak(leak);
            if !owners.includes(owner_index.owner(owner)) {
                others.push((owner, size, n));
                continue;
            }
            if keep_places {
                let label = owner_index.owner(owner).label.clone();
                self.places
                    .entry(site.key.clone())
                    .or_insert_with(place)
                    .owners
                    .insert(label);
            }
            let entry = self
                .sites
                .entry(site.key.clone())
                .or_insert_with(|| SiteLeaks {
                    location: site.location.clone(),
                    label: site.label(),
                    kind: site.kind,
                    ..SiteLeaks::default()
                });
            entry.bytes = entry.bytes.saturating_add(size);
            entry.leaks += n;
            if !entry.apis.contains(&*leak.api) {
                entry.apis.insert(leak.api.to_string());
            }
        }
        others
    }

    /// Charges each event of `report` (but those of a Python program's teardown) to its site:
    /// suppressed (counted by rule) or counted by kind and site.
    fn charge_events(
        &mut self,
        report: &Report,
        index: &SiteIndex<'_>,
        stacks: &HashMap<u64, &Stack>,
        how: &Condense<'_>,
    ) {
        let stack_of = |id: Option<u64>| id.and_then(|id| stacks.get(&id).copied());
        for event in report
            .events
            .iter()
            .filter(|e| !report.at_python_teardown(e))
        {
            let site = index.site(event.stack);
            if how.places && !self.places.contains_key(&site.key) {
                let place = Place::of(index.stack(event.stack), &site);
                self.places.insert(site.key.clone(), place);
            }
            if let Some(rule) = how
                .suppressions
                .match_event(event, stack_of(event.stack), &site)
            {
                self.rule_hits[rule] += 1;
                self.suppressed_events += 1;
                let s = self
                    .suppressed_sites
                    .entry((event.kind.to_string(), site.key.clone()))
                    .or_insert(SuppressedSite {
                        rule,
                        ..SuppressedSite::default()
                    });
                s.count += 1;
                continue;
            }
            let site = site.key.clone();
            *self
                .events
                .entry((event.kind.to_string(), site))
                .or_default() += 1;
        }
    }
}

/// How [`ProcessCheck::condensed`] condenses a report.
#[derive(Clone, Copy, Debug)]
pub struct Condense<'a> {
    /// The suppressions to apply.
    pub suppressions: &'a Suppressions,
    /// Whose leaks are checked (the others are counted in `other_owners`).
    pub owners: &'a OwnerFilter,
    /// Whether what Python objects held at the end counts too (`--held`).
    pub held: bool,
    /// Whether to keep where each site is in the source ([`ProcessCheck::places`]): only the
    /// formats that point at code (`sarif`, `github`) read it, and across half a million sites
    /// it is most of the check's memory (a kilobyte a site), so the others leave it out.
    pub places: bool,
}
