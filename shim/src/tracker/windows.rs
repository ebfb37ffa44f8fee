//! Time windows over every thread's device memory: what the in-process API's `track` blocks
//! measure (`crate::api`). A window knows the most device memory that was live while it was
//! open, above what was live when it opened, and the device bytes allocated meanwhile; which
//! allocations it made is read later from the records' order keys.
//!
//! Up to [`SLOTS`] windows are open at once (nested, or on several threads). While none is,
//! the allocation path pays one relaxed load of [`OPEN`] (a word written only when a window
//! opens or closes). While one is, every device allocation, free and release adds its bytes
//! to one shared counter ([`LIVE`], all devices together) and raises each open window's
//! maximum: exact whatever the per-thread counters have not folded yet
//! ([`super::counters`]), at the cost of one shared atomic add per operation then.
//!
//! An operation that runs while a window opens or closes may fall on either side of it.
//!
//! A token names a window: its slot, the slot's use count and the fork epoch, so that a
//! closed window's token, or one from before a fork, is refused rather than misread.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};

/// Windows that can be open at once.
pub const SLOTS: usize = 64;

/// One bit per open window: the only word the allocation path reads while none is open.
static OPEN: AtomicU64 = AtomicU64::new(0);
/// One bit per slot in use (claimed before it opens, released after it closes).
static CLAIMED: AtomicU64 = AtomicU64::new(0);
/// Device bytes live, all devices, as counted while some window is open (only differences
/// between two readings mean anything).
static LIVE: AtomicI64 = AtomicI64::new(0);
/// Device bytes allocated while some window is open.
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
/// Forks seen: a token carries the epoch it was made in.
static EPOCH: AtomicU64 = AtomicU64::new(0);

struct Slot {
    /// Times this slot was claimed; part of its tokens.
    uses: AtomicU64,
    /// The order key (see [`super::order::order_key`]) when it opened.
    begin_key: AtomicU64,
    base_live: AtomicI64,
    max_live: AtomicI64,
    base_allocated: AtomicU64,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        uses: AtomicU64::new(0),
        begin_key: AtomicU64::new(0),
        base_live: AtomicI64::new(0),
        max_live: AtomicI64::new(0),
        base_allocated: AtomicU64::new(0),
    }
}; SLOTS];

const SLOT_BITS: u32 = 6;
const USE_BITS: u32 = 42;
const USE_MASK: u64 = (1 << USE_BITS) - 1;
const EPOCH_MASK: u64 = (1 << (64 - SLOT_BITS - USE_BITS)) - 1;

fn token(slot: usize, uses: u64, epoch: u64) -> u64 {
    slot as u64 | (uses & USE_MASK) << SLOT_BITS | (epoch & EPOCH_MASK) << (SLOT_BITS + USE_BITS)
}

/// Counts a change of `delta` live device bytes (an allocation, a free, memory released with
/// its context): one relaxed load while no window is open.
#[inline]
pub fn note(delta: i64) {
    let open = OPEN.load(Relaxed);
    if open != 0 {
        note_open(open, delta);
    }
}

#[cold]
#[inline(never)]
fn note_open(open: u64, delta: i64) {
    let now = LIVE.fetch_add(delta, Relaxed) + delta;
    if delta > 0 {
        ALLOCATED.fetch_add(delta as u64, Relaxed);
    }
    let mut bits = open;
    while bits != 0 {
        let slot = &TABLE[bits.trailing_zeros() as usize];
        bits &= bits - 1;
        if now > slot.max_live.load(Relaxed) {
            slot.max_live.fetch_max(now, Relaxed);
        }
    }
}

/// Why a window could not be opened or closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowError {
    /// [`SLOTS`] windows are open already.
    Full,
    /// The token names no open window (closed already, or never made).
    Unknown,
    /// The window was opened before a fork, in the parent.
    BeforeFork,
}

/// What a window saw, when it closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed {
    /// Order keys of its opening and closing: allocations with a key in `begin_key..end_key`
    /// were made inside it.
    pub begin_key: u64,
    pub end_key: u64,
    /// The most device memory live while it was open, above what was live when it opened.
    pub peak_bytes: u64,
    /// Device bytes allocated while it was open.
    pub allocated_bytes: u64,
}

