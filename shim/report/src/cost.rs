//! [`Cost`]: the report's `cost`, what cuguard itself cost the program (time on the allocation
//! path, report writing, its own heap), and how figures of several reports add up.

use serde::{Deserialize, Serialize};

/// `cost`: what cuguard cost the process. Times on the allocation path are estimates from
/// samples: each thread's first `first_timed` calls were all timed, then one call in
/// `sample_every`; a thread's estimate is the time of its first calls plus the mean of its
/// later timed calls times the number of its later calls (with sampling, a later call over 1 ms,
/// most likely descheduled, is left out of the mean and counted in `dropped`). Call counts are
/// exact.
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
    /// Native call-stack capture: unwinding, hashing, the stack table (part of `hooks`, and of
    /// events' stacks). `calls`: captures.
    pub stacks: CostTiming,
    /// Reading Python frames (part of `hooks`). `calls`: captures that read at least one.
    pub python: CostTiming,
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

    fn add(&mut self, other: &CostTiming) {
        self.calls = self.calls.saturating_add(other.calls);
        self.timed = self.timed.saturating_add(other.timed);
        self.dropped = self.dropped.saturating_add(other.dropped);
        self.ns = self.ns.saturating_add(other.ns);
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
            },
            stacks: CostTiming {
                calls: 10,
                timed: 9,
                dropped: 0,
                ns: 600,
            },
            python: CostTiming::default(),
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
        };
        let s = Cost::sum([&a, &b]).unwrap();
        assert_eq!(s.sample_every, 32);
        assert_eq!(
            s.hooks,
            CostTiming {
                calls: 20,
                timed: 18,
                dropped: 0,
                ns: 2000
            }
        );
        assert_eq!(s.python.calls, 4);
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
