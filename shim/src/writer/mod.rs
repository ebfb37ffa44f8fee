//! The shim's report writer: one JSON document per process (schema `cuguard-report`, version 1; see
//! `docs/report.schema.json`), and the one-line summary on stderr.
//!
//! Only raw facts go in: addresses, sizes, contexts, threads, stacks as instruction pointers
//! with their module and offset. Names are filled in where the symbolizer can do so in bounded
//! time; `cuguard` does the analysis.
//!
//! The format is the `cuguard-format` crate's: [`write()`] gathers what the tracker, the stacks
//! ([`stacks`]), the pool ([`crate::serving::serve`]), the timeline and the alerts hold as plain
//! data, fills a [`cuguard_format::Report`] with it, and serializes it in one place. No JSON is
//! written anywhere else in the shim.
//!
//! A process may write several reports to the same file, each replacing the last (see
//! [`file`]): checkpoints and snapshots on request (`complete: false`), then the final one
//! (`reason` `exit` or `signal`), each with its `report_number`. [`emergency`] writes the
//! smallest valid report, without allocating, when a signal leaves nothing else possible.
//!
//! What a report is written for, an [`Occasion`], is in [`occasion`], with the little the
//! report's parts share.

pub mod cache_blocks;
pub mod emergency;
pub mod file;
mod occasion;
mod python;
mod reconcile;
pub mod stacks;
pub mod timeline;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use cuguard_format as format;
use cuguard_format::wire::{UNKNOWN_VERSION, device_ordinal};
use cuguard_format::{Addr, template};

use crate::config;
use crate::config::amount::Amount;
use crate::process::clock;
use crate::process::identity as process;
use crate::tracker::{LeakState, NONE, Record, Tracker};
use occasion::{id, signal_name};

pub use occasion::{Occasion, Reason};

/// How many reports this process has written (the report's `report_number` is this plus one).
static REPORTS_WRITTEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// In a forked child: its reports are numbered from 1 again.
pub fn reset_after_fork() {
    REPORTS_WRITTEN.store(0, std::sync::atomic::Ordering::Relaxed);
    if let Ok(mut said) = LAST_SAID.try_lock() {
        said.clear();
    }
}

/// One leak as the tracker holds it.
struct Leak {
    address: u64,
    record: Record,
    state: LeakState,
    /// VMM handle, for cuMemCreate allocations.
    handle: Option<u64>,
}

/// What a written report held, for the summary line.
pub struct Outcome {
    pub path: PathBuf,
    /// The program's own leaks (owner kind `program`, or no owner known).
    pub leaks: usize,
    pub leaked_bytes: u64,
    /// Allocations live at the end that frameworks' caches, libraries or the driver hold.
    pub held: usize,
    pub held_bytes: u64,
    pub contexts_with_leaks: usize,
    pub events: Vec<(String, usize)>,
    pub fallback_reason: Option<String>,
}

/// Writes the report for `occasion`; returns what it held and where it went.
pub fn write(t: &Tracker, occasion: &Occasion) -> std::io::Result<Outcome> {
    let started = clock::monotonic_ns();
    let heap = crate::process::cost::heap_bytes();
    let (mut report, host, rank) = gather(t, occasion);
    report.cost = Some(bill(started, heap));
    let path = path_for(&host, rank);
    report.history = crate::recorder::status().map(history_info);
    let written = file::write_report(&path, &format::to_vec(&report))?;

    let mut kinds: Vec<(String, usize)> = Vec::new();
    for k in report.events.iter().map(|e| e.kind.as_str()) {
        match kinds.iter_mut().find(|(n, _)| n == k) {
            Some((_, c)) => *c += 1,
            None => kinds.push((k.to_string(), 1)),
        }
    }
    // The program's own leaks, and what others (frameworks' caches, libraries) hold.
    let others: HashSet<&str> = report
        .owners
        .iter()
        .filter(|o| o.kind != "program")
        .map(|o| o.id.as_str())
        .collect();
    let (held, own): (Vec<&format::Leak>, Vec<&format::Leak>) = report
        .leaks
        .iter()
        .partition(|l| l.owner.as_deref().is_some_and(|o| others.contains(o)));
    let mut contexts_with_leaks: Vec<Option<u32>> = own.iter().map(|l| l.context).collect();
    contexts_with_leaks.sort_unstable();
    contexts_with_leaks.dedup();
    Ok(Outcome {
        path: written.path,
        leaks: own.len(),
        leaked_bytes: own.iter().map(|l| l.size).sum(),
        held: held.len(),
        held_bytes: held.iter().map(|l| l.size).sum(),
        contexts_with_leaks: contexts_with_leaks.len(),
        events: kinds,
        fallback_reason: written.fallback_reason,
    })
}

