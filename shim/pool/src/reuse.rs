//! When a freed pool block may be handed out again.
//!
//! # The rule
//!
//! A block freed by the program is not reused while GPU work issued before its free may still
//! touch it. Every driver entry that submits work (kernels, copies, sets, graph launches, stream
//! memory operations, external semaphores, host functions; see the shim's `hooks::submit`)
//! counts one submission *after* the driver has enqueued it. A free remembers the count at that
//! moment, its *mark*: all work that could touch the block was enqueued before the mark.
//!
//! A *fence* reads the count `v`, then records an event on the legacy default stream and on every
//! known non-blocking stream of the context. The legacy stream's event completes only after all
//! work enqueued before it on every blocking stream, the per-thread default streams included
//! (they synchronize with the legacy stream); non-blocking streams do not, so each gets its own
//! event. When all of a fence's events have completed, every submission counted in `v` has
//! finished, and blocks whose mark is ≤ `v` are safe to reuse. `cuCtxSynchronize` is the same
//! fence, taken at once.
//!
//! Two consequences keep the pool fast without weakening this:
//! - While nothing has been submitted since the last completed fence, a freed block is reusable
//!   at once (its mark is already covered).
//! - Otherwise frees wait in batches; one fence per batch amortizes the events.
//!
//! A block in a thread cache (`tcache.rs`) follows the same rule: its slot keeps its free's mark,
//! and it is handed out again only once a completed fence covers that mark (the pool keeps the
//! highest mark any of its arenas' fences reached); one that still waits goes back to its arena's
//! pending frees.
//!
//! Streams that were non-blocking and are destroyed with work in flight get a last event at
//! destruction, which the next fence waits for too. While any stream capture is active, no fence
//! is recorded (an event on the legacy stream would invalidate a global-mode capture): frees wait.
//!
//! # Other contexts (peers)
//!
//! Work issued in *another* context can touch this context's memory too: kernels of a context
//! that enabled peer access to this one (`cuCtxEnablePeerAccess`), and peer copies
//! (`cuMemcpyPeer*`, `cuMemcpy3DPeer*`, a unified-address `cuMemcpy*` with an operand in this
//! context's memory) issued anywhere. The submission count is process-wide, so a free's mark
//! already counts that work; what a fence must add is events on those contexts' streams. The
//! device keeps the relations ([`Device::record_peer_events`]): a fence records, after its own
//! events, an event on the legacy stream and every known non-blocking stream of each context
//! that can reach this one, and waits for their destroyed streams' last events, so that a
//! completed fence covers every submission counted in its mark that could touch the pool's
//! blocks. A relation is known before the work it allows is counted (peer access is enabled
//! before the kernels that use it; a peer copy is noted before it is counted), so a fence whose
//! mark counts the work sees the relation. A copy's relation is forgotten once a completed
//! fence covered it; peer access once it is disabled and a fence covered what was issued before,
//! or when either context is destroyed. A synchronization waits for the peers too.
//!
//! A context nothing outside can reach fences exactly as before: the device answers "no peers"
//! with one atomic read.
//!
//! # Stream-aware reuse
//!
//! With `CUGUARD_POOL_STREAM_REUSE` on (the default), a free whose mark is not covered yet may still be reused
//! at once, when the device says so ([`Device::reuse_on_stream`]; the shim's
//! `pool::stream_reuse` decides, `hooks::submit` enforces). The pool then keeps the block as if
//! its mark were covered (mark 0), in its arena or a thread cache alike. The rule the device
//! must follow:
//!
//! - **One stream.** Let `c` be the pool's completed mark. Every submission counted after `c`,
//!   up to now (a superset of those up to the free's mark), was issued on one stream S. The
//!   shim knows because the count and the stream of each submission are taken in one atomic
//!   step (runs of one stream, `serving::submissions`). Streams are told apart by handle, with the legacy
//!   stream and each thread's per-thread default stream each a stream of its own (the legacy
//!   stream's implicit synchronization with blocking streams is not relied on); an entry
//!   without a stream argument (a synchronous copy or set) is on the default stream; a
//!   submission whose stream cannot be told matches none.
//! - **Why that is enough now.** All work that can touch the block was counted by its free's
//!   mark (as for the fence rule), so what may still be running of it is on S. Later work on S
//!   runs after it, by stream order.
//! - **Every other stream waits.** From the free on, until S's work up to it is known complete,
//!   every submission on a stream T ≠ S, of any context and any thread, is preceded by a wait
//!   of T on an event recorded on S after the free (`cuStreamWaitEvent`; once per stream per
//!   arming free); an event recorded later on S covers more, never less. Synchronous copies and
//!   sets are submissions on the default stream, so host reads and writes wait too; a chunk
//!   given back to the driver waits the same way, or on the host. Where no wait can be
//!   inserted (a submission whose stream is unknown, a capture beginning, S destroyed, a new
//!   peer relation, a chunk freed synchronously), the host waits for S's event, or for the
//!   context, first. The guard is armed before the block can be handed out (before the free
//!   returns it to the pool), and anything that can use the block is submitted after it is
//!   handed out, so it sees the guard.
//! - **Not then.** Never while a capture is in progress (a capturing stream cannot wait for an
//!   event recorded outside it), while any other context can reach this context's memory
//!   (peers: their streams are not ordered with S either way), when the pool's context is not
//!   current, or when S is another thread's per-thread default stream (only its thread can name
//!   it to record the event). Then the fence rule alone applies.
//! - **One guard at a time.** A guard on S can be replaced by one on S' only once a completed
//!   fence covers the old guard's marks. It always is when the new free qualifies: the old
//!   guard's work after `c` was on S and the new one's on S', so there is none.
//!
//! A wrong guess costs a wait, never a corruption: a stream that waits for nothing it needed
//! only loses overlap.
//!
//! # Who does what
//!
//! The counting and the stream bookkeeping happen where the program's calls are seen (in the
//! shim: `hooks::submit`, `hooks::streams`, and its `serving::submissions`); the pool reads them through
//! its [`Device`]: the count is [`Device::submissions`], captures [`Device::capturing`], the
//! non-blocking streams and how many destroyed ones left a last event
//! [`Device::with_side_streams`]. [`Fences`] here records, polls and retires the fences.
//!
//! Each arena of a pool has its own fences, so a destroyed stream's last event is not handed to
//! one fence: the device keeps it, every fence remembers how many such events existed when it
//! was recorded, and completes only once those have ([`Device::destroyed_streams_done`]).

