//! Allocations refused for lack of memory, and what held the memory at that moment (this
//! process's holders, and other processes where NVML says): the report's `ooms`.
//!
//! The first [`MAX_OOMS`] refusals are recorded in full (what was live by stack, the device's
//! free and total memory, the pool); later ones are only counted, so a storm of refusals costs
//! a counter each and the report stays small. The hooks gather what goes into a record
//! ([`crate::hooks`]); this module keeps them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::process::global::lock;

/// The most refusals recorded in full.
pub const MAX_OOMS: usize = 16;
/// The most stacks a record lists (those holding the most).
pub const MAX_STACKS: usize = 64;

/// Who refused the allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusedBy {
    /// The driver (or the pool, because the driver gave it no more memory).
    Driver,
    /// The pool's `CUGUARD_POOL_LIMIT`.
    PoolLimit,
    /// The process's `CUGUARD_LIMIT` ([`super::limit`]).
    Limit,
    /// A framework's allocator (PyTorch's, CuPy's, JAX's), as the Python package tells it.
    Framework(&'static cuguard_format::frameworks::Framework),
}

impl RefusedBy {
    /// The report's word (`ooms[].refused_by`).
    pub fn as_str(self) -> &'static str {
        match self {
            RefusedBy::Driver => "driver",
            RefusedBy::PoolLimit => "pool_limit",
            RefusedBy::Limit => "limit",
            RefusedBy::Framework(f) => f.name,
        }
    }
}

/// The pool on the device when the allocation was refused.
#[derive(Clone, Copy, Debug)]
pub struct PoolState {
    pub reserved_bytes: u64,
    pub free_bytes: u64,
    pub largest_free_block: u64,
}

/// One refusal.
#[derive(Clone, Debug)]
pub struct Oom {
    pub seq: u64,
    pub time_ms: u64,
    pub thread: u32,
    /// The entry refused: a driver entry's name, or a framework allocator's.
    pub api: &'static str,
    pub size: u64,
    pub device: i32,
    /// Stack id or `NONE`.
    pub stack: u32,
    pub refused_by: RefusedBy,
    pub message: Option<String>,
    /// The device's (free, total) memory then, if it could be asked.
    pub device_memory: Option<(u64, u64)>,
    /// The program's live device bytes on the device then.
    pub live_bytes: u64,
    /// `(stack or NONE, bytes, allocations)`, most bytes first.
    pub stacks: Vec<(u32, u64, u64)>,
    pub pool: Option<PoolState>,
    /// The program's labels then ([`crate::process::labels`]).
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// The limit that refused it and what was held against it, for `Limit` and `PoolLimit`.
    pub limit: Option<cuguard_format::OomLimit>,
    /// What each holder kept idle on the device then.
    pub idle: Vec<cuguard_format::IdleHolder>,
    /// What would have made it fit ([`cuguard_format::verdict`]).
    pub verdict: cuguard_format::Verdict,
    /// For the driver's refusal of memory a framework's allocator asked for, the framework,
    /// which then refused the request itself (its own record explains it).
    pub within: Option<RefusedBy>,
    /// The other processes on the device (NVML's), most bytes first, and what they all held;
    /// or why NVML could not say ([`crate::driver::nvml::others`]). Listed by the cuguard
    /// thread just after the refusal where it runs (NVML's listing can take most of a
    /// millisecond: not the refused call's to pay), in the refused call where it does not.
    pub others: Result<(Vec<cuguard_format::OtherProcess>, u64), String>,
    /// Whether `others` is still to be listed ([`Ooms::fill_others`]); the verdict is worked
    /// out again then.
    pub others_pending: bool,
    /// What making the card took the shim (`ooms[].card_ns`).
    pub card_ns: u64,
    /// What reading a framework's figures took the Python package (`ooms[].framework_ns`).
    pub framework_ns: Option<u64>,
    /// Where `card_ns` went (`ooms[].card_parts`).
    pub card_parts: cuguard_format::CardParts,
}

/// Whether a framework's out-of-memory observer is registered in this process (the Python
/// package's, for PyTorch: `cuguard_framework_watch`): the driver's refusals may then be inside
/// that framework's allocator, whose own card explains them.
static FRAMEWORK_WATCHED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A framework's out-of-memory observer was registered.
pub fn watch_framework() {
    FRAMEWORK_WATCHED.store(true, Ordering::Release);
}

/// Whether one is ([`watch_framework`]).
pub fn framework_watched() -> bool {
    FRAMEWORK_WATCHED.load(Ordering::Acquire)
}

/// Whether a record's other processes are still to be listed ([`Ooms::fill_others`]).
static OTHERS_PENDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The records.
pub struct Ooms {
    list: Mutex<Vec<Oom>>,
    /// Refusals seen, recorded or not.
    seen: AtomicU64,
}

