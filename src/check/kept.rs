//! What the check keeps across processes, compactly: the sites in tables ([`Sites`]: a
//! [`SiteTable`] and one row of totals per site), the processes in a log ([`ProcessLog`]: one
//! record each, read back when the verdict is written), and the verdict's two long lists read
//! from them one entry at a time ([`SiteVerdicts`], [`ProcessVerdicts`]), never all at once.
//!
//! So a site costs its key's bytes and a few words, a process a few bytes in memory (its name's
//! number and where its record starts), and the verdict's output streams: `--format json` of a
//! check over half a million sites holds one site's verdict at a time.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::Arc;

use serde::ser::{Error as _, Serialize, SerializeSeq, Serializer};

use super::condense::SiteLeaks;
use super::entries::{GrowthVerdict, ProcessVerdict, SiteStatus, SiteVerdict};
use crate::compact::{Column, SiteTable, Strings};
use crate::growth::GrowingSite;
use crate::record::{Dec, Enc};
use crate::spill::{Log, Spill};

/// How many processes a site names (`processes[]`).
pub const SITE_PROCESSES: usize = 5;

/// No process, no set.
const NONE: u32 = u32::MAX;

/// One site's totals across processes.
#[derive(Clone, Copy, Debug)]
struct Row {
    bytes: u64,
    leaks: u64,
    process_count: u32,
    /// Its driver entries: a number in [`Sites::api_sets`].
    apis: u32,
    /// The first process that leaked there.
    first: u32,
    /// The next [`SITE_PROCESSES`]` - 1`: a number in [`Sites::more`], or [`NONE`].
    more: u32,
}

/// The sites across processes (see the module doc).
#[derive(Debug, Default)]
pub struct Sites {
    table: SiteTable,
    rows: Column<Row>,
    /// Driver entries by number.
    apis: Strings,
    /// Distinct sets of driver entries (numbers in `apis`, sorted), by number.
    api_sets: Vec<Vec<u32>>,
    api_set_numbers: HashMap<Vec<u32>, u32>,
    more: Column<[u32; SITE_PROCESSES - 1]>,
    /// Each process's name: a number among the table's texts.
    names: Column<u32>,
    scratch: Vec<u32>,
}

impl Sites {
    /// How many sites.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Adds a process named `name`; returns its number.
    pub fn add_process(&mut self, name: &str) -> u32 {
        let id = self.table.texts().id(name);
        self.names.push(id);
        self.names.len() as u32 - 1
    }

    /// Adds process `process`'s leaks at a site; returns the site's number.
    pub fn add(&mut self, process: u32, key: &str, s: &SiteLeaks) -> u32 {
        let (id, new) = self
            .table
            .site(key, s.location.as_deref(), &s.label, s.kind);
        if new {
            let apis = self.api_set(Vec::new());
            self.rows.push(Row {
                bytes: 0,
                leaks: 0,
                process_count: 0,
                apis,
                first: NONE,
                more: NONE,
            });
        }
        let row = *self.rows.get(id as usize);
        // The site's driver entries, and these.
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.extend(s.apis.iter().map(|a| self.apis.id(a)));
        let set = &self.api_sets[row.apis as usize];
        let apis = if scratch.iter().all(|a| set.binary_search(a).is_ok()) {
            row.apis
        } else {
            scratch.extend_from_slice(set);
            scratch.sort_unstable();
            scratch.dedup();
            self.api_set(scratch.clone())
        };
        self.scratch = scratch;
        let (mut first, mut more) = (row.first, row.more);
        let named = row.process_count as usize;
        if named == 0 {
            first = process;
        } else if named < SITE_PROCESSES {
            if more == NONE {
                more = self.more.len() as u32;
                self.more.push([NONE; SITE_PROCESSES - 1]);
            }
            self.more.get_mut(more as usize)[named - 1] = process;
        }
        let r = self.rows.get_mut(id as usize);
        r.bytes = r.bytes.saturating_add(s.bytes);
        r.leaks += s.leaks;
        r.process_count = r.process_count.saturating_add(1);
        r.apis = apis;
        r.first = first;
        r.more = more;
        id
    }

    fn api_set(&mut self, set: Vec<u32>) -> u32 {
        if let Some(&n) = self.api_set_numbers.get(&set) {
            return n;
        }
        let n = self.api_sets.len() as u32;
        self.api_sets.push(set.clone());
        self.api_set_numbers.insert(set, n);
        n
    }

    /// Site `id`'s key.
    pub fn key(&self, id: u32) -> &str {
        self.table.key(id)
    }

    /// Site `id`'s unsuppressed bytes and leaks.
    pub fn totals(&self, id: u32) -> (u64, u64) {
        let r = self.rows.get(id as usize);
        (r.bytes, r.leaks)
    }

