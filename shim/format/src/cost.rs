//! The report format's `cost` ([`Cost`]): what cuguard itself cost the program (time on the allocation
//! path, report writing, its own heap), and how figures of several reports add up.

use serde::{Deserialize, Serialize};

/// `cost`: what cuguard cost the process. Times on the allocation path are estimates from
/// samples: each thread's first `first_timed` calls were all timed, then one call in
/// `sample_every`; a thread's estimate is the time of its first calls plus the mean of its
/// later timed calls times the number of its later calls (with sampling, a later call over 1 ms,
/// most likely descheduled, is left out of the mean and counted in `dropped`). Call counts are
/// exact.
///
/// The bill adds up: `stacks` and `python` are parts of `hooks`, timed in the same calls and
/// scaled by the same factor, so neither they nor their sum is ever more than `hooks`, in all
/// and in each thread's first calls (`first_ns`). Stacks captured outside an allocation are in
/// `captures`, and work done once (the module tables read for unwinding, a thread's set-up, the
/// Python interpreter's lookup, arming the process at its first allocation) in `one_time`, timed whole and taken out of every other figure:
/// the steady cost of an allocation is `(hooks.ns − hooks.first_ns) / (hooks.calls −
/// hooks.first_calls)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// After each thread's first `first_timed` calls, one call in this many was timed
    /// (`CUGUARD_COST_SAMPLE`); 1 when every call was. In a sum of reports, the largest.
    pub sample_every: u64,
    /// Calls of each thread timed in full (they carry its one-time costs).
    pub first_timed: u64,
    /// The hooks' work on each tracked allocation: its record (context, thread, order, time,
    /// call stack) and its accounting once served. The driver's or the pool's serving is not
    /// in it. `calls`: tracked allocation calls, failed ones included.
    pub hooks: CostTiming,
    /// Native call-stack capture inside the hooks' work: unwinding, hashing, the stack table (a
    /// part of `hooks`). `calls`: captures (a refused allocation captures twice). In reports of
    /// cuguard before the bill added up, also the captures outside an allocation.
    pub stacks: CostTiming,
    /// Reading Python frames inside the hooks' work (a part of `hooks`). `calls`: captures that
    /// read at least one.
    pub python: CostTiming,
    /// Stacks captured outside an allocation (a context's, an event's), Python frames
    /// included: not a part of `hooks`. Absent in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captures: Option<CostTiming>,
    /// A framework cache's blocks its hook recorded (PyTorch's tensors, each made and freed):
    /// the record and its stack, whole; not a part of `hooks`, and their stacks not in
    /// `captures`. `calls`: blocks made and freed. Absent where none was recorded, and in older
    /// reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_blocks: Option<CostTiming>,
    /// Work done once, every occurrence timed whole and taken out of the other figures: the
    /// module tables read for unwinding (at the first capture, and again when libraries are
    /// loaded), each return address's unwind rule evaluated (once per address), each thread's
    /// unwinder set-up, the Python interpreter's lookup, arming the
    /// process (exit handlers, the cuguard thread, the emergency report). `calls`: how many
    /// times. Absent in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_time: Option<CostTiming>,
    /// How the native captures unwound (exact counts): frames stepped, and where each frame's
    /// rule came from. Absent in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unwind: Option<CostUnwind>,
    /// The chunks the pool took from the driver and the driver's time for them: the pool's
    /// own driver calls, not in `hooks` (a program without the pool makes its own instead).
    /// Absent in older reports, and 0s when the pool is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_growth: Option<CostGrowth>,
    /// Report writing, every report timed: the earlier reports of the process, and this one
    /// up to the moment its `cost` was taken (its serialization and file not included).
    pub reports: CostReports,
    /// Bytes the shim's own code held on the heap when the report was gathered: the tracker's
    /// tables, the stack table, the unwinder's rule caches, the Python code table, the pool's
    /// host-side bookkeeping. Not counted: the program's own allocations, thread stacks, the
    /// stats page, device memory.
    pub heap_bytes: u64,
}

