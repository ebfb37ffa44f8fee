//! The unwinder: a published snapshot of the module list with each module's mapped CFI, and
//! the per-thread state (rule cache, stack bounds, re-entry flag). The frame rules themselves
//! are in [`super::cfi`].
//!
//! Snapshot: an immutable [`Snapshot`] published through an `AtomicPtr`; readers load it and use
//! it with no lock. A refresh builds a new one under a try-lock and publishes it; old snapshots
//! are leaked (a reader may still hold one), which is bounded: a refresh happens only when the
//! loader's add/remove counters moved, at most once per [`REFRESH_INTERVAL_NS`] (unless forced:
//! after a `dlclose`, or by a miss on an address a newly loaded module maps,
//! [`refresh_for_miss`]), and at most [`MAX_SNAPSHOTS`] times (each costs about 80 bytes a
//! module).
//!
//! Per thread: a 128 KiB rule cache, a gimli CFI evaluation context (about 25 KiB, made at the
//! first cache miss; it never allocates while evaluating), the thread's stack bounds (so stack
//! reads never leave mapped memory) and a busy flag (no re-entry). They are freed by a
//! thread-local destructor; a capture after that (from another TLS destructor) borrows a
//! global spare under a try-lock, or gives up.

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use gimli::UnwindContext;

use super::cfi::{ModUnwind, Rule, RuleCache};
use super::dedup::SpinLock;
use super::phdr;

/// Refreshes of the module list are at most this often (unless forced by a dlclose).
pub(crate) const REFRESH_INTERVAL_NS: u64 = 20_000_000;
/// Snapshots built in the life of the process, at most.
pub(crate) const MAX_SNAPSHOTS: u32 = 4096;
/// Frames of the shim itself skipped at most, before giving up on finding the caller.
const MAX_SKIPPED: usize = 64;

pub(crate) struct Snapshot {
    /// Sorted by start, non-overlapping.
    mods: Vec<ModUnwind>,
    /// The module holding the shim's own code: its frames are skipped.
    own: (u64, u64),
    counters: (u64, u64),
    /// Distinguishes module lists under which a rule may differ, so the rule caches (each
    /// thread's, and the process-wide table's entries) know when to empty themselves: it
    /// changes only when a module may have been unloaded. Additions keep it (the modules known
    /// before keep their rules; ips in no module are never cached).
    generation: u64,
}

static GENERATION: AtomicU64 = AtomicU64::new(1);

/// Borrows mapped bytes of a loaded module for the life of the process.
///
/// SAFETY (for callers): `[bias + svma.0, bias + svma.1)` must lie in a readable segment of a
/// loaded module, as `phdr::describe` checks. The bytes stay mapped until the module is
/// dlclosed; see `invalidate` for that case.
unsafe fn mapped(bias: u64, svma: (u64, u64)) -> &'static [u8] {
    // SAFETY: see the function's contract.
    unsafe {
        std::slice::from_raw_parts(
            bias.wrapping_add(svma.0) as *const u8,
            (svma.1 - svma.0) as usize,
        )
    }
}

impl Snapshot {
    /// The module list now. `generation` is that of `previous` when no module can have been
    /// unloaded since (the loader's unload counter did not move and no dlclose was seen): every
    /// rule of the modules it knew still holds, so the rule caches are kept.
    fn build(counters: (u64, u64), previous: Option<&Snapshot>, stale: bool) -> Snapshot {
        // Any of the shim's own functions marks the shim's module.
        let own_addr = snapshot as *const () as u64;
        let mut mods = Vec::with_capacity(64);
        let mut own = (0, 0);
        for m in phdr::all() {
            if m.start <= own_addr && own_addr < m.end {
                own = (m.start, m.end);
            }
            super::loaded::note_module(&m);
            // SAFETY: the ranges come from `phdr::describe`, which checked them.
            let hdr = m
                .eh_frame_hdr_svma
                .map(|r| (unsafe { mapped(m.bias, r) }, r.0));
            // SAFETY: as above.
            let eh = m.eh_frame_svma.map(|r| (unsafe { mapped(m.bias, r) }, r.0));
            mods.push(ModUnwind {
                start: m.start,
                end: m.end,
                bias: m.bias,
                hdr,
                eh,
                text_svma: m.text_svma.map_or(0, |t| t.0),
            });
        }
        mods.sort_unstable_by_key(|m| m.start);
        let generation = match previous {
            Some(p) if !stale && p.counters.1 == counters.1 => p.generation,
            _ => GENERATION.fetch_add(1, Ordering::Relaxed),
        };
        Snapshot {
            mods,
            own,
            counters,
            generation,
        }
    }

