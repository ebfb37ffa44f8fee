//! The writer's `timeline` of the report: device memory over time (what `cuguard view` draws): per device,
//! live bytes (the program's) and reserved bytes (the pool's), sampled by the shim's reporter
//! thread every `CUGUARD_TIMELINE_MS` (default 100 ms; 0 turns sampling off).
//!
//! Bounded: at most [`MAX_SAMPLES`] samples are kept. When the buffer is full, every other
//! sample is dropped and the interval doubles, so a run of any length keeps an even picture of
//! its whole life in a fixed amount of memory. Nothing here runs on the allocation path.
//!
//! At the same ticks, live device bytes per stack ([`crate::tracker::by_stack`]) are sampled
//! for the report's `stack_samples` (what grew): at most [`StackSamples::MAX_TIMES`] times, with
//! the same halving, for at most [`MAX_TRACKED`] (stack, device) pairs at once (a new one takes
//! the place of the one whose largest sample is smallest, when it is larger); the report keeps
//! the [`StackSamples::MAX_SERIES`] largest. The stats page measures each site's growth from
//! them ([`stack_bytes_since`]). A framework cache's live blocks (PyTorch's tensors, where the
//! hook records them: [`crate::tracker::cache_blocks`]) are sampled beside, as series of their
//! own (`cache_blocks`), by the stacks that made them.

use std::collections::HashMap;
use std::sync::Mutex;

use cuguard_format::StackSamples;
use cuguard_format::wire::device_ordinal;

/// The most (stack, device) series followed at once.
pub const MAX_TRACKED: usize = 512;

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
    stacks: ByStack,
}

/// A series' key: stack, device, and whether it is a cache's blocks (else the driver's
/// allocations).
type Key = (u32, i32, bool);

/// Live bytes per (stack, device) over time.
struct ByStack {
    interval_ms: u64,
    next_ms: u64,
    times: Vec<u64>,
    /// Each as long as `times`.
    series: HashMap<Key, Vec<u64>>,
}

impl ByStack {
    fn new(interval_ms: u64) -> ByStack {
        ByStack {
            interval_ms,
            next_ms: 0,
            times: Vec::new(),
            series: HashMap::new(),
        }
    }

    /// Samples every device's live bytes by stack, at `now`.
    fn take(&mut self, devices: &[i32], now: u64) {
        let n = self.times.len();
        self.times.push(now);
        for s in self.series.values_mut() {
            s.push(0);
        }
        for &device in devices {
            for (stack, bytes, _) in crate::tracker::by_stack::snapshot(device) {
                self.set((stack, device, false), n, bytes);
            }
        }
        for ((stack, device), bytes) in crate::tracker::cache_blocks::live_by_stack() {
            if bytes > 0 {
                self.set((stack, device, true), n, bytes);
            }
        }
        if self.times.len() >= StackSamples::MAX_TIMES {
            let halve = |v: &mut Vec<u64>| {
                let kept: Vec<u64> = v.iter().step_by(2).copied().collect();
                *v = kept;
            };
            halve(&mut self.times);
            for s in self.series.values_mut() {
                halve(s);
            }
            self.interval_ms *= 2;
        }
    }

    /// Sets series `key`'s sample `n` (the latest) to `bytes`, following a new series when
    /// there is room or it is larger than the smallest followed (which it replaces).
    fn set(&mut self, key: Key, n: usize, bytes: u64) {
        if let Some(s) = self.series.get_mut(&key) {
            s[n] = bytes;
            return;
        }
        if self.series.len() >= MAX_TRACKED {
            let smallest = self
                .series
                .iter()
                .map(|(k, v)| (*k, v.iter().copied().max().unwrap_or(0)))
                .min_by_key(|(_, m)| *m);
            match smallest {
                Some((k, m)) if m < bytes => {
                    self.series.remove(&k);
                }
                _ => return,
            }
        }
        let mut s = vec![0; n + 1];
        s[n] = bytes;
        self.series.insert(key, s);
    }

    fn report(&self) -> Option<StackSamples> {
        if self.times.is_empty() {
            return None;
        }
        let mut series: Vec<(&Key, &Vec<u64>, u64)> = self
            .series
            .iter()
            .map(|(k, v)| (k, v, v.iter().copied().max().unwrap_or(0)))
            .filter(|(_, _, m)| *m > 0)
            .collect();
        series.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)));
        series.truncate(StackSamples::MAX_SERIES);
        Some(StackSamples {
            interval_ms: self.interval_ms,
            times_ms: self.times.clone(),
            series: series
                .into_iter()
                .map(
                    |(&(stack, device, cache), bytes, _)| cuguard_format::StackSeries {
                        stack: (stack != crate::tracker::NONE).then_some(u64::from(stack)),
                        device: device_ordinal(device),
                        bytes: bytes.clone(),
                        cache_blocks: cache,
                    },
                )
                .collect(),
        })
    }
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
    let tl = g.get_or_insert_with(|| new_timeline(base));
    if now >= tl.next_ms {
        take(tl, now);
        tl.next_ms = next_tick(tl.next_ms, now, tl.interval_ms);
    }
    if now >= tl.stacks.next_ms {
        take_stacks(tl, now);
        tl.stacks.next_ms = next_tick(tl.stacks.next_ms, now, tl.stacks.interval_ms);
    }
    Some(tl.next_ms.min(tl.stacks.next_ms).saturating_sub(now))
}

