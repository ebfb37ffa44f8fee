//! `CUGUARD_WARN_AT`: an early warning for long-running services, instead of an out-of-memory.
//!
//! # When an alert fires, and when it fires again
//!
//! Per device, with `T` the threshold in bytes (`CUGUARD_WARN_AT`, or that percentage of the
//! device's memory) and `R = T - T/10` (90% of it, rounded up) the re-arm level:
//!
//! - armed (at the start): a check that sees live bytes `>= T` fires a `warn_at` alert and the
//!   device is no longer armed;
//! - fired: a check that sees live bytes `< R` sends a `cleared` alert and arms the device
//!   again, so the next crossing of `T` fires again. Between `R` and `T` nothing happens, so
//!   usage that hovers around the threshold does not flap.
//!
//! Each `warn_at` alert is one `warn_threshold_crossed` event in the report (`size` = live bytes
//! then, `device`, `message`), one more in [`total`] (the stats page's `alerts_total`), and one
//! line where `CUGUARD_ALERT` says ([`sink`]). A `cleared` alert is only a line. A forked child
//! starts armed, with its own count.
//!
//! # Where the check runs
//!
//! The cuguard thread calls [`poll`] at least once a second (every time it wakes): live bytes are
//! summed from the per-thread counters there, not on the allocation path (which shares no counter
//! between threads), so an alert comes up to a second after the crossing, and a spike that rises
//! and falls between two polls is not warned about (the report's `peak_live_bytes` still shows
//! it). [`check`] is two relaxed loads and a compare against a threshold prepared per device. A
//! threshold of 0 means "not resolved yet" (the first check on each device takes the slow path
//! once, to learn the device's size); `u64::MAX` means off.

pub mod sink;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cuguard_format::alert::{Alert, AlertKind, AlertSite};

use crate::config::amount::Amount;
use crate::tracker::events::{Event, Kind};
use crate::tracker::{NONE, Tracker};

/// Devices with ordinals at or above this share the last slot (as in the tracker's stats).
const SLOTS: usize = 64;
const UNRESOLVED: u64 = 0;
const OFF: u64 = u64::MAX;
/// Top sites an alert names.
const TOP_SITES: usize = 3;

static THRESHOLD: [AtomicU64; SLOTS] = [const { AtomicU64::new(UNRESOLVED) }; SLOTS];
/// Whether the device's alert has fired and not cleared since.
static FIRED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
/// `warn_at` alerts fired in this process.
static TOTAL: AtomicU64 = AtomicU64::new(0);

fn slot(device: i32) -> usize {
    (device.max(0) as usize).min(SLOTS - 1)
}

/// The level live bytes must fall below for a fired alert to clear: 90% of `threshold`,
/// rounded up.
pub fn rearm_level(threshold: u64) -> u64 {
    threshold - threshold / 10
}

/// What a check does, given whether the device's alert has fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Nothing,
    Fire,
    Clear,
}

fn step(fired: bool, live_now: u64, threshold: u64) -> Step {
    if threshold == OFF {
        Step::Nothing
    } else if !fired && live_now >= threshold {
        Step::Fire
    } else if fired && live_now < rearm_level(threshold) {
        Step::Clear
    } else {
        Step::Nothing
    }
}

/// `warn_at` alerts fired so far in this process.
pub fn total() -> u64 {
    TOTAL.load(Ordering::Relaxed)
}

/// Checks `device`'s live bytes, `live_now`, against its threshold: two relaxed loads and a
/// compare.
#[inline(always)]
pub fn check(device: i32, live_now: u64) {
    let s = slot(device);
    let threshold = THRESHOLD[s].load(Ordering::Relaxed);
    if threshold == UNRESOLVED
        || step(FIRED[s].load(Ordering::Relaxed), live_now, threshold) != Step::Nothing
    {
        changed(device, live_now);
    }
}

/// The slow path: resolve the threshold, fire or clear.
#[cold]
#[inline(never)]
fn changed(device: i32, live_now: u64) {
    crate::guard::shield((), || {
        let s = &THRESHOLD[slot(device)];
        if s.load(Ordering::Acquire) == UNRESOLVED {
            let resolved = resolve(device);
            let _ = s.compare_exchange(UNRESOLVED, resolved, Ordering::AcqRel, Ordering::Acquire);
        }
        let threshold = s.load(Ordering::Acquire);
        let fired = &FIRED[slot(device)];
        let was = fired.load(Ordering::Acquire);
        let step = step(was, live_now, threshold);
        if step == Step::Nothing
            || fired
                .compare_exchange(was, !was, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return; // nothing to do, or another thread did it
        }
        let Some(t) = crate::tracker::if_any() else {
            return;
        };
        match step {
            Step::Fire => warn(t, device, live_now, threshold),
            Step::Clear => clear(t, device, live_now, threshold),
            Step::Nothing => {}
        }
    });
}