    fn module(&self, ip: u64) -> Option<&ModUnwind> {
        let i = self.mods.partition_point(|m| m.start <= ip);
        let m = self.mods.get(i.checked_sub(1)?)?;
        (ip < m.end).then_some(m)
    }

    /// Whether `ip` lies in a module this snapshot knows.
    pub(crate) fn knows(&self, ip: u64) -> bool {
        self.module(ip).is_some()
    }
}

static SNAPSHOT: AtomicPtr<Snapshot> = AtomicPtr::new(std::ptr::null_mut());
static REFRESH_LOCK: SpinLock = SpinLock::new();
static LAST_REFRESH_NS: AtomicU64 = AtomicU64::new(0);
static SNAPSHOTS_BUILT: AtomicU32 = AtomicU32::new(0);
/// Set by a dlclose: the current snapshot may point at unmapped unwind data.
static STALE: AtomicBool = AtomicBool::new(false);

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer. CLOCK_MONOTONIC_COARSE is a vDSO read: no syscall,
    // no lock, no allocation.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The current snapshot, building the first one if needed. `None` if none could be had (another
/// thread is building the first one, or a dlclose made the current one unsafe and another
/// thread is replacing it).
pub(crate) fn snapshot() -> Option<&'static Snapshot> {
    let p = SNAPSHOT.load(Ordering::Acquire);
    if !p.is_null() && !STALE.load(Ordering::Relaxed) {
        // SAFETY: snapshots are published with Release once built and never freed.
        return Some(unsafe { &*p });
    }
    refresh(true);
    let p = SNAPSHOT.load(Ordering::Acquire);
    // SAFETY: as above.
    (!p.is_null() && !STALE.load(Ordering::Relaxed)).then(|| unsafe { &*p })
}

/// Rebuilds the snapshot if the module list changed. Rate-limited unless `force`; never waits
/// for another thread's refresh. Returns whether a new snapshot was published.
pub(crate) fn refresh(force: bool) -> bool {
    let now = now_ns();
    if !force && now.saturating_sub(LAST_REFRESH_NS.load(Ordering::Relaxed)) < REFRESH_INTERVAL_NS {
        return false;
    }
    if !REFRESH_LOCK.try_lock() {
        return false;
    }
    LAST_REFRESH_NS.store(now, Ordering::Relaxed);
    let current = SNAPSHOT.load(Ordering::Acquire);
    let counters = phdr::load_counters();
    let stale = STALE.swap(false, Ordering::AcqRel);
    // SAFETY: published snapshots are never freed.
    let unchanged = !current.is_null() && !stale && unsafe { (*current).counters } == counters;
    let mut published = false;
    if !unchanged && SNAPSHOTS_BUILT.load(Ordering::Relaxed) < MAX_SNAPSHOTS {
        SNAPSHOTS_BUILT.fetch_add(1, Ordering::Relaxed);
        // Reading the module tables: work done once per module list, billed apart.
        // SAFETY: published snapshots are never freed.
        let previous = (!current.is_null()).then(|| unsafe { &*current });
        let snap = crate::process::cost::one_time(|| {
            Box::into_raw(Box::new(Snapshot::build(counters, previous, stale)))
        });
        // The old snapshot is leaked on purpose: other threads may be unwinding with it.
        SNAPSHOT.store(snap, Ordering::Release);
        published = true;
    } else if stale {
        // Could not rebuild: keep refusing to use the old one.
        STALE.store(true, Ordering::Relaxed);
    }
    REFRESH_LOCK.unlock();
    published
}

