//! Two runs' histories compared at their peaks: the whole run's peak, and each phase
//! occurrence's (aligned by name and occurrence, `step #4` with `step #4`), with the sites whose
//! memory at that peak is new, gone, grown or shrunk. What `cuguard diff` shows beside the leaks
//! and `cuguard check --max-peak-growth` gates on.
//!
//! Runs are aligned by their phases' occurrences where both have phases; the whole run's peak
//! is compared always. An occurrence only one run has is said, not compared.
//!
//! Two jobs of several processes each (merged reports, directories of reports) are compared
//! process by process ([`compare_job`]): paired by rank, else by worker, else by their order
//! ([`PairBy`]), each pair's histories opened in turn (one pair at a time, whatever the number
//! of ranks) and compared as two runs are; a process only one job has, or a pair without both
//! histories, is said, not compared.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Opened;
use super::phases::{self, PhaseSummary};
use crate::check::places::Place;
use crate::identity::Identity;
use crate::input::InputError;
use cuguard_format::{Reason, Report};

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

impl PeakDiff {
    /// Whether every peak compared is the same in both runs and nothing was noted.
    pub fn unchanged(&self) -> bool {
        self.notes.is_empty() && self.peaks.iter().all(|c| c.delta_bytes == 0)
    }
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

/// The peaks `cuguard diff` compared: one process's against another's (the shape of its JSON
/// `peaks` for one process each side), or two jobs' process by process.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Peaks {
    /// One process each side.
    One(PeakDiff),
    /// Several processes on a side: each pair's peaks.
    Job(JobPeaks<PeakDiff>),
}

/// How the processes of two jobs are paired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairBy {
    /// By rank (`process.rank`, else the launcher's labels: [`crate::identity`]).
    Rank,
    /// By the label `worker`.
    Worker,
    /// The first process of each side with the other's first, and so on (input order: files
    /// in order, a merged report's processes in its order).
    Order,
}

impl PairBy {
    /// What one process is called when paired so: `rank`, `worker`, `process`.
    pub fn noun(self) -> &'static str {
        match self {
            PairBy::Rank => "rank",
            PairBy::Worker => "worker",
            PairBy::Order => "process",
        }
    }

    /// `3 ranks`, `1 worker`, `2 processes`.
    pub fn count(self, n: usize) -> String {
        let many = match self {
            PairBy::Rank => "ranks",
            PairBy::Worker => "workers",
            PairBy::Order => "processes",
        };
        crate::wording::plural(n as u64, self.noun(), many)
    }

    /// How the pairs are made, for a heading: `rank by rank`, `worker by worker`, `process by
    /// process, in order: neither ranks nor workers pair them`.
    pub fn heading(self) -> &'static str {
        match self {
            PairBy::Rank => "rank by rank",
            PairBy::Worker => "worker by worker",
            PairBy::Order => "process by process, in order: neither ranks nor workers pair them",
        }
    }
}

/// Two jobs compared process by process; `T` is what each pair has (its [`PeakDiff`], or how
/// `check` judged it).
#[derive(Clone, Debug, Serialize)]
pub struct JobPeaks<T> {
    /// How the processes were paired.
    pub by: PairBy,
    /// The processes of each side.
    pub base_processes: usize,
    pub new_processes: usize,
    /// The pairs compared, in key order (ranks as numbers; in order).
    pub processes: Vec<Named<T>>,
    /// The pairs whose peaks were not compared (a history missing or unreadable), in key order.
    pub not_compared: Vec<NotCompared>,
    /// The processes only one side has, by name (`rank 3`), in key order.
    pub only_base: Vec<String>,
    pub only_new: Vec<String>,
    /// What else could not be paired (processes without the key that pairs the others), one
    /// line each.
    pub notes: Vec<String>,
}

/// One pair of a job's processes and what it has.
#[derive(Clone, Debug, Serialize)]
pub struct Named<T> {
    /// `rank 3`, `worker NAME`, `process #2`.
    pub name: String,
    /// The rank, when paired by rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    /// The worker, when paired by worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(flatten)]
    pub peaks: T,
}

/// A pair whose peaks were not compared.
#[derive(Clone, Debug, Serialize)]
pub struct NotCompared {
    /// `rank 3`.
    pub name: String,
    /// Why, in one line.
    pub why: String,
}