/// The report for `occasion` as it stands now, without writing it anywhere (the in-process
/// API's snapshot); the caller is inside the shim and holds the writer's turn, as
/// [`write`]'s does. It counts as one of the process's reports (`report_number`), and its
/// building as one report written in the bill, which it carries as a written report does.
pub fn build(t: &Tracker, occasion: &Occasion) -> format::Report {
    let started = clock::monotonic_ns();
    let heap = crate::process::cost::heap_bytes();
    let mut report = gather(t, occasion).0;
    report.cost = Some(bill(started, heap));
    report
}

/// Everything the report holds for `occasion`, gathered in the order it is written (the end
/// time, the stacks' symbolization and the faults they record come late, as the report's own
/// order has them); with the host and rank its path is made from.
fn gather(t: &Tracker, occasion: &Occasion) -> (format::Report, String, Option<i64>) {
    // Refusals' other processes not yet listed (the cuguard thread had not come to them):
    // listed now, unless in a signal's handler, where NVML is not to be called.
    if !matches!(occasion.reason, Reason::Signal) {
        crate::guard::shield((), || t.ooms.fill_others());
    }
    let cfg = config::get();
    let taken = Taken::now(t);
    let contexts = t.contexts.snapshot();
    let rank = process::rank();
    let host = process::hostname();
    let number = REPORTS_WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    // The timeline's last sample is taken now, at the end time, before the slow part (naming
    // the stacks): the reporter thread's samples while a final report is written would read as
    // a flat stretch at the end of the run, which hides growth (`cuguard`'s growth criterion
    // looks at the run's last part).
    let samples = timeline::report();
    let mut r = heading(t, occasion, number, &host, rank);
    r.config = Some(settings(cfg));
    r.contexts = contexts.iter().map(context_entry).collect();
    r.leaks = leak_entries(&taken.leaks);
    r.events = taken.events.iter().map(event_entry).collect();
    r.events_dropped = Some(taken.events_dropped);
    name_stacks(&mut r, &taken, occasion);
    r.ooms = oom_entries(&taken.ooms, &r.stacks);
    r.ooms_dropped = (taken.ooms_dropped > 0).then_some(taken.ooms_dropped);
    r.reconciliation = reconciliation(&r, &contexts);
    device_stats(t, &mut r);
    if let Some((timeline, stack_samples)) = samples {
        r.timeline = Some(timeline);
        r.stack_samples = stack_samples;
    }
    r.peaks = crate::tracker::peaks::all()
        .into_iter()
        .map(|p| format::PeakRecord {
            device: device_ordinal(p.device),
            time_ms: p.time_ms,
            time_us: Some(p.time_us),
            live_bytes: p.live_bytes,
            stacks: stack_bytes(&p.stacks),
        })
        .collect();
    let (exported, dlsym, get_proc_address) = crate::tracker::doors::counts();
    r.doors = Some(format::Doors {
        dlsym,
        get_proc_address,
        exported: Some(exported),
    });
    r.versions = crate::process::versions::now(&crate::tracker::end::framework_files());
    r.faults = cfg.problems.clone();
    r.faults.extend(crate::process::faults::all());
    (r, host, rank)
}