/// The first tick after `now` on the grid of `interval` that `due` (the tick just taken, 0 for
/// the first) is on: samples stay on one grid when the thread is late (a report being written,
/// a page being filled), rather than drifting by each delay; ticks missed meanwhile are skipped.
fn next_tick(due: u64, now: u64, interval: u64) -> u64 {
    let interval = interval.max(1);
    if due == 0 || due > now {
        return now + interval;
    }
    due + ((now - due) / interval + 1) * interval
}

fn new_timeline(base: u64) -> Timeline {
    Timeline {
        interval_ms: base,
        next_ms: 0,
        samples: Vec::new(),
        stacks: ByStack::new(base),
    }
}

fn take_stacks(tl: &mut Timeline, now: u64) {
    let Some(t) = crate::tracker::if_any() else {
        return;
    };
    let devices: Vec<i32> = t.stats.snapshot().iter().map(|d| d.device).collect();
    tl.stacks.take(&devices, now);
}

fn take(tl: &mut Timeline, now: u64) {
    let Some(t) = crate::tracker::if_any() else {
        return;
    };
    for d in t.stats.snapshot() {
        let reserved =
            crate::serving::registry::stats_for_device(d.device).map_or(0, |p| p.reserved_bytes);
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

/// The report's `timeline` and `stack_samples`, with one last sample of each taken now (the
/// report takes them when it starts, at its end time); `None` when sampling is off (or its lock
/// is held, as after a fork mid-sample).
pub fn report() -> Option<(cuguard_format::Timeline, Option<StackSamples>)> {
    let base = interval_ms()?;
    let mut g = TIMELINE.try_lock().ok()?;
    let tl = g.get_or_insert_with(|| new_timeline(base));
    let now = crate::process::clock::since_start_ms();
    take(tl, now);
    take_stacks(tl, now);
    let stacks = tl.stacks.report();
    Some((
        cuguard_format::Timeline {
            interval_ms: tl.interval_ms,
            samples: tl
                .samples
                .iter()
                .map(|s| cuguard_format::Sample {
                    time_ms: s.time_ms,
                    device: device_ordinal(s.device),
                    live_bytes: s.live_bytes,
                    reserved_bytes: s.reserved_bytes,
                })
                .collect(),
        },
        stacks,
    ))
}

/// Live bytes of every (stack, device) of the driver's allocations the stack samples follow, as
/// the first stack sample taken
/// at or after `since_ms` (milliseconds since the start) saw them: what the stats page measures
/// each site's growth from. `None` when sampling is off, no sample is that recent yet, or the
/// lock is busy.
pub fn stack_bytes_since(since_ms: u64) -> Option<HashMap<(u32, i32), u64>> {
    interval_ms()?;
    let g = TIMELINE.try_lock().ok()?;
    let by_stack = &g.as_ref()?.stacks;
    let i = by_stack.times.iter().position(|&t| t >= since_ms)?;
    Some(
        by_stack
            .series
            .iter()
            .filter(|(k, _)| !k.2)
            .map(|(k, v)| ((k.0, k.1), v.get(i).copied().unwrap_or(0)))
            .collect(),
    )
}

/// In the child of a fork: the parent's samples are not the child's. (If the parent's reporter
/// thread held the lock at the fork, the child's timeline stays empty: every use only tries it.)
pub fn reset_after_fork() {
    if let Ok(mut g) = TIMELINE.try_lock() {
        *g = None;
    }
}

#[cfg(test)]
mod tests {
    use super::next_tick;

    #[test]
    fn ticks_stay_on_their_grid_when_late() {
        assert_eq!(
            next_tick(0, 42, 100),
            142,
            "the first sample starts the grid"
        );
        assert_eq!(next_tick(142, 142, 100), 242);
        assert_eq!(next_tick(142, 150, 100), 242, "a little late");
        assert_eq!(next_tick(142, 401, 100), 442, "two ticks missed: skipped");
        assert_eq!(next_tick(142, 442, 100), 542);
    }
}
