//! The summary of one job's processes together (`cuguard summary --by`): processes grouped by
//! worker, rank, host or process, the processes called out by the comparison of [`crate::compare`],
//! and the reports that are incomplete or missing.
//!
//! [`JobFold`] is fed each process summary, one at a time, before its site list is cut to `--top`,
//! and keeps from it only each process's totals per site (never the summaries or the reports):
//!
//! - each group (see [`crate::identity::GroupBy`]; processes without the label form one group,
//!   `(no worker)`, `(no rank)`) gets the bytes and leaks its processes leaked, split into the
//!   program's own and the rest (framework caches, libraries, the driver: see
//!   [`crate::owners`]), its peak (the sum of each process's peak live bytes over its devices:
//!   an upper bound, as the processes need not have peaked at once), what grew (the sum of its
//!   processes' growing sites, as listed in the summary), and its [`GROUP_SITES`] largest sites;
//! - the comparison is fed each process's leaked bytes per site (held) and its growing sites'
//!   grown bytes (grown), and calls out processes by [`Criterion::default`];
//! - incomplete: every process whose report says `complete: false` (a checkpoint or interim
//!   report of a process that did not finish, one written at a signal), with why;
//! - missing: when processes carry the label `WORLD_SIZE`, every rank in `0..WORLD_SIZE` (the
//!   largest one given) that no process has.
//!
//! The summary carries a [`Job`] when `--by` is given, and otherwise only when some process was
//! called out or some rank is missing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use super::ReportSummary;
use crate::compare::{Comparison, Criterion, Measure, Outlier};
use crate::identity::{GroupBy, GroupKey, Identity};
use crate::owners::OwnerKind;
use crate::text::bytes;

/// How many sites each group lists, largest first.
pub const GROUP_SITES: usize = 3;

/// One job's processes together (see the module doc).
#[derive(Clone, Debug, Serialize)]
pub struct Job {
    /// What the processes are grouped by (`null`: not grouped).
    pub by: Option<GroupBy>,
    /// The groups, by key (numbers as numbers); empty when not grouped.
    pub groups: Vec<Group>,
    /// The criterion, in words.
    pub criterion: String,
    /// The processes called out, most bytes first, at most `--top`.
    pub outliers: Vec<JobOutlier>,
    /// How many were called out in all.
    pub outliers_total: usize,
    /// The processes whose reports are incomplete, in input order.
    pub incomplete: Vec<ProcessRef>,
    /// `WORLD_SIZE`, when processes give it.
    pub world_size: Option<u32>,
    /// The ranks in `0..world_size` without a report.
    pub missing_ranks: Vec<u32>,
}

/// A process, as the job section names it.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessRef {
    /// Who it was.
    #[serde(flatten)]
    pub who: Identity,
    /// For people: [`Identity::describe`].
    pub name: String,
    /// Where its report came from.
    pub source: String,
    /// Why its report was written.
    pub reason: String,
}

/// One group.
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    /// For people: `rank 3`, `worker tcp://…`, `host gpu01`, `pid 4242 (host gpu01)`,
    /// `(no rank)`.
    pub name: String,
    /// Its processes, in input order.
    pub processes: Vec<ProcessRef>,
    /// Bytes leaked.
    pub leaked_bytes: u64,
    /// Leaks.
    pub leaks: u64,
    /// Of the bytes leaked, the program's own.
    pub own_bytes: u64,
    /// Of the bytes leaked, what framework caches, libraries and the driver hold.
    pub others_bytes: u64,
    /// The sum of its processes' peak live bytes.
    pub peak_bytes: u64,
    /// The sum of what its processes' growing sites grew by.
    pub grown_bytes: u64,
    /// Its largest sites, at most [`GROUP_SITES`].
    pub sites: Vec<GroupSite>,
    /// How many distinct sites it leaked at.
    pub sites_total: usize,
}

/// One site of a group.
#[derive(Clone, Debug, Serialize)]
pub struct GroupSite {
    /// The site's key.
    pub site: String,
    /// For people.
    pub label: String,
    /// Bytes leaked there.
    pub leaked_bytes: u64,
    /// Leaks there.
    pub leaks: u64,
}

/// One process called out.
#[derive(Clone, Debug, Serialize)]
pub struct JobOutlier {
    /// Who.
    pub who: ProcessRef,
    /// Where and how much.
    #[serde(flatten)]
    pub outlier: Outlier,
    /// For people: `rank 3 holds 4.0 GiB at train.py:88, 8.0× the median of 512.0 MiB over 8
    /// ranks (host node17, pid 9001)`.
    pub sentence: String,
}