/// What the tracker holds now, taken in one go, its order keys made dense: the leaks, the
/// events, the out-of-memory records, and a Python program's end (when its bootstrap marked
/// it) with the order of the allocations live then.
struct Taken {
    leaks: Vec<Leak>,
    events: Vec<crate::tracker::events::Event>,
    events_dropped: u64,
    ooms: Vec<crate::tracker::ooms::Oom>,
    ooms_dropped: u64,
    end_mark: Option<crate::tracker::end::Mark>,
    /// The dense order of each of the end mark's live allocations, in its order.
    end_order: Vec<u64>,
    /// The (address, order key) of each allocation still live now.
    live_now: HashSet<(u64, u64)>,
}

impl Taken {
    fn now(t: &Tracker) -> Taken {
        let mut leaks = collect_leaks(t);
        let (mut events, events_dropped) = t.events.snapshot();
        let end_mark = crate::tracker::end::get();
        let end_live: &[(u64, Record)] = end_mark.as_ref().map_or(&[], |m| &m.live[..]);
        let live_now: HashSet<(u64, u64)> = leaks
            .iter()
            .filter(|l| l.state == LeakState::LiveAtExit)
            .map(|l| (l.address, l.record.seq))
            .collect();
        // Tags given after the fact are found by the raw order key, before it is renumbered.
        for l in &mut leaks {
            l.record.tag = crate::tracker::tags::of(l.address, &l.record);
        }
        // Out-of-memory records share their alloc_failed event's order key; a framework's
        // refusal has no event and takes a number of its own.
        let (mut ooms, ooms_dropped) = t.ooms.snapshot();
        let event_keys: HashSet<(u64, u32)> = events.iter().map(|e| (e.seq, e.thread)).collect();
        let own: Vec<usize> = (0..ooms.len())
            .filter(|&i| !event_keys.contains(&(ooms[i].seq, ooms[i].thread)))
            .collect();
        // Raw order keys (time-stamp counter) become dense sequence numbers, leaks, events,
        // the end's allocations and those refusals in one order.
        let keys: Vec<(u64, u32)> = leaks
            .iter()
            .map(|l| (l.record.seq, l.record.thread))
            .chain(events.iter().map(|e| (e.seq, e.thread)))
            .chain(end_live.iter().map(|(_, r)| (r.seq, r.thread)))
            .chain(own.iter().map(|&i| (ooms[i].seq, ooms[i].thread)))
            .collect();
        let dense = crate::tracker::dense_order(&keys);
        let (for_leaks, rest) = dense.split_at(leaks.len());
        let (for_events, rest) = rest.split_at(events.len());
        let (for_end, for_own) = rest.split_at(end_live.len());
        for (l, d) in leaks.iter_mut().zip(for_leaks) {
            l.record.seq = *d;
        }
        let mut dense_of: HashMap<(u64, u32), u64> = HashMap::new();
        for (e, d) in events.iter_mut().zip(for_events) {
            dense_of.insert((e.seq, e.thread), *d);
            e.seq = *d;
        }
        for (&i, d) in own.iter().zip(for_own) {
            ooms[i].seq = *d;
        }
        for (i, o) in ooms.iter_mut().enumerate() {
            if !own.contains(&i) {
                o.seq = dense_of.get(&(o.seq, o.thread)).copied().unwrap_or(o.seq);
            }
        }
        let end_order = for_end.to_vec();
        Taken {
            leaks,
            events,
            events_dropped,
            ooms,
            ooms_dropped,
            end_mark,
            end_order,
            live_now,
        }
    }

    /// The end mark's live allocations (none without a mark).
    fn end_live(&self) -> &[(u64, Record)] {
        self.end_mark.as_ref().map_or(&[], |m| &m.live[..])
    }
}

