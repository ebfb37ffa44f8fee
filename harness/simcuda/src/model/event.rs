//! The event family's model: an event, a recorded point in a stream, which completes when the
//! stream's work before it has.
//!
//! Recording (`entries/event.rs`) issues a marker operation on the stream and remembers it; the
//! marker stamps the time when it runs. Recording again starts a new generation: a marker of an
//! older generation that runs late does not touch the new one.

use std::ffi::c_uint;
use std::sync::Mutex;
use std::time::Instant;

use crate::model::stream::Point;

/// An event.
pub struct Event {
    pub ctx_id: u64,
    pub flags: c_uint,
    rec: Mutex<Record>,
}

/// What an event's last record captured (behind the event's lock).
#[derive(Default)]
pub struct Record {
    pub generation: u64,
    /// The marker operation of the last record, if any.
    pub target: Option<Point>,
    /// When that marker ran.
    pub time: Option<Instant>,
}

impl Event {
    pub fn new(ctx_id: u64, flags: c_uint) -> Event {
        Event {
            ctx_id,
            flags,
            rec: Mutex::new(Record::default()),
        }
    }

    /// The event's last record (behind its lock).
    pub fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.rec.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The event's lock, for holding it across a fork (see `state/fork.rs`).
    pub fn lock_record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record()
    }

    /// The point the last record captured (`None` if never recorded).
    pub fn target(&self) -> Option<Point> {
        self.record().target.clone()
    }

    /// Whether the recorded work has completed (an event never recorded has).
    pub fn complete(&self) -> bool {
        self.target().is_none_or(|(s, seq)| s.reached(seq))
    }

    /// The marker of record `generation` ran: stamps the time, unless the event was recorded
    /// again since.
    pub fn stamp(&self, generation: u64) {
        let mut r = self.record();
        if r.generation == generation {
            r.time = Some(Instant::now());
        }
    }
}
