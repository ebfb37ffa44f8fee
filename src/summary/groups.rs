//! The summary of one job's processes together (`cuguard summary --by`): processes grouped by
//! worker, rank, host or process, the processes called out by the comparison of [`crate::compare`],
//! and the reports that are incomplete or missing.
//!
//! [`JobFold`] is fed each process summary, one at a time, before its site list is cut to `--top`,
//! with the numbers [`Overall`] gave its sites, and keeps from it only each process's totals per
//! site (never the summaries or the reports), by site number:
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
//!
//! Memory: the comparison's values go to a log ([`Comparison::on_disk`]); without `--by`, who
//! each process was goes to a log too, and only those called out or incomplete are read back;
//! with `--by`, the groups list every process (what is printed), and each process's totals per
//! site go to a log as well, one record per process ([`GroupSites`]), added up per group when
//! the job is finished, in passes over the log that each gather at most [`BATCH`] of them, so
//! that a job of 10,000 ranks does not keep 10,000 tables of sites (the processes of `--by
//! process` are each a group of their own, cut to its [`GROUP_SITES`] largest sites at once).
//! The groups' figures are exact, as if every table were kept.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;

use serde::Serialize;

use super::overall::{Overall, top_by};
use super::report::ReportSummary;
use crate::compact::{Column, Strings};
use crate::compare::{BATCH, Comparison, Criterion, Measure, Outlier};
use crate::identity::{GroupBy, GroupKey, Identity};
use crate::owners::OwnerKind;
use crate::record::{Dec, Enc};
use crate::spill::Spill;
use crate::wording::bytes;

/// How many sites each group lists, largest first.
pub const GROUP_SITES: usize = 3;

/// The most logged sites [`GroupSites::finish`] gathers in one pass over its log: the
/// comparison's [`BATCH`] (a few in tests, so that they take many passes).
const GROUP_BATCH: usize = if cfg!(test) { 64 } else { BATCH };

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
    refs: Refs,
    processes: usize,
    incomplete: Vec<usize>,
    comparison: Comparison,
    /// The held sites whose first process with bytes there labels them otherwise than
    /// [`Overall`] does (its first process).
    held_labels: HashMap<u32, String>,
    /// The growing sites, numbered, and their labels by number.
    grown: Strings,
    grown_labels: Vec<String>,
    groups: BTreeMap<Option<GroupKey>, GroupFold>,
    world_size: Option<u32>,
    ranks: BTreeSet<u32>,
    all_workers: bool,
    all_ranks: bool,
    values: Vec<(Measure, u32, u64)>,
    /// The groups' totals per site, one record per process (see [`GroupSites`]).
    group_sites: GroupSites,
}

/// The groups' totals per site while processes are added: each process's sites go to a log as
/// one record (its group's number, then site number, bytes, leaks and, when it is not
/// [`Overall`]'s, the label the process gives, for each site), and are added up per group in
/// [`JobFold::finish`].
#[derive(Debug)]
struct GroupSites {
    log: Spill,
    /// The first error writing the log.
    error: Option<io::Error>,
    record: Enc,
}

impl GroupSites {
    /// Logs the sites `group` (group number `number`) gathered from one process, and empties
    /// them.
    fn log(&mut self, number: u32, group: &mut GroupFold) {
        if group.sites.is_empty() {
            return;
        }
        self.record.clear().u64(u64::from(number));
        // Taken, not drained: a drained table would keep its room, a table per group.
        for (id, acc) in std::mem::take(&mut group.sites) {
            self.record
                .u64(u64::from(id))
                .u64(acc.leaked_bytes)
                .u64(acc.leaks)
                .opt_str(acc.label.as_deref());
            group.logged += 1;
        }
        if self.error.is_none()
            && let Err(e) = self.record.write_to(&mut self.log)
        {
            self.error = Some(e);
        }
    }

