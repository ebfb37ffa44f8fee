//! The stack capture's origins: the stack of the thread that started work which other threads do for it, given to
//! the allocations those threads make (PyTorch's backward pass runs on the autograd engine's
//! own threads, which have no Python frames, while the thread that called `backward()` waits).
//!
//! [`begin`] records an origin (a stack captured on the calling thread, [`super::capture_origin`])
//! in a small fixed table and makes it *current*; [`end`] closes it. While an origin is current,
//! every capture on a thread that has no Python frames of its own appends one tagged word
//! ([`super::ORIGIN_TAG`] and the origin's stack id) to its stack, so its stack (and id) says
//! where the work was started; [`super::origin_of`] reads it back when the report is written.
//!
//! - **Which origin**: the most recent one still open. Origins nest (an inner `backward()`
//!   inside a hook of an outer one) and may overlap on several threads; closing the current
//!   one makes the most recent of the others current again. An origin whose stack could not be
//!   captured (stacks off) is open but never current.
//! - **Bounded**: [`SLOTS`] open at once; one more is refused ([`OriginError::Full`]).
//! - **The allocation path** reads one word ([`current`], a relaxed load) on threads without
//!   Python frames, nothing else.
//! - **Locks**: [`begin`] and [`end`] take one spin-lock, for a few loads and stores, bounded;
//!   it is never held by the allocation path.
//! - **Fork**: a forked child starts with no origin ([`reset_after_fork`]); a token from the
//!   parent names nothing in the child.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::dedup::SpinLock;
use super::words::StackId;

/// Origins open at once, at most.
pub const SLOTS: usize = 16;

/// No stack: an origin opened while stacks were off.
const NO_STACK: u32 = u32::MAX;

/// Why an origin could not be opened or closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginError {
    /// [`SLOTS`] origins are open already, or the table's lock could not be had.
    Full,
    /// The token names no open origin.
    Unknown,
}

struct Slot {
    /// 0: free; else the token of the origin that holds it.
    token: AtomicU64,
    stack: AtomicU32,
}

/// A table of open origins (one per process: [`ORIGINS`]; tests make their own).
pub(crate) struct Origins {
    table: [Slot; SLOTS],
    lock: SpinLock,
    /// Tokens are handed out in order: the largest open one is the most recent.
    next_token: AtomicU64,
    /// The current origin: `CURRENT_SET | stack id`, or 0 when none.
    current: AtomicU64,
}

const CURRENT_SET: u64 = 1 << 32;

static ORIGINS: Origins = Origins::new();

impl Origins {
    pub(crate) const fn new() -> Origins {
        Origins {
            table: [const {
                Slot {
                    token: AtomicU64::new(0),
                    stack: AtomicU32::new(NO_STACK),
                }
            }; SLOTS],
            lock: SpinLock::new(),
            next_token: AtomicU64::new(1),
            current: AtomicU64::new(0),
        }
    }

    #[inline]
    fn current(&self) -> Option<StackId> {
        let c = self.current.load(Ordering::Relaxed);
        (c & CURRENT_SET != 0).then_some(c as u32)
    }

    /// Makes the most recent open origin with a stack current (or none). Called with the lock
    /// held.
    fn recompute(&self) {
        let mut best: Option<(u64, u32)> = None;
        for s in &self.table {
            let token = s.token.load(Ordering::Relaxed);
            let stack = s.stack.load(Ordering::Relaxed);
            if token != 0 && stack != NO_STACK && best.is_none_or(|(t, _)| token > t) {
                best = Some((token, stack));
            }
        }
        let word = best.map_or(0, |(_, stack)| CURRENT_SET | u64::from(stack));
        self.current.store(word, Ordering::Release);
    }

    fn begin(&self, stack: Option<StackId>) -> Result<u64, OriginError> {
        if !self.lock.lock_bounded() {
            return Err(OriginError::Full);
        }
        let r = match self
            .table
            .iter()
            .find(|s| s.token.load(Ordering::Relaxed) == 0)
        {
            None => Err(OriginError::Full),
            Some(slot) => {
                let token = self.next_token.fetch_add(1, Ordering::Relaxed);
                slot.stack
                    .store(stack.unwrap_or(NO_STACK), Ordering::Relaxed);
                slot.token.store(token, Ordering::Relaxed);
                self.recompute();
                Ok(token)
            }
        };
        self.lock.unlock();
        r
    }