/// A report with its heading filled in: the occasion, the process, its number, the run, the
/// driver and the devices.
fn heading(
    t: &Tracker,
    occasion: &Occasion,
    number: u64,
    host: &str,
    rank: Option<i64>,
) -> format::Report {
    let process = format::Process {
        pid: process::pid(),
        ppid: process::ppid(),
        exe: process::exe(),
        argv: process::argv(),
        hostname: host.to_string(),
        // The schema's rank is a count: a launcher's negative rank is not one.
        rank: rank.and_then(|r| u32::try_from(r).ok()),
        start_unix_ms: crate::process::clock::start().0,
        end_unix_ms: clock::unix_ms(),
        labels: crate::process::labels::all(),
    };
    let mut r = format::Report::new(occasion.complete, occasion.reason.into(), process);
    r.cut_short = occasion.cut_short.map(String::from);
    r.signal = occasion.signal.map(|sig| format::Signal {
        number: sig,
        name: signal_name(sig).into(),
    });
    r.report_number = Some(number);
    r.run_id = crate::config::get().run_id.clone();
    r.driver = format::Driver {
        version: driver_version().map_or(UNKNOWN_VERSION, i64::from),
        path: crate::driver::driver_if_loaded().map_or_else(String::new, |d| d.path.clone()),
    };
    r.devices = t
        .contexts
        .devices()
        .into_iter()
        .map(|d| format::Device {
            ordinal: device_ordinal(d.ordinal),
            name: d.name,
            total_bytes: d.total_bytes,
            limit_bytes: crate::tracker::limit::limit(d.ordinal),
        })
        .collect();
    r
}

/// A context as the report writes it.
fn context_entry(c: &crate::tracker::contexts::ContextInfo) -> format::Context {
    format::Context {
        id: c.id,
        handle: Addr(c.handle),
        device: device_ordinal(c.device),
        primary: c.primary,
        destroyed: c.destroyed,
        destroyed_by: c.destroyed_by.map(|e| e.name().into()),
        created_ms: Some(c.created_ms),
        destroyed_ms: c.destroyed_ms,
        stack: id(c.stack).map(u64::from),
        overhead_bytes: c.overhead_bytes,
    }
}

/// The leaks as the report writes them, their owners not yet known ([`name_stacks`]); each
/// entry point's name is shared between them.
fn leak_entries(leaks: &[Leak]) -> Vec<format::Leak> {
    let mut apis: HashMap<&'static str, Arc<str>> = HashMap::new();
    let mut tags: HashMap<u32, Arc<str>> = HashMap::new();
    leaks
        .iter()
        .map(|l| {
            let rec = &l.record;
            format::Leak {
                allocation: cuguard_format::Allocation {
                    address: Addr(l.address),
                    size: rec.size,
                    requested: rec.requested,
                    api: apis
                        .entry(rec.api.name())
                        .or_insert_with_key(|n| Arc::from(*n))
                        .clone(),
                    memory: rec.memory.into(),
                    device: device_ordinal(rec.device),
                    context: id(rec.context),
                    thread: rec.thread.into(),
                    seq: rec.seq,
                    time_ms: rec.time_ms,
                    stack: id(rec.stack).map(u64::from),
                    tag: crate::tracker::tags::text(&mut tags, rec.tag),
                },
                state: l.state.into(),
                handle: l.handle.map(Addr),
                owner: None,
            }
        })
        .collect()
}

/// An event as the report writes it.
fn event_entry(e: &crate::tracker::events::Event) -> format::Event {
    format::Event {
        kind: e.kind.into(),
        address: (e.address != 0).then_some(Addr(e.address)),
        api: e.api.map(|a| a.name().into()),
        seq: e.seq,
        thread: e.thread.into(),
        stack: id(e.stack).map(u64::from),
        result: e.result.map(i64::from),
        size: e.size,
        context: id(e.context),
        time_ms: Some(e.time_ms),
        message: e.message.clone(),
        device: e.device.map(device_ordinal),
    }
}

/// Names the stacks (the slow part: symbolization), and with them fills in the stacks, the
/// modules, the owners, each leak's owner and the Python section.
fn name_stacks(r: &mut format::Report, taken: &Taken, occasion: &Occasion) {
    // The memory kinds each stack allocated (of the allocations in the report), for owners.
    let mut memories: HashMap<u32, Vec<&'static str>> = HashMap::new();
    for rec in taken
        .leaks
        .iter()
        .map(|l| &l.record)
        .chain(taken.end_live().iter().map(|(_, r)| r))
    {
        if rec.stack != NONE {
            let kinds = memories.entry(rec.stack).or_default();
            let m = rec.memory.as_str();
            if !kinds.contains(&m) {
                kinds.push(m);
            }
        }
    }
    let stacks = stacks::stacks(&memories);
    r.python = python::section(
        occasion,
        taken.end_mark.as_ref(),
        &taken.end_order,
        &stacks.owner_of,
        &taken.live_now,
    );
    for (leak, l) in r.leaks.iter_mut().zip(&taken.leaks) {
        leak.owner = stacks
            .owner_of
            .get(&(l.record.stack, l.record.memory.as_str()))
            .cloned();
    }
    r.stacks = stacks.stacks;
    r.modules = stacks.modules;
    r.owners = stacks.owners;
}

