//! One allocation the program owns, as the tracker keeps it ([`Record`]), and why it is in the report: the types every part of the tracker shares, below them all.

use cuguard_format::MemoryKind;

use crate::driver::Entry;

/// Why an allocation is in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeakState {
    LiveAtExit,
    ReleasedByContextDestroy,
}

impl From<LeakState> for cuguard_format::LeakState {
    fn from(s: LeakState) -> cuguard_format::LeakState {
        match s {
            LeakState::LiveAtExit => cuguard_format::LeakState::LiveAtExit,
            LeakState::ReleasedByContextDestroy => {
                cuguard_format::LeakState::ReleasedByContextDestroy
            }
        }
    }
}

/// "No context" / "no stack" in the compact fields below.
pub const NONE: u32 = u32::MAX;

/// One allocation the program owns.
#[derive(Clone, Copy, Debug)]
pub struct Record {
    /// Bytes the program received.
    pub size: u64,
    /// Bytes it asked for.
    pub requested: u64,
    /// The entry that made it.
    pub api: Entry,
    pub memory: MemoryKind,
    /// Device ordinal, -1 if unknown.
    pub device: i32,
    /// Context id ([`super::contexts`]), or [`NONE`].
    pub context: u32,
    /// OS thread id of the allocating thread.
    pub thread: u32,
    /// Global allocation order.
    pub seq: u64,
    /// Milliseconds since the process started.
    pub time_ms: u64,
    /// Stack id, or [`NONE`].
    pub stack: u32,
    /// The program's tag for it (a name id, as the `tags` module keeps them), or [`NONE`].
    pub tag: u32,
}

impl Record {
    /// The history's memory of this record (a block of the pool's own when `pooled`).
    fn history_memory(&self, pooled: bool) -> MemoryKind {
        if pooled {
            MemoryKind::PoolBlock
        } else {
            self.memory
        }
    }

    /// Tells the history the program received this allocation at `addr`, made by a call that
    /// takes no stream.
    #[inline]
    pub fn history_allocated(&self, addr: u64, pooled: bool) {
        self.history_allocated_at(None, addr, pooled, 0);
    }

    /// [`Self::history_allocated`] of an allocation made on `stream` (the history's key of a
    /// stream: see [`crate::recorder::allocated_at`]), at the moment `tsc` when one taken
    /// already follows every free of `addr` (see there too).
    #[inline(always)]
    pub fn history_allocated_at(&self, tsc: Option<u64>, addr: u64, pooled: bool, stream: u64) {
        crate::recorder::allocated_at(
            tsc,
            addr,
            self.size,
            self.history_memory(pooled),
            self.stack,
            self.context,
            self.device,
            stream,
            self.tag,
        );
    }

    /// Tells the history the program freed this allocation at `addr`, from the moment `tsc`,
    /// by a call that takes no stream.
    #[inline]
    pub fn history_freed(&self, addr: u64, tsc: u64) {
        self.history_freed_on(addr, tsc, 0);
    }

    /// [`Self::history_freed`] by a free on `stream` (see [`crate::recorder::freed`]).
    #[inline(always)]
    pub fn history_freed_on(&self, addr: u64, tsc: u64, stream: u64) {
        crate::recorder::freed(
            addr,
            self.history_memory(false),
            self.context,
            self.device,
            tsc,
            stream,
        );
    }
}
