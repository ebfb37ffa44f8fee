//! The context family's model: a context (primary or created), its identity, and each thread's
//! context stack.
//!
//! A context handle stays known after its context is gone, so the driver can tell a dead handle
//! from garbage (see `state/context.rs`). A primary context has one handle for the life of the
//! process; each time it becomes active it gets a fresh context id, and everything made in it
//! belongs to that id.

use std::cell::RefCell;
use std::ffi::{c_int, c_uint};
use std::sync::Arc;

use crate::errors::Fault;
use crate::ffi::consts::{CU_CTX_FLAGS_MASK, CU_CTX_SCHED_MASK};
use crate::model::stream::Stream;

/// What `cuCtxGetApiVersion` reports for every context.
pub const CTX_API_VERSION: c_uint = 3020;
/// `cuCtxGetStreamPriorityRange`: least and greatest priority (lower is higher priority).
pub const STREAM_PRIORITY_LEAST: c_int = 0;
pub const STREAM_PRIORITY_GREATEST: c_int = -5;

/// A context, alive or not.
pub struct Ctx {
    pub handle: usize,
    pub device: i32,
    pub primary: bool,
    /// The id of the current activation (unique in the process; what `cuCtxGetId` returns).
    pub id: u64,
    pub alive: bool,
    pub flags: c_uint,
    /// Retain count (primary contexts only).
    pub refcount: u32,
    /// The context's legacy default stream.
    pub legacy: Option<Arc<Stream>>,
    /// Every stream of this context that may still have work: the legacy stream, per-thread
    /// default streams, created streams (destroyed ones until they drain).
    pub streams: Vec<Arc<Stream>>,
}

/// The identity of a live context, copied out of the state.
#[derive(Clone, Copy, Debug)]
pub struct CtxRef {
    pub handle: usize,
    pub id: u64,
    pub device: i32,
}

impl Ctx {
    /// A context not yet alive (a primary context until it is retained; a created context until
    /// it is activated).
    pub fn new(handle: usize, device: i32, primary: bool, flags: c_uint) -> Ctx {
        Ctx {
            handle,
            device,
            primary,
            id: 0,
            alive: false,
            flags,
            refcount: 0,
            legacy: None,
            streams: Vec::new(),
        }
    }

    pub fn as_ref(&self) -> CtxRef {
        CtxRef {
            handle: self.handle,
            id: self.id,
            device: self.device,
        }
    }
}

/// A thread's context stack: a fixed array, so that it has no destructor and stays usable while
/// the process exits (glibc runs thread-local destructors before `atexit` handlers, which may
/// still use the driver, as the real driver allows).
#[derive(Clone, Copy)]
pub struct CtxStack {
    len: usize,
    items: [usize; CtxStack::MAX],
}

impl CtxStack {
    /// The deepest stack kept; a push beyond it drops the bottom.
    const MAX: usize = 64;

    pub const fn new() -> CtxStack {
        CtxStack {
            len: 0,
            items: [0; CtxStack::MAX],
        }
    }

    pub fn last(&self) -> Option<&usize> {
        self.len.checked_sub(1).map(|i| &self.items[i])
    }

    pub fn push(&mut self, h: usize) {
        if self.len == Self::MAX {
            self.items.copy_within(1.., 0);
            self.len -= 1;
        }
        self.items[self.len] = h;
        self.len += 1;
    }

    pub fn pop(&mut self) -> Option<usize> {
        self.len = self.len.checked_sub(1)?;
        Some(self.items[self.len])
    }
}

thread_local! {
    /// The calling thread's context stack; the last element is current.
    static STACK: RefCell<CtxStack> = const { RefCell::new(CtxStack::new()) };
}

/// Runs `f` on the calling thread's context stack.
pub fn with_stack<R>(f: impl FnOnce(&mut CtxStack) -> R) -> R {
    let mut f = Some(f);
    let r = STACK.try_with(|s| (f.take().expect("called once"))(&mut s.borrow_mut()));
    match r {
        Ok(r) => r,
        Err(_) => (f.take().expect("not called"))(&mut CtxStack::new()),
    }
}

/// The handle current on the calling thread, if any.
pub fn current_handle() -> Option<usize> {
    with_stack(|s| s.last().copied())
}

/// Validates creation flags.
pub fn check_flags(flags: c_uint) -> Result<(), Fault> {
    if flags & !CU_CTX_FLAGS_MASK != 0 || (flags & CU_CTX_SCHED_MASK).count_ones() > 1 {
        return Err(Fault::BadFlags);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_flags() {
        assert!(check_flags(0).is_ok());
        assert!(check_flags(4).is_ok());
        assert!(check_flags(4 | 8).is_ok());
        assert_eq!(check_flags(1 | 2), Err(Fault::BadFlags));
        assert_eq!(check_flags(0x100), Err(Fault::BadFlags));
    }
}