/// The out-of-memory records as the report writes them, what was live then summed by owner
/// (the owner of each stack in `stacks`, else the program).
fn oom_entries(
    ooms: &[crate::tracker::ooms::Oom],
    stacks: &[format::Stack],
) -> Vec<format::OomRecord> {
    let owner_of_stack: HashMap<u64, &str> = stacks
        .iter()
        .filter_map(|s| Some((s.id, s.owner.as_deref()?)))
        .collect();
    let by_owner = |stacks: &[(u32, u64, u64)]| -> Vec<format::OwnerBytes> {
        let mut sums: Vec<format::OwnerBytes> = Vec::new();
        for &(stack, bytes, _) in stacks {
            let owner = id(stack)
                .and_then(|s| owner_of_stack.get(&u64::from(s)).copied())
                .unwrap_or("program");
            match sums.iter_mut().find(|o| o.owner == owner) {
                Some(o) => o.bytes += bytes,
                None => sums.push(format::OwnerBytes {
                    owner: owner.into(),
                    bytes,
                }),
            }
        }
        sums.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.owner.cmp(&b.owner)));
        sums
    };
    ooms.iter()
        .map(|o| format::OomRecord {
            seq: o.seq,
            time_ms: o.time_ms,
            thread: o.thread.into(),
            api: o.api.into(),
            size: o.size,
            device: device_ordinal(o.device),
            stack: id(o.stack).map(u64::from),
            refused_by: o.refused_by.as_str().into(),
            message: o.message.clone(),
            device_free_bytes: o.device_memory.map(|m| m.0),
            device_total_bytes: o.device_memory.map(|m| m.1),
            live_bytes: o.live_bytes,
            by_owner: by_owner(&o.stacks),
            stacks: stack_bytes(&o.stacks),
            pool: o.pool.map(|p| format::OomPool {
                reserved_bytes: p.reserved_bytes,
                free_bytes: p.free_bytes,
                largest_free_block: p.largest_free_block,
            }),
            labels: o.labels.clone(),
            limit: o.limit.clone(),
            idle: o.idle.clone(),
            verdict: Some(o.verdict.clone()),
            within: o.within.map(|w| w.as_str().into()),
            other_processes: o.others.as_ref().ok().map(|o| o.0.clone()),
            other_processes_bytes: o.others.as_ref().ok().map(|o| o.1),
            other_processes_note: o.others.as_ref().err().cloned(),
            card_ns: Some(o.card_ns),
            framework_ns: o.framework_ns,
            card_parts: Some(o.card_parts),
        })
        .collect()
}

/// Each device that had a context: what it says is used against what the report explains.
fn reconciliation(
    r: &format::Report,
    contexts: &[crate::tracker::contexts::ContextInfo],
) -> Vec<format::Reconciliation> {
    let kinds: HashMap<&str, &str> = r
        .owners
        .iter()
        .map(|o| (o.id.as_str(), o.kind.as_str()))
        .collect();
    let mut devices: Vec<i32> = contexts.iter().map(|c| c.device).collect();
    devices.sort_unstable();
    devices.dedup();
    devices
        .into_iter()
        .filter(|d| *d >= 0)
        .map(|d| reconcile::device(d, &r.leaks, &kinds, contexts))
        .collect()
}

