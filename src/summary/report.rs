//! One process's summary, [`ReportSummary`], and its parts (devices, contexts, sites, the
//! largest leaks, events), and how a report is condensed to it ([`ReportSummary::new`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::attribution::{self, OomSummary, PeakSummary, ReconciliationSummary};
use super::python;
use crate::growth::{Criterion, GrowingSite, NotTold, growing_sites, not_told};
use crate::input::Source;
use crate::owners::{OwnerIndex, OwnerKind, OwnerShare, by_owner};
use crate::sites::{SiteIndex, SiteKind};
use cuguard_format::{Addr, Cost, Event, LeakFold, LeakState, Report};

/// One process's summary.
#[derive(Clone, Debug, Serialize)]
pub struct ReportSummary {
    /// The report file, with `[i]` for the i-th process of a merged report.
    pub source: String,
    /// Who the process was.
    pub process: ProcessInfo,
    /// Whether the report is final.
    pub complete: bool,
    /// Why it was written (`exit`, `checkpoint`, `signal`, `request`, …).
    pub reason: String,
    /// Version of the shim that wrote it.
    pub tool_version: String,
    /// `cuDriverGetVersion` of the driver.
    pub driver_version: i64,
    /// Bytes leaked.
    pub leaked_bytes: u64,
    /// Leaks.
    pub leaks: u64,
    /// Of those, leaks released by a context destroy (state `released_by_context_destroy`).
    pub released_by_context_destroy: u64,
    /// Every device the report names, by ordinal.
    pub devices: Vec<DeviceSummary>,
    /// The contexts that hold leaks, by device then id (`null` id: leaks outside any context).
    pub contexts: Vec<ContextSummary>,
    /// Sites, most bytes first, at most `--top` of them.
    pub sites: Vec<SiteSummary>,
    /// How many distinct sites the process leaked at.
    pub sites_total: usize,
    /// The largest leaks, at most `--top` of them (ties: earliest allocation first).
    pub largest_leaks: Vec<LeakLine>,
    /// Events by kind, most frequent first.
    pub events: Vec<EventCount>,
    /// Events the shim did not keep (its list is bounded); 0 when the report does not say.
    pub events_dropped: u64,
    /// The shim's own problems.
    pub faults: Vec<String>,
    /// Bytes leaked (held at the end) by owner, most first (`count`: leaks).
    pub owners: Vec<OwnerShare>,
    /// What each out-of-memory refusal saw, in order, at most `--top`.
    pub ooms: Vec<OomSummary>,
    /// Refusals not listed: those the shim did not keep, and those beyond `--top`.
    pub ooms_dropped: u64,
    /// What was live at each device's peak, by device.
    pub peaks: Vec<PeakSummary>,
    /// The sites whose live bytes were still rising at the end of the run, most grown first (see
    /// [`crate::growth`]), at most `--top`.
    pub growing: Vec<GrowingSite>,
    /// Why growth could not be told (the run had too few samples: see
    /// [`crate::growth::not_told`]); `None` when it could, or when nothing was allocated.
    pub growth_not_told: Option<NotTold>,
    /// What each device says is used against what cuguard can explain.
    pub reconciliation: Vec<ReconciliationSummary>,
    /// What cuguard itself cost the process: the report's `cost` (`null` in older reports).
    pub cost: Option<Cost>,
    /// A Python program's end: held, lost and the caches' live and idle blocks (see
    /// [`python`]); left out when the report has no `python` section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python: Option<python::PythonSummary>,
    /// The versions that must match and the known mismatches (see [`crate::versions`]); left
    /// out when the report has no `versions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versions: Option<crate::versions::VersionsSummary>,
}

/// Who a process was.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessInfo {
    /// Executable path.
    pub exe: String,
    /// Command line.
    pub argv: Vec<String>,
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Host name.
    pub hostname: String,
    /// Rank, if any.
    pub rank: Option<u32>,
    /// The labels the program set (`process.labels`); left out of the JSON when empty.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// One device's share.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceSummary {
    /// Ordinal.
    pub device: u32,
    /// Name, when `devices[]` lists it.
    pub name: Option<String>,
    /// Total memory, when `devices[]` lists it.
    pub total_bytes: Option<u64>,
    /// Bytes leaked on it.
    pub leaked_bytes: u64,
    /// Leaks on it.
    pub leaks: u64,
    /// The most bytes live at once, from `stats`.
    pub peak_live_bytes: Option<u64>,
    /// Bytes the pool held, from `stats`, when the pool was on.
    pub pool_reserved_bytes: Option<u64>,
    /// The process's limit on it (`CUGUARD_LIMIT`), when `devices[]` gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
}

