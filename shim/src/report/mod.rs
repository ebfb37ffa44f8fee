//! The report: one JSON document per process (schema `cuguard-report`, version 1; see
//! `docs/report.schema.json`), and the one-line summary on stderr.
//!
//! Only raw facts go in: addresses, sizes, contexts, threads, stacks as instruction pointers
//! with their module and offset. Names are filled in where the symbolizer can do so in bounded
//! time; `cuguard` does the analysis.
//!
//! A process may write several reports to the same file, each replacing the last (see
//! [`file`]): checkpoints and snapshots on request (`complete: false`), then the final one
//! (`reason` `exit` or `signal`). Fields added here beyond REPORT.md, all optional for readers:
//! `cut_short` (why `complete` is false, in words, or null), `signal` (`{number, name}` when a
//! signal ended the process, else null) and `report_number` (1 for the first report this
//! process wrote, 2 for the next, …). [`emergency`] writes the smallest valid report, without
//! allocating, when a signal leaves nothing else possible.

pub mod emergency;
pub mod file;
pub mod json;

use std::path::PathBuf;

use crate::clock;
use crate::config;
use crate::process;
use crate::tracker::{LeakState, NONE, Record, Tracker};
use json::Json;

/// The report's schema name.
pub const SCHEMA: &str = "cuguard-report";
/// The report's schema version.
pub const SCHEMA_VERSION: u64 = 1;

/// Why a report is written (the report's `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The process is ending normally (return from main, `exit` from any thread).
    Exit,
    /// Periodic (`CUGUARD_CHECKPOINT_SECS`); the process goes on.
    Checkpoint,
    /// A fatal or terminating signal.
    Signal,
    /// `cuguard snapshot PID`; the process goes on.
    Request,
}

impl Reason {
    /// The report's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Exit => "exit",
            Reason::Checkpoint => "checkpoint",
            Reason::Signal => "signal",
            Reason::Request => "request",
        }
    }
}

/// What a report is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Occasion {
    pub reason: Reason,
    /// Whether the report is final and holds everything (the report's `complete`).
    pub complete: bool,
    /// The signal, for [`Reason::Signal`].
    pub signal: Option<i32>,
    /// Why the report is not complete (the report's `cut_short`).
    pub cut_short: Option<&'static str>,
}

impl Occasion {
    /// The final report of a process that exits.
    pub const EXIT: Occasion = Occasion {
        reason: Reason::Exit,
        complete: true,
        signal: None,
        cut_short: None,
    };
    /// A checkpoint.
    pub const CHECKPOINT: Occasion = Occasion {
        reason: Reason::Checkpoint,
        complete: false,
        signal: None,
        cut_short: Some("checkpoint: the process was still running"),
    };
    /// A snapshot on request.
    pub const REQUEST: Occasion = Occasion {
        reason: Reason::Request,
        complete: false,
        signal: None,
        cut_short: Some("snapshot on request: the process was still running"),
    };
}

/// How many reports this process has written (the report's `report_number` is this plus one).
static REPORTS_WRITTEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// In a forked child: its reports are numbered from 1 again.
pub fn reset_after_fork() {
    REPORTS_WRITTEN.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// The name of signal `sig` (`"SIGSEGV"`), or `"signal"` for others.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "signal",
    }
}

/// One leak as it goes into the report.
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
    pub leaks: usize,
    pub leaked_bytes: u64,
    pub contexts_with_leaks: usize,
    pub events: Vec<(&'static str, usize)>,
    pub fallback_reason: Option<String>,
}