impl<T> JobPeaks<T> {
    /// The same pairs, each with `f` of what it had.
    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> JobPeaks<U> {
        JobPeaks {
            by: self.by,
            base_processes: self.base_processes,
            new_processes: self.new_processes,
            processes: self
                .processes
                .into_iter()
                .map(|n| Named {
                    name: n.name,
                    rank: n.rank,
                    worker: n.worker,
                    peaks: f(n.peaks),
                })
                .collect(),
            not_compared: self.not_compared,
            only_base: self.only_base,
            only_new: self.only_new,
            notes: self.notes,
        }
    }

    /// The pairs beyond the `top` shown of `changed` ones with changed peaks, in words (`… 3
    /// more with changed peaks (see --top)`); `None` when all are shown.
    pub fn more_changed_line(&self, changed: usize, top: usize) -> Option<String> {
        (changed > top).then(|| {
            format!(
                "… {} more with changed peaks (see --top)",
                self.by.count(changed - top)
            )
        })
    }

    /// The pairs whose peaks are the same, named (`2 ranks with the same peaks: rank 0, rank
    /// 2`); `None` when there are none.
    pub fn same_line(&self, same: &[&Named<T>]) -> Option<String> {
        (!same.is_empty()).then(|| {
            let names: Vec<&str> = same.iter().map(|n| n.name.as_str()).collect();
            format!(
                "{} with the same peaks: {}",
                self.by.count(same.len()),
                some_names(&names, 5)
            )
        })
    }

    /// The lines that say what was not compared: each side's processes only it has, each pair
    /// not compared and why, then the notes.
    pub fn uncompared_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (which, list) in [("BASE", &self.only_base), ("NEW", &self.only_new)] {
            if !list.is_empty() {
                out.push(format!(
                    "only {which} has {}: not compared",
                    some_names(list, 5)
                ));
            }
        }
        out.extend(
            self.not_compared
                .iter()
                .map(|n| format!("{}: peaks not compared: {}", n.name, n.why)),
        );
        out.extend(self.notes.iter().cloned());
        out
    }
}

/// `a, b, c`, at most `most` of `names`, then `and N more`.
pub fn some_names<S: AsRef<str>>(names: &[S], most: usize) -> String {
    let shown: Vec<&str> = names.iter().take(most).map(AsRef::as_ref).collect();
    let mut out = shown.join(", ");
    if names.len() > shown.len() {
        out.push_str(&format!(" and {} more", names.len() - shown.len()));
    }
    out
}

/// One process of a job, as pairing it and opening its history need: who it was, and its
/// report without what reading its history does not (its process, run, devices and history).
#[derive(Clone, Debug)]
pub struct Member {
    pub identity: Identity,
    /// `None`: `path` is the history file itself.
    report: Option<Report>,
    /// The file it was read from (a report names its history's files relative to it).
    path: PathBuf,
}

impl Member {
    /// The process of `report`, read from the file `path` (a merged report's file for each of
    /// its processes).
    pub fn of_report(path: &Path, report: &Report) -> Member {
        let p = &report.process;
        let mut slim = Report::new(report.complete, Reason::Exit, p.clone());
        slim.run_id = report.run_id.clone();
        slim.history = report.history.clone();
        slim.devices = report.devices.clone();
        Member {
            identity: Identity::new(p.pid, &p.hostname, p.rank, p.labels.as_ref()),
            report: Some(slim),
            path: path.to_path_buf(),
        }
    }

    /// The processes of the file at `path`: a report's, each process of a merged report, or
    /// the process of a history file (known by its pid alone).
    pub fn of_file(path: &Path) -> Result<Vec<Member>, InputError> {
        if super::is_history_file(path)? {
            let pid = super::load(path)?.meta().pid;
            return Ok(vec![Member {
                identity: Identity::new(pid, "", None, None),
                report: None,
                path: path.to_path_buf(),
            }]);
        }
        let read = crate::input::map_reports(&[path.to_path_buf()], |source, report| {
            Member::of_report(&source.path, &report)
        })?;
        Ok(read.into_iter().map(|(_, m)| m).collect())
    }

    /// Whether its report names a history (a history file is one).
    pub fn has_history(&self) -> bool {
        self.report.as_ref().is_none_or(|r| r.history.is_some())
    }