/// The counters per device (with the pool's) and the VMM reservations.
fn device_stats(t: &Tracker, r: &mut format::Report) {
    r.stats.devices = t
        .stats
        .snapshot()
        .into_iter()
        .map(|d| format::DeviceStats {
            device: device_ordinal(d.device),
            live_bytes: d.live_bytes,
            peak_live_bytes: d.peak_live_bytes,
            total_allocated_bytes: d.total_allocated_bytes,
            allocations: d.allocations,
            frees: d.frees,
            released_bytes: Some(d.released_bytes),
            host_pinned_live_bytes: Some(d.host_pinned_live_bytes),
            pool: crate::serving::serve::pool_stats(d.device),
        })
        .collect();
    let (ranges, bytes) = t.vmm.reservations();
    r.stats.vmm_reserved_ranges = Some(ranges as u64);
    r.stats.vmm_reserved_bytes = Some(bytes);
}

/// The report's `history`: its files by absolute path (the report's own path is absolute), so
/// that no file elsewhere that happens to share the name is taken for it.
fn history_info(s: crate::recorder::Status) -> format::HistoryInfo {
    format::HistoryInfo {
        files: s
            .files
            .iter()
            .map(|f| f.to_string_lossy().into_owned())
            .collect(),
        events: s.events,
        bytes: s.bytes,
        bound_bytes: s.bound,
        segments_let_go: s.let_go,
        begins_ms: s.begins_ms,
        lost: s
            .lost
            .iter()
            .map(|&(count, from_ms, to_ms)| format::HistoryLost {
                count,
                from_ms,
                to_ms,
            })
            .collect(),
        stopped: s.stopped,
        cache_blocks_unrecorded: cache_blocks::unrecorded(),
    }
}

/// The report's `cost`: the shim's own bill ([`crate::process::cost`]), with this report's
/// writing until now timed, and `heap` (the shim's heap before this report was gathered).
fn bill(started: u64, heap: u64) -> format::Cost {
    use crate::process::cost::{self, Metric};
    cost::report_written(clock::monotonic_ns().saturating_sub(started));
    let totals = cost::all_totals();
    let timing = |m: Metric| {
        let t = totals[m as usize];
        format::CostTiming {
            calls: t.calls,
            timed: t.timed,
            dropped: t.dropped,
            ns: t.ns,
            first_calls: t.first_calls,
            first_ns: t.first_ns,
        }
    };
    let (written, ns) = cost::reports();
    let t = cost::all_tallies();
    let at = |k: cost::Tally| t[k as usize];
    format::Cost {
        sample_every: cost::sample_every(),
        first_timed: cost::FIRST_TIMED,
        hooks: timing(Metric::Hooks),
        stacks: timing(Metric::Stacks),
        python: timing(Metric::Python),
        captures: Some(timing(Metric::Captures)),
        cache_blocks: Some(timing(Metric::Blocks)).filter(|t| t.calls > 0),
        one_time: Some(timing(Metric::OneTime)),
        unwind: Some(format::CostUnwind {
            frames: at(cost::Tally::Frames),
            by_position: at(cost::Tally::ByPosition),
            cached: at(cost::Tally::Cached),
            shared: at(cost::Tally::Shared),
            evaluated: at(cost::Tally::Evaluated),
            evaluated_ns: at(cost::Tally::EvaluatedNs),
        }),
        pool_growth: Some(format::CostGrowth {
            chunks: at(cost::Tally::Chunks),
            bytes: at(cost::Tally::ChunkBytes),
            ns: at(cost::Tally::ChunkNs),
        }),
        reports: format::CostReports { written, ns },
        heap_bytes: heap,
    }
}

/// The report's `config`: the effective settings.
fn settings(cfg: &config::Config) -> format::Config {
    let text = |a: Amount| match a {
        Amount::Bytes(b) => b.to_string(),
        Amount::Percent(p) => format!("{p}%"),
    };
    // A pool amount of u64::MAX bytes is "none" (no limit, keep everything).
    let amount = |a: Option<Amount>| a.filter(|a| *a != Amount::Bytes(u64::MAX)).map(text);
    format::Config {
        report: Some(cfg.report_template.clone()),
        stack_depth: Some(cfg.stack_depth as u64),
        pool: Some(cfg.pool),
        pool_initial: amount(Some(cfg.pool_settings.initial)),
        pool_limit: amount(cfg.pool_settings.limit),
        pool_keep: amount(Some(cfg.pool_settings.keep)),
        timeline_ms: Some(cfg.timeline_ms),
        disabled: Some(cfg.disabled),
        checkpoint_secs: Some(cfg.checkpoint_secs),
        warn_at: cfg.warn_at.map(text),
        snapshot_signal: (cfg.snapshot_signal != 0).then_some(cfg.snapshot_signal),
        signals: Some(cfg.signals),
        limit: cfg.limit.as_ref().map(|l| l.text()),
        limit_virtual: cfg.limit.as_ref().map(|_| cfg.limit_virtual),
    }
}

