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
//! [`ProcessCheck::new`] condenses one report (in the input workers); [`Verdict::new`] decides.
//! Output formats, one per file, listed in [`FORMATS`]: [`text`], [`json`] (whose [`json::Json`]
//! describes the JSON), [`junit`].

pub mod json;
pub mod junit;
pub mod suppressions;
pub mod text;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::format::{Registry, Row};
use crate::growth::{Criterion, GrowingSite, growing_sites};
use crate::input::Source;
use crate::owners::{OwnerFilter, OwnerIndex, OwnerShare};
use crate::report::{HeldClass, Leak, LeakFold, LeakState, PyView, Report, Stack};
use crate::sites::{Site, SiteIndex, SiteKind};
use suppressions::Suppressions;

/// The formats of `cuguard check --format`, the default first (see [`crate::format`]).
pub const FORMATS: Registry<Verdict> = Registry::new(&[
    Row::of::<text::Text>(),
    Row::of::<json::Json>(),
    Row::of::<junit::Junit>(),
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
    /// For a Python program checked on its end: what Python objects held then that was not
    /// counted (bytes, allocations and cache blocks); `None` for other reports and with
    /// `--held`.
    pub held_at_end: Option<(u64, u64)>,
}

/// What a Python program's end view counts, as leaks with their bytes, count and, for a live
/// cache block, the line that allocated it: lost and unclassified allocations, library ones
/// (their owner decides), and with `held` the held allocations and the live cache blocks
/// Python objects hold. What is held but not counted adds up in `not_counted`.
fn end_items(
    view: &PyView,
    held: bool,
    not_counted: &mut Option<(u64, u64)>,
) -> Vec<(Leak, u64, u64, Option<Site>)> {
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
                    out.push((block, b.size, 1, crate::sites::frames_site(&b.frames)));
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
            held_at_end: None,
        };
        // A Python program whose end was recorded is checked on what it held then: the lost
        // (and with `held`, the held) allocations of its view, not what teardown left.
        let at_end = report
            .python
            .as_ref()
            .and_then(|p| p.view.as_ref())
            .filter(|v| v.at == "end");
        let items: Vec<(Leak, u64, u64, Option<Site>)> = match at_end {
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
            let rule = if suppressions.is_empty() {
                None
            } else {
                *decided
                    .entry((leak.stack, &*leak.api, leak.memory.as_str()))
                    .or_insert_with(|| suppressions.match_leak(leak, stack_of(leak.stack)))
            };
            if let Some(rule) = rule {
                check.rule_hits[rule] += n;
                check.suppressed.0 = check.suppressed.0.saturating_add(size);
                check.suppressed.1 += n;
                continue;
            }
            let owner = owner_index.of_leak(leak);
            if !owners.includes(owner_index.owner(owner)) {
                others.push((owner, size, n));
                continue;
            }
            let site = match site_of {
                Some(s) => std::borrow::Cow::Borrowed(s),
                None => index.site(leak.stack),
            };
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
        for event in &report.events {
            if let Some(rule) = suppressions.match_event(event, stack_of(event.stack)) {
                check.rule_hits[rule] += 1;
                check.suppressed_events += 1;
                continue;
            }
            let site = index.site(event.stack).key.clone();
            *check
                .events
                .entry((event.kind.to_string(), site))
                .or_default() += 1;
        }
        check.other_owners = crate::owners::by_owner(&owner_index, others);
        check.growing = growing_sites(
            report,
            &index,
            &mut owner_index,
            |o| owners.includes(o),
            &Criterion::default(),
        );
        check
    }
}

/// What a baseline holds: leaks per site and events per (kind, site), all processes together.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    sites: HashMap<String, (u64, u64)>,
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
            let e = self.sites.entry(key.clone()).or_default();
            e.0 = e.0.saturating_add(s.bytes);
            e.1 += s.leaks;
        }
        for (key, n) in &p.events {
            *self.events.entry(key.clone()).or_default() += n;
        }
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
    /// Sites: counting ones first (most counted bytes first), then the rest.
    pub sites: Vec<SiteVerdict>,
    /// Sites of checked owners that grew, per process: failing ones first, then most grown.
    pub growing: Vec<GrowthVerdict>,
    /// Unsuppressed events by kind and site: failing ones first.
    pub events: Vec<EventVerdict>,
    /// Every suppression rule with its matches.
    pub suppressions: Vec<RuleUse>,
    /// Per process.
    pub processes: Vec<ProcessVerdict>,
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
    }

    /// The rules that matched nothing.
    pub fn unused_suppressions(&self) -> impl Iterator<Item = &RuleUse> {
        self.suppressions.iter().filter(|r| r.matched == 0)
    }
}

