//! Call-stack capture for tracked allocations: unwind, deduplicate, and describe the modules.
//!
//! # API
//!
//! ```ignore
//! stack::configure(32);                      // once, before the first capture (CUGUARD_STACK_DEPTH)
//! let id: Option<StackId> = stack::capture(); // on every tracked allocation (hot path)
//! // at report time:
//! let stacks = stack::stacks();              // [(id, [ip, …])], innermost frame first
//! let mods = stack::modules();               // loaded modules (and ones seen but since unloaded)
//! let (module, offset) = stack::locate(ip, &mods).unwrap(); // offset = file vaddr of ip
//! ```
//!
//! - **ips are call-site addresses**: each is a return address minus one, so it lies inside the
//!   call instruction. Symbolize the ip (its offset) as is; do not subtract one again. Frames of
//!   the shim itself (every innermost frame in `libcuguard.so`) are not recorded.
//! - **ids** are dense, `0..stacks().len()`, in first-capture order; equal stacks get one id.
//!
//! What a stack's words are (ips, Python frames, an origin's word) is in [`words`]; the modules
//! that [`modules`] and [`locate`] describe, in [`loaded`].
//!
//! # Unwinder: DWARF CFI read in place, with a per-thread rule cache
//!
//! Captures must work in code built without frame pointers (libtorch, libcudart, distro
//! libraries, Rust std), so frame-pointer walking is out. Measured with `bench_capture`
//! (`tests.rs`): a 30-deep chain of C functions built `-O2 -fomit-frame-pointer` that zero rbp,
//! 32 frames captured, warm caches, median of runs, on the H200 host's Xeon (idle) / on this
//! 2-core development machine (shared, noisy):
//!
//! | unwinder | ns per capture, 32 frames recorded |
//! |---|---|
//! | libgcc `_Unwind_Backtrace` (whole stack, ~45 frames) | 4,900–8,700 / 7,000–14,000 |
//! | framehop 0.16, its 509-slot direct-mapped cache | — / 4,400–5,800 |
//! | framehop with 16 such caches chosen by address | — / 500–1,000 |
//! | **this module** (gimli CFI + 4-way rule cache) | **240–310** / 350–400 |
//! | **this module**, 8 more frames unwound and skipped (as the shim's own are) | **290–320** / 390–530 |
//!
//! - libgcc re-finds the FDE and re-interprets the CFI for every frame, every time.
//! - framehop (samply's unwinder) caches rules, but in a direct-mapped 509-entry cache: a
//!   40-frame stack already has addresses sharing a slot, which evict each other on every
//!   capture, and each miss is a CFI evaluation (~0.4 µs). Its cache cannot be replaced.
//! - **Chosen**: the same method, done here in [`cfi`]: gimli finds the FDE through the mapped
//!   `.eh_frame_hdr` table and evaluates the CFI once per address; the result is reduced to a
//!   packed rule (CFA = sp/bp + k, rbp saved at CFA + j) kept in a 4-way set-associative
//!   per-thread cache (128 KiB; PyTorch's allocation paths touch thousands of distinct return addresses). A warm frame is a cache probe and two stack reads. Behind the thread's
//!   cache, a process-wide lock-free table (256 KiB) shares every evaluated rule with the
//!   other threads, so each address is evaluated once in the process (billed as work done
//!   once: a module's tables read for the first time fault in from disk, measured on the H200
//!   at tens of microseconds an evaluation), and the caches survive libraries being loaded
//!   (they are emptied only when a module may have been unloaded). No file is
//!   opened and nothing is copied: `.eh_frame_hdr`/`.eh_frame` are found through
//!   `PT_GNU_EH_FRAME` in the mapped program headers. libunwind was not tried: one more C
//!   library to ship and find at run time, for the same method.
//!
//! # Hot path
//!
//! [`capture`]: one atomic load for the published module snapshot, the thread-local state,
//! the unwind (no lock, no allocation), and then, when the stack is the thread's last one
//! again (a loop that allocates), one comparison with it gives the id; else a hash of the ips
//! and a lock-free probe of the stack table. Only a stack never seen before allocates its
//! record and takes the table's insert lock. See [`dedup`] and [`unwind`] for the details and the bounds on memory.
//!
//! Deep stacks (issue 14): a loop that allocates meets the same frames at every allocation.
//! Each frame's rule is first looked for in the thread's last capture at the same position (one
//! comparison; [`unwind`]), and each Python frame's word in a per-thread memo by code object
//! and offset (one probe; [`python`]). Measured with `capture_bench` on the simulated driver
//! (`docs/benchmarks.md`). Each capture is timed for the report's `cost`
//! ([`crate::process::cost`]): native and Python parts apart.
//!
//! First times: the first capture in the process builds the module snapshot
//! (`dl_iterate_phdr`, a few allocations); a thread's first capture allocates its 128 KiB rule
//! cache and asks pthread for its stack bounds (for the main thread glibc reads
//! `/proc/self/maps`); its first rule-cache miss allocates a 25 KiB CFI context.
//!
//! Modules loaded later (a dlopen of libtorch, an extension module imported or a library
//! `ctypes.CDLL`'d after the first capture): when a *new* stack has an ip in no module the
//! snapshot knows (a *miss*), the loader is asked whether a module it has now maps that ip
//! (`phdr::loaded_at`, a walk of its list without allocating). If one does, the module list
//! and its unwind tables are rebuilt at once (when the loader's load/unload counters moved)
//! and the stack captured again, so a library loaded a moment ago unwinds through all its
//! frames from its first allocation on. An ip no module maps (JIT code, a frame-pointer guess
//! gone wrong) only asks for the rate-limited refresh (at most every 20 ms, and only when the
//! counters moved). A stack stored with an unknown ip is flagged, and later hits on it retry the
//! rate-limited refresh. The cost stays off the common path: a stack seen before is never a
//! miss, and a new stack pays the walk only when it has an unknown ip. Rebuilds are bounded by
//! the loader's loads and by `unwind::MAX_SNAPSHOTS`.
//!
//! There is no `dlopen` hook: `dlopen` looks a bare name up in the `DT_RUNPATH` of the object
//! that called it (the return address), so a shim that interposed it would change which
//! library a program loads; and a library loaded by another's `DT_NEEDED` or by the loader
//! itself passes no hook anyway. The miss is what every such case has in common.
//!
//! # What the caller (the shim) must know
//!
//! - Nothing here panics by design, calls CUDA, or calls the shim's own `dlsym` (the unwinder
//!   uses no std facility that looks symbols up; the thread-local destructor is registered
//!   through `__cxa_thread_atexit_impl`, a link-time weak symbol). The first capture looks
//!   the Python interpreter up once through the *real* `dlsym` ([`python`]).
//! - Re-entry on one thread (a signal handler that allocates during a capture) returns `None`.
//! - Safe from any thread, including from thread-local destructors after this module's own
//!   thread state is gone (then a shared spare cache is used under a try-lock, else `None`).
//! - Locks that a fork can catch held: the table's insert lock, the module refresh lock,
//!   the module history lock and the spare-cache lock. None is ever held across user code, and
//!   all are bounded spins or try-locks, so a forked child does not hang; call
//!   [`after_fork_child`] in a `pthread_atfork` child handler to clear them.
//! - `dl_iterate_phdr` is called (a refresh, [`modules`]); it takes the loader's write lock.
//!   Do not call [`capture`] from inside a `dl_iterate_phdr` callback.
//! - After a `dlclose`, call [`invalidate_modules`]: a snapshot may point at the unwind data of
//!   an unloaded module, and a library mapped at the same address later would be unwound with
//!   it (reading unmapped memory). Until someone calls it, this risk remains for programs that
//!   dlclose and then allocate through a library loaded where the old one was.
//! - Only x86_64 unwinds; elsewhere [`capture`] returns `None`.