/// After a capture met `ip` in no module of the current snapshot: rebuilds the snapshot at
/// once when a module the loader has now maps `ip` (a library loaded since), else as
/// [`refresh`] does, rate-limited. Returns whether a new snapshot was published.
pub(crate) fn refresh_for_miss(ip: u64) -> bool {
    if !phdr::loaded_at(ip) {
        return refresh(false);
    }
    // Another thread may be rebuilding (a bounded walk of the loader's list): wait for it,
    // a bounded time, and take its snapshot when it knows `ip`.
    if !REFRESH_LOCK.lock_bounded() {
        return false;
    }
    REFRESH_LOCK.unlock();
    let current = SNAPSHOT.load(Ordering::Acquire);
    // SAFETY: published snapshots are never freed.
    if !current.is_null() && !STALE.load(Ordering::Relaxed) && unsafe { (*current).knows(ip) } {
        return true;
    }
    refresh(true)
}

/// After a dlclose: the next capture rebuilds the module list before unwinding.
#[allow(dead_code)] // until the shim hooks dlclose
pub(crate) fn invalidate() {
    STALE.store(true, Ordering::Release);
}

pub(crate) fn reset_after_fork() {
    REFRESH_LOCK.unlock();
    SPARE_LOCK.unlock();
}

/// Frames of the thread's last capture remembered by position ([`Cache::last`]).
const LAST_FRAMES: usize = 64;
/// Words of the thread's last stack remembered with its id ([`Cache::known`]); a longer stack
/// is looked up in the table every time.
const KNOWN_WORDS: usize = 96;

/// Whether captures use the last capture's rules by position (`CUGUARD_TEST_CAPTURE_CACHE=0`
/// turns it off, for the capture benchmark's "before" column).
static LAST_ON: AtomicBool = AtomicBool::new(true);

/// Turns the use of the last capture's rules on or off (for benchmarks).
pub(crate) fn set_last(on: bool) {
    LAST_ON.store(on, Ordering::Relaxed);
}

/// A thread's unwinding state: the rule cache, the rules of its last capture by position and,
/// from the first miss on, a CFI context.
pub(crate) struct Cache {
    rules: Box<RuleCache>,
    /// The (ip, rule) of each frame of the thread's last capture, by position from the
    /// innermost: a loop that allocates meets the same ips at the same positions, so a frame
    /// is one comparison instead of a probe of the set-associative cache. Emptied with the
    /// rule cache when the module list changes.
    last: [(u64, Rule); LAST_FRAMES],
    /// The generation `last` belongs to.
    last_generation: u64,
    /// The words of the thread's last stack (ips, Python frames, origin) and its id in the
    /// stack table: a loop that allocates captures the same stack again, and then knows its id
    /// by one comparison, without hashing it or probing the table. Ids are never reused (the
    /// table only grows), so this stays true across module-list changes; a stack flagged for
    /// an unknown module is never remembered (its lookups retry the refresh).
    known: [u64; KNOWN_WORDS],
    /// How many words of `known` are the stack; 0: none remembered.
    known_len: usize,
    known_id: u32,
    ctx: Option<Box<UnwindContext<usize>>>,
    /// Since the last [`Self::take_tally`]: frames stepped, rules by position, rules from the
    /// thread's cache, from the process-wide table, rules evaluated and the nanoseconds that
    /// took (the bill's `cost.unwind`).
    tally: [u64; 6],
}

impl Cache {
    fn new() -> Cache {
        Cache {
            rules: RuleCache::new_boxed(),
            last: [(0, Rule::END); LAST_FRAMES],
            last_generation: 0,
            known: [0; KNOWN_WORDS],
            known_len: 0,
            known_id: 0,
            ctx: None,
            tally: [0; 6],
        }
    }

    /// The id of `words` when they are the thread's last stack ([`Self::remember`]).
    #[inline]
    pub(crate) fn known(&self, words: &[u64]) -> Option<u32> {
        (self.known_len != 0 && self.known[..self.known_len] == *words).then_some(self.known_id)
    }