    /// Adds the logged sites up per group, in passes over the log of at most [`GROUP_BATCH`] logged
    /// sites each (a group with more is a pass of its own), and cuts each group's sites to its
    /// [`GROUP_SITES`] largest.
    fn finish(self, groups: &mut [&mut GroupFold], overall: &Overall) -> io::Result<()> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let log = self.log.into_log()?;
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "the groups' log is damaged");
        let logged: Vec<usize> = (0..groups.len())
            .filter(|&i| groups[i].logged > 0)
            .collect();
        let mut start = 0;
        while start < logged.len() {
            let (mut end, mut sum) = (start, 0usize);
            while end < logged.len()
                && (end == start || sum + groups[logged[end]].logged <= GROUP_BATCH)
            {
                sum += groups[logged[end]].logged;
                end += 1;
            }
            let wanted: HashMap<u32, usize> = logged[start..end]
                .iter()
                .map(|&i| (groups[i].number, i))
                .collect();
            let mut input = log.reader();
            while let Some(record) = crate::record::next(&mut input)? {
                let mut d = Dec::new(&record);
                let Some(&i) = wanted.get(&d.u32()?) else {
                    continue;
                };
                let g = &mut *groups[i];
                while !d.is_empty() {
                    let id = d.u32()?;
                    let (bytes, leaks) = (d.u64()?, d.u64()?);
                    let label = d.opt_str()?;
                    let e = g.sites.entry(id).or_insert_with(|| GroupAcc {
                        leaked_bytes: 0,
                        leaks: 0,
                        label: label.map(Into::into),
                    });
                    e.leaked_bytes = e.leaked_bytes.saturating_add(bytes);
                    e.leaks += leaks;
                }
                if g.sites.is_empty() {
                    return Err(bad());
                }
            }
            for &i in &logged[start..end] {
                groups[i].close(overall);
            }
            start = end;
        }
        Ok(())
    }
}

/// Who each process was: kept when grouped (the groups list them all), else in a log and read
/// back by place.
#[derive(Debug)]
enum Refs {
    Kept(Vec<ProcessRef>),
    Logged {
        log: Spill,
        /// Where each process's record starts.
        at: Column<u64>,
        written: u64,
        error: Option<io::Error>,
    },
}

/// One group's running sums.
#[derive(Debug)]
struct GroupFold {
    /// Its number, in the order the groups were first seen.
    number: u32,
    members: Vec<usize>,
    group: Group,
    /// By site number: the current process's (then logged, see [`GroupSites`]), or all of
    /// them while [`GroupSites::finish`] adds them up.
    sites: HashMap<u32, GroupAcc>,
    /// How many of its sites were logged.
    logged: usize,
}

/// One site of a group while its processes are added.
#[derive(Debug)]
struct GroupAcc {
    leaked_bytes: u64,
    leaks: u64,
    /// The label its first process in the group gave, when not [`Overall`]'s.
    label: Option<Box<str>>,
}

impl JobFold {
    /// An empty job, grouped `by`, listing at most `top` processes called out; what it keeps
    /// per process in memory.
    pub fn new(by: Option<GroupBy>, top: usize) -> JobFold {
        JobFold::with(by, top, Comparison::new(), || Spill::Memory(Vec::new()))
    }

    /// As [`JobFold::new`], what it keeps per process in temporary files.
    pub fn on_disk(by: Option<GroupBy>, top: usize) -> JobFold {
        JobFold::with(by, top, Comparison::on_disk(), Spill::new)
    }

    fn with(
        by: Option<GroupBy>,
        top: usize,
        comparison: Comparison,
        spill: impl Fn() -> Spill,
    ) -> JobFold {
        let log = spill();
        JobFold {
            by,
            top,
            refs: match by {
                Some(_) => Refs::Kept(Vec::new()),
                None => Refs::Logged {
                    log,
                    at: Column::new(),
                    written: 0,
                    error: None,
                },
            },
            processes: 0,
            incomplete: Vec::new(),
            comparison,
            held_labels: HashMap::new(),
            grown: Strings::new(),
            grown_labels: Vec::new(),
            groups: BTreeMap::new(),
            world_size: None,
            ranks: BTreeSet::new(),
            all_workers: true,
            all_ranks: true,
            values: Vec::new(),
            group_sites: GroupSites {
                log: if by.is_some_and(|b| b != GroupBy::Process) {
                    spill()
                } else {
                    Spill::Memory(Vec::new())
                },
                error: None,
                record: Enc::new(),
            },
        }
    }

