//! The unwinder: framehop (DWARF CFI from the mapped `.eh_frame_hdr`/`.eh_frame`, with a
//! per-thread rule cache), a published snapshot of the module list, and the per-thread state.
//!
//! Snapshot: an immutable [`Snapshot`] published through an `AtomicPtr`; readers load it and use
//! it with no lock. A refresh builds a new one under a try-lock and publishes it; old snapshots
//! are leaked (a reader may still hold one), which is bounded: a refresh happens only when the
//! loader's add/remove counters moved, at most once per [`REFRESH_INTERVAL_NS`] (unless forced
//! after a `dlclose`), and at most [`MAX_SNAPSHOTS`] times.
//!
//! Per thread: a framehop cache (about 50 KiB: 509 cached rules plus fixed-size CFI evaluation
//! storage, so unwinding itself never allocates), the thread's stack bounds (so stack reads
//! never leave mapped memory) and a busy flag (no re-entry). It is freed by a thread-local
//! destructor; a capture after that (from another TLS destructor) borrows a global spare cache
//! under a try-lock, or gives up.

use std::cell::Cell;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use framehop::{
    CacheNative, ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind,
    UnwindRegsNative, Unwinder, UnwinderNative,
};

use super::phdr;
use super::table::SpinLock;

/// Refreshes of the module list are at most this often (unless forced by a dlclose).
pub(crate) const REFRESH_INTERVAL_NS: u64 = 20_000_000;
/// Snapshots built in the life of the process, at most (each leaks about 100 bytes per module).
pub(crate) const MAX_SNAPSHOTS: u32 = 4096;
/// Frames of the shim itself skipped at most, before giving up on finding the caller.
const MAX_SKIPPED: usize = 64;

/// Unwind section bytes of a mapped module. Points into the module's own mapping.
#[derive(Clone, Copy)]
pub(crate) struct Section {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a Section is a read-only view of mapped, immutable unwind data; sharing it between
// threads is as safe as sharing `&[u8]`.
unsafe impl Send for Section {}
// SAFETY: as above.
unsafe impl Sync for Section {}

impl Default for Section {
    /// Empty (needed by `ExplicitModuleSectionInfo`'s `Default`).
    fn default() -> Self {
        Section {
            ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
            len: 0,
        }
    }
}

impl Deref for Section {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: built only from ranges `phdr::describe` checked to lie in a readable PT_LOAD
        // segment of a loaded module (or empty with a dangling, non-null pointer). The module stays mapped until dlclose; see
        // `invalidate` for how a dlclose is handled.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

type Policy = MustNotAllocateDuringUnwind;
type Native = UnwinderNative<Section, Policy>;

/// framehop's rule cache is direct-mapped with 509 slots (slot = address % 509): a 40-frame
/// stack already has a few addresses sharing a slot and evicting each other on every capture,
/// and each such miss costs a CFI evaluation (~0.4 µs). So each thread has [`WAYS`] of them and
/// a frame's cache is chosen by the address bits above the slot index: in effect one
/// direct-mapped cache of 509 × WAYS rules.
pub(crate) const WAYS: usize = 16;

pub(crate) struct Cache {
    ways: [CacheNative<Policy>; WAYS],
}

impl Cache {
    fn new() -> Cache {
        Cache {
            ways: std::array::from_fn(|_| CacheNative::new_in()),
        }
    }
    #[inline(always)]
    fn for_address(&mut self, a: FrameAddress) -> &mut CacheNative<Policy> {
        &mut self.ways[(a.address_for_lookup() / 509) as usize % WAYS]
    }
    #[cfg(test)]
    pub(crate) fn stats(&self) -> framehop::CacheStats {
        let mut t = framehop::CacheStats::new();
        for w in &self.ways {
            let s = w.stats();
            t.hit_count += s.hit_count;
            t.miss_empty_slot_count += s.miss_empty_slot_count;
            t.miss_wrong_address_count += s.miss_wrong_address_count;
            t.miss_wrong_modules_count += s.miss_wrong_modules_count;
        }
        t
    }
}

pub(crate) struct Snapshot {
    unwinder: Native,
    /// Sorted, non-overlapping `[start, end)` of every module.
    ranges: Vec<(u64, u64)>,
    /// The module holding the shim's own code: its frames are skipped.
    own: (u64, u64),
    counters: (u64, u64),
}

impl Snapshot {
    fn build(counters: (u64, u64)) -> Snapshot {
        let own_addr = super::capture as *const () as u64;
        let mut unwinder = Native::new();
        let mut ranges = Vec::with_capacity(64);
        let mut own = (0, 0);
        for m in phdr::all() {
            if m.start <= own_addr && own_addr < m.end {
                own = (m.start, m.end);
            }
            ranges.push((m.start, m.end));
            super::note_module(&m);
            let section = |svma: Option<(u64, u64)>| {
                svma.map(|(a, b)| Section {
                    ptr: m.bias.wrapping_add(a) as *const u8,
                    len: (b - a) as usize,
                })
            };
            let range = |svma: Option<(u64, u64)>| svma.map(|(a, b)| a..b);
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                text_svma: range(m.text_svma),
                eh_frame_svma: range(m.eh_frame_svma),
                eh_frame: section(m.eh_frame_svma),
                eh_frame_hdr_svma: range(m.eh_frame_hdr_svma),
                eh_frame_hdr: section(m.eh_frame_hdr_svma),
                ..Default::default()
            };
            unwinder.add_module(Module::new(String::new(), m.start..m.end, m.bias, info));
        }
        ranges.sort_unstable();
        Snapshot {
            unwinder,
            ranges,
            own,
            counters,
        }
    }

