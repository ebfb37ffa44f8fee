//! What the page says: a [`cuguard_page::Page`] filled from what the shim holds now, and the
//! history it keeps between publishes.
//!
//! Everything here is read from counters and short copies (the tracker's per-device and
//! per-stack counters, the pool's figures, the context table), never by walking the live
//! allocations, so a publish costs the same with ten allocations or ten million.

use std::collections::{BTreeMap, HashMap, VecDeque};

use cuguard_page::{
    ContextPage, DevicePage, HISTORY, MAX_SITES, MAX_TAGS, Page, SitePage, TagPage,
};

use crate::process::identity as process;
use crate::tracker::Tracker;

/// Live bytes by (stack, device), as a stack sample saw them.
type StackBytes = HashMap<(u32, i32), u64>;

/// Milliseconds between two samples of a device's live bytes (the page's history).
pub const HISTORY_INTERVAL_MS: u64 = 1000;

/// One device's samples: (time since the start in ms, live bytes), oldest first, at most
/// [`HISTORY`].
#[derive(Default)]
struct History(VecDeque<(u64, u64)>);

impl History {
    fn push(&mut self, time_ms: u64, live: u64) {
        if self.0.len() == HISTORY {
            self.0.pop_front();
        }
        self.0.push_back((time_ms, live));
    }

    /// The last sample less the first.
    fn growth(&self) -> i64 {
        match (self.0.front(), self.0.back()) {
            (Some(&(_, first)), Some(&(_, last))) => clamp(i128::from(last) - i128::from(first)),
            _ => 0,
        }
    }

    fn since_ms(&self) -> Option<u64> {
        self.0.front().map(|&(t, _)| t)
    }
}

fn clamp(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Fills pages: what stays the same, once, and the history.
pub struct Filler {
    /// The fields fixed for the process's life (pid, uid, start, exe, host, report, rank).
    fixed: Page,
    history: BTreeMap<i32, History>,
    next_sample_ms: u64,
}

impl Filler {
    /// A filler for this process, which started at `start_unix_ms`.
    pub fn new(start_unix_ms: u64) -> Filler {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        Filler {
            fixed: Page {
                pid: process::pid(),
                uid,
                start_unix_ms,
                rank: process::rank().and_then(|r| u32::try_from(r).ok()),
                exe: process::exe(),
                worker: None,
                host: process::hostname(),
                report: crate::writer::report_path().to_string_lossy().into_owned(),
                ..Page::default()
            },
            history: BTreeMap::new(),
            next_sample_ms: 0,
        }
    }

    /// The page now (`now_ms`: milliseconds since the start), taking a history sample if one is
    /// due.
    pub fn page(&mut self, t: &Tracker, now_ms: u64) -> Page {
        let counts = t.stats.snapshot();
        let infos = t.contexts.devices();
        let mut ordinals: Vec<i32> = counts
            .iter()
            .map(|c| c.device)
            .chain(infos.iter().map(|d| d.ordinal))
            .filter(|d| *d >= 0)
            .collect();
        ordinals.sort_unstable();
        ordinals.dedup();

        let sample = now_ms >= self.next_sample_ms;
        if sample {
            self.next_sample_ms = now_ms + HISTORY_INTERVAL_MS;
        }
        let mut devices = Vec::with_capacity(ordinals.len());
        for &d in &ordinals {
            let c = counts.iter().find(|c| c.device == d);
            let info = infos.iter().find(|i| i.ordinal == d);
            let live = c.map_or(0, |c| c.live_bytes);
            let history = self.history.entry(d).or_default();
            if sample {
                history.push(now_ms, live);
            }
            devices.push(DevicePage {
                ordinal: d as u32,
                total_bytes: info.map_or(0, |i| i.total_bytes),
                live_bytes: live,
                peak_bytes: c.map_or(0, |c| c.peak_live_bytes),
                reserved_bytes: crate::serving::registry::stats_for_device(d)
                    .map_or(0, |p| p.reserved_bytes),
                growth_bytes: history.growth(),
                history_interval_ms: HISTORY_INTERVAL_MS as u32,
                history: history.0.iter().map(|&(_, v)| v).collect(),
                uuid: info.and_then(|i| i.uuid.clone()),
                name: info.map_or_else(String::new, |i| i.name.clone()),
            });
        }

        let live = crate::lifecycle::sites::live(&ordinals);
        let live_allocations = live.iter().map(|l| l.allocations).sum();
        let top = &live[..live.len().min(MAX_SITES)];
        let names =
            crate::lifecycle::sites::names(&top.iter().map(|l| l.stack).collect::<Vec<_>>());
        // Each site's growth over its device's history window, from the stack samples.
        let mut since: HashMap<i32, Option<StackBytes>> = HashMap::new();
        let sites = top
            .iter()
            .zip(names)
            .map(|(l, name)| {
                let at_start = since.entry(l.device).or_insert_with(|| {
                    self.history
                        .get(&l.device)
                        .and_then(History::since_ms)
                        .and_then(crate::writer::timeline::stack_bytes_since)
                });
                let growth = at_start
                    .as_ref()
                    .and_then(|m| m.get(&(l.stack, l.device)))
                    .map_or(0, |&then| clamp(i128::from(l.bytes) - i128::from(then)));
                SitePage {
                    device: l.device as u32,
                    live_bytes: l.bytes,
                    allocations: l.allocations,
                    growth_bytes: growth,
                    owner: name.owner,
                    label: name.label,
                }
            })
            .collect();

        let all_contexts = t.contexts.snapshot();
        let live_contexts: Vec<ContextPage> = all_contexts
            .iter()
            .filter(|c| !c.destroyed)
            .map(|c| ContextPage {
                id: c.id,
                device: c.device as u32,
                primary: c.primary,
                created_ms: c.created_ms,
                live_bytes: 0,
            })
            .collect();

        Page {
            updated_unix_ms: crate::process::clock::unix_ms(),
            snapshot_signal: crate::lifecycle::reporter_thread::snapshot_signal(),
            oom_total: t.ooms.seen(),
            alerts_total: crate::lifecycle::alerts::total(),
            live_allocations,
            contexts_live: live_contexts.len() as u32,
            devices,
            sites,
            contexts: live_contexts,
            tags: tags(),
            ..self.fixed.clone()
        }
    }
}

/// The top tags by live device memory ([`crate::tracker::tags::live`]), named.
fn tags() -> Vec<TagPage> {
    crate::tracker::tags::live()
        .into_iter()
        .take(MAX_TAGS)
        .map(|(id, live_bytes, allocations)| TagPage {
            name: crate::recorder::names::text(id).unwrap_or_else(|| "?".into()),
            live_bytes,
            allocations,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keeps_the_last_samples_and_growth_is_last_less_first() {
        let mut h = History::default();
        assert_eq!(h.growth(), 0);
        assert_eq!(h.since_ms(), None);
        for i in 0..100u64 {
            h.push(i * 1000, 10 * i);
        }
        assert_eq!(h.0.len(), HISTORY);
        assert_eq!(h.since_ms(), Some(40_000));
        assert_eq!(h.growth(), 990 - 400);
        h.push(100_000, 0);
        assert_eq!(h.growth(), -410);
        assert_eq!(clamp(i128::from(u64::MAX)), i64::MAX);
    }
}
