//! The relations that [`super::peers`] notes, by the context reached: the contexts that enabled
//! peer access to it and those whose copies touched its memory, kept with their count
//! ([`COUNT`]) so that [`reaching`] answers with one atomic read while no relation exists
//! anywhere. Below the stream rule ([`super::stream_reuse`]) and the fences, which ask it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use crate::process::global::{self, lock};

/// A context that copied to or from X's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Touched {
    pub(super) ctx: u64,
    /// Copies being issued now (not yet counted).
    pub(super) pending: u32,
    /// The submission count after its last copy was counted: a completed fence of X covering
    /// this mark waited for all its copies.
    pub(super) mark: u64,
}

/// The contexts that can reach one context's memory.
#[derive(Default)]
pub(super) struct Reach {
    pub(super) enabled: Vec<u64>,
    pub(super) touched: Vec<Touched>,
}

impl Reach {
    fn is_empty(&self) -> bool {
        self.enabled.is_empty() && self.touched.is_empty()
    }

    fn relations(&self) -> usize {
        self.enabled.len() + self.touched.len()
    }
}

/// Reach by the handle of the context reached.
pub(super) type Relations = Mutex<HashMap<u64, Reach>>;

pub(super) static RELATIONS: AtomicPtr<Relations> = AtomicPtr::new(std::ptr::null_mut());
/// How many relations exist, in every context: 0 means no fence need look further.
pub(super) static COUNT: AtomicUsize = AtomicUsize::new(0);

fn relations() -> &'static Relations {
    global::get_or_create(&RELATIONS, Default::default)
}

/// Runs `f` on the relations and keeps [`COUNT`] in step with what it changed.
pub(super) fn change<T>(f: impl FnOnce(&mut HashMap<u64, Reach>) -> T) -> T {
    let mut map = lock(relations());
    let before: usize = map.values().map(Reach::relations).sum();
    let out = f(&mut map);
    map.retain(|_, r| !r.is_empty());
    let after: usize = map.values().map(Reach::relations).sum();
    if after >= before {
        COUNT.fetch_add(after - before, Ordering::AcqRel);
    } else {
        COUNT.fetch_sub(before - after, Ordering::AcqRel);
    }
    out
}

/// The contexts whose work can touch context `ctx`'s memory now, after forgetting the copies a
/// completed fence of `ctx` covering `completed` already waited for. Empty, with one atomic
/// read, while no relation exists anywhere.
pub fn reaching(ctx: u64, completed: u64) -> Vec<u64> {
    if COUNT.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    change(|map| {
        let Some(r) = map.get_mut(&ctx) else {
            return Vec::new();
        };
        r.touched.retain(|t| t.pending > 0 || t.mark > completed);
        let mut out = r.enabled.clone();
        for t in &r.touched {
            if !out.contains(&t.ctx) {
                out.push(t.ctx);
            }
        }
        out
    })
}
