//! The program's names for its memory, shim side: the tag each thread has open now
//! (`cuguard_tag_push`, Python's `with cuguard.tag("kv_cache"):`), which every allocation the
//! thread makes inside takes ([`current`], read by the allocation's record), and the tags
//! given after the fact ([`annotate`]). A tag is a name of [`crate::recorder::names`], shared
//! with the phases: the history carries its id ([`cuguard_history::Action::Tag`]), the report
//! its text (`leaks[].tag`).
//!
//! Tags nest on their thread; the innermost names the allocation. [`MAX_DEPTH`] are kept: past
//! it a push is counted (its pop matches it) but the allocations keep the deepest kept tag. A
//! forked child's name table is a new one: the tags the forking thread (the child's one thread)
//! had open are closed there ([`after_fork_child`]).
//!
//! A tag given after the fact is kept apart ([`given`], by address and the allocation's order
//! key, so that a later allocation at the same address is not named by it): a block of
//! cuguard's pool keeps its record where the pool keeps it, in another thread's cache maybe.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr};
use std::sync::{Arc, Mutex};

use crate::process::global::{get, get_or_create, lock};
use crate::recorder::names;
use crate::tracker::record::{NONE, Record};

/// The most tags given after the fact that are kept (then the oldest addresses' go first).
pub const MAX_GIVEN: usize = 1 << 16;

/// The most tags a thread keeps open.
pub const MAX_DEPTH: usize = 16;

thread_local! {
    /// The thread's open tags (name ids), innermost last, with how many are open (past
    /// [`MAX_DEPTH`] too).
    static OPEN: Cell<Open> = const { Cell::new(Open { ids: [NONE; MAX_DEPTH], depth: 0 }) };
}

#[derive(Clone, Copy)]
struct Open {
    ids: [u32; MAX_DEPTH],
    depth: u32,
}

impl Open {
    /// The innermost kept tag.
    fn innermost(&self) -> u32 {
        match (self.depth as usize).min(MAX_DEPTH) {
            0 => NONE,
            n => self.ids[n - 1],
        }
    }
}

/// The tag of an allocation made now on this thread: its innermost open tag, or [`NONE`]
/// (also while the thread is being torn down). One thread-local read.
#[inline]
pub fn current() -> u32 {
    current_in(crate::process::local::get())
}

/// [`current`] of the thread whose words `l` are (already looked up: `process::local`).
#[inline(always)]
pub fn current_in(l: Option<&crate::process::local::Local>) -> u32 {
    l.map_or(NONE, |l| l.tag.get())
}

/// Sets the thread's innermost open tag (what [`current`] reads, kept with the allocation path's
/// other words of the thread: `process::local`).
fn set_current(tag: u32) {
    if let Some(l) = crate::process::local::get() {
        l.tag.set(tag);
    }
}

/// Opens tag `id` on this thread.
pub fn push(id: u32) {
    let _ = OPEN.try_with(|o| {
        let mut open = o.get();
        if (open.depth as usize) < MAX_DEPTH {
            open.ids[open.depth as usize] = id;
        }
        open.depth = open.depth.saturating_add(1);
        o.set(open);
        set_current(open.innermost());
    });
}

/// Closes this thread's innermost open tag; `false` when none is open.
pub fn pop() -> bool {
    OPEN.try_with(|o| {
        let mut open = o.get();
        if open.depth == 0 {
            return false;
        }
        open.depth -= 1;
        o.set(open);
        set_current(open.innermost());
        true
    })
    .unwrap_or(false)
}

/// Live device bytes and allocations by tag (name id), for the stats page and the exporter:
/// counted as tagged memory is made and freed, by the tag it was made with (a tag given after
/// the fact is not counted here).
static LIVE: [[AtomicI64; 2]; names::MAX_NAMES + 1] =
    [const { [AtomicI64::new(0), AtomicI64::new(0)] }; names::MAX_NAMES + 1];
/// Set once tagged memory was counted: until then the page looks at no tag.
static COUNTED: AtomicBool = AtomicBool::new(false);