    /// Its history, opened.
    pub fn open(&self) -> Result<Opened, InputError> {
        match &self.report {
            Some(r) => super::of_report(r, &self.path),
            None => super::load(&self.path),
        }
    }
}

/// A pair: its name and key, and each side's process (its index), when it has one.
struct Pair {
    name: String,
    rank: Option<u32>,
    worker: Option<String>,
    base: Option<usize>,
    new: Option<usize>,
}

/// Each side's processes by `key`, when every key is met once on its side and each side has
/// one; else `None` (the key does not pair them). Processes without the key are left out.
fn keyed<K: Ord>(
    base: &[Member],
    new: &[Member],
    key: impl Fn(&Identity) -> Option<K>,
) -> Option<BTreeMap<K, [Option<usize>; 2]>> {
    let mut out: BTreeMap<K, [Option<usize>; 2]> = BTreeMap::new();
    for (side, members) in [base, new].into_iter().enumerate() {
        let mut any = false;
        for (i, m) in members.iter().enumerate() {
            if let Some(k) = key(&m.identity) {
                let slot = &mut out.entry(k).or_default()[side];
                if slot.replace(i).is_some() {
                    return None;
                }
                any = true;
            }
        }
        if !any {
            return None;
        }
    }
    Some(out)
}

/// The pairs of `base` and `new` in key order, how they were paired, and a note per side on
/// the processes left out (without the key).
fn pairs(base: &[Member], new: &[Member]) -> (PairBy, Vec<Pair>, Vec<String>) {
    let left_out = |by: PairBy, has: &dyn Fn(&Identity) -> bool| -> Vec<String> {
        let mut notes = Vec::new();
        for (which, members) in [("BASE", base), ("NEW", new)] {
            let out: Vec<String> = members
                .iter()
                .filter(|m| !has(&m.identity))
                .map(|m| m.identity.describe())
                .collect();
            if !out.is_empty() {
                notes.push(format!(
                    "{} of {which} without a {}, not compared: {}",
                    crate::wording::plural(out.len() as u64, "process", "processes"),
                    by.noun(),
                    some_names(&out, 3)
                ));
            }
        }
        notes
    };
    if let Some(by_rank) = keyed(base, new, |i| i.rank) {
        let list = by_rank
            .into_iter()
            .map(|(r, [b, n])| Pair {
                name: format!("rank {r}"),
                rank: Some(r),
                worker: None,
                base: b,
                new: n,
            })
            .collect();
        return (
            PairBy::Rank,
            list,
            left_out(PairBy::Rank, &|i| i.rank.is_some()),
        );
    }
    if let Some(by_worker) = keyed(base, new, |i| i.worker.clone()) {
        let list = by_worker
            .into_iter()
            .map(|(w, [b, n])| Pair {
                name: format!("worker {}", crate::wording::one_line(&w)),
                rank: None,
                worker: Some(w),
                base: b,
                new: n,
            })
            .collect();
        return (
            PairBy::Worker,
            list,
            left_out(PairBy::Worker, &|i| i.worker.is_some()),
        );
    }
    let list = (0..base.len().max(new.len()))
        .map(|i| Pair {
            name: format!("process #{}", i + 1),
            rank: None,
            worker: None,
            base: (i < base.len()).then_some(i),
            new: (i < new.len()).then_some(i),
        })
        .collect();
    (PairBy::Order, list, Vec::new())
}

/// Two jobs' peaks, process by process: paired as [`PairBy`] says, each pair's histories
/// opened in turn and compared as [`compare`] compares two runs (with `by_phase`, each phase
/// occurrence's too), then closed before the next pair's are opened. A pair whose histories
/// cannot both be read is said, with why, and the others compared.
pub fn compare_job(base: &[Member], new: &[Member], by_phase: bool) -> JobPeaks<PeakDiff> {
    let (by, list, notes) = pairs(base, new);
    let mut out = JobPeaks {
        by,
        base_processes: base.len(),
        new_processes: new.len(),
        processes: Vec::new(),
        not_compared: Vec::new(),
        only_base: Vec::new(),
        only_new: Vec::new(),
        notes,
    };
    for pair in list {
        match (pair.base, pair.new) {
            (Some(b), Some(n)) => match compare_pair(&base[b], &new[n], by_phase) {
                Ok(peaks) => out.processes.push(Named {
                    name: pair.name,
                    rank: pair.rank,
                    worker: pair.worker,
                    peaks,
                }),
                Err(why) => out.not_compared.push(NotCompared {
                    name: pair.name,
                    why,
                }),
            },
            (Some(_), None) => out.only_base.push(pair.name),
            (None, Some(_)) => out.only_new.push(pair.name),
            (None, None) => {}
        }
    }
    out
}