/// `cost.hooks`, `cost.stacks`, `cost.python`: one timed span of the allocation path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostTiming {
    /// How many calls (exact).
    pub calls: u64,
    /// How many of them were timed.
    pub timed: u64,
    /// Of the timed ones, how many were left out of the mean: with sampling, a call that took
    /// over 1 ms (the thread was most likely descheduled).
    pub dropped: u64,
    /// Estimated nanoseconds over all calls.
    pub ns: u64,
    /// Of the calls, each thread's first `first_timed` (for a part: those inside its whole's
    /// first calls), which carry the warm-up; 0 in older reports.
    #[serde(default)]
    pub first_calls: u64,
    /// Their nanoseconds (measured, part of `ns`).
    #[serde(default)]
    pub first_ns: u64,
}

/// `cost.unwind`: how the native captures unwound, counted exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostUnwind {
    /// Frames stepped, the shim's own innermost ones included.
    pub frames: u64,
    /// Of them, those whose rule was the thread's last capture's at the same position.
    pub by_position: u64,
    /// Those whose rule was in the thread's rule cache.
    pub cached: u64,
    /// Those whose rule was in the process-wide table (evaluated by another thread, or evicted
    /// from this one's cache). 0 in reports before it.
    #[serde(default)]
    pub shared: u64,
    /// Those whose rule was evaluated from the module's DWARF CFI, once per address (the rest:
    /// frames outside every module, guessed with frame pointers).
    pub evaluated: u64,
    /// Nanoseconds those evaluations took (each timed; work done once, in `one_time`).
    pub evaluated_ns: u64,
}

/// `cost.pool_growth`: the chunks the pool took from the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostGrowth {
    /// Chunks (`cuMemAlloc` calls that succeeded).
    pub chunks: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Nanoseconds the driver took for them.
    pub ns: u64,
}

impl CostUnwind {
    fn add(&mut self, o: &CostUnwind) {
        self.frames = self.frames.saturating_add(o.frames);
        self.by_position = self.by_position.saturating_add(o.by_position);
        self.cached = self.cached.saturating_add(o.cached);
        self.shared = self.shared.saturating_add(o.shared);
        self.evaluated = self.evaluated.saturating_add(o.evaluated);
        self.evaluated_ns = self.evaluated_ns.saturating_add(o.evaluated_ns);
    }
}

impl CostGrowth {
    fn add(&mut self, o: &CostGrowth) {
        self.chunks = self.chunks.saturating_add(o.chunks);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.ns = self.ns.saturating_add(o.ns);
    }
}

/// `cost.reports`: report writing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostReports {
    /// Reports timed (this one included).
    pub written: u64,
    /// Nanoseconds they took.
    pub ns: u64,
}

impl CostTiming {
    /// Nanoseconds per call; `None` without calls.
    pub fn per_call_ns(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.ns as f64 / self.calls as f64)
    }

    /// Nanoseconds of the calls after each thread's first ones (the steady state).
    pub fn later_ns(&self) -> u64 {
        self.ns.saturating_sub(self.first_ns)
    }

    /// Calls after each thread's first ones.
    pub fn later_calls(&self) -> u64 {
        self.calls.saturating_sub(self.first_calls)
    }

    fn add(&mut self, other: &CostTiming) {
        self.calls = self.calls.saturating_add(other.calls);
        self.timed = self.timed.saturating_add(other.timed);
        self.dropped = self.dropped.saturating_add(other.dropped);
        self.ns = self.ns.saturating_add(other.ns);
        self.first_calls = self.first_calls.saturating_add(other.first_calls);
        self.first_ns = self.first_ns.saturating_add(other.first_ns);
    }
}

fn add_optional(mine: &mut Option<CostTiming>, other: Option<&CostTiming>) {
    if let Some(o) = other {
        mine.get_or_insert_with(CostTiming::default).add(o);
    }
}