/// One context's share.
#[derive(Clone, Debug, Serialize)]
pub struct ContextSummary {
    /// Context id; `null` for leaks outside any context.
    pub context: Option<u32>,
    /// The device of its leaks.
    pub device: u32,
    /// Whether `contexts[]` lists it.
    pub listed: bool,
    /// Whether it is a primary context.
    pub primary: bool,
    /// Whether it was destroyed.
    pub destroyed: bool,
    /// What destroyed it.
    pub destroyed_by: Option<String>,
    /// Bytes leaked in it.
    pub leaked_bytes: u64,
    /// Leaks in it.
    pub leaks: u64,
}

/// One site of one process.
#[derive(Clone, Debug, Serialize)]
pub struct SiteSummary {
    /// The site's key (see [`crate::sites`]).
    pub site: String,
    /// `file:line`, when known.
    pub location: Option<String>,
    /// Bytes leaked there.
    pub leaked_bytes: u64,
    /// Leaks there.
    pub leaks: u64,
    /// The driver entries that made them, sorted.
    pub apis: Vec<String>,
    /// The site for people, its location once (see [`crate::sites::Site::label`]).
    pub label: String,
    /// What kind of frame it is, when the report says.
    pub kind: Option<SiteKind>,
    /// Who holds most of its bytes: owner id.
    pub owner: String,
    /// The owner for people.
    pub owner_label: String,
    /// The owner's kind.
    pub owner_kind: OwnerKind,
    /// Of its bytes, how many that owner holds (fewer than `leaked_bytes` when other owners
    /// hold the rest).
    pub owner_bytes: u64,
    /// Its largest stack's frames in the mixed native and Python order, when it has Python
    /// frames (see [`crate::sites::chain`]; for the first [`CHAIN_SITES`] sites).
    pub stack: Vec<String>,
}

/// One leak, as listed among the largest.
#[derive(Clone, Debug, Serialize)]
pub struct LeakLine {
    /// The pointer.
    pub address: Addr,
    /// Bytes the program received.
    pub size: u64,
    /// Bytes asked for.
    pub requested: u64,
    /// The driver entry.
    pub api: String,
    /// Kind of memory.
    pub memory: String,
    /// Device ordinal.
    pub device: u32,
    /// Context id.
    pub context: Option<u32>,
    /// OS thread id.
    pub thread: u64,
    /// Allocation order.
    pub seq: u64,
    /// `live_at_exit` or `released_by_context_destroy`.
    pub state: String,
    /// The site's key.
    pub site: String,
    /// Who holds it: owner id.
    pub owner: String,
    /// The site for people: its label (see [`crate::sites::Site::label`]) where the shim chose
    /// the site, else its key (as `site`).
    pub label: String,
    /// The program's tag for it (`cuguard.tag`, `cuguard_tag_push`, `cuguard.annotate`);
    /// absent when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// How many events of one kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventCount {
    /// The kind, e.g. `double_free`.
    pub kind: String,
    /// How many.
    pub count: u64,
}

impl ReportSummary {
    /// Condenses one report, keeping every site (so [`Summary::new`](super::Summary::new) can add
    /// them up) and the `top` largest leaks.
    pub fn new(source: &Source, report: &Report, top: usize) -> ReportSummary {
        ReportSummary::folded(source, report, &LeakFold::of(&report.leaks, top), top)
    }

