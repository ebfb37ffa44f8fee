//! What was live at each device's peak: the report's `peaks`.
//!
//! Whenever a device's live bytes reach a new high that is 1% above the last record (and at
//! least [`MIN_BYTES`]), the live bytes by stack are copied from [`super::by_stack`] into that
//! device's record, which replaces the last one. The last record is therefore within 1% of the
//! peak, plus what the per-thread counters had not folded yet (see [`super::counters`]). Taken on
//! the allocating thread, right after the fold that saw the new high: a few microseconds, about
//! 460 times per hundredfold growth, never blocking (a record another thread is taking is
//! skipped).

use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};

use super::by_stack;
use super::devices::DEVICES;

/// No record below this many live bytes.
pub const MIN_BYTES: u64 = 1 << 20;

/// One device's record.
#[derive(Clone, Debug)]
pub struct Peak {
    pub device: i32,
    pub time_ms: u64,
    /// The same moment in microseconds.
    pub time_us: u64,
    pub live_bytes: u64,
    /// `(stack or NONE, bytes, allocations)`, most bytes first.
    pub stacks: Vec<(u32, u64, u64)>,
}

/// The records, replaced wholesale in a forked child (a thread that held a lock is not there).
struct Records {
    last: [Mutex<Option<Peak>>; DEVICES],
    /// Live bytes at which the next record is taken.
    next: [AtomicU64; DEVICES],
}

static RECORDS: AtomicPtr<Records> = AtomicPtr::new(std::ptr::null_mut());

fn records() -> &'static Records {
    crate::process::global::get_or_create(&RECORDS, fresh)
}

fn fresh() -> Records {
    Records {
        last: std::array::from_fn(|_| Mutex::new(None)),
        next: std::array::from_fn(|_| AtomicU64::new(MIN_BYTES)),
    }
}

/// Device slot `slot` reached a new high of `live` bytes: records what is live by stack if it is
/// 1% above the last record.
#[inline]
pub fn new_high(slot: usize, live: u64) {
    let r = records();
    if live < r.next[slot].load(Relaxed) {
        return;
    }
    take(r, slot, live);
}

#[cold]
fn take(r: &Records, slot: usize, live: u64) {
    let Ok(mut last) = r.last[slot].try_lock() else {
        return;
    };
    if live < r.next[slot].load(Relaxed) {
        return;
    }
    let device = slot as i32;
    let time_us = crate::process::clock::moment_us();
    *last = Some(Peak {
        device,
        time_ms: time_us.div_ceil(1_000),
        time_us,
        live_bytes: live,
        stacks: by_stack::snapshot(device),
    });
    r.next[slot].store(live.saturating_add(live / 100).max(MIN_BYTES), Relaxed);
}

/// Every device's last record.
pub fn all() -> Vec<Peak> {
    let r = records();
    r.last
        .iter()
        .filter_map(|m| m.try_lock().ok().and_then(|g| g.clone()))
        .collect()
}

/// In the child of a fork: no records (the parent's peaks are not the child's).
pub fn reset_after_fork() {
    crate::process::global::replace(&RECORDS, fresh());
}