/// Opens a window; returns its token (never 0).
pub fn open() -> Result<u64, WindowError> {
    let mut claimed = CLAIMED.load(SeqCst);
    let index = loop {
        if claimed == u64::MAX {
            return Err(WindowError::Full);
        }
        let i = (!claimed).trailing_zeros() as usize;
        match CLAIMED.compare_exchange_weak(claimed, claimed | 1 << i, SeqCst, SeqCst) {
            Ok(_) => break i,
            Err(now) => claimed = now,
        }
    };
    let slot = &TABLE[index];
    let uses = (slot.uses.load(Relaxed) + 1) & USE_MASK;
    let uses = uses.max(1);
    slot.uses.store(uses, Relaxed);
    slot.max_live.store(i64::MIN, SeqCst);
    slot.begin_key.store(super::order::order_key(), Relaxed);
    OPEN.fetch_or(1 << index, SeqCst);
    let base = LIVE.load(SeqCst);
    slot.base_live.store(base, Relaxed);
    slot.max_live.fetch_max(base, SeqCst);
    slot.base_allocated.store(ALLOCATED.load(SeqCst), Relaxed);
    Ok(token(index, uses, EPOCH.load(Relaxed)))
}

/// Closes the window `token` names and says what it saw.
pub fn close(token: u64) -> Result<Closed, WindowError> {
    let index = (token & ((1 << SLOT_BITS) - 1)) as usize;
    let uses = (token >> SLOT_BITS) & USE_MASK;
    let epoch = token >> (SLOT_BITS + USE_BITS);
    if epoch != EPOCH.load(Relaxed) & EPOCH_MASK {
        return Err(WindowError::BeforeFork);
    }
    let slot = &TABLE[index];
    let bit = 1u64 << index;
    if token == 0 || OPEN.load(SeqCst) & bit == 0 || slot.uses.load(Relaxed) != uses {
        return Err(WindowError::Unknown);
    }
    // Only the holder of the token closes it: take the bit back first, so that two closes of
    // one token cannot both succeed.
    if OPEN.fetch_and(!bit, SeqCst) & bit == 0 {
        return Err(WindowError::Unknown);
    }
    let end_key = super::order::order_key();
    let max = slot.max_live.load(SeqCst);
    let base = slot.base_live.load(Relaxed);
    let allocated = ALLOCATED
        .load(SeqCst)
        .wrapping_sub(slot.base_allocated.load(Relaxed));
    let closed = Closed {
        begin_key: slot.begin_key.load(Relaxed),
        end_key,
        peak_bytes: max.saturating_sub(base).max(0) as u64,
        allocated_bytes: allocated,
    };
    CLAIMED.fetch_and(!bit, SeqCst);
    Ok(closed)
}

/// In the child of a fork: no window is open (the parent's are the parent's; their tokens are
/// refused here), and only this thread runs.
pub fn reset_after_fork() {
    EPOCH.fetch_add(1, SeqCst);
    OPEN.store(0, SeqCst);
    CLAIMED.store(0, SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    // The table is process-wide: one test walks it all.
    #[test]
    fn windows_nest_overlap_and_refuse_stale_tokens() {
        let a = open().unwrap();
        note(100);
        let b = open().unwrap();
        note(50);
        note(-120);
        note(10);
        let cb = close(b).unwrap();
        assert_eq!(cb.peak_bytes, 50);
        assert_eq!(cb.allocated_bytes, 60);
        assert!(cb.begin_key <= cb.end_key);
        assert_eq!(close(b), Err(WindowError::Unknown), "closed once");
        note(-40);
        let ca = close(a).unwrap();
        assert_eq!(ca.peak_bytes, 150);
        assert_eq!(ca.allocated_bytes, 160);
        assert_eq!(close(0), Err(WindowError::Unknown));
        assert_eq!(OPEN.load(Relaxed), 0);

        // A peak below the start is no peak.
        let c = open().unwrap();
        note(-10);
        assert_eq!(close(c).unwrap().peak_bytes, 0);

        // Full table.
        let all: Vec<u64> = (0..SLOTS).map(|_| open().unwrap()).collect();
        assert_eq!(open(), Err(WindowError::Full));
        for t in &all {
            close(*t).unwrap();
        }

        // A token from before a fork.
        let d = open().unwrap();
        reset_after_fork();
        assert_eq!(close(d), Err(WindowError::BeforeFork));
        assert_eq!(OPEN.load(Relaxed), 0);
        let e = open().unwrap();
        assert_ne!(e, d);
        close(e).unwrap();
    }
}
