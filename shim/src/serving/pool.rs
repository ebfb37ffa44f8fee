//! A context's pool as the shim uses it ([`Pool`]): `cuguard_pool`'s pool over one context of the
//! real driver ([`DriverContext`], whose `Device` is [`super::driver_context`]'s), keeping the
//! tracker's record with each block. Below the rest of the serving, which all names it.

/// A context's pool, as the shim uses it: over the real driver, keeping the tracker's record
/// with each block.
pub type Pool = cuguard_pool::CtxPool<DriverContext, crate::tracker::Record>;

/// What a fence waits for: an event it recorded, or the last events of another context's
/// destroyed non-blocking streams (its own are counted apart, by the pool).
#[derive(Debug)]
pub enum FenceEvent {
    /// An event recorded on a stream (of this context or of a peer).
    Recorded(u64),
    /// The first `count` last events of context `ctx`'s destroyed non-blocking streams.
    DestroyedStreams { ctx: u64, count: u64 },
}

/// One context of the real driver, as its pool sees it.
pub struct DriverContext {
    /// The context's handle.
    pub handle: u64,
    /// Its device's ordinal.
    pub ordinal: i32,
}
