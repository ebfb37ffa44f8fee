//! The state's fork handling: the simulator stays usable in the child of a `fork`, whatever its
//! other threads were doing at that moment.
//!
//! The real driver cannot be used in a forked child at all; the simulator lets a child go on
//! with the parent's contexts and memory (a copy), because that is how cuguard's tests make the
//! shim's own fork handling meet locks held at the fork. For that the simulator's own locks must
//! not be held by a thread the child lacks:
//!
//! - before the fork ([`prepare`], on the forking thread) it takes the state lock, then every
//!   event's lock, then every stream queue's lock — the lock order everywhere else too (the state
//!   lock first; a stream worker holds its queue lock or an event's alone) — so no other thread is
//!   inside any of them when the process is copied;
//! - after the fork, the parent ([`parent`]) and the child ([`child`]) release them. The child's
//!   streams have no worker threads: each stream forgets its worker, an operation the parent's
//!   worker had taken but not finished counts as done, and operations still queued run on a new
//!   worker when someone waits for them or issues more.
//!
//! The handlers are registered once, when the driver is initialized (`cuInit`).

use std::cell::RefCell;
use std::sync::{Arc, MutexGuard, Once};

use super::{State, driver};
use crate::model::event::{Event, Record};
use crate::model::stream::{self, Queue, Stream};

/// The locks held across a fork, and what they borrow from. Fields drop in order: the guards
/// first (the queues', then the events', then the state's), then the objects they borrow.
struct Held {
    queues: Vec<MutexGuard<'static, Queue>>,
    _events: Vec<MutexGuard<'static, Record>>,
    _state: MutexGuard<'static, State>,
    streams: Vec<Arc<Stream>>,
    _event_objects: Vec<Arc<Event>>,
}

thread_local! {
    /// On the forking thread (and so in the child's one thread): the locks held across the fork.
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// Registers the fork handlers, the first time it is called (by `cuInit`, once the driver is
/// initialized).
pub fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: three plain extern "C" fns without arguments; registering has no other effect.
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

extern "C" fn prepare() {
    let Ok(drv) = driver() else { return };
    let st = drv.lock();
    let mut streams: Vec<Arc<Stream>> = Vec::new();
    for c in st.contexts.values() {
        streams.extend(c.legacy.iter().cloned());
        streams.extend(c.streams.iter().cloned());
    }
    streams.extend(st.streams.values().cloned());
    streams.sort_by_key(|s| Arc::as_ptr(s) as usize);
    streams.dedup_by_key(|s| Arc::as_ptr(s) as usize);
    let event_objects: Vec<Arc<Event>> = st.events.values().cloned().collect();
    // SAFETY: each guard borrows from an `Arc` that `Held` keeps alive and drops after the
    // guards (field order), so the borrow outlives every guard although its lifetime is written
    // `'static`.
    let events = event_objects
        .iter()
        .map(|e| unsafe { std::mem::transmute::<_, MutexGuard<'static, Record>>(e.lock_record()) })
        .collect();
    // SAFETY: as above, for the streams' queues.
    let queues = streams
        .iter()
        .map(|s| unsafe { std::mem::transmute::<_, MutexGuard<'static, Queue>>(s.lock_queue()) })
        .collect();
    let held = Held {
        queues,
        _events: events,
        _state: st,
        streams,
        _event_objects: event_objects,
    };
    let _ = HELD.try_with(|h| *h.borrow_mut() = Some(held));
}

extern "C" fn parent() {
    let _ = HELD.try_with(|h| h.borrow_mut().take());
}

extern "C" fn child() {
    let _ = HELD.try_with(|h| {
        if let Some(mut held) = h.borrow_mut().take() {
            for q in held.queues.iter_mut() {
                stream::forget_worker(q);
            }
            let streams = std::mem::take(&mut held.streams);
            drop(held);
            drop(streams);
        }
    });
}