/// Writes the report for `occasion`; returns what it held and where it went.
pub fn write(t: &Tracker, occasion: &Occasion) -> std::io::Result<Outcome> {
    let cfg = config::get();
    let mut leaks = collect_leaks(t);
    let (mut events, dropped) = t.events.snapshot();
    let mut alerts = crate::lifecycle::alerts::events();
    // Raw order keys (time-stamp counter) become dense sequence numbers, leaks and events in
    // one order.
    let keys: Vec<(u64, u32)> = leaks
        .iter()
        .map(|l| (l.record.seq, l.record.thread))
        .chain(events.iter().map(|e| (e.seq, e.thread)))
        .chain(alerts.iter().map(|a| a.order_key()))
        .collect();
    let dense = crate::tracker::dense_order(&keys);
    let (for_leaks, rest) = dense.split_at(leaks.len());
    let (for_events, for_alerts) = rest.split_at(events.len());
    for (l, d) in leaks.iter_mut().zip(for_leaks) {
        l.record.seq = *d;
    }
    for (e, d) in events.iter_mut().zip(for_events) {
        e.seq = *d;
    }
    for (a, d) in alerts.iter_mut().zip(for_alerts) {
        a.set_seq(*d);
    }
    let contexts = t.contexts.snapshot();
    let devices = t.contexts.devices();
    let rank = process::rank();
    let host = process::hostname();

    let mut j = Json::new();
    j.begin_object();
    j.key("schema").str(SCHEMA);
    j.key("schema_version").u64(SCHEMA_VERSION);
    j.key("tool").begin_object();
    j.key("name").str("cuguard");
    j.key("version").str(env!("CARGO_PKG_VERSION"));
    j.end_object();
    j.key("complete").bool(occasion.complete);
    j.key("reason").str(occasion.reason.as_str());
    j.key("cut_short").opt_str(occasion.cut_short);
    j.key("signal");
    match occasion.signal {
        Some(sig) => {
            j.begin_object();
            j.key("number").i64(sig.into());
            j.key("name").str(signal_name(sig));
            j.end_object();
        }
        None => {
            j.null();
        }
    }
    let number = REPORTS_WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    j.key("report_number").u64(number);

    j.key("process").begin_object();
    j.key("pid").u64(process::pid().into());
    j.key("ppid").u64(process::ppid().into());
    j.key("exe").str(&process::exe());
    j.key("argv").begin_array();
    for a in process::argv() {
        j.str(&a);
    }
    j.end_array();
    j.key("hostname").str(&host);
    j.key("rank");
    match rank {
        Some(r) => j.i64(r),
        None => j.null(),
    };
    j.key("start_unix_ms").u64(cfg.start_unix_ms);
    j.key("end_unix_ms").u64(clock::unix_ms());
    j.end_object();

    j.key("driver").begin_object();
    j.key("version");
    match driver_version() {
        Some(v) => j.i64(v.into()),
        None => j.null(),
    };
    j.key("path")
        .str(crate::driver::driver_if_loaded().map_or("", |d| d.path.as_str()));
    j.end_object();

    j.key("devices").begin_array();
    for d in &devices {
        j.begin_object();
        j.key("ordinal").i64(d.ordinal.into());
        j.key("name").str(&d.name);
        j.key("total_bytes").u64(d.total_bytes);
        j.end_object();
    }
    j.end_array();

    j.key("config").begin_object();
    j.key("report").str(&cfg.report_template);
    j.key("stack_depth").u64(cfg.stack_depth as u64);
    j.key("pool").bool(cfg.pool);
    let amount = |j: &mut Json, a: Option<crate::pool::settings::Amount>| match a {
        Some(crate::pool::settings::Amount::Bytes(u64::MAX)) | None => {
            j.null();
        }
        Some(crate::pool::settings::Amount::Bytes(b)) => {
            j.str(&b.to_string());
        }
        Some(crate::pool::settings::Amount::Percent(p)) => {
            j.str(&format!("{p}%"));
        }
    };
    j.key("pool_initial");
    amount(&mut j, Some(cfg.pool_settings.initial));
    j.key("pool_limit");
    amount(&mut j, cfg.pool_settings.limit);
    j.key("pool_keep");
    amount(&mut j, Some(cfg.pool_settings.keep));
    j.key("timeline_ms").u64(cfg.timeline_ms);
    j.key("disabled").bool(cfg.disabled);
    j.key("checkpoint_secs").u64(cfg.checkpoint_secs);
    j.key("warn_at");
    match cfg.warn_at {
        Some(crate::pool::settings::Amount::Bytes(b)) => j.str(&b.to_string()),
        Some(crate::pool::settings::Amount::Percent(p)) => j.str(&format!("{p}%")),
        None => j.null(),
    };
    j.key("snapshot_signal");
    if cfg.snapshot_signal == 0 {
        j.null();
    } else {
        j.i64(cfg.snapshot_signal.into());
    }
    j.key("signals").bool(cfg.signals);
    j.end_object();

    j.key("contexts").begin_array();
    for c in &contexts {
        j.begin_object();
        j.key("id").u64(c.id.into());
        j.key("handle").addr(c.handle);
        j.key("device").i64(c.device.into());
        j.key("primary").bool(c.primary);
        j.key("destroyed").bool(c.destroyed);
        j.key("destroyed_by")
            .opt_str(c.destroyed_by.map(|e| e.name()));
        j.key("created_ms").u64(c.created_ms);
        j.key("destroyed_ms").opt_u64(c.destroyed_ms);
        j.key("stack");
        opt_id(&mut j, c.stack);
        j.end_object();
    }
    j.end_array();

    j.key("leaks").begin_array();
    for l in &leaks {
        let r = &l.record;
        j.begin_object();
        j.key("address").addr(l.address);
        j.key("size").u64(r.size);
        j.key("requested").u64(r.requested);
        j.key("api").str(r.api.name());
        j.key("memory").str(r.memory.as_str());
        j.key("device").i64(r.device.into());
        j.key("context");
        opt_id(&mut j, r.context);
        j.key("thread").u64(r.thread.into());
        j.key("seq").u64(r.seq);
        j.key("time_ms").u64(r.time_ms);
        j.key("stack");
        opt_id(&mut j, r.stack);
        j.key("state").str(l.state.as_str());
        if let Some(h) = l.handle {
            j.key("handle").addr(h);
        }
        j.end_object();
    }
    j.end_array();

    j.key("events").begin_array();
    for e in &events {
        j.begin_object();
        j.key("kind").str(e.kind.as_str());
        j.key("address");
        if e.address == 0 {
            j.null();
        } else {
            j.addr(e.address);
        }
        j.key("api").str(e.api.name());
        j.key("seq").u64(e.seq);
        j.key("thread").u64(e.thread.into());
        j.key("stack");
        opt_id(&mut j, e.stack);
        j.key("result").u64(e.result.into());
        j.key("size").opt_u64(e.size);
        j.key("context");
        opt_id(&mut j, e.context);
        j.key("time_ms").u64(e.time_ms);
        j.key("message").opt_str(e.message.as_deref());
        j.end_object();
    }
    for a in &alerts {
        a.write(&mut j);
    }
    j.end_array();
    j.key("events_dropped").u64(dropped);

    crate::callsite::write_stacks(&mut j);

    j.key("stats").begin_object();
    j.key("devices").begin_array();
    for d in t.stats.snapshot() {
        j.begin_object();
        j.key("device").i64(d.device.into());
        j.key("live_bytes").u64(d.live_bytes);
        j.key("peak_live_bytes").u64(d.peak_live_bytes);
        j.key("total_allocated_bytes").u64(d.total_allocated_bytes);
        j.key("allocations").u64(d.allocations);
        j.key("frees").u64(d.frees);
        j.key("released_bytes").u64(d.released_bytes);
        j.key("host_pinned_live_bytes")
            .u64(d.host_pinned_live_bytes);
        j.key("pool");
        crate::serve::write_pool_stats(&mut j, d.device);
        j.end_object();
    }
    j.end_array();
    let (ranges, bytes) = t.vmm.reservations();
    j.key("vmm_reserved_ranges").u64(ranges as u64);
    j.key("vmm_reserved_bytes").u64(bytes);
    j.end_object();

    crate::timeline::write(&mut j);

    let (exported, dlsym, gpa) = crate::doors::counts();
    j.key("doors").begin_object();
    j.key("exported").u64(exported);
    j.key("dlsym").u64(dlsym);
    j.key("get_proc_address").u64(gpa);
    j.end_object();

    let mut faults = cfg.problems.clone();
    faults.extend(crate::faults::all());
    j.key("faults").begin_array();
    for f in &faults {
        j.str(f);
    }
    j.end_array();
    j.end_object();

    let path = path_for(host, rank);
    let mut doc = j.finish();
    doc.push('\n');
    let written = file::write_report(&path, doc.as_bytes())?;

    let mut contexts_with_leaks: Vec<u32> = leaks.iter().map(|l| l.record.context).collect();
    contexts_with_leaks.sort_unstable();
    contexts_with_leaks.dedup();
    let mut kinds: Vec<(&'static str, usize)> = Vec::new();
    let alert_kinds = alerts.iter().map(|a| a.kind());
    for k in events.iter().map(|e| e.kind.as_str()).chain(alert_kinds) {
        match kinds.iter_mut().find(|(n, _)| *n == k) {
            Some((_, c)) => *c += 1,
            None => kinds.push((k, 1)),
        }
    }
    Ok(Outcome {
        path: written.path,
        leaks: leaks.len(),
        leaked_bytes: leaks.iter().map(|l| l.record.size).sum(),
        contexts_with_leaks: contexts_with_leaks.len(),
        events: kinds,
        fallback_reason: written.fallback_reason,
    })
}

/// Where this process's report goes: the template expanded, relative to the start directory.
pub fn report_path() -> PathBuf {
    path_for(process::hostname(), process::rank())
}

fn path_for(host: String, rank: Option<i64>) -> PathBuf {
    let cfg = config::get();
    let placeholders = file::Placeholders {
        pid: process::pid(),
        exe_name: process::exe_name(),
        host,
        rank,
        start_unix_s: cfg.start_unix_ms / 1000,
    };
    let path = PathBuf::from(file::expand(&cfg.report_template, &placeholders));
    if path.is_relative() {
        cfg.start_dir.join(path)
    } else {
        path
    }
}

fn opt_id(j: &mut Json, id: u32) {
    if id == NONE {
        j.null();
    } else {
        j.u64(id.into());
    }
}

fn collect_leaks(t: &Tracker) -> Vec<Leak> {
    let mut leaks: Vec<Leak> = t
        .live_snapshot()
        .into_iter()
        .map(|(address, record)| Leak {
            address,
            record,
            state: LeakState::LiveAtExit,
            handle: None,
        })
        .collect();
    leaks.extend(
        crate::tracker::lock(&t.released)
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
    if crate::lifecycle::in_fini() {
        return None;
    }
    crate::driver::driver_if_loaded()?;
    let f = crate::driver::real::cuDriverGetVersion()?;
    let mut v = 0;
    // SAFETY: v is a valid out-parameter.
    (unsafe { f(&mut v) } == crate::ffi::CUDA_SUCCESS).then_some(v)
}

/// The one-line summary printed at exit.
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

/// Bytes in the largest binary unit that keeps the number at or above 1.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Writes a report for `occasion` (the caller is inside the shim and holds the writer's turn,
/// see [`crate::lifecycle`]); a final one also prints the summary line. Never panics.
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
                crate::diag::warn(&line);
            } else if let Some(why) = &outcome.fallback_reason {
                static SAID: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                crate::diag::warn_once(
                    &SAID,
                    &format!(
                        "{} report: {} ({why})",
                        occasion.reason.as_str(),
                        outcome.path.display()
                    ),
                );
            }
            Some(outcome)
        }
        Err(e) => {
            crate::diag::warn(&format!(
                "could not write the {} report: {e}",
                occasion.reason.as_str()
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