    /// Condenses one report whose leaks are `leaks` (folded while it was parsed, keeping the
    /// `top` largest; the report's own `leaks` are not read), as [`ReportSummary::new`].
    pub fn folded(source: &Source, report: &Report, leaks: &LeakFold, top: usize) -> ReportSummary {
        let index = SiteIndex::new(report);
        let mut owners = OwnerIndex::new(report);
        let mut tally = Tally::of(report, leaks, &index, &mut owners);
        let sites = tally.site_list(&index, &owners);
        let largest_leaks = largest_leaks(leaks, &index, &mut owners, top);
        let held = by_owner(
            &owners,
            tally
                .by_stack
                .iter()
                .map(|(&(_, owner), &(bytes, leaks))| (owner, bytes, leaks)),
        );
        let ooms = attribution::ooms(report, &index, &mut owners, top);
        let peaks = attribution::peaks(report, &index, &mut owners, top);
        let criterion = Criterion::default();
        let mut growing = growing_sites(report, &index, &mut owners, |_| true, &criterion);
        growing.truncate(top);
        let growth_not_told = not_told(report, &criterion);
        let reconciliation = attribution::reconciliation(report, &held);
        let python = python_summary(report, &index, &mut owners);
        ReportSummary {
            source: source.to_string(),
            process: ProcessInfo::of(report),
            complete: report.complete,
            reason: report.reason.to_string(),
            tool_version: report.tool.version.clone(),
            driver_version: report.driver.version,
            leaked_bytes: tally.leaked_bytes,
            leaks: leaks.count(),
            released_by_context_destroy: tally.released,
            devices: tally.devices.into_values().collect(),
            contexts: tally.contexts.into_values().collect(),
            sites_total: sites.len(),
            sites,
            largest_leaks,
            events: count_events(
                report
                    .events
                    .iter()
                    .filter(|e| !report.at_python_teardown(e))
                    .map(|e| e.kind.as_str()),
            ),
            events_dropped: report.events_dropped.unwrap_or(0),
            faults: report.faults.clone(),
            owners: held,
            ooms_dropped: report
                .ooms_dropped
                .unwrap_or(0)
                .saturating_add((report.ooms.len() - ooms.len()) as u64),
            ooms,
            peaks,
            growing,
            growth_not_told,
            reconciliation,
            cost: report.cost.clone(),
            python,
            versions: crate::versions::VersionsSummary::of(report),
        }
    }

    /// The executable's file name.
    pub fn exe_name(&self) -> &str {
        crate::sites::file_name(&self.process.exe)
    }

    /// Who the process was in its job (see [`crate::identity`]).
    pub fn identity(&self) -> crate::identity::Identity {
        crate::identity::Identity::new(
            self.process.pid,
            &self.process.hostname,
            self.process.rank,
            Some(&self.process.labels),
        )
    }
}

impl DeviceSummary {
    fn empty(device: u32) -> DeviceSummary {
        DeviceSummary {
            device,
            name: None,
            total_bytes: None,
            leaked_bytes: 0,
            leaks: 0,
            peak_live_bytes: None,
            pool_reserved_bytes: None,
            limit_bytes: None,
        }
    }
}

/// How many of a process's sites (most bytes first) get their mixed stack
/// ([`SiteSummary::stack`]); the others' is left empty.
pub const CHAIN_SITES: usize = 100;

/// One site while leaks are added up.
struct SiteAcc<'r> {
    summary: SiteSummary,
    apis: BTreeSet<&'r str>,
    /// Bytes by owner.
    owners: HashMap<usize, u64>,
    /// Bytes by stack.
    stacks: HashMap<Option<u64>, u64>,
}

/// A report's leaks added up: by device, context, site and (stack, owner).
struct Tally<'r> {
    devices: BTreeMap<u32, DeviceSummary>,
    contexts: BTreeMap<(u32, Option<u32>), ContextSummary>,
    sites: HashMap<String, SiteAcc<'r>>,
    /// Bytes and leaks by (stack, owner).
    by_stack: HashMap<(Option<u64>, usize), (u64, u64)>,
    leaked_bytes: u64,
    /// Leaks released by a context destroy.
    released: u64,
}