    /// Site `id` in the verdict, compared with `base` (its baseline's bytes and leaks, when
    /// a baseline was given: `Some((0, 0))` where it has none).
    fn verdict(&self, id: u32, status: SiteStatus, base: (u64, u64)) -> SiteVerdict {
        let r = self.rows.get(id as usize);
        let (counted_bytes, counted_leaks) = counted(status, (r.bytes, r.leaks), base);
        let named = (r.process_count as usize).min(SITE_PROCESSES);
        let mut processes = Vec::with_capacity(named);
        if named > 0 {
            processes.push(self.name(r.first));
        }
        if named > 1 {
            let more = self.more.get(r.more as usize);
            processes.extend(more[..named - 1].iter().map(|&p| self.name(p)));
        }
        let mut apis: Vec<String> = self.api_sets[r.apis as usize]
            .iter()
            .map(|&a| self.apis.get(a).to_string())
            .collect();
        apis.sort();
        SiteVerdict {
            site: self.key(id).to_string(),
            location: self.table.location(id).map(str::to_string),
            status,
            leaked_bytes: r.bytes,
            leaks: r.leaks,
            baseline_bytes: base.0,
            baseline_leaks: base.1,
            counted_bytes,
            counted_leaks,
            apis,
            processes,
            process_count: u64::from(r.process_count),
            label: self.table.label(id).into_owned(),
            kind: self.table.kind(id),
        }
    }

    fn name(&self, process: u32) -> String {
        self.table
            .text(*self.names.get(process as usize))
            .to_string()
    }
}

/// What counts of a site's (bytes, leaks), with `status` and the baseline's `base`.
pub fn counted(status: SiteStatus, totals: (u64, u64), base: (u64, u64)) -> (u64, u64) {
    match status {
        SiteStatus::Baselined => (0, 0),
        _ => (
            totals.0.saturating_sub(base.0),
            totals.1.saturating_sub(base.1),
        ),
    }
}

/// The processes as the check keeps them until the verdict: one record each in a log, in
/// input order (who it was, its totals per site by number, its events), and the sites that grew
/// in the few that have them.
#[derive(Debug)]
pub struct ProcessLog {
    log: Spill,
    error: Option<io::Error>,
    record: Enc,
    len: usize,
    /// The processes with growing sites, by number.
    growing: HashMap<usize, Vec<GrowingSite>>,
}

/// One process as its record gives it back (the fields of [`super::ProcessCheck`] it keeps).
pub struct Condensed {
    /// Where the report came from.
    pub source: String,
    /// `exe[pid]`.
    pub name: String,
    /// Host name.
    pub hostname: String,
    /// Rank, if any.
    pub rank: Option<u32>,
    /// The label `worker`, if any.
    pub worker: Option<String>,
    /// Who it was, for people.
    pub who: String,
    /// Whether the report is final.
    pub complete: bool,
    /// (site number, bytes, leaks), in site key order.
    pub sites: Vec<(u32, u64, u64)>,
    /// ((kind, site key), count).
    pub events: Vec<((String, String), u64)>,
}

impl ProcessLog {
    /// An empty log, in a temporary file when `on_disk` (in memory where none can be made).
    pub fn new(on_disk: bool) -> ProcessLog {
        ProcessLog {
            log: if on_disk {
                Spill::new()
            } else {
                Spill::Memory(Vec::new())
            },
            error: None,
            record: Enc::new(),
            len: 0,
            growing: HashMap::new(),
        }
    }

    /// How many processes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds the next process.
    pub fn add(&mut self, p: &Condensed, growing: Vec<GrowingSite>) {
        let e = self.record.clear();
        e.str(&p.source)
            .str(&p.name)
            .str(&p.hostname)
            .opt_u32(p.rank)
            .opt_str(p.worker.as_deref())
            .str(&p.who)
            .bool(p.complete)
            .u64(p.sites.len() as u64);
        for &(id, b, n) in &p.sites {
            e.u64(u64::from(id)).u64(b).u64(n);
        }
        e.u64(p.events.len() as u64);
        for ((kind, site), n) in &p.events {
            e.str(kind).str(site).u64(*n);
        }
        if self.error.is_none()
            && let Err(err) = self.record.write_to(&mut self.log)
        {
            self.error = Some(err);
        }
        if !growing.is_empty() {
            self.growing.insert(self.len, growing);
        }
        self.len += 1;
    }

    /// The processes' growing sites, by number.
    pub fn growing(&self) -> impl Iterator<Item = (usize, &GrowingSite)> {
        let mut numbers: Vec<usize> = self.growing.keys().copied().collect();
        numbers.sort_unstable();
        numbers
            .into_iter()
            .flat_map(|i| self.growing[&i].iter().map(move |g| (i, g)))
    }

