//! The sites holding live device memory now, for the stats page and the alerts: live bytes per
//! (stack, device) from the tracker's per-stack counters ([`crate::tracker::by_stack`], no walk
//! of the allocations), each stack named once per process.
//!
//! Naming a stack is expensive (symbolizing its frames, up to half a second the first time a
//! module is read: [`crate::writer::stacks::sites_with_owners_now`]), so the label and owner of
//! each stack id are kept once found (a stack's frames never change). Only stacks that reach
//! the top of a list are named, all those new in one list together. When naming ran out of time
//! (a large library), the label found so far is used and naming is tried again, at most every
//! [`RETRY_MS`]. Runs on the cuguard thread, never on the allocation path.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicPtr;

use crate::process::global;
use crate::tracker::NONE;

/// What is live from one stack on one device now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    /// The stack, or [`NONE`] (allocations made without one).
    pub stack: u32,
    pub device: i32,
    pub bytes: u64,
    pub allocations: u64,
}

/// A site's name and owner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Name {
    /// The site as `summary` prints it (`step (train.py:42)`), `module+0x…` where nothing names
    /// it, `(no stack)` for allocations made without one.
    pub label: String,
    /// An owner id (`program`, `torch-caching-allocator`, …); empty when unknown.
    pub owner: String,
}

/// What is live on `devices` now, by stack and device, most bytes first (ties: device, then
/// stack), stacks with nothing live left out.
pub fn live(devices: &[i32]) -> Vec<Live> {
    let mut out: Vec<Live> = devices
        .iter()
        .flat_map(|&device| {
            crate::tracker::by_stack::snapshot(device).into_iter().map(
                move |(stack, bytes, allocations)| Live {
                    stack,
                    device,
                    bytes,
                    allocations,
                },
            )
        })
        .collect();
    out.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(a.device.cmp(&b.device))
            .then(a.stack.cmp(&b.stack))
    });
    out
}

/// How long a name found without enough time waits before it is tried again.
pub const RETRY_MS: u64 = 10_000;

/// A name found, and whether it is whole; when not, when it was found.
struct Found {
    name: Name,
    whole: bool,
    at_ms: u64,
}

type Cache = Mutex<HashMap<u32, Found>>;

/// Names found so far, by stack id; a forked child starts a new cache (its lock may be held by
/// the parent's cuguard thread, which the child does not have).
static CACHE: AtomicPtr<Cache> = AtomicPtr::new(std::ptr::null_mut());

fn cache() -> &'static Cache {
    global::get_or_create(&CACHE, || Mutex::new(HashMap::new()))
}

/// The names of `stacks`, in order: from the cache, the others named now, together.
pub fn names(stacks: &[u32]) -> Vec<Name> {
    let now = crate::process::clock::since_start_ms();
    let missing: Vec<u32> = {
        let c = global::lock(cache());
        let mut m: Vec<u32> = stacks
            .iter()
            .copied()
            .filter(|s| {
                *s != NONE
                    && c.get(s)
                        .is_none_or(|f| !f.whole && now >= f.at_ms + RETRY_MS)
            })
            .collect();
        m.sort_unstable();
        m.dedup();
        m
    };
    if !missing.is_empty() {
        // Named outside the lock: it may take a while.
        let (found, whole) = crate::writer::stacks::sites_with_owners_now(&missing);
        let mut c = global::lock(cache());
        for (id, site) in missing.iter().zip(found) {
            let name = match site {
                Some(s) => Name {
                    label: s.label.unwrap_or_else(|| "(no site)".into()),
                    owner: s.owner,
                },
                None => Name {
                    label: "(no stack)".into(),
                    owner: String::new(),
                },
            };
            c.insert(
                *id,
                Found {
                    name,
                    whole,
                    at_ms: now,
                },
            );
        }
    }
    let c = global::lock(cache());
    stacks
        .iter()
        .map(|s| match c.get(s) {
            Some(f) => f.name.clone(),
            None => Name {
                label: "(no stack)".into(),
                owner: String::new(),
            },
        })
        .collect()
}

/// In a forked child: a fresh cache. (The child's stack table is a copy of the parent's, so the
/// names would still hold; the lock might not.)
pub fn after_fork_child() {
    global::replace(&CACHE, Mutex::new(HashMap::new()));
}
