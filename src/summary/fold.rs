//! [`SummaryFold`]: a [`Summary`] built one process at a time, as the reports are read (and
//! [`Summary::new`], which adds up summaries kept in memory through it).

use std::collections::{BTreeMap, HashMap};
use std::io;

use super::groups;
use super::model::Summary;
use super::overall::{self, OverallSite};
use super::report::{EventCount, ReportSummary};
use crate::owners::OwnerShare;
use cuguard_format::Cost;

/// A [`Summary`] built one process at a time, in input order: each process's sites are added
/// to those across processes ([`overall::Overall`], compact tables) and then cut to `top`, so
/// memory holds the distinct sites, a few words each, and each process's shortened summary,
/// never every process's every site.
#[derive(Debug)]
pub struct SummaryFold {
    top: usize,
    sites: overall::Overall,
    events: BTreeMap<String, u64>,
    /// Bytes by owner (each owner's label is the first process's).
    owners: HashMap<String, OwnerShare>,
    reports: usize,
    complete_reports: usize,
    leaked_bytes: u64,
    leaks: u64,
    /// cuguard's bill, summed over the processes that carry one.
    cost: Option<Cost>,
    processes: Vec<ReportSummary>,
    /// The processes as one job (see [`groups`]).
    job: groups::JobFold,
    ids: Vec<u32>,
}

impl SummaryFold {
    /// An empty summary that will list `top` sites (across processes, and per process).
    pub fn new(top: usize) -> SummaryFold {
        SummaryFold::grouped(top, None)
    }

    /// As [`SummaryFold::new`], with the processes grouped `by` (see [`groups`]).
    pub fn grouped(top: usize, by: Option<crate::identity::GroupBy>) -> SummaryFold {
        SummaryFold::with_job(top, groups::JobFold::new(by, top))
    }

    /// As [`SummaryFold::grouped`], what the job section keeps per process in temporary files
    /// (see [`groups`]), for [`SummaryFold::count`]: memory does not grow with the processes.
    pub fn on_disk(top: usize, by: Option<crate::identity::GroupBy>) -> SummaryFold {
        SummaryFold::with_job(top, groups::JobFold::on_disk(by, top))
    }

    fn with_job(top: usize, job: groups::JobFold) -> SummaryFold {
        SummaryFold {
            top,
            sites: overall::Overall::new(),
            events: BTreeMap::new(),
            owners: HashMap::new(),
            reports: 0,
            complete_reports: 0,
            leaked_bytes: 0,
            leaks: 0,
            cost: None,
            processes: Vec::new(),
            job,
            ids: Vec::new(),
        }
    }

    /// Adds the next process (in input order), keeping its summary with its sites cut to `top`.
    pub fn add(&mut self, mut p: ReportSummary) {
        self.count(&mut p);
        self.processes.push(p);
    }

    /// Adds the next process's totals (in input order) and cuts its sites to `top`, without
    /// keeping it: the caller writes it (see [`super::Sections`]). [`SummaryFold::finish`] then gives the
    /// summary without these processes in `processes`, but counted in `reports`.
    pub fn count(&mut self, p: &mut ReportSummary) {
        self.reports += 1;
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        ids.extend(p.sites.iter().map(|s| self.sites.add(s)));
        self.job.add(p, &ids, &self.sites);
        self.ids = ids;
        for e in &p.events {
            match self.events.get_mut(&e.kind) {
                Some(n) => *n += e.count,
                None => {
                    self.events.insert(e.kind.clone(), e.count);
                }
            }
        }
        for share in &p.owners {
            match self.owners.get_mut(&share.owner) {
                Some(t) => {
                    t.bytes = t.bytes.saturating_add(share.bytes);
                    t.count = t.count.saturating_add(share.count);
                }
                None => {
                    self.owners.insert(share.owner.clone(), share.clone());
                }
            }
        }
        if p.complete {
            self.complete_reports += 1;
        }
        if let Some(c) = &p.cost {
            match &mut self.cost {
                Some(total) => total.add(c),
                None => self.cost = Some(c.clone()),
            }
        }
        self.leaked_bytes = self.leaked_bytes.saturating_add(p.leaked_bytes);
        self.leaks += p.leaks;
        p.sites.truncate(self.top);
        p.sites.shrink_to_fit();
    }

    /// The summary of the processes added. Fails only when what was kept in a temporary file
    /// cannot be read back (or could not be written).
    pub fn finish(self) -> io::Result<Summary> {
        let sites: Vec<OverallSite> = self
            .sites
            .top(self.top)
            .into_iter()
            .map(|id| self.sites.site(id))
            .collect();
        let sites_total = self.sites.len();
        let mut events: Vec<EventCount> = self
            .events
            .into_iter()
            .map(|(kind, count)| EventCount { kind, count })
            .collect();
        events.sort_by(|a, b| b.count.cmp(&a.count).then(a.kind.cmp(&b.kind)));
        let job = self.job.finish(&self.sites)?;
        Ok(Summary {
            reports: self.reports,
            complete_reports: self.complete_reports,
            leaked_bytes: self.leaked_bytes,
            leaks: self.leaks,
            events,
            sites,
            sites_total,
            owners: crate::owners::combine(self.owners.into_values()),
            cost: self.cost,
            processes: self.processes,
            job,
        })
    }
}

impl Summary {
    /// Combines process summaries (in input order) and cuts site lists to `top`.
    pub fn new(processes: Vec<ReportSummary>, top: usize) -> Summary {
        Summary::grouped(processes, top, None)
    }

    /// As [`Summary::new`], with the processes grouped `by` (see [`groups`]).
    pub fn grouped(
        processes: Vec<ReportSummary>,
        top: usize,
        by: Option<crate::identity::GroupBy>,
    ) -> Summary {
        let mut fold = SummaryFold::grouped(top, by);
        for p in processes {
            fold.add(p);
        }
        fold.finish()
            .expect("a summary kept in memory reads back what it kept")
    }
}