/// Where this process's report goes: the template expanded, relative to the start directory.
pub fn report_path() -> PathBuf {
    path_for(&process::hostname(), process::rank())
}

fn path_for(host: &str, rank: Option<i64>) -> PathBuf {
    let template = &config::get().report_template;
    // A directory (`CUGUARD_REPORT=out/`, `.`): the report goes into it, by the default name.
    let exe = process::exe_name();
    template::into_directory(
        template,
        expand(template, host, rank),
        &placeholders(host, rank, &exe),
    )
}

/// `template` with the report template's placeholders expanded (`%p`, `%e`, `%h`, `%r`, `%t`),
/// relative to the start directory: for other paths a user gives the same way (`CUGUARD_ALERT`'s
/// `file:PATH`).
pub fn expand_path(template: &str) -> PathBuf {
    expand(template, &process::hostname(), process::rank())
}

/// The placeholders' values in this process (`exe`: its executable's name).
fn placeholders<'a>(host: &'a str, rank: Option<i64>, exe: &'a str) -> template::Placeholders<'a> {
    template::Placeholders {
        pid: process::pid(),
        exe_name: exe,
        host,
        rank,
        start_unix_s: crate::process::clock::start().0 / 1000,
    }
}

fn expand(template: &str, host: &str, rank: Option<i64>) -> PathBuf {
    let cfg = config::get();
    let exe = process::exe_name();
    let path = PathBuf::from(template::expand(template, &placeholders(host, rank, &exe)));
    // `Path::components` leaves out the `.` a relative template starts with (`./r.json`): the
    // path said and named in the report reads `/work/r.json`, not `/work/./r.json`.
    if path.is_relative() {
        cfg.start_dir.join(path).components().collect()
    } else {
        path.components().collect()
    }
}

/// A context or stack id, or `None` for [`NONE`].
/// Live bytes by stack, as the report gives them.
fn stack_bytes(stacks: &[(u32, u64, u64)]) -> Vec<format::StackBytes> {
    stacks
        .iter()
        .map(|&(stack, bytes, allocations)| format::StackBytes {
            stack: id(stack).map(u64::from),
            bytes,
            allocations,
        })
        .collect()
}

fn collect_leaks(t: &Tracker) -> Vec<Leak> {
    let mut leaks: Vec<Leak> = crate::serving::serve::live_allocations(t)
        .into_iter()
        .map(|(address, record)| Leak {
            address,
            record,
            state: LeakState::LiveAtExit,
            handle: None,
        })
        .collect();
    leaks.extend(
        crate::process::global::lock(&t.released)
            .iter()
            .map(|(address, record)| Leak {
                address: *address,
                record: *record,
                state: LeakState::ReleasedByContextDestroy,
                handle: None,
            }),
    );
    leaks.extend(
        t.vmm
            .live()
            .into_iter()
            .map(|(address, handle, record)| Leak {
                address,
                record,
                state: LeakState::LiveAtExit,
                handle: Some(handle),
            }),
    );
    leaks.sort_by_key(|l| l.record.seq);
    leaks
}

fn driver_version() -> Option<i32> {
    if crate::phase::unloading() {
        return None;
    }
    crate::driver::driver_if_loaded()?;
    let f = crate::driver::real::cuDriverGetVersion()?;
    let mut v = 0;
    // SAFETY: v is a valid out-parameter.
    (unsafe { f(&mut v) } == crate::ffi::CUDA_SUCCESS).then_some(v)
}