    /// Whether `ip` lies in a module this snapshot knows.
    pub(crate) fn knows(&self, ip: u64) -> bool {
        let i = self.ranges.partition_point(|r| r.0 <= ip);
        i > 0 && ip < self.ranges[i - 1].1
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
        let snap = Box::into_raw(Box::new(Snapshot::build(counters)));
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

/// After a dlclose: the next capture rebuilds the module list before unwinding.
pub(crate) fn invalidate() {
    STALE.store(true, Ordering::Release);
}

pub(crate) fn reset_after_fork() {
    REFRESH_LOCK.unlock();
    SPARE_LOCK.unlock();
}

/// Per-thread state. `const`-initialised, so first use costs no lazy-init check beyond the
/// destructor registration.
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

/// Runs `f` with this thread's unwinder cache and stack bounds, or returns `None` (re-entered,
/// or no cache/bounds could be had).
pub(crate) fn with_thread<R>(f: impl FnOnce(&mut Cache, (u64, u64)) -> Option<R>) -> Option<R> {
    let mut f = Some(f);
    let r = STATE.try_with(|st| {
        if st.busy.replace(true) {
            return None;
        }
        let mut bounds = st.stack.get();
        if bounds == (0, 0) {
            bounds = thread_stack_bounds().unwrap_or((1, 1));
            st.stack.set(bounds);
        }
        let mut c = st.cache.get();
        if c.is_null() {
            c = Box::into_raw(Box::new(Cache::new()));
            st.cache.set(c);
        }
        // SAFETY: the cache is owned by this thread and `busy` guarantees no other borrow.
        let r = (bounds != (1, 1))
            .then(|| (f.take()?)(unsafe { &mut *c }, bounds))
            .flatten();
        st.busy.set(false);
        r
    });
    match r {
        Ok(r) => r,
        Err(_) => {
            // Thread-locals destroyed: borrow the spare cache if free, never wait.
            if !SPARE_LOCK.try_lock() {
                return None;
            }
            let mut c = SPARE.load(Ordering::Relaxed);
            if c.is_null() {
                c = Box::into_raw(Box::new(Cache::new()));
                SPARE.store(c, Ordering::Relaxed);
            }
            let bounds = thread_stack_bounds();
            // SAFETY: the spare cache is only used under SPARE_LOCK.
            let r = bounds.and_then(|b| (f.take()?)(unsafe { &mut *c }, b));
            SPARE_LOCK.unlock();
            r
        }
    }
}

/// The registers of the caller's frame, at the point of this inlined code.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn registers() -> (u64, UnwindRegsNative) {
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
    (pc, UnwindRegsNative::new(pc, sp, bp))
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

/// Unwinds the calling thread into `out` (call-site addresses: return address - 1), returning
/// how many were written.
///
/// Never allocates (after the thread's first call), takes no lock, reads memory only inside
/// the mapped unwind sections of loaded modules and `[sp, stack top)` of this thread.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
pub(crate) fn unwind(
    snap: &Snapshot,
    cache: &mut Cache,
    (_, hi): (u64, u64),
    skip: Skip,
    out: &mut [MaybeUninit<u64>],
) -> usize {
    let (pc, mut regs) = registers();
    let lo = regs.sp();
    if lo >= hi || lo < 4096 {
        // Not on the stack pthread told us of (an alternate signal stack, a coroutine): reads
        // could leave mapped memory.
        return 0;
    }
    let mut read = |addr: u64| -> Result<u64, ()> {
        if addr >= lo && addr <= hi - 8 {
            // SAFETY: [lo, hi) is this thread's live stack (lo = our own sp), mapped and
            // readable; unaligned reads are allowed on this architecture via read_unaligned.
            Ok(unsafe { std::ptr::read_unaligned(addr as *const u64) })
        } else {
            Err(())
        }
    };
    let (mut skipping, mut skip_n) = match skip {
        Skip::OwnModule => (true, 0),
        Skip::Frames(n) => (false, n),
    };
    let mut addr = FrameAddress::from_instruction_pointer(pc);
    let mut n = 0;
    let mut steps = 0;
    let max_steps = out.len() + MAX_SKIPPED;
    loop {
        let ip = addr.address_for_lookup();
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
        steps += 1;
        if steps >= max_steps {
            break;
        }
        match snap
            .unwinder
            .unwind_frame(addr, &mut regs, cache.for_address(addr), &mut read)
        {
            Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                Some(a) => addr = a,
                None => break,
            },
            _ => break,
        }
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