    fn end(&self, token: u64) -> Result<(), OriginError> {
        if token == 0 {
            return Err(OriginError::Unknown);
        }
        if !self.lock.lock_bounded() {
            return Err(OriginError::Full);
        }
        let r = match self
            .table
            .iter()
            .find(|s| s.token.load(Ordering::Relaxed) == token)
        {
            None => Err(OriginError::Unknown),
            Some(slot) => {
                slot.token.store(0, Ordering::Relaxed);
                slot.stack.store(NO_STACK, Ordering::Relaxed);
                self.recompute();
                Ok(())
            }
        };
        self.lock.unlock();
        r
    }

    fn reset(&self) {
        for s in &self.table {
            s.token.store(0, Ordering::Relaxed);
            s.stack.store(NO_STACK, Ordering::Relaxed);
        }
        self.current.store(0, Ordering::Relaxed);
        self.lock.unlock();
    }
}

/// The current origin's stack, if one is open: what a capture on a thread without Python frames
/// appends. One relaxed load.
#[inline]
pub fn current() -> Option<StackId> {
    ORIGINS.current()
}

/// Opens an origin with `stack` (the opening thread's, or `None` when it could not be
/// captured) and makes it current; returns its token (never 0).
pub fn begin(stack: Option<StackId>) -> Result<u64, OriginError> {
    ORIGINS.begin(stack)
}

/// Closes the origin `token` names; the most recent other open one becomes current.
pub fn end(token: u64) -> Result<(), OriginError> {
    ORIGINS.end(token)
}

/// In a forked child: no origin is open (the threads that opened them are the parent's).
pub(crate) fn reset_after_fork() {
    ORIGINS.reset();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_recent_open_origin_is_current() {
        let o = Origins::new();
        assert_eq!(o.current(), None);
        let a = o.begin(Some(7)).unwrap();
        assert_eq!(o.current(), Some(7));
        let b = o.begin(Some(9)).unwrap();
        assert!(b > a);
        assert_eq!(o.current(), Some(9));
        // One without a stack is open, never current.
        let c = o.begin(None).unwrap();
        assert_eq!(o.current(), Some(9));
        // Closing an older one leaves the newest current; closing that one goes back.
        o.end(a).unwrap();
        assert_eq!(o.current(), Some(9));
        assert_eq!(o.end(a), Err(OriginError::Unknown), "closed already");
        o.end(b).unwrap();
        assert_eq!(o.current(), None, "only the stackless one is left");
        o.end(c).unwrap();
        assert_eq!(o.end(0), Err(OriginError::Unknown));
        assert_eq!(o.end(u64::MAX), Err(OriginError::Unknown));
        // Nested: the inner one is current until it closes, then the outer one again.
        let outer = o.begin(Some(1)).unwrap();
        let inner = o.begin(Some(2)).unwrap();
        assert_eq!(o.current(), Some(2));
        o.end(inner).unwrap();
        assert_eq!(o.current(), Some(1));
        o.end(outer).unwrap();
        assert_eq!(o.current(), None);
    }

    #[test]
    fn the_table_is_bounded_and_a_forked_child_starts_with_none() {
        let o = Origins::new();
        let tokens: Vec<u64> = (0..SLOTS as u32)
            .map(|i| o.begin(Some(i)).unwrap())
            .collect();
        assert_eq!(o.begin(Some(99)), Err(OriginError::Full));
        assert_eq!(o.current(), Some(SLOTS as u32 - 1));
        // What a fork's child handler does.
        o.reset();
        assert_eq!(o.current(), None);
        assert_eq!(o.end(tokens[0]), Err(OriginError::Unknown));
        let t = o.begin(Some(3)).unwrap();
        assert_eq!(o.current(), Some(3));
        o.end(t).unwrap();
        assert_eq!(o.current(), None);
    }

    #[test]
    fn concurrent_origins_stay_consistent() {
        let o = std::sync::Arc::new(Origins::new());
        let threads: Vec<_> = (0..4u32)
            .map(|k| {
                let o = o.clone();
                std::thread::spawn(move || {
                    for i in 0..2000u32 {
                        let t = o.begin(Some(k * 10_000 + i)).unwrap();
                        assert!(o.current().is_some());
                        o.end(t).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(o.current(), None);
    }
}