/// The threshold in bytes for `device`, or [`OFF`].
fn resolve(device: i32) -> u64 {
    let Some(amount) = crate::config::get().warn_at else {
        return OFF;
    };
    let bytes = match amount {
        Amount::Bytes(b) => b,
        Amount::Percent(_) => {
            let total = crate::tracker::if_any()
                .and_then(|t| {
                    t.contexts
                        .devices()
                        .into_iter()
                        .find(|d| d.ordinal == device)
                        .map(|d| d.total_bytes)
                })
                .unwrap_or(0);
            if total == 0 {
                crate::process::diag::log(|| {
                    format!(
                        "CUGUARD_WARN_AT: the size of device {device} is unknown; no warning for it"
                    )
                });
                return OFF;
            }
            amount.resolve(total)
        }
    };
    // 0 would read as "unresolved": the smallest real threshold is one byte.
    bytes.clamp(1, OFF - 1)
}

/// CUGUARD_WARN_AT as the lines say it: a percentage, or the threshold's size.
fn setting_text(threshold: u64) -> String {
    match crate::config::get().warn_at {
        Some(Amount::Percent(p)) => format!("{p}% of the device"),
        _ => crate::writer::human_bytes(threshold),
    }
}

/// CUGUARD_WARN_AT as given (for the JSON line's `setting`).
fn setting_raw() -> String {
    match crate::config::get().warn_at {
        Some(Amount::Percent(p)) => format!("{p}%"),
        Some(Amount::Bytes(b)) => b.to_string(),
        None => String::new(),
    }
}

fn warn(t: &Tracker, device: i32, live_now: u64, threshold: u64) {
    let n = TOTAL.fetch_add(1, Ordering::Relaxed) + 1;
    let sites = top_sites(t, device, TOP_SITES);
    let mut message = format!(
        "device {device}: live device memory {} crossed CUGUARD_WARN_AT ({})",
        crate::writer::human_bytes(live_now),
        setting_text(threshold)
    );
    if !sites.is_empty() {
        message.push_str("; top sites: ");
        let parts: Vec<String> = sites
            .iter()
            .map(|(site, bytes, n)| {
                format!(
                    "{site} ({} in {n} allocation{})",
                    crate::writer::human_bytes(*bytes),
                    if *n == 1 { "" } else { "s" }
                )
            })
            .collect();
        message.push_str(&parts.join(", "));
    }
    let named = named_top_sites(device, TOP_SITES);
    sink::send(&alert(
        AlertKind::WarnAt,
        device,
        live_now,
        threshold,
        n,
        named,
        &message,
    ));
    t.events.push(Event {
        kind: Kind::WarnThresholdCrossed,
        address: 0,
        api: None,
        seq: t.next_seq(),
        thread: crate::process::clock::thread_id(),
        stack: if super::reporter_thread::on_reporter_thread() {
            NONE
        } else {
            crate::tracker::capture_stack()
        },
        result: None,
        size: Some(live_now),
        context: NONE,
        time_ms: crate::process::clock::since_start_ms(),
        message: Some(message),
        device: Some(device),
    });
}

fn clear(_t: &Tracker, device: i32, live_now: u64, threshold: u64) {
    let message = format!(
        "device {device}: live device memory {} fell below 90% of CUGUARD_WARN_AT ({}); the warning fires again at the next crossing",
        crate::writer::human_bytes(live_now),
        setting_text(threshold)
    );
    sink::send(&alert(
        AlertKind::Cleared,
        device,
        live_now,
        threshold,
        total(),
        Vec::new(),
        &message,
    ));
}

