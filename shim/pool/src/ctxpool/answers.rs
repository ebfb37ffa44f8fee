//! What the pool's calls answer besides an address: why an allocation was refused, an invalid
//! free, what an export found, and a live block as a lookup finds it.

use crate::device::DeviceError;

/// Why an allocation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    /// One line for people (sizes in bytes; [`Refusal::message`] says it with the caller's units).
    pub why: String,
    /// When `CUGUARD_POOL_LIMIT` refused it: the limit, what the pool held, and what it needed.
    pub over_limit: Option<OverLimit>,
}

/// A request the pool's limit refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverLimit {
    /// `CUGUARD_POOL_LIMIT`, in bytes.
    pub limit: u64,
    /// Bytes the pool held from the device then.
    pub reserved: u64,
    /// Bytes more it would have needed.
    pub asked: u64,
    /// The process's limit (`CUGUARD_LIMIT`, [`crate::Device::process_limit`]) refused it rather
    /// than the pool's: `limit` is then that limit and `reserved` what the process held.
    pub process: bool,
}

impl Refusal {
    /// The refusal in one line for people, sizes written by `bytes` (`1.0 GiB`).
    pub fn message(&self, bytes: impl Fn(u64) -> String) -> String {
        match self.over_limit {
            Some(o) if o.process => format!(
                "CUGUARD_LIMIT of {} reached: {} held, {} more asked for",
                bytes(o.limit),
                bytes(o.reserved),
                bytes(o.asked)
            ),
            Some(o) => format!(
                "CUGUARD_POOL_LIMIT of {} reached: {} reserved, {} more asked for",
                bytes(o.limit),
                bytes(o.reserved),
                bytes(o.asked)
            ),
            None => self.why.clone(),
        }
    }
}

/// What kind of refusal it is (the shim turns it into the driver's code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// A request of zero bytes.
    ZeroSize,
    /// The pool's context is gone.
    ContextDestroyed,
    /// No memory: the device's, or the pool's limit.
    OutOfMemory,
    /// The device refused a chunk (only
    /// [`CtxPool::reserve_initial`](super::CtxPool::reserve_initial) says so; an allocation that
    /// cannot grow is [`Reason::OutOfMemory`]).
    Device(DeviceError),
}

/// A free of an address inside the pool's chunks that starts no live block: a double free, an
/// interior pointer, or a block still waiting for a fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidFree;

/// What [`CtxPool::export`](super::CtxPool::export) found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Export {
    /// The block is a dedicated chunk whole, starting at `base`; now marked exported.
    Whole { base: u64 },
    /// The block shares its chunk with others.
    Shared,
    /// No live block there.
    NotLive,
}

/// A live block, as [`CtxPool::find`](super::CtxPool::find) reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block<R> {
    /// Its first byte.
    pub addr: u64,
    /// Bytes granted (at least what was asked, rounded to [`ALIGN`](super::ALIGN); a dedicated
    /// chunk whole).
    pub granted: u64,
    /// The record kept with it, if one was given.
    pub record: Option<R>,
}