impl<'r> Tally<'r> {
    /// Adds up `leaks` (the report's, folded), every device the report names listed.
    fn of(
        report: &'r Report,
        leaks: &'r LeakFold,
        index: &SiteIndex<'_>,
        owners: &mut OwnerIndex<'r>,
    ) -> Tally<'r> {
        let mut t = Tally {
            devices: devices_of(report),
            contexts: BTreeMap::new(),
            sites: HashMap::new(),
            by_stack: HashMap::new(),
            leaked_bytes: 0,
            released: 0,
        };
        for group in leaks.groups() {
            let (leak, size, n) = (&group.leak, group.bytes, group.leaks);
            t.leaked_bytes = t.leaked_bytes.saturating_add(size);
            if leak.state == LeakState::ReleasedByContextDestroy {
                t.released += n;
            }
            let d = t
                .devices
                .entry(leak.device)
                .or_insert_with(|| DeviceSummary::empty(leak.device));
            d.leaked_bytes = d.leaked_bytes.saturating_add(size);
            d.leaks += n;
            let c = t
                .contexts
                .entry((leak.device, leak.context))
                .or_insert_with(|| ContextSummary::of(report, leak.device, leak.context));
            c.leaked_bytes = c.leaked_bytes.saturating_add(size);
            c.leaks += n;
            let owner = owners.of_leak(leak);
            let site = index.site(leak.stack);
            let entry = t
                .sites
                .entry(site.key.clone())
                .or_insert_with(|| SiteAcc::new(&site));
            entry.summary.leaked_bytes = entry.summary.leaked_bytes.saturating_add(size);
            entry.summary.leaks += n;
            entry.apis.insert(&leak.api);
            let b = t.by_stack.entry((leak.stack, owner)).or_default();
            *b = (b.0.saturating_add(size), b.1 + n);
        }
        // Bytes by owner and by stack at each site, from the bytes by (stack, owner).
        for (&(stack, owner), &(b, _)) in &t.by_stack {
            if let Some(acc) = t.sites.get_mut(&index.site(stack).key) {
                let o = acc.owners.entry(owner).or_default();
                *o = o.saturating_add(b);
                let st = acc.stacks.entry(stack).or_default();
                *st = st.saturating_add(b);
            }
        }
        t
    }

    /// The sites, most bytes first, each with its owner, and the first [`CHAIN_SITES`] with
    /// their largest stack's mixed frames.
    /// Takes the sites out of the tally.
    fn site_list(&mut self, index: &SiteIndex<'_>, owners: &OwnerIndex<'_>) -> Vec<SiteSummary> {
        let mut sites: Vec<(SiteSummary, Option<Option<u64>>)> = std::mem::take(&mut self.sites)
            .into_values()
            .map(|acc| {
                let mut s = acc.summary;
                s.apis = acc.apis.into_iter().map(str::to_string).collect();
                let owner = largest(&acc.owners).unwrap_or_else(|| owners.program());
                s.owner_bytes = acc.owners.get(&owner).copied().unwrap_or(s.leaked_bytes);
                let owner = owners.owner(owner);
                s.owner = owner.id.clone();
                s.owner_label = owner.label.clone();
                s.owner_kind = owner.kind;
                (s, largest(&acc.stacks))
            })
            .collect();
        sort_sites(&mut sites, |(s, _)| {
            (s.leaked_bytes, s.leaks, s.site.clone())
        });
        sites
            .into_iter()
            .enumerate()
            .map(|(i, (mut s, stack))| {
                if i < CHAIN_SITES {
                    s.stack = stack.map(|st| index.chain(st)).unwrap_or_default();
                }
                s
            })
            .collect()
    }
}

/// Every device the report names, by ordinal, with its peak and pool from `stats`.
fn devices_of(report: &Report) -> BTreeMap<u32, DeviceSummary> {
    let mut devices: BTreeMap<u32, DeviceSummary> = BTreeMap::new();
    for d in &report.devices {
        devices.entry(d.ordinal).or_insert_with(|| DeviceSummary {
            device: d.ordinal,
            name: Some(d.name.clone()),
            total_bytes: Some(d.total_bytes),
            limit_bytes: d.limit_bytes,
            ..DeviceSummary::empty(d.ordinal)
        });
    }
    for s in &report.stats.devices {
        let d = devices
            .entry(s.device)
            .or_insert_with(|| DeviceSummary::empty(s.device));
        d.peak_live_bytes = Some(s.peak_live_bytes);
        d.pool_reserved_bytes = s.pool.as_ref().map(|p| p.reserved_bytes);
    }
    devices
}

/// The `top` largest leaks, as listed.
fn largest_leaks<'r>(
    leaks: &'r LeakFold,
    index: &SiteIndex<'_>,
    owners: &mut OwnerIndex<'r>,
    top: usize,
) -> Vec<LeakLine> {
    leaks
        .largest()
        .into_iter()
        .take(top)
        .map(|l| {
            let site = index.site(l.stack);
            LeakLine {
                address: l.address,
                size: l.size,
                requested: l.requested,
                api: l.api.to_string(),
                memory: l.memory.to_string(),
                device: l.device,
                context: l.context,
                thread: l.thread,
                seq: l.seq,
                state: l.state.to_string(),
                site: site.key.clone(),
                label: if site.kind.is_some() {
                    site.label()
                } else {
                    site.key.clone()
                },
                owner: {
                    let o = owners.of_leak(l);
                    owners.owner(o).id.clone()
                },
                tag: l.tag.as_deref().map(str::to_string),
            }
        })
        .collect()
}

