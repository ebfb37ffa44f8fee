//! Device memory over time, for the report's `timeline` (what `cuguard view` draws): per device,
//! live bytes (the program's) and reserved bytes (the pool's), sampled by the shim's reporter
//! thread every `CUGUARD_TIMELINE_MS` (default 100 ms; 0 turns sampling off).
//!
//! Bounded: at most [`MAX_SAMPLES`] samples are kept. When the buffer is full, every other
//! sample is dropped and the interval doubles, so a run of any length keeps an even picture of
//! its whole life in a fixed amount of memory. Nothing here runs on the allocation path.

use std::sync::Mutex;

use cuguard_report::wire::device_ordinal;

/// The most samples kept (all devices together).
pub const MAX_SAMPLES: usize = 4096;

#[derive(Clone, Copy)]
struct Sample {
    time_ms: u64,
    device: i32,
    live_bytes: u64,
    reserved_bytes: u64,
}

struct Timeline {
    interval_ms: u64,
    next_ms: u64,
    samples: Vec<Sample>,
}

static TIMELINE: Mutex<Option<Timeline>> = Mutex::new(None);

/// The configured interval, or `None` when sampling is off.
pub fn interval_ms() -> Option<u64> {
    let ms = crate::config::get().timeline_ms;
    (ms > 0).then_some(ms)
}

/// Takes a sample if one is due (called by the reporter thread after each wake-up), and returns
/// how long until the next one is due.
pub fn tick() -> Option<u64> {
    let base = interval_ms()?;
    let now = crate::process::clock::since_start_ms();
    // Never wait: after a fork the lock may be held by a thread that no longer exists.
    let mut g = TIMELINE.try_lock().ok()?;
    let tl = g.get_or_insert_with(|| Timeline {
        interval_ms: base,
        next_ms: 0,
        samples: Vec::new(),
    });
    if now >= tl.next_ms {
        take(tl, now);
        tl.next_ms = now + tl.interval_ms;
    }
    Some(tl.next_ms.saturating_sub(now))
}

fn take(tl: &mut Timeline, now: u64) {
    let Some(t) = crate::tracker::if_any() else {
        return;
    };
    for d in t.stats.snapshot() {
        let reserved =
            crate::pool::registry::stats_for_device(d.device).map_or(0, |p| p.reserved_bytes);
        tl.samples.push(Sample {
            time_ms: now,
            device: d.device,
            live_bytes: d.live_bytes,
            reserved_bytes: reserved,
        });
    }
    if tl.samples.len() >= MAX_SAMPLES {
        // Keep every other sample time (all devices of a kept time together).
        let mut times: Vec<u64> = tl.samples.iter().map(|s| s.time_ms).collect();
        times.dedup();
        let keep: std::collections::HashSet<u64> = times.iter().step_by(2).copied().collect();
        tl.samples.retain(|s| keep.contains(&s.time_ms));
        tl.interval_ms *= 2;
    }
}

/// The report's `timeline`, with one last sample taken now; `None` when sampling is off (or its
/// lock is held, as after a fork mid-sample).
pub fn report() -> Option<cuguard_report::Timeline> {
    let base = interval_ms()?;
    let mut g = TIMELINE.try_lock().ok()?;
    let tl = g.get_or_insert_with(|| Timeline {
        interval_ms: base,
        next_ms: 0,
        samples: Vec::new(),
    });
    take(tl, crate::process::clock::since_start_ms());
    Some(cuguard_report::Timeline {
        interval_ms: tl.interval_ms,
        samples: tl
            .samples
            .iter()
            .map(|s| cuguard_report::Sample {
                time_ms: s.time_ms,
                device: device_ordinal(s.device),
                live_bytes: s.live_bytes,
                reserved_bytes: s.reserved_bytes,
            })
            .collect(),
    })
}

/// In the child of a fork: the parent's samples are not the child's. (If the parent's reporter
/// thread held the lock at the fork, the child's timeline stays empty: every use only tries it.)
pub fn reset_after_fork() {
    if let Ok(mut g) = TIMELINE.try_lock() {
        *g = None;
    }
}