impl Cost {
    /// Adds another report's cost to this one (the bill of several processes: every count,
    /// time and byte summed; `sample_every` and `first_timed` the largest).
    pub fn add(&mut self, other: &Cost) {
        self.sample_every = self.sample_every.max(other.sample_every);
        self.first_timed = self.first_timed.max(other.first_timed);
        self.hooks.add(&other.hooks);
        self.stacks.add(&other.stacks);
        self.python.add(&other.python);
        add_optional(&mut self.captures, other.captures.as_ref());
        add_optional(&mut self.cache_blocks, other.cache_blocks.as_ref());
        add_optional(&mut self.one_time, other.one_time.as_ref());
        if let Some(o) = &other.unwind {
            self.unwind.get_or_insert_with(CostUnwind::default).add(o);
        }
        if let Some(o) = &other.pool_growth {
            self.pool_growth
                .get_or_insert_with(CostGrowth::default)
                .add(o);
        }
        self.reports.written = self.reports.written.saturating_add(other.reports.written);
        self.reports.ns = self.reports.ns.saturating_add(other.reports.ns);
        self.heap_bytes = self.heap_bytes.saturating_add(other.heap_bytes);
    }

    /// The sum of several costs; `None` when there are none.
    pub fn sum<'a>(costs: impl IntoIterator<Item = &'a Cost>) -> Option<Cost> {
        let mut it = costs.into_iter();
        let mut total = it.next()?.clone();
        for c in it {
            total.add(c);
        }
        Some(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_add_up() {
        let a = Cost {
            sample_every: 32,
            first_timed: 8,
            hooks: CostTiming {
                calls: 10,
                timed: 9,
                dropped: 0,
                ns: 1000,
                first_calls: 8,
                first_ns: 900,
            },
            stacks: CostTiming {
                calls: 10,
                timed: 9,
                dropped: 0,
                ns: 600,
                first_calls: 8,
                first_ns: 500,
            },
            python: CostTiming::default(),
            captures: None,
            cache_blocks: None,
            one_time: Some(CostTiming {
                calls: 1,
                timed: 1,
                ns: 3000,
                ..CostTiming::default()
            }),
            unwind: Some(CostUnwind {
                frames: 40,
                by_position: 30,
                cached: 6,
                shared: 1,
                evaluated: 2,
                evaluated_ns: 1200,
            }),
            pool_growth: None,
            reports: CostReports {
                written: 1,
                ns: 5_000_000,
            },
            heap_bytes: 1 << 20,
        };
        let mut b = a.clone();
        b.sample_every = 1;
        b.python = CostTiming {
            calls: 4,
            timed: 4,
            dropped: 0,
            ns: 80,
            ..CostTiming::default()
        };
        b.pool_growth = Some(CostGrowth {
            chunks: 2,
            bytes: 40 << 20,
            ns: 900_000,
        });
        b.captures = Some(CostTiming {
            calls: 2,
            ns: 50,
            ..CostTiming::default()
        });
        let s = Cost::sum([&a, &b]).unwrap();
        assert_eq!(s.sample_every, 32);
        assert_eq!(
            s.hooks,
            CostTiming {
                calls: 20,
                timed: 18,
                dropped: 0,
                ns: 2000,
                first_calls: 16,
                first_ns: 1800,
            }
        );
        assert_eq!(s.hooks.later_ns(), 200);
        assert_eq!(s.hooks.later_calls(), 4);
        assert_eq!(s.captures.map(|c| c.calls), Some(2));
        assert_eq!(s.one_time.map(|c| c.ns), Some(6000));
        assert_eq!(s.python.calls, 4);
        assert_eq!(
            s.unwind.map(|u| (u.frames, u.evaluated_ns)),
            Some((80, 2400))
        );
        assert_eq!(s.pool_growth.map(|g| g.chunks), Some(2));
        assert_eq!(
            s.reports,
            CostReports {
                written: 2,
                ns: 10_000_000
            }
        );
        assert_eq!(s.heap_bytes, 2 << 20);
        assert_eq!(s.hooks.per_call_ns(), Some(100.0));
        assert_eq!(CostTiming::default().per_call_ns(), None);
        assert_eq!(Cost::sum([]), None);
    }
}