use std::collections::VecDeque;

use crate::device::{Device, LEGACY_STREAM};

/// One recorded fence.
struct Fence<E> {
    /// Submissions covered.
    mark: u64,
    events: Vec<E>,
    /// Last events of destroyed streams it waits for too: the first this many.
    destroyed: u64,
}

/// A context's fences (kept inside each arena of its pool, under the arena's lock).
pub(crate) struct Fences<E> {
    /// All work counted up to this mark is known complete.
    completed: u64,
    in_flight: VecDeque<Fence<E>>,
    /// Fences recorded (for the report).
    pub recorded: u64,
    /// Synchronizations under pressure (for the report).
    pub syncs: u64,
    /// Fences and synchronizations that also waited for other contexts' work (for the report).
    pub peer_waits: u64,
    /// Host waits for the oldest fence in flight, in place of a synchronization (for the
    /// report).
    pub fence_waits: u64,
}

impl<E> Default for Fences<E> {
    fn default() -> Self {
        Fences {
            completed: 0,
            in_flight: VecDeque::new(),
            recorded: 0,
            syncs: 0,
            peer_waits: 0,
            fence_waits: 0,
        }
    }
}

impl<E> Fences<E> {
    /// All submissions up to this mark are complete.
    #[inline]
    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// Whether a fence covering `mark` is already in flight.
    pub fn covers(&self, mark: u64) -> bool {
        self.in_flight.back().is_some_and(|f| f.mark >= mark)
    }

