//! Which other contexts' work can touch a context's memory: the relations a pool's fence must
//! cover besides its own context's streams (the rule is `cuguard_pool`'s `reuse.rs`, "Other
//! contexts").
//!
//! For each context X whose memory others can reach, two lists of contexts:
//! - *enabled*: contexts that enabled peer access to X (`cuCtxEnablePeerAccess(X)` while they
//!   were current), until they disable it or either context is destroyed;
//! - *touched*: contexts that issued a peer copy touching X's memory. A copy is noted before it
//!   is counted as a submission ([`Touch`]: pending while the copy is being issued, then the
//!   submission count after it), so a fence whose mark counts it sees the relation. Once a
//!   completed fence of X covers that count, the copy is done and the relation is forgotten.
//!   Disabling peer access leaves the same kind of relation, covering what was issued before.
//!
//! The relations are kept in [`super::relations`], whose [`super::relations::reaching`] answers
//! with one atomic read while no relation exists anywhere, so a context nothing can reach keeps
//! today's fences at no cost. A forked child starts with none (the
//! parent's contexts are not its own).

use std::sync::atomic::Ordering;

use super::relations::{COUNT, RELATIONS, Reach, Touched, change};
use super::submissions;
use crate::process::global;

/// Context `by` enabled peer access to context `peer`.
pub fn enabled(peer: u64, by: u64) {
    if peer == by {
        return;
    }
    change(|map| {
        let r = map.entry(peer).or_default();
        if !r.enabled.contains(&by) {
            r.enabled.push(by);
        }
    });
    // Work of `by` may now reach `peer`'s memory: no block of it stays reused early.
    super::stream_reuse::relation_added();
}

/// Context `by` disabled peer access to context `peer`: its work issued until now may still
/// touch `peer`'s memory, so it stays a relation until a fence covered that work.
pub fn disabled(peer: u64, by: u64) {
    change(|map| {
        let Some(r) = map.get_mut(&peer) else { return };
        let before = r.enabled.len();
        r.enabled.retain(|c| *c != by);
        if r.enabled.len() != before {
            touch_end(r, by, submissions::mark());
        }
    });
}

/// Context `by` disabled peer access: what it issued up to `mark` may still touch the memory.
fn touch_end(r: &mut Reach, by: u64, mark: u64) {
    match r.touched.iter_mut().find(|t| t.ctx == by) {
        Some(t) => t.mark = t.mark.max(mark),
        None => r.touched.push(Touched {
            ctx: by,
            pending: 0,
            mark,
        }),
    }
}

/// A peer copy being issued by context `by` into (or out of) the memory of other contexts:
/// noted when made, before the copy is issued and counted; dropped after it was counted.
pub struct Touch {
    by: u64,
    targets: [u64; 2],
}

impl Touch {
    /// Notes that context `by` is issuing a copy touching the memory of `targets` (those that
    /// are `by` itself or 0 are not others: nothing to note).
    pub fn begin(by: u64, targets: [u64; 2]) -> Option<Touch> {
        let mut targets = targets;
        if targets[1] == targets[0] {
            targets[1] = 0;
        }
        for t in &mut targets {
            if *t == by {
                *t = 0;
            }
        }
        if by == 0 || targets == [0, 0] {
            return None;
        }
        change(|map| {
            for &x in targets.iter().filter(|x| **x != 0) {
                let r = map.entry(x).or_default();
                match r.touched.iter_mut().find(|t| t.ctx == by) {
                    Some(t) => t.pending += 1,
                    None => r.touched.push(Touched {
                        ctx: by,
                        pending: 1,
                        mark: 0,
                    }),
                }
            }
        });
        // The copy may reach another context's memory: no block stays reused early.
        super::stream_reuse::relation_added();
        Some(Touch { by, targets })
    }
}

impl Drop for Touch {
    /// The copy was counted: it is covered by any fence whose mark reaches the count now.
    fn drop(&mut self) {
        let mark = submissions::mark();
        change(|map| {
            for &x in self.targets.iter().filter(|x| **x != 0) {
                // Gone with a destroyed context: nothing left to cover.
                if let Some(t) = map
                    .get_mut(&x)
                    .and_then(|r| r.touched.iter_mut().find(|t| t.ctx == self.by))
                {
                    t.pending = t.pending.saturating_sub(1);
                    t.mark = t.mark.max(mark);
                }
            }
        });
    }
}

/// Context `ctx` is gone: it reaches nothing and nothing reaches it (its work ended with it).
pub fn context_gone(ctx: u64) {
    if COUNT.load(Ordering::Acquire) == 0 {
        return;
    }
    change(|map| {
        map.remove(&ctx);
        for r in map.values_mut() {
            r.enabled.retain(|c| *c != ctx);
            r.touched.retain(|t| t.ctx != ctx);
        }
    });
}

/// In the child of a fork: no relations (the parent's contexts are not the child's). The old
/// table is leaked, not dropped: its lock may be held by a thread that does not exist here.
pub fn reset_after_fork() {
    global::replace(&RELATIONS, Default::default());
    COUNT.store(0, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::relations::reaching;

    /// The relations are process-wide: one test walks through them all, in order.
    #[test]
    fn relations_come_and_go() {
        let (x, b, c) = (0x1000, 0x2000, 0x3000);
        assert!(reaching(x, 0).is_empty());
        // Peer access: reaches until disabled, then until a fence covers the work before that.
        enabled(x, b);
        enabled(x, b);
        enabled(x, x);
        assert_eq!(reaching(x, u64::MAX), vec![b]);
        assert!(reaching(b, 0).is_empty(), "access is one-way");
        submissions::submitted();
        let at_disable = submissions::mark();
        disabled(x, b);
        assert_eq!(reaching(x, at_disable - 1), vec![b]);
        assert_eq!(reaching(x, at_disable), Vec::<u64>::new());
        assert_eq!(COUNT.load(Ordering::Acquire), 0);
        // A copy reaches while being issued whatever the fences did, then until covered.
        let touch = Touch::begin(c, [x, c]).expect("x is another context");
        assert_eq!(reaching(x, u64::MAX), vec![c]);
        assert!(reaching(c, u64::MAX).is_empty());
        submissions::submitted();
        drop(touch);
        let counted = submissions::mark();
        assert_eq!(reaching(x, counted - 1), vec![c]);
        assert!(reaching(x, counted).is_empty());
        assert!(Touch::begin(c, [c, 0]).is_none(), "its own memory");
        assert!(Touch::begin(0, [x, 0]).is_none(), "no current context");
        // Destroying either context drops the relations.
        enabled(x, b);
        let pending = Touch::begin(c, [x, b]);
        assert_eq!(reaching(x, u64::MAX), vec![b, c]);
        context_gone(c);
        assert_eq!(reaching(x, u64::MAX), vec![b]);
        assert!(reaching(b, u64::MAX).is_empty());
        context_gone(x);
        drop(pending);
        assert!(reaching(x, 0).is_empty());
        assert_eq!(COUNT.load(Ordering::Acquire), 0);
    }
}