impl ProcessRef {
    fn of(p: &ReportSummary) -> ProcessRef {
        let who = p.identity();
        ProcessRef {
            name: who.describe(),
            who,
            source: p.source.clone(),
            reason: p.reason.clone(),
        }
    }
}

/// The job section, built one process at a time (see the module doc): each process's
/// [`ProcessRef`], its per-site totals in the comparison, and its group's running sums; never the
/// process summaries themselves.
#[derive(Debug)]
pub struct JobFold {
    by: Option<GroupBy>,
    top: usize,
    refs: Vec<ProcessRef>,
    incomplete: Vec<usize>,
    comparison: Comparison,
    groups: BTreeMap<Option<GroupKey>, GroupFold>,
}

/// One group's running sums.
#[derive(Debug)]
struct GroupFold {
    members: Vec<usize>,
    group: Group,
    sites: HashMap<String, GroupSite>,
}

impl JobFold {
    /// An empty job, grouped `by`, listing at most `top` processes called out.
    pub fn new(by: Option<GroupBy>, top: usize) -> JobFold {
        JobFold {
            by,
            top,
            refs: Vec::new(),
            incomplete: Vec::new(),
            comparison: Comparison::new(),
            groups: BTreeMap::new(),
        }
    }

    /// Adds the next process (in input order), before its site list is cut to `--top`.
    pub fn add(&mut self, p: &ReportSummary) {
        let r = ProcessRef::of(p);
        let i = self.refs.len();
        let n = self.comparison.add_process();
        for s in &p.sites {
            self.comparison
                .add(n, Measure::Held, &s.site, &s.label, s.leaked_bytes);
        }
        for g in &p.growing {
            self.comparison
                .add(n, Measure::Grown, &g.site, &g.label, g.growth.grown_bytes);
        }
        if !p.complete {
            self.incomplete.push(i);
        }
        if let Some(by) = self.by {
            let g = self
                .groups
                .entry(by.key(&r.who, i))
                .or_insert_with(GroupFold::new);
            g.members.push(i);
            g.add(p, &r);
        }
        self.refs.push(r);
    }

    /// The job section; `None` when not grouped and nothing is called out or missing.
    pub fn finish(self) -> Option<Job> {
        let JobFold {
            by,
            top,
            refs,
            incomplete,
            comparison,
            groups,
        } = self;
        let criterion = Criterion::default();
        let outliers = comparison.outliers(&criterion);
        let noun = noun(&refs, by);
        let outliers_total = outliers.len();
        let outliers: Vec<JobOutlier> = outliers
            .into_iter()
            .take(top)
            .map(|o| {
                let who = refs[o.process].clone();
                JobOutlier {
                    sentence: sentence(&who.who, &o, noun),
                    who,
                    outlier: o,
                }
            })
            .collect();
        let world_size = refs.iter().filter_map(|r| r.who.world_size).max();
        let ranks: BTreeSet<u32> = refs.iter().filter_map(|r| r.who.rank).collect();
        let missing_ranks: Vec<u32> = world_size
            .map(|w| (0..w).filter(|r| !ranks.contains(r)).collect())
            .unwrap_or_default();
        if by.is_none() && outliers.is_empty() && missing_ranks.is_empty() {
            return None;
        }
        let groups = by
            .map(|by| finish_groups(groups, &refs, by))
            .unwrap_or_default();
        Some(Job {
            by,
            groups,
            criterion: format!(
                "at least {}× the median and at least {} more at a site, over at least {} processes",
                criterion.ratio,
                bytes(criterion.min_excess_bytes),
                criterion.min_processes
            ),
            outliers,
            outliers_total,
            incomplete: incomplete.into_iter().map(|i| refs[i].clone()).collect(),
            world_size,
            missing_ranks,
        })
    }
}

/// The groups, keyed ones first (in key order), then the one without the label.
fn finish_groups(
    groups: BTreeMap<Option<GroupKey>, GroupFold>,
    refs: &[ProcessRef],
    by: GroupBy,
) -> Vec<Group> {
    let mut order: Vec<(Option<GroupKey>, GroupFold)> = groups.into_iter().collect();
    let unlabelled = usize::from(order.first().is_some_and(|(k, _)| k.is_none()));
    order.rotate_left(unlabelled);
    order
        .into_iter()
        .map(|(key, g)| {
            let name = match (&key, by) {
                (None, _) => format!("(no {})", by.as_str()),
                (Some(_), GroupBy::Process) => refs[g.members[0]].name.clone(),
                (Some(GroupKey::Number(n)), _) => format!("{} {n}", by.as_str()),
                (Some(GroupKey::Text(t)), _) => {
                    format!("{} {}", by.as_str(), crate::text::one_line(t))
                }
            };
            g.finish(name)
        })
        .collect()
}