/// A [`Verdict`] built one process at a time, in input order: each process's sites are added to
/// those across processes and the process keeps only its totals per site (by site number), so
/// memory holds the distinct sites and the processes' per-site totals, never their leaks.
#[derive(Debug)]
pub struct CheckFold {
    /// Site numbers by key.
    ids: HashMap<Arc<str>, u32>,
    /// The sites across processes, by number.
    sites: Vec<SiteAcc>,
    events: BTreeMap<(String, String), u64>,
    hits: Vec<u64>,
    suppressed_bytes: u64,
    suppressed_leaks: u64,
    suppressed_events: u64,
    /// Bytes of other owners (each owner's label is the first process's).
    other_owners: HashMap<String, OwnerShare>,
    /// What Python objects held at the end and was not counted (without `--held`).
    held_at_end: Option<(u64, u64)>,
    processes: Vec<Condensed>,
}

/// One site across processes.
#[derive(Debug)]
struct SiteAcc {
    key: Arc<str>,
    location: Option<String>,
    label: String,
    kind: Option<SiteKind>,
    bytes: u64,
    leaks: u64,
    apis: BTreeSet<String>,
    processes: Vec<String>,
    process_count: u64,
}

/// One process, as the verdict needs it once its sites are counted across processes.
#[derive(Debug)]
struct Condensed {
    source: String,
    name: String,
    hostname: String,
    rank: Option<u32>,
    worker: Option<String>,
    who: String,
    complete: bool,
    /// (site number, bytes, leaks), in site key order.
    sites: Vec<(u32, u64, u64)>,
    events: Vec<((String, String), u64)>,
    growing: Vec<GrowingSite>,
}

impl CheckFold {
    /// An empty check of processes condensed with `suppressions`.
    pub fn new(suppressions: &Suppressions) -> CheckFold {
        CheckFold {
            ids: HashMap::new(),
            sites: Vec::new(),
            events: BTreeMap::new(),
            hits: vec![0; suppressions.rules().len()],
            suppressed_bytes: 0,
            suppressed_leaks: 0,
            suppressed_events: 0,
            other_owners: HashMap::new(),
            held_at_end: None,
            processes: Vec::new(),
        }
    }