    /// The log to read back, and the growing sites by process.
    fn finish(self) -> io::Result<(Log, usize, HashMap<usize, Vec<GrowingSite>>)> {
        if let Some(e) = self.error {
            return Err(e);
        }
        Ok((self.log.into_log()?, self.len, self.growing))
    }
}

/// Reads the processes of a log back, in order.
fn read_processes(log: &Log) -> impl Iterator<Item = io::Result<Condensed>> + '_ {
    let mut input = log.reader();
    std::iter::from_fn(move || match crate::record::next(&mut input) {
        Ok(None) => None,
        Ok(Some(record)) => Some(decode(&record)),
        Err(e) => Some(Err(e)),
    })
}

fn decode(record: &[u8]) -> io::Result<Condensed> {
    let mut d = Dec::new(record);
    let source = d.str()?.to_string();
    let name = d.str()?.to_string();
    let hostname = d.str()?.to_string();
    let rank = d.opt_u32()?;
    let worker = d.opt_str()?.map(str::to_string);
    let who = d.str()?.to_string();
    let complete = d.bool()?;
    let n = d.u64()?;
    let mut sites = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        sites.push((d.u32()?, d.u64()?, d.u64()?));
    }
    let n = d.u64()?;
    let mut events = Vec::new();
    for _ in 0..n {
        let kind = d.str()?.to_string();
        let site = d.str()?.to_string();
        events.push(((kind, site), d.u64()?));
    }
    Ok(Condensed {
        source,
        name,
        hostname,
        rank,
        worker,
        who,
        complete,
        sites,
        events,
    })
}

/// What the verdict's sites and processes are read from: the sites, their order and how each
/// compares with the baseline.
#[derive(Debug)]
struct Shared {
    sites: Sites,
    /// Site numbers, in the verdict's order.
    order: Vec<u32>,
    /// With a baseline: the baseline's (bytes, leaks) of the sites it has, by number.
    base: Option<HashMap<u32, (u64, u64)>>,
}

impl Shared {
    fn status(&self, id: u32) -> (SiteStatus, (u64, u64)) {
        status(&self.sites, self.base.as_ref(), id)
    }
}

/// How site `id` compares with the baseline (see [`super::SiteStatus`]), and the baseline's
/// bytes and leaks there.
fn status(
    sites: &Sites,
    base: Option<&HashMap<u32, (u64, u64)>>,
    id: u32,
) -> (SiteStatus, (u64, u64)) {
    let (bytes, leaks) = sites.totals(id);
    match base {
        None => (SiteStatus::Leak, (0, 0)),
        Some(b) => match b.get(&id) {
            None => (SiteStatus::New, (0, 0)),
            Some(&(bb, bl)) if bytes > bb || leaks > bl => (SiteStatus::Grown, (bb, bl)),
            Some(&base) => (SiteStatus::Baselined, base),
        },
    }
}

/// The verdict's sites, in its order (counting ones first, most counted bytes first, then most
/// bytes, then by key), each made when asked for.
#[derive(Clone, Debug)]
pub struct SiteVerdicts {
    shared: Arc<Shared>,
    counting: usize,
}

impl SiteVerdicts {
    /// The sites, in the verdict's order: `base` gives the baseline's (bytes, leaks) of the
    /// sites it has, when one was given.
    pub fn new(sites: Sites, base: Option<HashMap<u32, (u64, u64)>>) -> SiteVerdicts {
        let mut order: Vec<u32> = (0..sites.len() as u32).collect();
        let sort_key = |id: u32| {
            let (s, b) = status(&sites, base.as_ref(), id);
            let totals = sites.totals(id);
            (
                s != SiteStatus::Baselined,
                counted(s, totals, b).0,
                totals.0,
            )
        };
        if base.is_none() {
            // Every site counts, all of its bytes.
            order.sort_unstable_by(|&a, &b| {
                let (x, y) = (sites.totals(a).0, sites.totals(b).0);
                y.cmp(&x).then_with(|| sites.key(a).cmp(sites.key(b)))
            });
        } else {
            order.sort_unstable_by(|&a, &b| {
                let (x, y) = (sort_key(a), sort_key(b));
                y.0.cmp(&x.0)
                    .then(y.1.cmp(&x.1))
                    .then(y.2.cmp(&x.2))
                    .then_with(|| sites.key(a).cmp(sites.key(b)))
            });
        }
        let counting = order
            .iter()
            .take_while(|&&id| status(&sites, base.as_ref(), id).0 != SiteStatus::Baselined)
            .count();
        SiteVerdicts {
            shared: Arc::new(Shared { sites, order, base }),
            counting,
        }
    }

