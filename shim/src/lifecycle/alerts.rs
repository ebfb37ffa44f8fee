//! `CUGUARD_WARN_AT`: an early warning for long-running services, instead of an out-of-memory.
//!
//! When a device's live bytes first reach the threshold (bytes, or a percentage of that device's
//! memory), one line goes to stderr naming the top sites by live bytes on that device, and a
//! `warn_threshold_crossed` event goes into the tracker's events (and so the report's). Once per device per process (a forked
//! child starts over).
//!
//! The cuguard thread calls [`poll`] at least once a second: live bytes are summed from the
//! per-thread counters there, not on the allocation path (which shares no counter between
//! threads), so a spike that rises and falls between two polls is not warned about (the report's
//! `peak_live_bytes` still shows it). [`check`] is one relaxed load and a compare against a
//! threshold prepared per device. A threshold of 0 means "not resolved yet" (the first check on
//! each device takes the slow path once, to learn the device's size); `u64::MAX` means off or
//! already given.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::amount::Amount;
use crate::tracker::events::{Event, Kind};
use crate::tracker::{NONE, Tracker};

/// Devices with ordinals at or above this share the last slot (as in the tracker's stats).
const SLOTS: usize = 64;
const UNRESOLVED: u64 = 0;
const OFF: u64 = u64::MAX;

static THRESHOLD: [AtomicU64; SLOTS] = [const { AtomicU64::new(UNRESOLVED) }; SLOTS];

fn slot(device: i32) -> usize {
    (device.max(0) as usize).min(SLOTS - 1)
}

/// Checks `device`'s live bytes, `live_now`, against its threshold: one relaxed load and a
/// compare.
#[inline(always)]
pub fn check(device: i32, live_now: u64) {
    if live_now >= THRESHOLD[slot(device)].load(Ordering::Relaxed) {
        crossed(device, live_now);
    }
}

/// The slow path: resolve the threshold, or give the warning once.
#[cold]
#[inline(never)]
fn crossed(device: i32, live_now: u64) {
    crate::guard::shield((), || {
        let s = &THRESHOLD[slot(device)];
        let current = s.load(Ordering::Acquire);
        if current == UNRESOLVED {
            let resolved = resolve(device);
            let _ = s.compare_exchange(UNRESOLVED, resolved, Ordering::AcqRel, Ordering::Acquire);
            if live_now < s.load(Ordering::Acquire) {
                return;
            }
        }
        let threshold = s.load(Ordering::Acquire);
        if threshold == OFF || live_now < threshold {
            return;
        }
        if s.compare_exchange(threshold, OFF, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return; // another thread gives the warning
        }
        if let Some(t) = crate::tracker::if_any() {
            warn(t, device, live_now, threshold);
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

fn warn(t: &Tracker, device: i32, live_now: u64, threshold: u64) {
    let sites = top_sites(t, device, 3);
    let setting = match crate::config::get().warn_at {
        Some(Amount::Percent(p)) => format!("{p}% of the device"),
        _ => crate::report::human_bytes(threshold),
    };
    let mut message = format!(
        "device {device}: live device memory {} crossed CUGUARD_WARN_AT ({setting})",
        crate::report::human_bytes(live_now)
    );
    if !sites.is_empty() {
        message.push_str("; top sites: ");
        let parts: Vec<String> = sites
            .iter()
            .map(|(site, bytes, n)| {
                format!(
                    "{site} ({} in {n} allocation{})",
                    crate::report::human_bytes(*bytes),
                    if *n == 1 { "" } else { "s" }
                )
            })
            .collect();
        message.push_str(&parts.join(", "));
    }
    crate::process::diag::warn(&message);
    t.events.push(Event {
        kind: Kind::WarnThresholdCrossed,
        address: 0,
        api: None,
        seq: t.next_seq(),
        thread: crate::process::clock::thread_id(),
        stack: if super::reporter::on_reporter_thread() {
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

/// The `n` stacks holding the most live device bytes on `device`: (site, bytes, allocations).
/// A site is the first frame outside cuguard and the CUDA libraries, as `module+0xoffset`.
fn top_sites(t: &Tracker, device: i32, n: usize) -> Vec<(String, u64, usize)> {
    let mut by_stack: std::collections::HashMap<u32, (u64, usize)> = Default::default();
    for (_, r) in crate::pool::serve::live_allocations(t) {
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

/// In a forked child: thresholds start over (the parent's alerts went with its tracker).
pub fn after_fork_child() {
    for s in &THRESHOLD {
        s.store(UNRESOLVED, Ordering::Relaxed);
    }
}