    /// Remembers `words` as the thread's last stack, of id `id` (nothing when too long).
    #[inline]
    pub(crate) fn remember(&mut self, words: &[u64], id: u32) {
        if words.is_empty() || words.len() > KNOWN_WORDS {
            self.known_len = 0;
            return;
        }
        self.known[..words.len()].copy_from_slice(words);
        self.known_len = words.len();
        self.known_id = id;
    }

    /// The counts since the last call (see [`Cache::tally`]), cleared: for
    /// `cost::tally(Tally::Frames, …)`.
    pub(crate) fn take_tally(&mut self) -> [u64; 6] {
        std::mem::take(&mut self.tally)
    }

    /// The rule at `ip`, the `n`th frame of this capture: the last capture's at the same
    /// position when its ip was the same, else [`Self::rule`] (and remembered).
    #[inline(always)]
    fn rule_at(&mut self, snap: &Snapshot, n: usize, ip: u64) -> Rule {
        if let Some(slot) = self.last.get(n).copied() {
            if slot.0 == ip {
                self.tally[1] += 1;
                return slot.1;
            }
            return match self.rule(snap, ip) {
                Some(r) => {
                    self.last[n] = (ip, r);
                    r
                }
                None => Rule::FRAME_POINTER,
            };
        }
        self.rule(snap, ip).unwrap_or(Rule::FRAME_POINTER)
    }

    /// The rule at `ip`: from the thread's cache, else from the process-wide table, else from
    /// the module's CFI (and then kept in both). `None` for an ip in no module the snapshot
    /// knows: the caller guesses with frame pointers, and nothing is kept (a library loaded
    /// there later has rules of its own, and the caches outlive additions to the module list).
    #[inline(always)]
    fn rule(&mut self, snap: &Snapshot, ip: u64) -> Option<Rule> {
        if let Some(r) = self.rules.get(ip) {
            self.tally[2] += 1;
            return Some(r);
        }
        self.miss(snap, ip)
    }

    /// A miss of the thread's cache.
    #[inline(never)]
    fn miss(&mut self, snap: &Snapshot, ip: u64) -> Option<Rule> {
        let m = snap.module(ip)?;
        if let Some(r) = super::cfi::shared_get(ip, snap.generation) {
            self.rules.put(ip, r);
            self.tally[3] += 1;
            return Some(r);
        }
        // Evaluated once per address in the process (the table shares it): work done once,
        // billed apart, since the first read of a module's tables can fault their pages in
        // from disk (tens of microseconds each on the H200's machine).
        let ctx = self
            .ctx
            .get_or_insert_with(|| Box::new(UnwindContext::new()));
        let (r, ns) = crate::process::cost::one_time_timed(|| {
            super::cfi::rule_for(m, ip.wrapping_sub(m.bias), ctx)
        });
        super::cfi::shared_put(ip, snap.generation, r);
        self.rules.put(ip, r);
        self.tally[4] += 1;
        self.tally[5] += ns;
        Some(r)
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> (u64, u64) {
        (self.rules.hits, self.rules.misses)
    }
}

/// Per-thread state. `const`-initialised: no lazy-init check beyond the destructor
/// registration at first use.
struct ThreadState {
    busy: Cell<bool>,
    cache: Cell<*mut Cache>,
    /// [lo, hi) of this thread's stack, or (0, 0) if not known yet, or (1, 1) if unknowable.
    stack: Cell<(u64, u64)>,
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        let c = self.cache.replace(std::ptr::null_mut());
        if !c.is_null() {
            // SAFETY: made by Box::into_raw in `with_thread`, owned by this thread only.
            drop(unsafe { Box::from_raw(c) });
        }
    }
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            busy: Cell::new(false),
            cache: Cell::new(std::ptr::null_mut()),
            stack: Cell::new((0, 0)),
        }
    };
}

/// A cache for threads whose thread-locals are gone (captures from TLS destructors).
static SPARE_LOCK: SpinLock = SpinLock::new();
static SPARE: AtomicPtr<Cache> = AtomicPtr::new(std::ptr::null_mut());