/// Tagged device memory of `size` bytes made (`made`) or gone, tag `tag` ([`NONE`]: nothing to
/// count; the allocation path's cost for untagged memory is this one comparison).
#[inline]
pub fn count(tag: u32, size: u64, made: bool) {
    if tag == NONE {
        return;
    }
    let Some(slot) = LIVE.get(tag as usize) else {
        return;
    };
    let sign = if made { 1 } else { -1 };
    slot[0].fetch_add(sign * size as i64, Relaxed);
    slot[1].fetch_add(sign, Relaxed);
    if made && !COUNTED.load(Relaxed) {
        COUNTED.store(true, Relaxed);
    }
}

/// The tags with live device memory now: (name id, bytes, allocations), largest first.
pub fn live() -> Vec<(u32, u64, u64)> {
    if !COUNTED.load(Relaxed) {
        return Vec::new();
    }
    let mut out: Vec<(u32, u64, u64)> = LIVE
        .iter()
        .enumerate()
        .filter_map(|(id, s)| {
            let (bytes, n) = (s[0].load(Relaxed), s[1].load(Relaxed));
            (n > 0).then(|| (id as u32, bytes.max(0) as u64, n as u64))
        })
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    out
}

/// Tags given after the fact: address → (the allocation's order key, the tag).
type Given = Mutex<HashMap<u64, (u64, u32)>>;

static GIVEN: AtomicPtr<Given> = AtomicPtr::new(std::ptr::null_mut());

/// Names the live allocation `record` at `addr` (the caller finds it: in the tracker, or in
/// cuguard's pool) `id`, in the reports from now on and in the history from this moment.
pub fn annotate(addr: u64, record: &Record, id: u32) {
    {
        let mut given = lock(get_or_create(&GIVEN, Default::default));
        if given.len() >= MAX_GIVEN && !given.contains_key(&addr) {
            let oldest = given
                .iter()
                .min_by_key(|(_, (seq, _))| *seq)
                .map(|(a, _)| *a);
            if let Some(a) = oldest {
                given.remove(&a);
            }
        }
        given.insert(addr, (record.seq, id));
    }
    crate::recorder::tagged(None, addr, id);
}

/// In the child of a fork: the table may be locked by a thread the child does not have, and
/// the allocations it names are the parent's.
pub fn after_fork_child() {
    crate::process::global::replace(&GIVEN, Given::default());
    let _ = OPEN.try_with(|o| {
        o.set(Open {
            ids: [NONE; MAX_DEPTH],
            depth: 0,
        })
    });
    set_current(NONE);
    // The parent's memory is not the child's, and the child's names are its own.
    for slot in &LIVE {
        slot[0].store(0, Relaxed);
        slot[1].store(0, Relaxed);
    }
}

/// The text of tag `id`, `None` for none; each distinct tag's text is looked up once and
/// shared through `seen`.
pub fn text(seen: &mut HashMap<u32, Arc<str>>, id: u32) -> Option<Arc<str>> {
    if id == NONE {
        return None;
    }
    if let Some(t) = seen.get(&id) {
        return Some(t.clone());
    }
    let text: Arc<str> = names::text(id)?.into();
    seen.insert(id, text.clone());
    Some(text)
}

/// The tag of the allocation at `addr` whose record is `record`: the one it was made with, or
/// one given after the fact; [`NONE`] without.
pub fn of(addr: u64, record: &Record) -> u32 {
    if record.tag != NONE {
        return record.tag;
    }
    let Some(given) = get(&GIVEN) else {
        return NONE;
    };
    match lock(given).get(&addr) {
        Some(&(seq, id)) if seq == record.seq => id,
        _ => NONE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_nest_and_the_innermost_names_the_allocation() {
        std::thread::spawn(|| {
            assert_eq!(current(), NONE);
            push(3);
            push(5);
            assert_eq!(current(), 5);
            assert!(pop());
            assert_eq!(current(), 3);
            assert!(pop());
            assert_eq!(current(), NONE);
            assert!(!pop(), "a pop without a push");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn past_the_deepest_kept_tag_pushes_are_counted_and_popped() {
        std::thread::spawn(|| {
            for id in 0..MAX_DEPTH as u32 + 4 {
                push(id);
            }
            assert_eq!(current(), MAX_DEPTH as u32 - 1, "the deepest kept");
            for _ in 0..4 {
                assert!(pop());
            }
            assert_eq!(current(), MAX_DEPTH as u32 - 1);
            assert!(pop());
            assert_eq!(current(), MAX_DEPTH as u32 - 2);
        })
        .join()
        .unwrap();
    }
}