    /// Records a fence now, on `dev` (whose context must be current). Returns false when none
    /// could be recorded (a capture is in progress, or the device refused).
    pub fn record<D: Device<Event = E>>(&mut self, dev: &D) -> bool {
        if dev.capturing() {
            return false;
        }
        let mark = dev.submissions();
        if mark <= self.completed || self.covers(mark) {
            return true;
        }
        let mut events = Vec::new();
        let Some(ev) = dev.record_event(LEGACY_STREAM) else {
            return false;
        };
        events.push(ev);
        let destroyed = dev.with_side_streams(|streams, destroyed| {
            for &stream in streams {
                if let Some(ev) = dev.record_event(stream) {
                    events.push(ev);
                }
            }
            // Destroyed streams' last events ride with this fence.
            destroyed
        });
        // Other contexts whose work can touch this context's memory.
        if dev.record_peer_events(self.completed, &mut events) > 0 {
            self.peer_waits += 1;
        }
        self.recorded += 1;
        self.in_flight.push_back(Fence {
            mark,
            events,
            destroyed,
        });
        true
    }

    /// Retires completed fences (oldest first); returns the new completed mark.
    pub fn poll<D: Device<Event = E>>(&mut self, dev: &D) -> u64 {
        while let Some(f) = self.in_flight.front() {
            if !f.events.iter().all(|e| dev.event_done(e))
                || !dev.destroyed_streams_done(f.destroyed)
            {
                break;
            }
            let f = self.in_flight.pop_front().expect("front exists");
            for e in f.events {
                dev.destroy_event(e);
            }
            self.completed = self.completed.max(f.mark);
        }
        self.completed
    }

    /// Whether a fence is in flight.
    pub fn any_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Waits on the host for the oldest fence in flight, then retires every fence that has
    /// completed; returns the new completed mark. Work submitted after that fence was recorded
    /// is not waited for, as a synchronization would. `None` when it cannot wait that way (no
    /// fence in flight, a capture in progress, an event the device cannot wait for, or a
    /// destroyed stream's last work still running): the caller then synchronizes.
    pub fn wait_oldest<D: Device<Event = E>>(&mut self, dev: &D) -> Option<u64> {
        if dev.capturing() {
            return None;
        }
        let f = self.in_flight.front()?;
        for e in &f.events {
            if !dev.event_done(e) && !dev.wait_event(e) {
                return None;
            }
        }
        if !dev.destroyed_streams_done(f.destroyed) {
            return None;
        }
        self.fence_waits += 1;
        Some(self.poll(dev))
    }

