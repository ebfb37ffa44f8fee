//! The calling thread's cache of ready pool blocks (`cuguard_pool::ThreadCache`), kept in a
//! thread-local with the pool it is bound to, and the tracker's record packed into a cache slot.
//!
//! - One cache per thread, bound to the pool of the context it last allocated or freed in; a
//!   thread that moves to another context's pool first gives its blocks back to the old one.
//! - Thread exit: the thread-local's destructor only marks the cache orphaned (two atomic
//!   stores, no lock, no allocation); the pool adopts it on a later allocation.
//! - Context destroy: the pool's cache generation changes, and the cache forgets its blocks on
//!   its next use, without touching the dead pool's arenas.
//! - Fork: [`reset_after_fork`] bumps this module's generation; the forking thread's cache,
//!   seeing it, forgets the parent's pool (whose locks may be held by threads that are gone).
//! - `CUGUARD_POOL_THREAD_CACHE=0` turns the caches off (every pair goes to the arenas).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use cuguard_pool::{Packed, RECORD_WORDS, ThreadCache};

use super::pool::Pool;
use crate::driver::Entry;
use cuguard_format::MemoryKind;

use crate::tracker::Record;

/// Bumped in a forked child.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// A thread's cache and the pool it is bound to.
struct Holder {
    cache: ThreadCache,
    pool: Option<&'static Pool>,
    /// [`FORKS`] when it was bound.
    forks: u64,
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take()
            && self.forks == FORKS.load(Ordering::Acquire)
        {
            pool.orphan_cache(&mut self.cache);
        }
    }
}

thread_local! {
    static CACHE: RefCell<Holder> = const {
        RefCell::new(Holder {
            cache: ThreadCache::new(),
            pool: None,
            forks: 0,
        })
    };
}

/// Calls `f` with this thread's cache bound to `pool`; with `rebind`, a cache bound to another
/// pool gives its blocks back to that pool and is bound to this one, else it is not used.
/// `None` when the caches are off, or the thread's cache is not usable now (the thread is
/// exiting, or this is a nested call).
#[inline]
pub fn with<T>(
    pool: &'static Pool,
    rebind: bool,
    f: impl FnOnce(&mut ThreadCache) -> T,
) -> Option<T> {
    if !crate::config::get().thread_cache {
        return None;
    }
    CACHE
        .try_with(|h| {
            let mut h = h.try_borrow_mut().ok()?;
            let forks = FORKS.load(Ordering::Acquire);
            if h.forks != forks {
                h.cache.forget();
                h.pool = None;
                h.forks = forks;
            }
            if !h.pool.is_some_and(|p| std::ptr::eq(p, pool)) {
                if !rebind && h.pool.is_some() {
                    return None;
                }
                if let Some(old) = h.pool.take() {
                    old.flush_cache(&mut h.cache);
                }
                h.pool = Some(pool);
            }
            Some(f(&mut h.cache))
        })
        .ok()
        .flatten()
}

/// In a forked child: every cache forgets the parent's pools on its next use.
pub fn reset_after_fork() {
    FORKS.fetch_add(1, Ordering::AcqRel);
}

fn memory_code(m: MemoryKind) -> u64 {
    m as u64
}

fn memory_of(code: u64) -> MemoryKind {
    u8::try_from(code)
        .ok()
        .and_then(MemoryKind::of_number)
        .unwrap_or_default()
}

impl Packed for Record {
    fn pack(&self) -> [u64; RECORD_WORDS] {
        let mut w = [0; RECORD_WORDS];
        w[0] = self.size;
        w[1] = self.requested;
        w[2] = self.api as u64
            | memory_code(self.memory) << 32
            | u64::from(self.tag.wrapping_add(1) & 0xff_ffff) << 40;
        w[3] = u64::from(self.device as u32) | u64::from(self.context) << 32;
        w[4] = u64::from(self.thread) | u64::from(self.stack) << 32;
        w[5] = self.seq;
        w[6] = self.time_ms;
        w
    }

    fn unpack(w: &[u64; RECORD_WORDS]) -> Self {
        Record {
            size: w[0],
            requested: w[1],
            api: Entry::ALL[(w[2] as u32 as usize).min(Entry::ALL.len() - 1)],
            memory: memory_of((w[2] >> 32) & 0xff),
            tag: ((w[2] >> 40) as u32).wrapping_sub(1),
            device: w[3] as u32 as i32,
            context: (w[3] >> 32) as u32,
            thread: w[4] as u32,
            stack: (w[4] >> 32) as u32,
            seq: w[5],
            time_ms: w[6],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_comes_back_from_its_words() {
        let r = Record {
            size: 1 << 40,
            requested: 12345,
            api: Entry::ALL[Entry::ALL.len() - 1],
            memory: MemoryKind::Pitched,
            device: -1,
            context: u32::MAX,
            thread: 4_000_000,
            seq: u64::MAX - 3,
            time_ms: 99,
            stack: 7,
            tag: 4096,
        };
        let back = Record::unpack(&r.pack());
        assert_eq!(format!("{back:?}"), format!("{r:?}"));
    }
}