/// This thread's stack bounds from pthread (for the main thread glibc reads /proc/self/maps
/// once: slow, but only once per thread).
fn thread_stack_bounds() -> Option<(u64, u64)> {
    // SAFETY: `attr` is initialised by pthread_getattr_np before use and destroyed after.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (rc == 0 && !addr.is_null()).then(|| (addr as u64, addr as u64 + size as u64))
    }
}

/// This thread's unwinding state and stack bounds, borrowed (see [`borrow`]) until dropped.
/// Not `Send` (it holds a `&Cell`): it never leaves its thread, and lives inside one capture.
pub(crate) struct Borrowed {
    cache: *mut Cache,
    pub(crate) bounds: (u64, u64),
    /// What the drop gives back: the thread's busy flag, or (`None`) the spare's lock.
    busy: Option<&'static Cell<bool>>,
}

impl Borrowed {
    /// The borrowed rule cache.
    #[inline(always)]
    pub(crate) fn cache(&mut self) -> &mut Cache {
        // SAFETY: the thread's cache (owned by this thread, `busy` set: no other borrow) or the
        // spare (only used under SPARE_LOCK, held), valid until this borrow is dropped; the
        // `&mut self` keeps it to one borrow at a time.
        unsafe { &mut *self.cache }
    }
}

impl Drop for Borrowed {
    #[inline(always)]
    fn drop(&mut self) {
        match self.busy {
            Some(busy) => busy.set(false),
            None => SPARE_LOCK.unlock(),
        }
    }
}

/// Borrows this thread's unwinding state and stack bounds, or returns `None` (re-entered, or no
/// state/bounds could be had). A borrow rather than a closure ([`with_thread`]), so that the
/// capture's work is no frame of its own for every capture to unwind through and skip.
#[inline(always)]
pub(crate) fn borrow() -> Option<Borrowed> {
    let st = STATE.try_with(|st| st as *const ThreadState);
    let Ok(st) = st else {
        // Thread-locals destroyed: borrow the spare if free, never wait.
        return borrow_spare();
    };
    // SAFETY: STATE's storage lasts until this thread exits; its destructor runs only after
    // every call the thread makes returns, so not while this capture runs (a capture from
    // another thread-local's destructor finds it either whole or gone: then `try_with` failed
    // above). `&ThreadState` is not `Send`: the reference stays on this thread.
    let st: &'static ThreadState = unsafe { &*st };
    if st.busy.replace(true) {
        return None;
    }
    let mut bounds = st.stack.get();
    let mut c = st.cache.get();
    if bounds == (0, 0) || c.is_null() {
        // The thread's set-up, done once (billed apart): its stack's bounds, its rule cache.
        crate::process::cost::one_time(|| {
            if bounds == (0, 0) {
                bounds = thread_stack_bounds().unwrap_or((1, 1));
                st.stack.set(bounds);
            }
            if c.is_null() {
                c = Box::into_raw(Box::new(Cache::new()));
                st.cache.set(c);
            }
        });
    }
    let borrowed = Borrowed {
        cache: c,
        bounds,
        busy: Some(&st.busy),
    };
    // Bounds unknowable: nothing to unwind (the drop gives the flag back).
    (bounds != (1, 1)).then_some(borrowed)
}

/// [`borrow`] for a thread whose thread-locals are gone: the spare, under its lock.
#[cold]
#[inline(never)]
fn borrow_spare() -> Option<Borrowed> {
    if !SPARE_LOCK.try_lock() {
        return None;
    }
    let mut c = SPARE.load(Ordering::Relaxed);
    if c.is_null() {
        c = Box::into_raw(Box::new(Cache::new()));
        SPARE.store(c, Ordering::Relaxed);
    }
    let mut borrowed = Borrowed {
        cache: c,
        bounds: (0, 0),
        busy: None,
    };
    // Without bounds, the borrow's drop gives the lock back.
    borrowed.bounds = thread_stack_bounds()?;
    Some(borrowed)
}

