//! `cuguard check`: the CI gate. Reads reports, drops what suppressions cover, compares with a
//! baseline when given, and decides pass or fail against the limits.
//!
//! The rule, in order:
//! 1. every leak and event is charged to its site ([`crate::sites`]), and every leak to its
//!    owner ([`crate::owners`]);
//! 2. leaks and events matched by a suppression ([`suppressions`]) are set aside and counted;
//! 3. leaks whose owner is not checked are set aside and counted by owner: by default only the
//!    program's own leaks are checked (owners of kind `program`, and leaks without a known
//!    owner); `--owners` adds owner ids or kinds, or `all` ([`OwnerFilter`]);
//! 4. with a baseline, a site's leaks *count* only where the site is new, or has grown (more
//!    bytes or more leaks than in the baseline; then only the growth counts); events likewise
//!    per kind and site; without a baseline everything left counts;
//! 5. the check fails when the counted bytes exceed `--max-leaked-bytes` or the counted leaks
//!    exceed `--max-leaks` (see [`Limits`]: with neither given both are 0, so any leak fails;
//!    with one given the other is not limited), when a site of a checked owner grew by more
//!    than `--max-growth` in one process ([`crate::growth`]; off unless given; baselines and
//!    suppressions do not apply to growth), when counted events of a failing kind remain
//!    (`--fail-on-events`, by default `double_free`, `invalid_free`, `free_in_wrong_context`),
//!    or, with `--require-complete`, when a report is incomplete.
//!
//! [`ProcessCheck::new`] condenses one report (in the input workers); [`CheckFold`] adds the
//! processes up one at a time, in compact tables and a log of the processes ([`kept`]), and
//! decides; [`Verdict::new`] does both for processes in memory. Output formats, one per file,
//! listed in [`FORMATS`]: [`text`], [`json`] (whose [`json::Json`] describes the JSON),
//! [`junit`], [`sarif`] and [`github`] (these two point at the user's code: [`places`]).

pub mod github;
pub mod json;
pub mod junit;
pub mod kept;
pub mod places;
pub mod sarif;
pub mod suppressions;
pub mod text;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::growth::{Criterion, GrowingSite, NotTold, growing_sites, not_told};
use crate::input::Source;
use crate::output::{Registry, Row};
use crate::owners::{OwnerFilter, OwnerIndex, OwnerShare};
use cuguard_format::{HeldClass, Leak, LeakFold, LeakState, PyView, Report, Stack};
use crate::sites::{Site, SiteIndex, SiteKind};
use places::Place;
use suppressions::Suppressions;

/// The formats of `cuguard check --format`, the default first (see [`crate::output`]).
pub const FORMATS: Registry<Verdict> = Registry::new(&[
    Row::of::<text::Text>(),
    Row::of::<json::Json>(),
    Row::of::<junit::Junit>(),
    Row::of::<sarif::Sarif>(),
    Row::of::<github::Github>(),
]);

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

/// A leak to condense: the leak, its bytes, its count, and its site and place when it is not
/// the site of its stack (a live cache block's, found from its Python frames).
pub(crate) type Item = (Leak, u64, u64, Option<(Site, Place)>);