    /// Adds the next process (in input order).
    pub fn add(&mut self, p: ProcessCheck) {
        let mut sites = Vec::with_capacity(p.sites.len());
        for (key, s) in p.sites {
            let id = match self.ids.get(key.as_str()) {
                Some(&id) => id,
                None => {
                    let id = self.sites.len() as u32;
                    let key: Arc<str> = key.into();
                    self.ids.insert(key.clone(), id);
                    self.sites.push(SiteAcc {
                        key,
                        location: s.location.clone(),
                        label: s.label.clone(),
                        kind: s.kind,
                        bytes: 0,
                        leaks: 0,
                        apis: BTreeSet::new(),
                        processes: Vec::new(),
                        process_count: 0,
                    });
                    id
                }
            };
            let a = &mut self.sites[id as usize];
            a.bytes = a.bytes.saturating_add(s.bytes);
            a.leaks += s.leaks;
            a.apis.extend(s.apis);
            if a.processes.len() < 5 {
                a.processes.push(p.name.clone());
            }
            a.process_count += 1;
            sites.push((id, s.bytes, s.leaks));
        }
        for (key, n) in &p.events {
            match self.events.get_mut(key) {
                Some(t) => *t += n,
                None => {
                    self.events.insert(key.clone(), *n);
                }
            }
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
        self.processes.push(Condensed {
            source: p.source,
            name: p.name,
            hostname: p.hostname,
            rank: p.rank,
            worker: p.worker,
            who: p.who,
            complete: p.complete,
            sites,
            events: p.events.into_iter().collect(),
            growing: p.growing,
        });
    }

    /// Decides. `suppressions` must be the ones the processes were condensed with.
    pub fn finish(
        self,
        baseline: Option<&Baseline>,
        suppressions: &Suppressions,
        limits: Limits,
    ) -> Verdict {
        let CheckFold {
            sites,
            events,
            hits,
            suppressed_bytes,
            suppressed_leaks,
            suppressed_events,
            other_owners,
            held_at_end,
            processes,
            ..
        } = self;
        let process_count = processes.len();
        let keys: Vec<Arc<str>> = sites.iter().map(|a| a.key.clone()).collect();
        let mut site_verdicts: Vec<SiteVerdict> = sites
            .into_iter()
            .map(|a| {
                let key: &str = &a.key;
                let (status, base) = match baseline {
                    None => (SiteStatus::Leak, (0, 0)),
                    Some(b) => match b.sites.get(key) {
                        None => (SiteStatus::New, (0, 0)),
                        Some(&(bb, bl)) if a.bytes > bb || a.leaks > bl => {
                            (SiteStatus::Grown, (bb, bl))
                        }
                        Some(&base) => (SiteStatus::Baselined, base),
                    },
                };
                let (counted_bytes, counted_leaks) = match status {
                    SiteStatus::Baselined => (0, 0),
                    _ => (
                        a.bytes.saturating_sub(base.0),
                        a.leaks.saturating_sub(base.1),
                    ),
                };
                SiteVerdict {
                    site: key.to_string(),
                    location: a.location,
                    status,
                    leaked_bytes: a.bytes,
                    leaks: a.leaks,
                    baseline_bytes: base.0,
                    baseline_leaks: base.1,
                    counted_bytes,
                    counted_leaks,
                    apis: a.apis.into_iter().collect(),
                    processes: a.processes,
                    process_count: a.process_count,
                    label: a.label,
                    kind: a.kind,
                }
            })
            .collect();
        site_verdicts.sort_by(|a, b| {
            let counts = |s: &SiteVerdict| s.status != SiteStatus::Baselined;
            counts(b)
                .cmp(&counts(a))
                .then(b.counted_bytes.cmp(&a.counted_bytes))
                .then(b.leaked_bytes.cmp(&a.leaked_bytes))
                .then(a.site.cmp(&b.site))
        });

        let mut event_verdicts: Vec<EventVerdict> = events
            .into_iter()
            .map(|((kind, site), count)| {
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
        event_verdicts.sort_by(|a, b| {
            b.failing
                .cmp(&a.failing)
                .then(b.counted.cmp(&a.counted))
                .then(a.kind.cmp(&b.kind))
                .then(a.site.cmp(&b.site))
        });

        let leaked_bytes = site_verdicts
            .iter()
            .map(|s| s.leaked_bytes)
            .fold(0, u64::saturating_add);
        let leaks = site_verdicts.iter().map(|s| s.leaks).sum();
        let counted_bytes = site_verdicts
            .iter()
            .map(|s| s.counted_bytes)
            .fold(0, u64::saturating_add);
        let counted_leaks: u64 = site_verdicts.iter().map(|s| s.counted_leaks).sum();
        let incomplete: Vec<String> = processes
            .iter()
            .filter(|p| !p.complete)
            .map(|p| p.source.clone())
            .collect();

        let mut failures = Vec::new();
        let what = if baseline.is_some() {
            "new or grown leaks"
        } else {
            "leaks"
        };
        let bytes_over = limits.max_leaked_bytes.is_some_and(|m| counted_bytes > m);
        let leaks_over = limits.max_leaks.is_some_and(|m| counted_leaks > m);
        if let (true, Some(max)) = (bytes_over, limits.max_leaked_bytes) {
            failures.push(format!(
                "{} in {what} exceeds --max-leaked-bytes {}",
                crate::text::bytes(counted_bytes),
                crate::text::bytes(max),
            ));
        }
        if let (true, Some(max)) = (leaks_over, limits.max_leaks) {
            failures.push(format!("{counted_leaks} {what} exceed --max-leaks {max}"));
        }
        let mut growing: Vec<GrowthVerdict> = processes
            .iter()
            .flat_map(|p| {
                p.growing.iter().map(|g| GrowthVerdict {
                    process: p.name.clone(),
                    growth: g.clone(),
                    failing: limits.max_growth.is_some_and(|m| g.growth.grown_bytes > m),
                })
            })
            .collect();
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
        if let Some(max) = limits.max_growth {
            for g in growing.iter().filter(|g| g.failing) {
                failures.push(format!(
                    "{} grew by {} over {} in {} (more than --max-growth {})",
                    g.growth.label,
                    crate::text::bytes(g.growth.growth.grown_bytes),
                    crate::text::millis(
                        g.growth
                            .growth
                            .to_ms
                            .saturating_sub(g.growth.growth.from_ms)
                    ),
                    g.process,
                    crate::text::bytes(max),
                ));
            }
        }
        let failing_events: BTreeMap<&str, u64> =
            event_verdicts
                .iter()
                .filter(|e| e.failing)
                .fold(BTreeMap::new(), |mut m, e| {
                    *m.entry(e.kind.as_str()).or_default() += e.counted;
                    m
                });
        for (kind, n) in &failing_events {
            failures.push(format!(
                "{n} {kind} event{}",
                if *n == 1 { "" } else { "s" }
            ));
        }
        if limits.require_complete && !incomplete.is_empty() {
            failures.push(format!(
                "{} incomplete report{} (--require-complete)",
                incomplete.len(),
                if incomplete.len() == 1 { "" } else { "s" }
            ));
        }
        let passed = failures.is_empty();

        let counting: HashSet<&str> = site_verdicts
            .iter()
            .filter(|s| s.counted_bytes > 0 || s.counted_leaks > 0)
            .map(|s| s.site.as_str())
            .collect();
        let counting: Vec<bool> = keys.iter().map(|k| counting.contains(&**k)).collect();
        let failing_event_keys: HashMap<(&str, &str), ()> = event_verdicts
            .iter()
            .filter(|e| e.failing)
            .map(|e| ((e.kind.as_str(), e.site.as_str()), ()))
            .collect();
        let leaks_fail = bytes_over || leaks_over;
        let process_verdicts = processes
            .into_iter()
            .map(|p| {
                let failing_sites: Vec<(Arc<str>, u64, u64)> = if leaks_fail {
                    p.sites
                        .iter()
                        .filter(|(id, _, _)| counting[*id as usize])
                        .map(|&(id, b, n)| (keys[id as usize].clone(), b, n))
                        .collect()
                } else {
                    Vec::new()
                };
                let failing_events: Vec<(String, String, u64)> = p
                    .events
                    .iter()
                    .filter(|((k, s), _)| {
                        failing_event_keys.contains_key(&(k.as_str(), s.as_str()))
                    })
                    .map(|((k, s), n)| (k.clone(), s.clone(), *n))
                    .collect();
                let incomplete_fails = limits.require_complete && !p.complete;
                let failing_growth: Vec<(String, u64)> = match limits.max_growth {
                    Some(max) => p
                        .growing
                        .iter()
                        .filter(|g| g.growth.grown_bytes > max)
                        .map(|g| (g.site.clone(), g.growth.grown_bytes))
                        .collect(),
                    None => Vec::new(),
                };
                ProcessVerdict {
                    source: p.source,
                    name: p.name,
                    hostname: p.hostname,
                    rank: p.rank,
                    worker: p.worker,
                    who: p.who,
                    complete: p.complete,
                    leaked_bytes: p.sites.iter().map(|s| s.1).fold(0, u64::saturating_add),
                    leaks: p.sites.iter().map(|s| s.2).sum(),
                    failed: !failing_sites.is_empty()
                        || !failing_events.is_empty()
                        || !failing_growth.is_empty()
                        || incomplete_fails,
                    failing_sites,
                    failing_events,
                    failing_growth,
                }
            })
            .collect();

        Verdict {
            passed,
            failures,
            baseline: baseline.is_some(),
            reports: process_count,
            incomplete,
            leaked_bytes,
            leaks,
            counted_bytes,
            counted_leaks,
            suppressed_bytes,
            suppressed_leaks,
            suppressed_events,
            other_owners: crate::owners::combine(other_owners.into_values()),
            held_at_end: held_at_end.map(|(bytes, allocations)| HeldAtEnd { bytes, allocations }),
            sites: site_verdicts,
            growing,
            events: event_verdicts,
            suppressions: suppressions
                .rules()
                .iter()
                .zip(hits)
                .map(|(r, matched)| RuleUse {
                    file: r.file.clone(),
                    line: r.line,
                    rule: r.text.clone(),
                    matched,
                })
                .collect(),
            processes: process_verdicts,
            limits,
        }
    }
}

#[cfg(test)]
mod tests;