/// Runs `f` with this thread's unwinding state and stack bounds ([`borrow`]), or returns `None`
/// (re-entered, or no state/bounds could be had). For the tests.
#[cfg(test)]
pub(crate) fn with_thread<R>(f: impl FnOnce(&mut Cache, (u64, u64)) -> Option<R>) -> Option<R> {
    let mut b = borrow()?;
    let bounds = b.bounds;
    f(b.cache(), bounds)
}

/// rip, rsp and rbp at the point of this (inlined) code.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn registers() -> (u64, u64, u64) {
    let (pc, sp, bp): (u64, u64, u64);
    // SAFETY: reads rip, rsp and rbp into registers; touches no memory, no flags.
    unsafe {
        std::arch::asm!(
            "lea {pc}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            pc = out(reg) pc,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    (pc, sp, bp)
}

/// What to skip at the innermost end of the stack.
#[derive(Clone, Copy)]
pub(crate) enum Skip {
    /// Frames in the shim's own module (production).
    OwnModule,
    /// This many frames, counting the unwinder's own (tests, benches).
    #[cfg_attr(not(test), allow(dead_code))]
    Frames(usize),
}

/// Unwinds the calling thread into `out` (call-site addresses: return address - 1; the
/// innermost frame, always skipped in production, is the unwinder's own pc: inlined, the pc in
/// its caller), returning how many were written. Inlined into the capture: a frame of its own
/// would be one more to step through and skip on every capture.
///
/// Takes no lock and, once the thread's rule cache is warm, allocates nothing; reads memory
/// only inside the mapped unwind sections of loaded modules and `[sp, stack top)` of this
/// thread.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn unwind(
    snap: &Snapshot,
    cache: &mut Cache,
    (stack_lo, hi): (u64, u64),
    skip: Skip,
    out: &mut [MaybeUninit<u64>],
) -> usize {
    let (pc, mut sp, mut bp) = registers();
    let lo = sp;
    if lo < stack_lo || lo >= hi || lo < 4096 || out.is_empty() {
        // Not on the stack pthread told us of (an alternate signal stack, a coroutine): reads
        // could leave mapped memory.
        return 0;
    }
    let read = |addr: u64| -> Option<u64> {
        if addr >= lo && addr <= hi - 8 {
            // SAFETY: [lo, hi) is this thread's live stack (lo = our own sp), mapped and
            // readable; read_unaligned allows any alignment.
            Some(unsafe { std::ptr::read_unaligned(addr as *const u64) })
        } else {
            None
        }
    };
    cache.rules.check_generation(snap.generation);
    let by_position = LAST_ON.load(Ordering::Relaxed);
    if cache.last_generation != snap.generation {
        cache.last = [(0, Rule::END); LAST_FRAMES];
        cache.last_generation = snap.generation;
    }
    let (mut skipping, mut skip_n) = match skip {
        Skip::OwnModule => (true, 0),
        Skip::Frames(n) => (false, n),
    };
    let mut ip = pc;
    let mut n = 0;
    for step in 0..out.len() + MAX_SKIPPED {
        if skipping {
            skipping = snap.own.0 <= ip && ip < snap.own.1;
        }
        if !skipping {
            if skip_n > 0 {
                skip_n -= 1;
            } else {
                out[n].write(ip);
                n += 1;
                if n == out.len() {
                    break;
                }
            }
        }
        cache.tally[0] += 1;
        let rule = if by_position {
            cache.rule_at(snap, step, ip)
        } else {
            cache.rule(snap, ip).unwrap_or(Rule::FRAME_POINTER)
        };
        let Some((ra, new_sp, new_bp)) = rule.step(sp, bp, &read) else {
            break;
        };
        if ra == 0 {
            break;
        }
        ip = ra - 1;
        sp = new_sp;
        bp = new_bp;
    }
    n
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn unwind(
    _snap: &Snapshot,
    _cache: &mut Cache,
    _bounds: (u64, u64),
    _skip: Skip,
    _out: &mut [MaybeUninit<u64>],
) -> usize {
    0
}