/// What a Python program's end view counts, as leaks with their bytes, count and, for a live
/// cache block, the line that allocated it: lost and unclassified allocations, library ones
/// (their owner decides), and with `held` the held allocations and the live cache blocks
/// Python objects hold. What is held but not counted adds up in `not_counted`.
pub(crate) fn end_items(
    view: &PyView,
    held: bool,
    not_counted: &mut Option<(u64, u64)>,
) -> Vec<Item> {
    let mut out = Vec::new();
    let mut skipped = (0u64, 0u64);
    for a in &view.allocations {
        let leak = Leak {
            address: a.address,
            size: a.size,
            requested: a.requested,
            api: a.api.clone(),
            memory: a.memory.clone(),
            device: a.device,
            context: a.context,
            thread: a.thread,
            seq: a.seq,
            time_ms: a.time_ms,
            stack: a.stack,
            state: LeakState::LiveAtExit,
            handle: None,
            owner: a.owner.clone(),
        };
        match a.class {
            HeldClass::Held if !held => {
                skipped = (skipped.0.saturating_add(a.size), skipped.1 + 1);
            }
            // The framework frees it (numba's queue of deferred frees): never the program's leak.
            HeldClass::PendingFree => {}
            HeldClass::Cache => {
                for b in a
                    .blocks
                    .iter()
                    .filter(|b| b.state == "live" && !b.holders.is_empty())
                {
                    if !held {
                        skipped = (skipped.0.saturating_add(b.size), skipped.1 + 1);
                        continue;
                    }
                    let mut block = leak.clone();
                    block.address = b.address;
                    block.size = b.size;
                    block.requested = b.size;
                    // The program's: a tensor or array it keeps.
                    block.owner = Some("program".into());
                    let site = crate::sites::frames_site(&b.frames)
                        .map(|s| (Place::of_python(&b.frames, &s), s))
                        .map(|(p, s)| (s, p));
                    out.push((block, b.size, 1, site));
                }
                // The segment itself is the cache's: counted only where `--owners` names it.
                out.push((leak, a.size, 1, None));
            }
            _ => out.push((leak, a.size, 1, None)),
        }
    }
    if !held {
        *not_counted = Some(skipped);
    }
    out
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
        let Condense {
            suppressions,
            owners,
            held,
            places: keep_places,
        } = *how;
        let index = SiteIndex::new(report);
        let mut owner_index = OwnerIndex::new(report);
        let mut others: Vec<(usize, u64, u64)> = Vec::new();
        let stacks: HashMap<u64, &Stack> = if suppressions.is_empty() {
            HashMap::new()
        } else {
            report.stacks.iter().rev().map(|s| (s.id, s)).collect()
        };
        let stack_of = |id: Option<u64>| id.and_then(|id| stacks.get(&id).copied());
        let id = crate::identity::Identity::new(
            report.process.pid,
            &report.process.hostname,
            report.process.rank,
            report.process.labels.as_ref(),
        );
        let mut check = ProcessCheck {
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
        };
        // A Python program whose end was recorded is checked on what it held then: the lost
        // (and with `held`, the held) allocations of its view, not what teardown left.
        let at_end = report
            .python
            .as_ref()
            .and_then(|p| p.view.as_ref())
            .filter(|v| v.at == "end");
        let items: Vec<Item> = match at_end {
            Some(view) => end_items(view, held, &mut check.held_at_end),
            None => leaks
                .groups()
                .iter()
                .map(|g| (g.leak.clone(), g.bytes, g.leaks, None))
                .collect(),
        };
        // Leaks sharing a stack, api and memory kind share a verdict: decide once per triple.
        let mut decided: HashMap<(Option<u64>, &str, &str), Option<usize>> = HashMap::new();
        for (leak, size, n, site_of) in &items {
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
                check.rule_hits[rule] += n;
                check.suppressed.0 = check.suppressed.0.saturating_add(size);
                check.suppressed.1 += n;
                if keep_places {
                    check.places.entry(site.key.clone()).or_insert_with(place);
                }
                let s = check
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
                check
                    .places
                    .entry(site.key.clone())
                    .or_insert_with(place)
                    .owners
                    .insert(label);
            }
            let entry = check
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
        for event in report
            .events
            .iter()
            .filter(|e| !report.at_python_teardown(e))
        {
            let site = index.site(event.stack);
            if keep_places && !check.places.contains_key(&site.key) {
                let place = Place::of(index.stack(event.stack), &site);
                check.places.insert(site.key.clone(), place);
            }
            if let Some(rule) = suppressions.match_event(event, stack_of(event.stack), &site) {
                check.rule_hits[rule] += 1;
                check.suppressed_events += 1;
                let s = check
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
            *check
                .events
                .entry((event.kind.to_string(), site))
                .or_default() += 1;
        }
        check.other_owners = crate::owners::by_owner(&owner_index, others);
        let criterion = Criterion::default();
        check.growing = growing_sites(
            report,
            &index,
            &mut owner_index,
            |o| owners.includes(o),
            &criterion,
        );
        check.growth_not_told = not_told(report, &criterion);
        check
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

/// The outcome of a check. Serialized as the `--format json` output (see [`json::Json`]).
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
    /// Where the sites of leaks and events are, by site key (not in the JSON).
    #[serde(skip)]
    pub places: HashMap<String, Place>,
    /// Suppressed leaks and events by kind and site, in (kind, site) order (not in the JSON).
    #[serde(skip)]
    pub suppressed_sites: Vec<SuppressedFinding>,
    /// The directory the `sarif` and `github` formats name files relative to, absolute (see
    /// [`places::source_root`]); `None`: the current directory. Not in the JSON.
    #[serde(skip)]
    pub source_root: Option<PathBuf>,
    /// Whether the text lists each suppressed site with its rule (`--show-suppressed`). Not in
    /// the JSON.
    #[serde(skip)]
    pub show_suppressed: bool,
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
    /// The rule that matched them first (index into [`Verdict::suppressions`]).
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

#[cfg(test)]
mod tests;