/// A Python program's end (see [`python`]), with a note on the contexts the interpreter's
/// teardown destroyed (numba's, at exit): the framework's, said once, not counted among the
/// events.
fn python_summary<'r>(
    report: &'r Report,
    index: &SiteIndex<'_>,
    owners: &mut OwnerIndex<'r>,
) -> Option<python::PythonSummary> {
    let mut python = python::PythonSummary::new(report, index, owners);
    let teardown: Vec<&Event> = report
        .events
        .iter()
        .filter(|e| report.at_python_teardown(e))
        .collect();
    if let (Some(py), false) = (python.as_mut(), teardown.is_empty()) {
        let live: u64 = teardown.iter().filter_map(|e| e.size).sum();
        py.notes.push(format!(
            "{} destroyed by the interpreter's teardown after the program's code ended, with {} \
             still live (a framework's own exit, as numba's): not a finding against the program",
            crate::wording::plural(teardown.len() as u64, "context", "contexts"),
            crate::wording::bytes(live)
        ));
    }
    python
}

impl ProcessInfo {
    fn of(report: &Report) -> ProcessInfo {
        ProcessInfo {
            exe: report.process.exe.clone(),
            argv: report.process.argv.clone(),
            pid: report.process.pid,
            ppid: report.process.ppid,
            hostname: report.process.hostname.clone(),
            rank: report.process.rank,
            labels: report.process.labels.clone().unwrap_or_default(),
        }
    }
}

impl ContextSummary {
    /// Context `id` of `device`, as `contexts[]` describes it, with nothing leaked yet.
    fn of(report: &Report, device: u32, id: Option<u32>) -> ContextSummary {
        let ctx = id.and_then(|id| report.contexts.iter().find(|c| c.id == id));
        ContextSummary {
            context: id,
            device,
            listed: ctx.is_some(),
            primary: ctx.is_some_and(|c| c.primary),
            destroyed: ctx.is_some_and(|c| c.destroyed),
            destroyed_by: ctx.and_then(|c| c.destroyed_by.clone()),
            leaked_bytes: 0,
            leaks: 0,
        }
    }
}

impl<'r> SiteAcc<'r> {
    fn new(site: &crate::sites::Site) -> SiteAcc<'r> {
        SiteAcc {
            summary: SiteSummary {
                site: site.key.clone(),
                location: site.location.clone(),
                leaked_bytes: 0,
                leaks: 0,
                apis: Vec::new(),
                label: site.label(),
                kind: site.kind,
                owner: String::new(),
                owner_label: String::new(),
                owner_kind: OwnerKind::Program,
                owner_bytes: 0,
                stack: Vec::new(),
            },
            apis: BTreeSet::new(),
            owners: HashMap::new(),
            stacks: HashMap::new(),
        }
    }
}

/// The key with the most bytes (ties: the smallest key).
fn largest<K: Copy + Ord>(bytes: &HashMap<K, u64>) -> Option<K> {
    bytes
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(k, _)| *k)
}

/// Sorts most bytes first, then most leaks, then by name.
pub(super) fn sort_sites<T, K: Ord>(sites: &mut [T], key: impl Fn(&T) -> (u64, u64, K)) {
    sites.sort_by(|a, b| {
        let (ab, al, an) = key(a);
        let (bb, bl, bn) = key(b);
        bb.cmp(&ab).then(bl.cmp(&al)).then(an.cmp(&bn))
    });
}

/// Counts kinds, most frequent first, then by name.
pub fn count_events<'a>(kinds: impl Iterator<Item = &'a str>) -> Vec<EventCount> {
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for k in kinds {
        *counts.entry(k).or_default() += 1;
    }
    let mut out: Vec<EventCount> = counts
        .into_iter()
        .map(|(kind, count)| EventCount {
            kind: kind.to_string(),
            count,
        })
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.kind.cmp(&b.kind)));
    out
}