    /// Adds the next process (in input order), before its site list is cut to `--top`; `ids`
    /// are the numbers `overall` gave its sites, in order.
    pub fn add(&mut self, p: &ReportSummary, ids: &[u32], overall: &Overall) {
        let r = ProcessRef::of(p);
        let i = self.processes;
        self.processes += 1;
        let mut values = std::mem::take(&mut self.values);
        values.clear();
        for (s, &id) in p.sites.iter().zip(ids) {
            if s.leaked_bytes > 0
                && self.comparison.count(Measure::Held, id) == 0
                && !overall.label_is(id, &s.label)
            {
                self.held_labels.insert(id, s.label.clone());
            }
            values.push((Measure::Held, id, s.leaked_bytes));
        }
        for g in p.growing.iter().filter(|g| g.growth.grown_bytes > 0) {
            let id = self.grown.id(&g.site);
            if id as usize == self.grown_labels.len() {
                self.grown_labels.push(g.label.clone());
            }
            values.push((Measure::Grown, id, g.growth.grown_bytes));
        }
        self.comparison.add_process(values.iter().copied());
        self.values = values;
        if !p.complete {
            self.incomplete.push(i);
        }
        self.world_size = self.world_size.max(r.who.world_size);
        if let Some(rank) = r.who.rank {
            self.ranks.insert(rank);
        }
        self.all_workers &= r.who.worker.is_some();
        self.all_ranks &= r.who.rank.is_some();
        if let Some(by) = self.by {
            let number = self.groups.len() as u32;
            let g = self
                .groups
                .entry(by.key(&r.who, i))
                .or_insert_with(|| GroupFold::new(number));
            g.members.push(i);
            g.add(p, &r, ids, overall);
            if by == GroupBy::Process {
                g.close(overall);
            } else {
                self.group_sites.log(g.number, g);
            }
        }
        self.refs.push(r);
    }

    /// The job section; `None` when not grouped and nothing is called out or missing.
    pub fn finish(self, overall: &Overall) -> io::Result<Option<Job>> {
        let JobFold {
            by,
            top,
            refs,
            processes,
            incomplete,
            comparison,
            held_labels,
            grown,
            grown_labels,
            groups,
            world_size,
            ranks,
            all_workers,
            all_ranks,
            group_sites,
            ..
        } = self;
        let criterion = Criterion::default();
        let key = |m: Measure, id: u32| match m {
            Measure::Held => overall.key(id),
            Measure::Grown => grown.get(id),
        };
        let (found, outliers_total) =
            comparison.outliers(&criterion, top, |m, a, b| key(m, a).cmp(key(m, b)))?;
        let noun = match by {
            Some(GroupBy::Worker) => "workers",
            Some(GroupBy::Rank) => "ranks",
            _ if processes > 0 && all_workers => "workers",
            _ if processes > 0 && all_ranks => "ranks",
            _ => "processes",
        };
        let refs = refs.finish()?;
        let mut outliers = Vec::with_capacity(found.len());
        for f in found {
            let label = match f.measure {
                Measure::Held => held_labels
                    .get(&f.site)
                    .cloned()
                    .unwrap_or_else(|| overall.label(f.site).into_owned()),
                Measure::Grown => grown_labels[f.site as usize].clone(),
            };
            let o = Outlier {
                process: f.process,
                measure: f.measure,
                site: key(f.measure, f.site).to_string(),
                label,
                bytes: f.bytes,
                median_bytes: f.median_bytes,
                processes: f.processes,
            };
            let who = refs.get(f.process)?;
            outliers.push(JobOutlier {
                sentence: sentence(&who.who, &o, noun),
                who,
                outlier: o,
            });
        }
        let missing_ranks: Vec<u32> = world_size
            .map(|w| (0..w).filter(|r| !ranks.contains(r)).collect())
            .unwrap_or_default();
        if by.is_none() && outliers.is_empty() && missing_ranks.is_empty() {
            return Ok(None);
        }
        let groups = match (by, &refs) {
            (Some(by), Finished::Kept(refs)) => {
                finish_groups(groups, group_sites, refs, by, overall)?
            }
            _ => Vec::new(),
        };
        let incomplete = incomplete
            .into_iter()
            .map(|i| refs.get(i))
            .collect::<io::Result<_>>()?;
        Ok(Some(Job {
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
            incomplete,
            world_size,
            missing_ranks,
        }))
    }
}

impl Refs {
    fn push(&mut self, r: ProcessRef) {
        match self {
            Refs::Kept(v) => v.push(r),
            Refs::Logged {
                log,
                at,
                written,
                error,
            } => {
                at.push(*written);
                let mut e = Enc::new();
                e.u64(u64::from(r.who.pid))
                    .str(&r.who.host)
                    .opt_u32(r.who.rank)
                    .opt_str(r.who.worker.as_deref())
                    .opt_u32(r.who.world_size)
                    .str(&r.source)
                    .str(&r.reason);
                let record = e.record();
                *written += record.len() as u64;
                if error.is_none()
                    && let Err(err) = std::io::Write::write_all(log, &record)
                {
                    *error = Some(err);
                }
            }
        }
    }