    /// Waits for all work of `dev`'s context (current) to finish; returns the new completed
    /// mark, or `None` when that is not allowed now (a capture is in progress) or failed.
    pub fn synchronize<D: Device<Event = E>>(&mut self, dev: &D) -> Option<u64> {
        if dev.capturing() {
            return None;
        }
        let mark = dev.submissions();
        if !dev.synchronize() {
            return None;
        }
        if dev.synchronize_peers(self.completed)? > 0 {
            self.peer_waits += 1;
        }
        self.syncs += 1;
        // Every fence in flight is complete now, and so is every destroyed stream's last work.
        for f in self.in_flight.drain(..) {
            for e in f.events {
                dev.destroy_event(e);
            }
        }
        let destroyed = dev.with_side_streams(|_, destroyed| destroyed);
        dev.destroyed_streams_done(destroyed);
        self.completed = self.completed.max(mark);
        Some(self.completed)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;
    use crate::device::DeviceError;

    /// A device whose events complete when the test says, with `peers` other contexts reaching it.
    #[derive(Default)]
    struct Dev {
        submissions: Cell<u64>,
        /// Done flags, by event (an index).
        done: RefCell<Vec<bool>>,
        /// Whether each event is a peer's.
        peer: RefCell<Vec<bool>>,
        peers: Cell<u64>,
        peer_syncs: Cell<u64>,
        /// Whether waiting for an event fails.
        no_wait: Cell<bool>,
    }

    impl Dev {
        fn event(&self, peer: bool) -> usize {
            self.done.borrow_mut().push(false);
            self.peer.borrow_mut().push(peer);
            self.done.borrow().len() - 1
        }

        fn finish(&self, peer: bool) {
            let kinds = self.peer.borrow();
            for (d, p) in self.done.borrow_mut().iter_mut().zip(kinds.iter()) {
                if *p == peer {
                    *d = true;
                }
            }
        }
    }

    impl Device for Dev {
        type Event = usize;
        fn alloc_chunk(&self, _: u64) -> Result<u64, DeviceError> {
            Err(DeviceError::Unavailable)
        }
        fn free_chunk(&self, _: u64, _: bool) {}
        fn is_current(&self) -> bool {
            true
        }
        fn submissions(&self) -> u64 {
            self.submissions.get()
        }
        fn capturing(&self) -> bool {
            false
        }
        fn record_event(&self, _: u64) -> Option<usize> {
            Some(self.event(false))
        }
        fn with_side_streams<T>(&self, f: impl FnOnce(&[u64], u64) -> T) -> T {
            f(&[], 0)
        }
        fn destroyed_streams_done(&self, _: u64) -> bool {
            true
        }
        fn event_done(&self, e: &usize) -> bool {
            self.done.borrow()[*e]
        }
        fn destroy_event(&self, _: usize) {}
        fn wait_event(&self, e: &usize) -> bool {
            if self.no_wait.get() {
                return false;
            }
            self.done.borrow_mut()[*e] = true;
            true
        }
        fn synchronize(&self) -> bool {
            self.finish(false);
            true
        }
        fn record_peer_events(&self, _: u64, events: &mut Vec<usize>) -> u64 {
            for _ in 0..self.peers.get() {
                events.push(self.event(true));
            }
            self.peers.get()
        }
        fn synchronize_peers(&self, _: u64) -> Option<u64> {
            self.finish(true);
            self.peer_syncs.set(self.peer_syncs.get() + 1);
            Some(self.peers.get())
        }
    }

    #[test]
    fn without_peers_a_fence_waits_for_its_own_context_only() {
        let dev = Dev::default();
        let mut f = Fences::default();
        dev.submissions.set(3);
        assert!(f.record(&dev));
        assert_eq!(f.poll(&dev), 0);
        dev.finish(false);
        assert_eq!(f.poll(&dev), 3);
        assert_eq!((f.recorded, f.peer_waits), (1, 0));
        dev.submissions.set(4);
        assert_eq!(f.synchronize(&dev), Some(4));
        assert_eq!((f.syncs, f.peer_waits), (1, 0));
    }

    #[test]
    fn a_fence_completes_only_once_its_peers_work_has() {
        let dev = Dev::default();
        dev.peers.set(2);
        let mut f = Fences::default();
        dev.submissions.set(5);
        assert!(f.record(&dev));
        assert_eq!(dev.done.borrow().len(), 3, "one own event, one per peer");
        dev.finish(false);
        assert_eq!(f.poll(&dev), 0, "the peers' work is still running");
        dev.finish(true);
        assert_eq!(f.poll(&dev), 5);
        assert_eq!(f.peer_waits, 1);
        // A synchronization waits for the peers too.
        dev.submissions.set(6);
        assert!(f.record(&dev));
        assert_eq!(f.synchronize(&dev), Some(6));
        assert_eq!((dev.peer_syncs.get(), f.syncs, f.peer_waits), (1, 1, 3));
    }

    #[test]
    fn waiting_for_the_oldest_fence_leaves_later_work_running() {
        let dev = Dev::default();
        let mut f = Fences::default();
        dev.submissions.set(2);
        assert!(f.record(&dev));
        dev.submissions.set(7);
        assert!(f.record(&dev));
        // The oldest fence's events are waited for; the second fence's are not.
        assert_eq!(f.wait_oldest(&dev), Some(2));
        assert_eq!(*dev.done.borrow(), vec![true, false]);
        assert!(f.any_in_flight());
        assert_eq!((f.fence_waits, f.syncs), (1, 0));
        assert_eq!(f.wait_oldest(&dev), Some(7));
        assert!(!f.any_in_flight());
        assert_eq!(f.wait_oldest(&dev), None, "nothing in flight");
        assert_eq!(f.fence_waits, 2);
    }

    #[test]
    fn a_fence_that_cannot_be_waited_for_is_left_to_a_synchronization() {
        let dev = Dev::default();
        dev.no_wait.set(true);
        let mut f = Fences::default();
        dev.submissions.set(3);
        assert!(f.record(&dev));
        assert_eq!(f.wait_oldest(&dev), None);
        assert_eq!(f.fence_waits, 0);
        assert!(f.any_in_flight());
        // One whose events already completed needs no wait.
        dev.finish(false);
        assert_eq!(f.wait_oldest(&dev), Some(3));
        assert_eq!(f.fence_waits, 1);
    }
}