/// The one-line summary printed at exit: the program's own leaks, then (when there are any)
/// what frameworks' caches and libraries held, which are not leaks.
pub fn summary_line(o: &Outcome) -> String {
    let mut s = if o.leaks == 0 {
        "no leaks".to_string()
    } else {
        format!(
            "{} leak{} ({}) in {} context{}",
            o.leaks,
            plural(o.leaks),
            human_bytes(o.leaked_bytes),
            o.contexts_with_leaks,
            plural(o.contexts_with_leaks)
        )
    };
    if o.held > 0 {
        let held = format!(
            "{} in {} allocation{} held by frameworks' caches and libraries",
            human_bytes(o.held_bytes),
            o.held,
            plural(o.held)
        );
        if o.leaks == 0 {
            s = format!("no leaks of the program's own ({held})");
        } else {
            s.push_str(&format!(", and {held}"));
        }
    }
    for (kind, n) in &o.events {
        s.push_str(&format!(", {n} {}", kind.replace('_', " ")));
    }
    s.push_str(&format!("; report: {}", o.path.display()));
    if let Some(why) = &o.fallback_reason {
        s.push_str(&format!(" ({why})"));
    }
    s
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

pub use cuguard_format::human_bytes;

/// Writes a report for `occasion` (the caller is inside the shim and holds the writer's turn,
/// see [`crate::lifecycle`]); a final one also prints the summary line. Never panics.
/// The last summary line said, in this process.
static LAST_SAID: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

pub fn write_and_say(t: &Tracker, occasion: &Occasion) -> Option<Outcome> {
    let cfg = config::get();
    match crate::guard::shield(Err(std::io::Error::other("internal error")), || {
        write(t, occasion)
    }) {
        Ok(outcome) => {
            let final_report = matches!(occasion.reason, Reason::Exit | Reason::Signal);
            if final_report && !cfg.quiet {
                let mut line = summary_line(&outcome);
                if let Some(sig) = occasion.signal {
                    line.push_str(&format!(" ({} received)", signal_name(sig)));
                }
                // A signal's report made final by the program's handler (`_exit` from it) says
                // the same line again: once is enough.
                // (try_lock: a forked child may inherit it held by a thread it does not have.)
                match LAST_SAID.try_lock() {
                    Ok(said) if *said == line => {}
                    Ok(mut said) => {
                        crate::process::diag::warn(&line);
                        *said = line;
                    }
                    Err(_) => crate::process::diag::warn(&line),
                }
            } else if let Some(why) = &outcome.fallback_reason {
                static SAID: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                crate::process::diag::warn_once(
                    &SAID,
                    &format!(
                        "{} report: {} ({why})",
                        format::Reason::from(occasion.reason),
                        outcome.path.display()
                    ),
                );
            }
            Some(outcome)
        }
        Err(e) => {
            crate::process::diag::warn(&format!(
                "could not write the {} report: {e}",
                format::Reason::from(occasion.reason)
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(leaks: usize, leaked_bytes: u64, held: usize, held_bytes: u64) -> Outcome {
        Outcome {
            path: PathBuf::from("r.json"),
            leaks,
            leaked_bytes,
            held,
            held_bytes,
            contexts_with_leaks: usize::from(leaks > 0),
            events: vec![("double_free".into(), 1)],
            fallback_reason: None,
        }
    }

    #[test]
    fn the_summary_line_counts_the_programs_leaks_and_says_what_caches_hold_apart() {
        assert_eq!(
            summary_line(&outcome(2, 3 << 20, 0, 0)),
            "2 leaks (3.0 MiB) in 1 context, 1 double free; report: r.json"
        );
        assert_eq!(
            summary_line(&outcome(0, 0, 18, 243_165_184)),
            "no leaks of the program's own (231.9 MiB in 18 allocations held by frameworks' \
             caches and libraries), 1 double free; report: r.json"
        );
        assert_eq!(
            summary_line(&outcome(1, 16 << 20, 1, 4)),
            "1 leak (16.0 MiB) in 1 context, and 4 B in 1 allocation held by frameworks' caches \
             and libraries, 1 double free; report: r.json"
        );
    }
}