    fn finish(self) -> io::Result<Finished> {
        match self {
            Refs::Kept(v) => Ok(Finished::Kept(v)),
            Refs::Logged { log, at, error, .. } => match error {
                Some(e) => Err(e),
                None => Ok(Finished::Logged(log.into_log()?, at)),
            },
        }
    }
}

/// Who each process was, to read back.
enum Finished {
    Kept(Vec<ProcessRef>),
    Logged(crate::spill::Log, Column<u64>),
}

impl Finished {
    /// Process `i`.
    fn get(&self, i: usize) -> io::Result<ProcessRef> {
        match self {
            Finished::Kept(v) => Ok(v[i].clone()),
            Finished::Logged(log, at) => {
                let mut input = log.reader_at(*at.get(i));
                let record = crate::record::next(&mut input)?.ok_or_else(|| {
                    io::Error::new(io::ErrorKind::UnexpectedEof, "a process is missing")
                })?;
                let mut d = Dec::new(&record);
                let pid = d.u32()?;
                let host = d.str()?.to_string();
                let rank = d.opt_u32()?;
                let worker = d.opt_str()?.map(str::to_string);
                let world_size = d.opt_u32()?;
                let who = Identity {
                    pid,
                    host,
                    rank,
                    worker,
                    world_size,
                };
                Ok(ProcessRef {
                    name: who.describe(),
                    who,
                    source: d.str()?.to_string(),
                    reason: d.str()?.to_string(),
                })
            }
        }
    }
}

/// The groups, keyed ones first (in key order), then the one without the label.
fn finish_groups(
    groups: BTreeMap<Option<GroupKey>, GroupFold>,
    sites: GroupSites,
    refs: &[ProcessRef],
    by: GroupBy,
    overall: &Overall,
) -> io::Result<Vec<Group>> {
    let mut order: Vec<(Option<GroupKey>, GroupFold)> = groups.into_iter().collect();
    let unlabelled = usize::from(order.first().is_some_and(|(k, _)| k.is_none()));
    order.rotate_left(unlabelled);
    sites.finish(
        &mut order.iter_mut().map(|(_, g)| g).collect::<Vec<_>>(),
        overall,
    )?;
    Ok(order
        .into_iter()
        .map(|(key, mut g)| {
            let name = match (&key, by) {
                (None, _) => format!("(no {})", by.as_str()),
                (Some(_), GroupBy::Process) => refs[g.members[0]].name.clone(),
                (Some(GroupKey::Number(n)), _) => format!("{} {n}", by.as_str()),
                (Some(GroupKey::Text(t)), _) => {
                    format!("{} {}", by.as_str(), crate::wording::one_line(t))
                }
            };
            g.close(overall);
            g.group.name = name;
            g.group
        })
        .collect())
}

impl GroupFold {
    fn new(number: u32) -> GroupFold {
        GroupFold {
            number,
            logged: 0,
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

    fn add(&mut self, p: &ReportSummary, r: &ProcessRef, ids: &[u32], overall: &Overall) {
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
        for (s, &id) in p.sites.iter().zip(ids) {
            let e = self.sites.entry(id).or_insert_with(|| GroupAcc {
                leaked_bytes: 0,
                leaks: 0,
                label: (!overall.label_is(id, &s.label)).then(|| s.label.as_str().into()),
            });
            e.leaked_bytes = e.leaked_bytes.saturating_add(s.leaked_bytes);
            e.leaks += s.leaks;
        }
    }

    /// Cuts the group's sites to its [`GROUP_SITES`] largest (adds to what was cut before).
    fn close(&mut self, overall: &Overall) {
        if self.sites.is_empty() {
            return;
        }
        let sites = std::mem::take(&mut self.sites);
        let g = &mut self.group;
        g.sites_total += sites.len();
        let top = top_by(sites.into_iter(), GROUP_SITES, |(a, x), (b, y)| {
            y.leaked_bytes
                .cmp(&x.leaked_bytes)
                .then(y.leaks.cmp(&x.leaks))
                .then_with(|| overall.key(*a).cmp(overall.key(*b)))
        });
        g.sites = top
            .into_iter()
            .map(|(id, acc)| GroupSite {
                site: overall.key(id).to_string(),
                label: match acc.label {
                    Some(l) => l.into(),
                    None => overall.label(id).into_owned(),
                },
                leaked_bytes: acc.leaked_bytes,
                leaks: acc.leaks,
            })
            .collect();
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
        crate::wording::one_line(&o.label),
        if more.is_empty() { "" } else { " " }
    )
}