mod cfi;
mod dedup;
mod loaded;
pub mod origin;
mod phdr;
pub mod python;
mod unwind;
mod words;

#[cfg(test)]
mod tests;

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::process::cost::{self, Metric};
use unwind::Skip;

pub use loaded::{Module, locate, modules};
pub use words::{ORIGIN_TAG, StackId, origin_of, split};
// For the tests (`tests.rs`, `python/tests.rs`), which read it here.
#[cfg(test)]
use words::is_tail;

/// The most distinct stacks the table keeps (ids are `0..MAX_STACKS`).
pub const MAX_STACKS: usize = dedup::MAX_STACKS;

/// The most frames kept per stack, whatever [`configure`] asks.
pub const MAX_DEPTH: usize = 256;
/// Frames kept per stack when [`configure`] was not called.
pub const DEFAULT_DEPTH: usize = 32;

static DEPTH: AtomicUsize = AtomicUsize::new(DEFAULT_DEPTH);

/// Sets how many frames each capture keeps (clamped to [`MAX_DEPTH`]); 0 turns capture off.
/// Call once, before the first capture; later calls apply to later captures.
pub fn configure(depth: usize) {
    DEPTH.store(depth.min(MAX_DEPTH), Ordering::Relaxed);
}

static CONFIGURED: std::sync::Once = std::sync::Once::new();