/// One pair's peaks, its two histories open only while compared; why not, in one line.
fn compare_pair(base: &Member, new: &Member, by_phase: bool) -> Result<PeakDiff, String> {
    match (base.has_history(), new.has_history()) {
        (true, true) => {}
        (true, false) => return Err("only BASE's report names a history".into()),
        (false, true) => return Err("only NEW's report names a history".into()),
        (false, false) => return Err("neither report names a history".into()),
    }
    let line = |e: InputError| crate::wording::one_line(&e.to_string());
    let b = base.open().map_err(line)?;
    let n = new.open().map_err(line)?;
    compare(&b, &n, by_phase).map_err(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process of pid `pid` with `rank` and `labels` (`KEY=VALUE`), its report naming no
    /// history.
    fn member(pid: u32, rank: Option<u32>, labels: &[(&str, &str)]) -> Member {
        let process = cuguard_format::Process {
            pid,
            ppid: 1,
            exe: "/bin/train".into(),
            argv: Vec::new(),
            hostname: "node1".into(),
            rank,
            start_unix_ms: 0,
            end_unix_ms: 0,
            labels: (!labels.is_empty()).then(|| {
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
        };
        Member::of_report(
            Path::new("r.json"),
            &Report::new(true, Reason::Exit, process),
        )
    }

    /// The pairs as (name, base index, new index).
    fn shown(list: &[Pair]) -> Vec<(&str, Option<usize>, Option<usize>)> {
        list.iter()
            .map(|p| (p.name.as_str(), p.base, p.new))
            .collect()
    }

    #[test]
    fn processes_pair_by_rank_then_worker_then_order() {
        // By rank, as numbers, from `process.rank` or a launcher's label; a process without
        // one (the launcher) left out and said.
        let base = [
            member(10, Some(10), &[]),
            member(11, None, &[("RANK", "2")]),
            member(12, None, &[]),
        ];
        let new = [member(20, Some(2), &[]), member(21, Some(3), &[])];
        let (by, list, notes) = pairs(&base, &new);
        assert_eq!(by, PairBy::Rank);
        assert_eq!(
            shown(&list),
            [
                ("rank 2", Some(1), Some(0)),
                ("rank 3", None, Some(1)),
                ("rank 10", Some(0), None)
            ]
        );
        assert_eq!(
            notes,
            ["1 process of BASE without a rank, not compared: pid 12 (host node1)"]
        );
        // A rank twice on a side does not pair: the workers do.
        let base = [
            member(10, Some(0), &[("worker", "b")]),
            member(11, Some(0), &[("worker", "a")]),
        ];
        let new = [
            member(20, Some(0), &[("worker", "a")]),
            member(21, Some(1), &[("worker", "b")]),
        ];
        let (by, list, notes) = pairs(&base, &new);
        assert_eq!(by, PairBy::Worker);
        assert_eq!(
            shown(&list),
            [
                ("worker a", Some(1), Some(0)),
                ("worker b", Some(0), Some(1))
            ]
        );
        assert!(notes.is_empty());
        // Neither: in order, the longer side's rest its own.
        let (by, list, _) = pairs(
            &[member(1, None, &[])],
            &[member(2, None, &[]), member(3, None, &[])],
        );
        assert_eq!(by, PairBy::Order);
        assert_eq!(
            shown(&list),
            [
                ("process #1", Some(0), Some(0)),
                ("process #2", None, Some(1))
            ]
        );
    }

    #[test]
    fn a_job_without_histories_is_said_pair_by_pair() {
        let job = compare_job(
            &[member(1, Some(0), &[]), member(2, Some(1), &[])],
            &[member(3, Some(1), &[])],
            true,
        );
        assert!(job.processes.is_empty());
        assert_eq!(
            job.uncompared_lines(),
            [
                "only BASE has rank 0: not compared",
                "rank 1: peaks not compared: neither report names a history"
            ]
        );
        assert_eq!(some_names(&["a", "b", "c"], 2), "a, b and 1 more");
    }
}