/// The alert's machine-readable form.
fn alert(
    kind: AlertKind,
    device: i32,
    live_now: u64,
    threshold: u64,
    alerts_total: u64,
    top_sites: Vec<AlertSite>,
    message: &str,
) -> Alert {
    use crate::process::identity as process;
    let unix_ms = crate::process::clock::unix_ms();
    let device_uuid = crate::tracker::if_any().and_then(|t| {
        t.contexts
            .devices()
            .into_iter()
            .find(|d| d.ordinal == device)
            .and_then(|d| d.uuid)
    });
    Alert {
        source: "cuguard".into(),
        kind,
        time: cuguard_format::alert::rfc3339_utc(unix_ms),
        unix_ms,
        pid: process::pid(),
        exe: process::exe(),
        host: process::hostname(),
        rank: process::rank().and_then(|r| u32::try_from(r).ok()),
        device,
        device_uuid,
        live_bytes: live_now,
        threshold_bytes: threshold,
        rearm_bytes: rearm_level(threshold),
        setting: setting_raw(),
        alerts_total,
        top_sites,
        report: crate::writer::report_path().to_string_lossy().into_owned(),
        message: message.to_string(),
    }
}

/// The `n` sites holding the most live device bytes on `device`, named (see [`super::sites`]).
fn named_top_sites(device: i32, n: usize) -> Vec<AlertSite> {
    let mut live = super::sites::live(&[device]);
    live.truncate(n);
    let names = super::sites::names(&live.iter().map(|l| l.stack).collect::<Vec<_>>());
    live.into_iter()
        .zip(names)
        .map(|(l, name)| AlertSite {
            label: name.label,
            owner: name.owner,
            live_bytes: l.bytes,
            allocations: l.allocations,
        })
        .collect()
}

/// The `n` stacks holding the most live device bytes on `device`: (site, bytes, allocations).
/// A site is the first frame outside cuguard and the CUDA libraries, as `module+0xoffset`.
fn top_sites(t: &Tracker, device: i32, n: usize) -> Vec<(String, u64, usize)> {
    let mut by_stack: std::collections::HashMap<u32, (u64, usize)> = Default::default();
    for (_, r) in crate::serving::serve::live_allocations(t) {
        if r.device == device && r.memory.on_device() {
            let e = by_stack.entry(r.stack).or_default();
            e.0 += r.size;
            e.1 += 1;
        }
    }
    let mut top: Vec<(u32, u64, usize)> =
        by_stack.into_iter().map(|(s, (b, c))| (s, b, c)).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(n);
    if top.is_empty() {
        return Vec::new();
    }
    let stacks = crate::stack::stacks();
    let modules = crate::stack::modules();
    top.into_iter()
        .map(|(id, bytes, count)| {
            let site = stacks
                .iter()
                .find(|(sid, _)| *sid == id)
                .and_then(|(_, ips)| {
                    ips.iter().find_map(|ip| {
                        let (m, off) = crate::stack::locate(*ip, &modules)?;
                        let name = modules[m].path.rsplit('/').next().unwrap_or("");
                        let plumbing = name.starts_with("libcuguard")
                            || name.starts_with("libcuda")
                            || name.starts_with("libcudart");
                        (!plumbing).then(|| format!("{name}+0x{off:x}"))
                    })
                })
                .unwrap_or_else(|| "(no stack)".to_string());
            (site, bytes, count)
        })
        .collect()
}

/// Checks every device's live bytes against the threshold; the cuguard thread calls this at least
/// once a second.
pub fn poll(t: &Tracker) {
    for d in t.stats.snapshot() {
        check(d.device, d.live_bytes);
    }
}

/// In a forked child: thresholds start over, armed, and the count from zero (the parent's
/// alerts went with its tracker).
pub fn after_fork_child() {
    for s in &THRESHOLD {
        s.store(UNRESOLVED, Ordering::Relaxed);
    }
    for f in &FIRED {
        f.store(false, Ordering::Relaxed);
    }
    TOTAL.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_once_above_and_again_only_after_falling_below_90_percent() {
        let t = 1000;
        assert_eq!(rearm_level(t), 900);
        assert_eq!(rearm_level(3), 3, "90% of 3 bytes, rounded up");
        // Armed.
        assert_eq!(step(false, 999, t), Step::Nothing);
        assert_eq!(step(false, 1000, t), Step::Fire);
        // Fired: between the re-arm level and the threshold nothing happens, above neither.
        for live in [900, 950, 1000, 5000] {
            assert_eq!(step(true, live, t), Step::Nothing, "{live}");
        }
        assert_eq!(step(true, 899, t), Step::Clear);
        assert_eq!(step(false, 899, t), Step::Nothing);
        // Off.
        assert_eq!(step(false, u64::MAX, OFF), Step::Nothing);
        assert_eq!(step(true, 0, OFF), Step::Nothing);
    }
}