/// [`capture`], with the depth and the Python mode from the shim's settings, read once, at the
/// first capture: `CUGUARD_STACK_DEPTH` and `CUGUARD_PYTHON` (`1`/`on` by default, `gil`,
/// `0`/`off`).
#[inline]
pub fn capture_with_settings() -> Option<StackId> {
    CONFIGURED.call_once(configure_from_settings);
    // Capture off (`CUGUARD_STACK_DEPTH=0`): answered here, without the two calls and the
    // capture's stack frame (its buffers of frames) that [`capture`] would make to say so.
    if DEPTH.load(Ordering::Relaxed) == 0 {
        return None;
    }
    capture()
}

fn configure_from_settings() {
    configure(crate::config::get().stack_depth);
    // For cuguard's capture benchmark only: `0` captures as before the per-thread caches of
    // Python frame words and of the last stack's rules (its "before" column).
    if std::env::var_os("CUGUARD_TEST_CAPTURE_CACHE").is_some_and(|v| v == "0") {
        python::set_memo(false);
        unwind::set_last(false);
    }
    if let Ok(v) = std::env::var("CUGUARD_PYTHON") {
        match python::Mode::parse(&v) {
            Some(mode) => python::configure(mode),
            None => {
                let msg = format!("CUGUARD_PYTHON={v:?} is not 0, 1 or gil; using 1");
                crate::process::diag::warn(&msg);
                crate::process::faults::record(msg);
            }
        }
    }
}

/// Captures the calling thread's stack, outward from the caller of the shim, and returns the
/// id of that stack. When the thread runs Python, its Python frames (up to the same depth)
/// are part of the stack: two allocations from one native path but different Python lines
/// get different ids (see [`python`] and [`split`]). `None` when capture is off (depth 0), on
/// re-entry, when no frame could be unwound, or when the table is full (2^20 distinct stacks).
///
/// Cost: see the module doc. Never panics by design, never blocks.
///
/// On a thread without Python frames while an origin is open ([`origin`]), the stack ends with
/// the origin's word ([`ORIGIN_TAG`]): its id is that of the stack and the origin together.
///
/// Inline: a frame of its own would be one more for every capture to unwind through and skip.
#[inline(always)]
pub fn capture() -> Option<StackId> {
    capture_with(Skip::OwnModule, DEPTH.load(Ordering::Relaxed), true)
}

/// [`capture`] for an origin ([`origin::begin`]): the calling thread's stack, never marked
/// with another origin (an origin's stack does not chain to the one before it).
#[inline(never)]
pub fn capture_origin() -> Option<StackId> {
    CONFIGURED.call_once(configure_from_settings);
    capture_with(Skip::OwnModule, DEPTH.load(Ordering::Relaxed), false)
}