impl Ooms {
    pub(super) fn new() -> Ooms {
        Ooms {
            list: Mutex::new(Vec::new()),
            seen: AtomicU64::new(0),
        }
    }

    /// Counts a refusal; returns its number (1 for the first), which says whether it is to be
    /// recorded in full (see [`Ooms::wants`]).
    pub fn count(&self) -> u64 {
        self.seen.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Refusals seen so far, recorded or not.
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// Whether refusal number `n` is recorded in full.
    pub fn wants(n: u64) -> bool {
        n <= MAX_OOMS as u64
    }

    /// Keeps a record.
    pub fn push(&self, oom: Oom) {
        let mut list = lock(&self.list);
        if list.len() < MAX_OOMS {
            list.push(oom);
        }
    }

    /// Marks the driver's and the limits' refusals that `by`'s refusal of `size` bytes on `thread` and
    /// `device` at `time_ms` followed: the allocator asked the driver for a segment (at least
    /// the size asked), was refused, and refused the request in the end. Only refusals since
    /// the thread's previous one by `by`, and of the last 10 seconds.
    pub fn mark_within(&self, by: RefusedBy, thread: u32, device: i32, size: u64, time_ms: u64) {
        let mut list = lock(&self.list);
        for o in list.iter_mut().rev() {
            if o.thread != thread || o.device != device {
                continue;
            }
            if o.refused_by == by || time_ms.saturating_sub(o.time_ms) > 10_000 {
                break;
            }
            let refused_inside = matches!(
                o.refused_by,
                RefusedBy::Driver | RefusedBy::Limit | RefusedBy::PoolLimit
            );
            if refused_inside && o.within.is_none() && o.size >= size {
                o.within = Some(by);
            }
        }
    }

    /// Lists the other processes of each record still without them (from the cuguard thread,
    /// or a report written outside a signal handler), with `list(device)`, and works out the
    /// verdict again with them (`verdict(record)`). NVML is asked with no lock held.
    pub fn fill_others_with(
        &self,
        list: impl Fn(i32) -> Result<(Vec<cuguard_format::OtherProcess>, u64), String>,
        verdict: impl Fn(&Oom) -> cuguard_format::Verdict,
    ) {
        if !OTHERS_PENDING.swap(false, Ordering::AcqRel) {
            return;
        }
        let pending: Vec<(u64, u32, i32)> = lock(&self.list)
            .iter()
            .filter(|o| o.others_pending)
            .map(|o| (o.seq, o.thread, o.device))
            .collect();
        for (seq, thread, device) in pending {
            let others = list(device);
            let mut all = lock(&self.list);
            if let Some(o) = all
                .iter_mut()
                .find(|o| o.seq == seq && o.thread == thread && o.others_pending)
            {
                o.others = others;
                o.others_pending = false;
                o.verdict = verdict(o);
            }
        }
    }

    /// Lists the other processes of the records still without them (NVML, now) and works their
    /// verdicts out again: the cuguard thread, just after a refusal; a report written outside a
    /// signal's handler.
    pub fn fill_others(&self) {
        self.fill_others_with(others_of, verdict_of);
    }

    /// A record was kept with its other processes to be listed ([`Self::fill_others`]).
    pub fn others_wanted(&self) {
        OTHERS_PENDING.store(true, Ordering::Release);
    }

    /// The records, and how many refusals were not recorded.
    pub fn snapshot(&self) -> (Vec<Oom>, u64) {
        let list = lock(&self.list).clone();
        let seen = self.seen.load(Ordering::Relaxed);
        let dropped = seen.saturating_sub(list.len() as u64);
        (list, dropped)
    }
}

/// `ooms[].other_processes_note` of a record whose other processes were never listed (the
/// cuguard thread was to list them and did not before the report).
pub const PENDING_NOTE: &str = "NVML was not asked: the refusal came as the process ended";

/// The other processes on `device`, as NVML lists them now (or why it cannot say).
pub fn others_of(device: i32) -> Result<(Vec<cuguard_format::OtherProcess>, u64), String> {
    crate::driver::nvml::others(
        device,
        cuguard_format::OomRecord::MAX_OTHER_PROCESSES,
        |pid, bytes| cuguard_format::OtherProcess { pid, bytes },
    )
    .map_err(|why| why.note())
}

/// The verdict of `o`, from its figures.
pub fn verdict_of(o: &Oom) -> cuguard_format::Verdict {
    cuguard_format::verdict::of(cuguard_format::verdict::Figures {
        size: o.size,
        refused_by: o.refused_by.as_str(),
        device_free_bytes: o.device_memory.map(|m| m.0),
        device_total_bytes: o.device_memory.map(|m| m.1),
        limit: o.limit.as_ref(),
        live_bytes: o.live_bytes,
        idle: &o.idle,
        device: cuguard_format::wire::device_ordinal(o.device),
        other_processes: o
            .others
            .as_ref()
            .ok()
            .map(|(list, held)| (&list[..], *held)),
    })
}