impl GroupFold {
    fn new() -> GroupFold {
        GroupFold {
            members: Vec::new(),
            group: Group {
                name: String::new(),
                processes: Vec::new(),
                leaked_bytes: 0,
                leaks: 0,
                own_bytes: 0,
                others_bytes: 0,
                peak_bytes: 0,
                grown_bytes: 0,
                sites: Vec::new(),
                sites_total: 0,
            },
            sites: HashMap::new(),
        }
    }

    fn add(&mut self, p: &ReportSummary, r: &ProcessRef) {
        let g = &mut self.group;
        g.processes.push(r.clone());
        g.leaked_bytes = g.leaked_bytes.saturating_add(p.leaked_bytes);
        g.leaks += p.leaks;
        for o in &p.owners {
            if o.kind == OwnerKind::Program {
                g.own_bytes = g.own_bytes.saturating_add(o.bytes);
            } else {
                g.others_bytes = g.others_bytes.saturating_add(o.bytes);
            }
        }
        let peak = p
            .devices
            .iter()
            .filter_map(|d| d.peak_live_bytes)
            .fold(0, u64::saturating_add);
        g.peak_bytes = g.peak_bytes.saturating_add(peak);
        g.grown_bytes = p
            .growing
            .iter()
            .map(|s| s.growth.grown_bytes)
            .fold(g.grown_bytes, u64::saturating_add);
        for s in &p.sites {
            let e = match self.sites.get_mut(&s.site) {
                Some(e) => e,
                None => self
                    .sites
                    .entry(s.site.clone())
                    .or_insert_with(|| GroupSite {
                        site: s.site.clone(),
                        label: s.label.clone(),
                        leaked_bytes: 0,
                        leaks: 0,
                    }),
            };
            e.leaked_bytes = e.leaked_bytes.saturating_add(s.leaked_bytes);
            e.leaks += s.leaks;
        }
    }

    fn finish(self, name: String) -> Group {
        let mut g = self.group;
        g.name = name;
        let mut sites: Vec<GroupSite> = self.sites.into_values().collect();
        sites.sort_by(|a, b| {
            b.leaked_bytes
                .cmp(&a.leaked_bytes)
                .then(b.leaks.cmp(&a.leaks))
                .then(a.site.cmp(&b.site))
        });
        g.sites_total = sites.len();
        sites.truncate(GROUP_SITES);
        g.sites = sites;
        g
    }
}

/// What the processes are called, plural: `ranks` when grouped by rank or all have one,
/// `workers` likewise, else `processes`.
fn noun(refs: &[ProcessRef], by: Option<GroupBy>) -> &'static str {
    let all = |f: fn(&Identity) -> bool| !refs.is_empty() && refs.iter().all(|r| f(&r.who));
    match by {
        Some(GroupBy::Worker) => "workers",
        Some(GroupBy::Rank) => "ranks",
        _ if all(|w| w.worker.is_some()) => "workers",
        _ if all(|w| w.rank.is_some()) => "ranks",
        _ => "processes",
    }
}

/// `rank 3 holds 4.0 GiB at train.py:88, 8.0× the median of 512.0 MiB over 8 ranks (host
/// node17, pid 9001)`; with a median of 0: `…, where the median over 8 ranks is 0 B (…)`.
fn sentence(who: &Identity, o: &Outlier, noun: &str) -> String {
    let verb = match o.measure {
        Measure::Held => "holds",
        Measure::Grown => "grew by",
    };
    let compared = match o.ratio() {
        Some(r) => format!(
            "{r:.1}× the median of {} over {} {noun}",
            bytes(o.median_bytes),
            o.processes
        ),
        None => format!("where the median over {} {noun} is 0 B", o.processes),
    };
    let full = who.describe();
    let more = full.strip_prefix(&who.name()).unwrap_or("").trim_start();
    format!(
        "{} {verb} {} at {}, {compared}{}{more}",
        who.name(),
        bytes(o.bytes),
        crate::text::one_line(&o.label),
        if more.is_empty() { "" } else { " " }
    )
}