#[inline(never)]
fn capture_with(skip: Skip, depth: usize, with_origin: bool) -> Option<StackId> {
    let depth = depth.min(MAX_DEPTH);
    if depth == 0 {
        return None;
    }
    let mut py = [MaybeUninit::<u64>::uninit(); MAX_DEPTH];
    // Timed for the report's `cost`: inside a tracked allocation, as parts of its hooks' work
    // (Python frames apart, counted only when some were read); outside one, whole, as a
    // capture of its own (a context's, an event's).
    let inside = cost::in_hooks();
    let _capture = (!inside && !cost::in_blocks()).then(|| cost::begin(Metric::Captures));
    let py_span = (inside && python::present()).then(|| cost::part(Metric::Python));
    let py_n = python::capture(&mut py[..depth]);
    match py_span {
        Some(s) if py_n == 0 => s.cancel(),
        _ => drop(py_span),
    }
    let _span = inside.then(|| cost::part(Metric::Stacks));
    // SAFETY: `python::capture` initialised the first `py_n` elements.
    let py = unsafe { std::slice::from_raw_parts(py.as_ptr() as *const u64, py_n) };
    // Work done for another thread: a thread without Python frames of its own, while an
    // origin is open (one relaxed load otherwise).
    let origin = if py_n == 0 && with_origin {
        origin::current()
    } else {
        None
    };
    let mut snap = unwind::snapshot()?;
    // The thread's unwinding state, borrowed (not a closure: no frame of its own to unwind
    // through and skip), given back when this returns.
    let mut borrowed = unwind::borrow()?;
    let bounds = borrowed.bounds;
    let cache = borrowed.cache();
    let mut buf = [MaybeUninit::<u64>::uninit(); 2 * MAX_DEPTH + 1];
    for attempt in 0..2 {
        let n = unwind::unwind(snap, cache, bounds, skip, &mut buf[..depth]);
        cost::tally(cost::Tally::Frames, &cache.take_tally());
        if n == 0 {
            return None;
        }
        for (slot, &w) in buf[n..n + py_n].iter_mut().zip(py) {
            slot.write(w);
        }
        let mut len = n + py_n;
        if let Some(id) = origin {
            buf[len].write(ORIGIN_TAG | u64::from(id));
            len += 1;
        }
        // SAFETY: `unwind` initialised the first `n` elements, the loop above the next
        // `py_n`, and the origin's word the one after them when there is one.
        let words = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u64, len) };
        let ips = &words[..n];
        // The thread's last stack again (a loop that allocates): its id without a hash.
        if let Some(id) = cache.known(words) {
            return Some(id);
        }
        let h = dedup::hash(words);
        if let Some((id, rec)) = dedup::lookup(h, words) {
            let suspect = rec.flags.load(Ordering::Relaxed) & dedup::FLAG_UNKNOWN_MODULE != 0;
            if !suspect {
                cache.remember(words, id);
                return Some(id);
            }
            if attempt == 1 || !unwind::refresh(false) {
                return Some(id);
            }
            snap = unwind::snapshot()?;
            continue;
        }
        let unknown = ips.iter().find(|&&ip| !snap.knows(ip)).copied();
        if let Some(ip) = unknown
            && attempt == 0
            && unwind::refresh_for_miss(ip)
        {
            snap = unwind::snapshot()?;
            continue;
        }
        let flags = if unknown.is_some() {
            dedup::FLAG_UNKNOWN_MODULE
        } else {
            0
        };
        let id = dedup::insert(h, words, flags)?;
        if flags == 0 {
            cache.remember(words, id);
        }
        return Some(id);
    }
    None
}

/// Every distinct stack captured so far, by id (innermost frame first; call-site addresses),
/// each followed by its Python frames, if any ([`split`] separates them).
pub fn stacks() -> Vec<(StackId, Vec<u64>)> {
    dedup::all()
}

/// The words of stack `id` (see [`stacks`]), when it exists.
pub fn words_of(id: StackId) -> Option<Vec<u64>> {
    dedup::words(id)
}

/// The stacks with ids `from..` captured so far, as [`stacks`] gives them: the history writes
/// each stack once, as it appears.
pub fn stacks_since(from: u32) -> Vec<(StackId, Vec<u64>)> {
    dedup::since(from)
}

/// Tells the unwinder that a module was unloaded (call after a successful `dlclose`): the next
/// capture rebuilds the module list before unwinding.
#[allow(dead_code)] // until the shim hooks dlclose
pub fn invalidate_modules() {
    unwind::invalidate();
}

/// The fork handler's prepare step (`crate::lifecycle`): waits for the shim's threads to leave
/// the loader's list of modules and keeps them out of it until [`after_fork_parent`] (in the
/// child, [`after_fork_child`] makes its lock anew); `phdr`'s module doc says why.
pub fn before_fork() {
    phdr::before_fork();
}

/// The fork handler's parent step: see [`before_fork`].
pub fn after_fork_parent() {
    phdr::after_fork_parent();
}

/// Clears the locks a fork may have caught held by another thread. Call in the child, from a
/// `pthread_atfork` child handler (only the forking thread exists then).
pub fn after_fork_child() {
    phdr::reset_after_fork();
    dedup::reset_after_fork();
    unwind::reset_after_fork();
    origin::reset_after_fork();
    python::reset_after_fork();
    loaded::reset_after_fork();
}
