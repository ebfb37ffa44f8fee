//! The allocation path's per-thread words, in one thread-local ([`Local`]).
//!
//! In a shared library every thread-local is reached through a call into the loader
//! (`__tls_get_addr`, the general-dynamic model; the initial-exec model that would make it one
//! load cannot be asked for on stable Rust). The compiler shares one such call between the
//! accesses to one thread-local in a function, never between two thread-locals. So what a
//! tracked allocation or free reads and writes of its own thread (the re-entry flag, the bill,
//! the thread's id, its open tag, its last context, its counters) lives here, side by side, and
//! a hook whose steps are inlined makes one look-up for all of them instead of one each.
//!
//! Each field belongs to the module named on it, which alone reads and writes it. The struct is
//! const-initialized and has no destructor, so it stays usable while the thread exits (as each
//! of the thread-locals it replaces did), and registers nothing with the runtime.

use std::cell::Cell;

/// The bill's state of a thread ([`super::cost`], which documents each field).
pub struct Bill {
    pub slot: Cell<u32>,
    pub in_hooks: Cell<u8>,
    pub in_blocks: Cell<bool>,
    pub paused: Cell<u8>,
    pub last_dropped: Cell<bool>,
    pub pending: [Cell<u64>; 2],
    pub one_time_ns: Cell<u64>,
}

/// A thread's words of the allocation path.
pub struct Local {
    /// Whether the thread is inside the shim (`crate::guard`).
    pub inside: Cell<bool>,
    /// The bill's state ([`super::cost`]).
    pub bill: Bill,
    /// The thread's kernel id, 0 until read ([`super::clock::thread_id`]).
    pub tid: Cell<u32>,
    /// The thread's innermost open tag, or `u32::MAX` (`crate::tracker::tags`).
    pub tag: Cell<u32>,
    /// (generation, handle, id, device) of the thread's last context look-up
    /// (`crate::tracker::contexts`).
    pub context: Cell<(u64, u64, u32, i32)>,
    /// The thread's counters (`crate::tracker::counters`, a `&'static Counters` there), null
    /// until its first count.
    pub counters: Cell<*const ()>,
}

thread_local! {
    // Const-initialized and without a destructor: usable while the thread exits, and its
    // storage lasts as long as the thread.
    static LOCAL: Local = const {
        Local {
            inside: Cell::new(false),
            bill: Bill {
                // `cost::NO_SLOT` and `cost::NONE`.
                slot: Cell::new(u32::MAX),
                in_hooks: Cell::new(0),
                in_blocks: Cell::new(false),
                paused: Cell::new(0),
                last_dropped: Cell::new(false),
                pending: [Cell::new(0), Cell::new(0)],
                one_time_ns: Cell::new(0),
            },
            tid: Cell::new(0),
            tag: Cell::new(u32::MAX),
            context: Cell::new((u64::MAX, 0, u32::MAX, -1)),
            counters: Cell::new(std::ptr::null()),
        }
    };
}

/// The calling thread's words; `None` only where thread-locals cannot be reached at all.
#[inline(always)]
pub fn get() -> Option<&'static Local> {
    // SAFETY: LOCAL is const-initialized and has no destructor, so its storage is valid for the
    // whole life of this thread; `&Local` is not `Send` (it holds `Cell`s), so the reference
    // never leaves the thread.
    LOCAL
        .try_with(|l| l as *const Local)
        .ok()
        .map(|p| unsafe { &*p })
}