    /// How many sites.
    pub fn len(&self) -> usize {
        self.shared.order.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.shared.order.is_empty()
    }

    /// How many sites count (are not covered by the baseline): the first ones.
    pub fn counting(&self) -> usize {
        self.counting
    }

    /// The `i`-th site.
    pub fn get(&self, i: usize) -> Option<SiteVerdict> {
        let id = *self.shared.order.get(i)?;
        let (status, base) = self.shared.status(id);
        Some(self.shared.sites.verdict(id, status, base))
    }

    /// The sites, in order.
    pub fn iter(&self) -> impl Iterator<Item = SiteVerdict> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The sites, all of them at once.
    pub fn to_vec(&self) -> Vec<SiteVerdict> {
        self.iter().collect()
    }

    fn sites(&self) -> &Sites {
        &self.shared.sites
    }
}

impl Serialize for SiteVerdicts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for s in self.iter() {
            seq.serialize_element(&s)?;
        }
        seq.end()
    }
}

/// What makes a process fail, decided for all (see [`ProcessVerdicts::new`]).
#[derive(Debug)]
pub struct Failing {
    /// Whether the leak limits failed: then each process's leaks at counting sites fail it.
    pub leaks_fail: bool,
    /// By site number: whether the site's leaks count.
    pub counting: Vec<bool>,
    /// The (kind, site) of failing events.
    pub events: HashSet<(String, String)>,
    /// `--max-growth`.
    pub max_growth: Option<u64>,
    /// `--require-complete`.
    pub require_complete: bool,
}

/// The verdict's processes, in input order, each read back from the log when asked for.
#[derive(Clone, Debug)]
pub struct ProcessVerdicts {
    log: Arc<Log>,
    len: usize,
    sites: SiteVerdicts,
    growing: Arc<HashMap<usize, Vec<GrowingSite>>>,
    failing: Arc<Failing>,
}

impl ProcessVerdicts {
    /// The processes of `log`, whose sites are numbered in `sites`.
    pub fn new(
        log: ProcessLog,
        sites: SiteVerdicts,
        failing: Failing,
    ) -> io::Result<ProcessVerdicts> {
        let (log, len, growing) = log.finish()?;
        Ok(ProcessVerdicts {
            log: Arc::new(log),
            len,
            sites,
            growing: Arc::new(growing),
            failing: Arc::new(failing),
        })
    }

    /// How many processes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The processes, in input order (an error only where the log cannot be read back).
    pub fn iter(&self) -> impl Iterator<Item = io::Result<ProcessVerdict>> + '_ {
        read_processes(&self.log)
            .enumerate()
            .map(|(i, p)| p.map(|p| self.verdict(i, p)))
    }

    /// The processes, all of them at once.
    pub fn to_vec(&self) -> io::Result<Vec<ProcessVerdict>> {
        self.iter().collect()
    }

    fn verdict(&self, i: usize, p: Condensed) -> ProcessVerdict {
        let f = &self.failing;
        let sites = self.sites.sites();
        let failing_sites: Vec<(Arc<str>, u64, u64)> = if f.leaks_fail {
            p.sites
                .iter()
                .filter(|(id, _, _)| f.counting[*id as usize])
                .map(|&(id, b, n)| (Arc::from(sites.key(id)), b, n))
                .collect()
        } else {
            Vec::new()
        };
        let failing_events: Vec<(String, String, u64)> = p
            .events
            .iter()
            .filter(|(key, _)| f.events.contains(key))
            .map(|((k, s), n)| (k.clone(), s.clone(), *n))
            .collect();
        let incomplete_fails = f.require_complete && !p.complete;
        let growing = self.growing.get(&i).map(Vec::as_slice).unwrap_or(&[]);
        let failing_growth: Vec<(String, u64)> = match f.max_growth {
            Some(max) => growing
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
    }
}

impl Serialize for ProcessVerdicts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for p in self.iter() {
            seq.serialize_element(&p.map_err(S::Error::custom)?)?;
        }
        seq.end()
    }
}

/// The growth verdicts of every process's growing sites (see [`super::Verdict::growing`]),
/// unsorted.
pub fn growth_verdicts(
    log: &ProcessLog,
    names: impl Fn(usize) -> String,
    max_growth: Option<u64>,
) -> Vec<GrowthVerdict> {
    log.growing()
        .map(|(i, g)| GrowthVerdict {
            process: names(i),
            growth: g.clone(),
            failing: max_growth.is_some_and(|m| g.growth.grown_bytes > m),
        })
        .collect()
}

impl Sites {
    /// Process `i`'s name.
    pub fn process_name(&self, i: usize) -> String {
        self.name(i as u32)
    }
}
