//! Misuse and anomalies seen while the program ran (the report's `events`), bounded.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::driver::Entry;
use crate::process::global::lock;

/// The most events kept; later ones are only counted.
pub const MAX_EVENTS: usize = 10_000;

/// Kinds of event (the report's `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A free of an address the program had already freed; the driver refused it.
    DoubleFree,
    /// A free of an address that was never allocated; the driver refused it.
    InvalidFree,
    /// A free the driver accepted of an address the shim never saw allocated.
    UntrackedFree,
    /// A free made while another context was current.
    FreeInWrongContext,
    /// A free of an allocation that had already gone with its destroyed context.
    FreeAfterContextDestroy,
    /// A context destroyed (or primary context reset or finally released) while it still held
    /// allocations.
    ContextDestroyedWithLiveAllocations,
    /// An allocation the driver (or the pool) refused.
    AllocFailed,
    /// An IPC export of a pooled pointer, refused.
    IpcRefused,
    /// Live device memory crossed `CUGUARD_WARN_AT` (see `lifecycle::alerts`).
    WarnThresholdCrossed,
}

impl From<Kind> for cuguard_format::EventKind {
    fn from(k: Kind) -> cuguard_format::EventKind {
        use cuguard_format::EventKind as K;
        match k {
            Kind::DoubleFree => K::DoubleFree,
            Kind::InvalidFree => K::InvalidFree,
            Kind::UntrackedFree => K::UntrackedFree,
            Kind::FreeInWrongContext => K::FreeInWrongContext,
            Kind::FreeAfterContextDestroy => K::FreeAfterContextDestroy,
            Kind::ContextDestroyedWithLiveAllocations => K::ContextDestroyedWithLiveAllocations,
            Kind::AllocFailed => K::AllocFailed,
            Kind::IpcRefused => K::IpcRefused,
            Kind::WarnThresholdCrossed => K::WarnThresholdCrossed,
        }
    }
}

/// One event.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: Kind,
    /// The address concerned, or 0.
    pub address: u64,
    /// The entry the program called, when a call caused the event.
    pub api: Option<Entry>,
    pub seq: u64,
    pub thread: u32,
    /// Stack id or `NONE`.
    pub stack: u32,
    /// The result the program received, when a call caused the event.
    pub result: Option<u32>,
    pub size: Option<u64>,
    /// Context id or `NONE`.
    pub context: u32,
    pub time_ms: u64,
    pub message: Option<String>,
    /// The device concerned, where the event is about a device rather than a call.
    pub device: Option<i32>,
}

/// The event list.
pub struct Events {
    list: Mutex<Vec<Event>>,
    dropped: AtomicU64,
}

impl Events {
    pub(super) fn new() -> Self {
        Events {
            list: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
        }
    }

    /// Records an event (or counts it, past [`MAX_EVENTS`]).
    pub fn push(&self, event: Event) {
        let mut list = lock(&self.list);
        if list.len() < MAX_EVENTS {
            list.push(event);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// All recorded events, and how many more were dropped.
    pub fn snapshot(&self) -> (Vec<Event>, u64) {
        (
            lock(&self.list).clone(),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}
