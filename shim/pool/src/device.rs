//! What the pool needs from the device: the [`Device`] trait, through which a pool takes and
//! returns chunks, learns how much work was submitted, records and queries fence events, and
//! synchronizes. The pool makes no other call; everything behind the trait (a driver, a
//! simulator, a test's fake) is the implementor's.

use std::fmt;

/// The stream handle that names the legacy default stream in [`Device::record_event`].
pub const LEGACY_STREAM: u64 = 0;

/// One context of one device, as a pool sees it.
///
/// Methods are called with one of the pool's arena locks held, so none may call back into the
/// pool. Events, synchronization and chunk calls act on the context the implementor stands for; the
/// pool makes them only while [`is_current`](Device::is_current) says it is the calling thread's
/// current one (creating a pool's first chunks included: the caller makes sure of that).
///
/// The fence rule (`reuse.rs`) relies on what [`submissions`](Device::submissions),
/// [`record_event`](Device::record_event), [`with_side_streams`](Device::with_side_streams) and
/// [`destroyed_streams_done`](Device::destroyed_streams_done) promise; read it before
/// implementing them.
pub trait Device {
    /// A recorded event: a marker in a stream's queue that completes once the work enqueued
    /// before it has.
    type Event;

    /// Takes a chunk of `bytes` bytes of device memory from the device; its first address.
    fn alloc_chunk(&self, bytes: u64) -> Result<u64, DeviceError>;

    /// Gives back a chunk [`alloc_chunk`](Device::alloc_chunk) returned, none of whose blocks is
    /// live or waiting for a fence. With `wait`, the memory must be free again when this returns
    /// (the pool is under pressure); without, the calling thread must not wait for the device:
    /// the memory may become free a little later (the shim hands the chunk to its give-back
    /// thread), but promptly, and the device must not hand the address out again before then.
    fn free_chunk(&self, base: u64, wait: bool);

    /// Gives back a chunk [`alloc_chunk`](Device::alloc_chunk) returned that the pool could not
    /// use (never added, so never [`chunk_added`](Device::chunk_added)), waiting for the device.
    fn chunk_unused(&self, base: u64, _size: u64) {
        self.free_chunk(base, true);
    }

    /// A limit on what the whole process holds on this device, beside the pool's own: `(limit,
    /// held)`, where `held` counts what this pool reserved. The pool grows only within it. None
    /// by default.
    fn process_limit(&self) -> Option<(u64, u64)> {
        None
    }

    /// Waits until every chunk given back without `wait` is free on the device (under pressure,
    /// before the slow path gives up). Nothing to wait for by default.
    fn settle_returns(&self) {}

    /// An arena of the pool at address `pool` now has frees waiting for a fence (it had none):
    /// the implementor may arrange for [`CtxPool::tend`](crate::CtxPool::tend) to be called off
    /// the program's threads until none wait, so that their memory comes back without the
    /// program calling again. Called with the arena's lock held: it must not call into the pool.
    /// Does nothing by default.
    fn frees_waiting(&self, pool: usize) {
        let _ = pool;
    }

    /// A chunk `[base, base + size)` now belongs to arena `arena` of the pool at address `pool`,
    /// so that whoever maps addresses to pools can learn it. Does nothing by default.
    fn chunk_added(&self, base: u64, size: u64, pool: usize, arena: usize) {
        let _ = (base, size, pool, arena);
    }

    /// The chunk at `base` is about to go back to the device (or went with its context).
    /// Does nothing by default.
    fn chunk_removed(&self, base: u64) {
        let _ = base;
    }

    /// Whether this context is the calling thread's current one.
    fn is_current(&self) -> bool;

    /// Submissions of device work counted so far, each counted *after* it was enqueued: the
    /// *mark* of a free made now. Never decreases.
    fn submissions(&self) -> u64;

    /// Whether a stream capture is in progress (then no event may be recorded on the legacy
    /// stream and the context may not be synchronized).
    fn capturing(&self) -> bool;

    /// Records an event on `stream` ([`LEGACY_STREAM`] for the legacy default stream); `None`
    /// when the device refused.
    fn record_event(&self, stream: u64) -> Option<Self::Event>;

    /// Calls `f` with the context's known non-blocking streams and the number of last events
    /// recorded so far on its non-blocking streams as they were destroyed, while no stream of
    /// the context is registered or forgotten.
    fn with_side_streams<T>(&self, f: impl FnOnce(&[u64], u64) -> T) -> T;

    /// Whether the first `count` last events of destroyed non-blocking streams (in the order
    /// they were recorded) have all completed. The device keeps those events, shared by every
    /// fence that waits for them, and destroys each once it has completed.
    fn destroyed_streams_done(&self, count: u64) -> bool;

    /// Whether `event` has completed. An error counts as completed: the event, or its context,
    /// is gone and can hold nothing back.
    fn event_done(&self, event: &Self::Event) -> bool;

    /// Destroys an event the pool no longer uses.
    fn destroy_event(&self, event: Self::Event);

    /// Waits on the host until `event` has completed; false when it cannot (then the pool
    /// synchronizes instead). Cannot by default.
    fn wait_event(&self, event: &Self::Event) -> bool {
        let _ = event;
        false
    }

    /// Waits for all work of the context to finish; false when that failed.
    fn synchronize(&self) -> bool;

    /// The device's free memory as the driver counts it now (memory another allocator freed
    /// but the driver still holds for it counts as taken), or `None` when it cannot say (then
    /// the pool assumes a synchronization might make room). `None` by default.
    fn free_bytes(&self) -> Option<u64> {
        None
    }

    /// For a fence being recorded: pushes onto `events` what completes once the work issued so
    /// far by every *other* context that can touch this context's memory (its peers: see
    /// `reuse.rs`) has completed. A relation whose work a fence of this context covering
    /// `completed` already waited for may be forgotten. Returns how many peers it covered. Does
    /// nothing by default: nothing outside the context can reach its memory.
    fn record_peer_events(&self, completed: u64, events: &mut Vec<Self::Event>) -> u64 {
        let _ = (completed, events);
        0
    }

    /// A block of this context is being freed now, with a mark above `completed` (all work
    /// counted up to `completed` is known complete): returns true when it may be reused at once
    /// because all pending work was issued on one stream, the implementor having made every
    /// other stream wait for that work before its next submission (the stream rule, `reuse.rs`:
    /// the implementor must only say yes when that rule's conditions hold). Called with an
    /// arena lock held, or none. Never by default: the fence rule alone.
    fn reuse_on_stream(&self, completed: u64) -> bool {
        let _ = completed;
        false
    }

    /// Waits for all work of this context's peers to finish (after
    /// [`synchronize`](Device::synchronize)); how many peers it waited for, or `None` when that failed.
    /// Nothing to wait for by default.
    fn synchronize_peers(&self, completed: u64) -> Option<u64> {
        let _ = completed;
        Some(0)
    }
}

/// Why [`Device::alloc_chunk`] gave nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// There is no driver to ask.
    Unavailable,
    /// The driver refused, with this code.
    Refused(u32),
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Unavailable => f.write_str("no driver"),
            DeviceError::Refused(code) => write!(f, "the driver refused (code {code})"),
        }
    }
}

impl std::error::Error for DeviceError {}
