//! Contexts: primary contexts (reference-counted per device), created contexts, and each thread's
//! context stack.
//!
//! A context handle stays in the table after its context is gone, so the driver can tell a dead
//! handle from garbage: a destroyed context passed as an argument is
//! [`Fault::DestroyedContextHandle`], a handle never made [`Fault::UnknownContextHandle`], and a
//! destroyed context still current on some thread is [`Fault::CurrentContextDestroyed`].
//!
//! The legacy entries `cuCtxCreate`, `cuCtxDestroy`, `cuCtxPushCurrent` and `cuCtxPopCurrent`
//! have the same C signatures as their `_v2` forms and behave as them.
//!
//! A primary context has one handle for the life of the process. Each time it becomes active
//! (the first `cuDevicePrimaryCtxRetain`, or the first after it was released to zero or reset)
//! it gets a fresh context id, and everything made in it belongs to that id. Destroying a context
//! (`cuCtxDestroy_v2`, the last `cuDevicePrimaryCtxRelease`, `cuDevicePrimaryCtxReset`) waits
//! for its streams to drain and then frees all it owns: allocations of every kind, pinned host
//! memory, pools it created, streams and events.

use std::cell::RefCell;
use std::ffi::{c_int, c_uint};
use std::sync::Arc;

use crate::errors::Fault;
use crate::event;
use crate::ffi::consts::{CU_CTX_FLAGS_MASK, CU_CTX_SCHED_MASK};
use crate::ffi::{CUcontext, CUctxCreateParams, CUdevice, CUresult, guard, need, put};
use crate::memory;
use crate::pool;
use crate::state::{self, Driver, State};
use crate::stream::{self, Stream, StreamKind};

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
struct CtxStack {
    len: usize,
    items: [usize; CtxStack::MAX],
}

impl CtxStack {
    /// The deepest stack kept; a push beyond it drops the bottom.
    const MAX: usize = 64;

    const fn new() -> CtxStack {
        CtxStack {
            len: 0,
            items: [0; CtxStack::MAX],
        }
    }

    fn last(&self) -> Option<&usize> {
        self.len.checked_sub(1).map(|i| &self.items[i])
    }

    fn push(&mut self, h: usize) {
        if self.len == Self::MAX {
            self.items.copy_within(1.., 0);
            self.len -= 1;
        }
        self.items[self.len] = h;
        self.len += 1;
    }

    fn pop(&mut self) -> Option<usize> {
        self.len = self.len.checked_sub(1)?;
        Some(self.items[self.len])
    }
}

thread_local! {
    /// The calling thread's context stack; the last element is current.
    static STACK: RefCell<CtxStack> = const { RefCell::new(CtxStack::new()) };
}

/// Runs `f` on the calling thread's context stack.
fn with_stack<R>(f: impl FnOnce(&mut CtxStack) -> R) -> R {
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

/// The context current on the calling thread.
pub fn current(st: &State) -> Result<CtxRef, Fault> {
    let handle = current_handle().ok_or(Fault::NoContext)?;
    match st.contexts.get(&handle) {
        Some(c) if c.alive => Ok(c.as_ref()),
        Some(_) => Err(Fault::CurrentContextDestroyed),
        None => Err(Fault::NoContext),
    }
}

/// The context with handle `h` (an argument of the call), alive or not.
fn known(st: &State, h: usize) -> Result<&Ctx, Fault> {
    st.contexts.get(&h).ok_or(Fault::UnknownContextHandle)
}

/// The live context with handle `h` (an argument of the call).
pub fn by_handle(st: &State, h: usize) -> Result<CtxRef, Fault> {
    let c = known(st, h)?;
    if c.alive {
        Ok(c.as_ref())
    } else {
        Err(Fault::DestroyedContextHandle)
    }
}

/// The current context if one is current; `Ok(None)` if none is. A dead current context is
/// still [`Fault::CurrentContextDestroyed`].
pub fn current_if_any(st: &State) -> Result<Option<CtxRef>, Fault> {
    match current(st) {
        Ok(c) => Ok(Some(c)),
        Err(Fault::NoContext) => Ok(None),
        Err(f) => Err(f),
    }
}

/// Checks a handle about to become current: alive, or a primary context (an inactive primary
/// may be made current; using it fails later).
fn check_bindable(st: &State, h: usize) -> Result<(), Fault> {
    let c = known(st, h)?;
    if c.alive || c.primary {
        Ok(())
    } else {
        Err(Fault::DestroyedContextHandle)
    }
}

/// `h` if given, else the current context.
fn given_or_current(st: &State, h: CUcontext) -> Result<CtxRef, Fault> {
    if h.is_null() {
        current(st)
    } else {
        by_handle(st, h as usize)
    }
}

/// Adds the (inactive) primary context of device `dev`; returns its handle.
pub fn new_primary(st: &mut State, dev: i32) -> usize {
    let handle = st.new_handle();
    st.contexts.insert(
        handle,
        Ctx {
            handle,
            device: dev,
            primary: true,
            id: 0,
            alive: false,
            flags: 0,
            refcount: 0,
            legacy: None,
            streams: Vec::new(),
        },
    );
    handle
}

/// Makes the context `handle` alive with a fresh id and legacy stream.
fn activate(st: &mut State, handle: usize) {
    let id = st.new_id();
    let Some(ctx) = st.contexts.get_mut(&handle) else {
        return;
    };
    let legacy = Stream::new(handle, id, ctx.device, StreamKind::Legacy, 0, 0);
    ctx.id = id;
    ctx.alive = true;
    ctx.legacy = Some(legacy.clone());
    ctx.streams = vec![legacy];
}

/// A context being torn down: what must drain and be freed once the state lock is released.
struct Teardown {
    id: u64,
    device: i32,
    streams: Vec<Arc<Stream>>,
}

/// Marks the context `handle` dead and takes its streams; the caller finishes with [`finish`].
fn begin_teardown(st: &mut State, handle: usize) -> Option<Teardown> {
    let ctx = st.contexts.get_mut(&handle)?;
    if !ctx.alive {
        return None;
    }
    ctx.alive = false;
    ctx.legacy = None;
    Some(Teardown {
        id: ctx.id,
        device: ctx.device,
        streams: std::mem::take(&mut ctx.streams),
    })
}

/// Waits for the dead context's work to finish, then frees everything it owned.
fn finish(drv: &Driver, t: Teardown) {
    stream::wait_all(&t.streams);
    let mut st = drv.lock();
    memory::release_context(&mut st, t.id);
    pool::release_context(&mut st, t.id, t.device);
    event::release_context(&mut st, t.id);
    crate::peer::release_context(&mut st, t.id);
    st.streams.retain(|_, s| s.ctx_id != t.id);
    for s in &t.streams {
        crate::capture::stream_gone(&mut st, Arc::as_ptr(s) as usize);
        s.close();
    }
}

/// Validates creation flags.
fn check_flags(flags: c_uint) -> Result<(), Fault> {
    if flags & !CU_CTX_FLAGS_MASK != 0 || (flags & CU_CTX_SCHED_MASK).count_ones() > 1 {
        return Err(Fault::BadFlags);
    }
    Ok(())
}

/// Creates a context on `dev` and pushes it on the calling thread's stack.
fn create(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(pctx)?;
    check_flags(flags)?;
    let mut st = drv.lock();
    st.device(dev)?;
    let handle = st.new_handle();
    st.contexts.insert(
        handle,
        Ctx {
            handle,
            device: dev,
            primary: false,
            id: 0,
            alive: false,
            flags,
            refcount: 0,
            legacy: None,
            streams: Vec::new(),
        },
    );
    activate(&mut st, handle);
    with_stack(|s| s.push(handle));
    // SAFETY: `pctx` was checked non-null; the caller passes a writable slot.
    unsafe { put(pctx, handle as CUcontext) }
}

/// `cuCtxCreate_v2`.
///
/// # Safety
/// `pctx` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(
    pctx: *mut CUcontext,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    guard("cuCtxCreate_v2", || create(pctx, flags, dev))
}

/// `cuCtxCreate` (the CUDA 2.0 entry, same signature as `_v2`): as `cuCtxCreate_v2`.
///
/// # Safety
/// `pctx` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate(
    pctx: *mut CUcontext,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    guard("cuCtxCreate", || create(pctx, flags, dev))
}

/// `cuCtxCreate_v3`: execution-affinity parameters are not supported.
///
/// # Safety
/// `pctx` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    paramsArray: *mut std::ffi::c_void,
    numParams: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    guard("cuCtxCreate_v3", || {
        if numParams < 0 || (numParams > 0 && paramsArray.is_null()) {
            return Err(Fault::BadArgument);
        }
        if numParams > 0 {
            state::driver()?;
            return Err(Fault::UnsupportedContextParams);
        }
        create(pctx, flags, dev)
    })
}

/// `cuCtxCreate_v4` (what `cuCtxCreate` means in CUDA 13): `ctxCreateParams` may be NULL;
/// execution-affinity or CiG parameters are not supported.
///
/// # Safety
/// `pctx` is NULL or writable; `ctxCreateParams` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    ctxCreateParams: *mut CUctxCreateParams,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    guard("cuCtxCreate_v4", || {
        if !ctxCreateParams.is_null() {
            // SAFETY: non-null and readable by the caller's contract.
            let p = unsafe { *ctxCreateParams };
            if p.num_exec_affinity_params != 0 || !p.cig_params.is_null() {
                state::driver()?;
                return Err(Fault::UnsupportedContextParams);
            }
        }
        create(pctx, flags, dev)
    })
}

/// Destroys a created context, popping it if it is current on the calling thread. On other
/// threads it stays current, dead.
fn destroy(ctx: CUcontext) -> Result<(), Fault> {
    let drv = state::driver()?;
    if ctx.is_null() {
        return Err(Fault::DestroyNullContext);
    }
    let handle = ctx as usize;
    let t = {
        let mut st = drv.lock();
        if known(&st, handle)?.primary {
            return Err(Fault::DestroyPrimaryContext);
        }
        by_handle(&st, handle)?;
        begin_teardown(&mut st, handle).ok_or(Fault::DestroyedContextHandle)?
    };
    with_stack(|s| {
        if s.last() == Some(&handle) {
            s.pop();
        }
    });
    finish(drv, t);
    Ok(())
}

/// `cuCtxDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    guard("cuCtxDestroy_v2", || destroy(ctx))
}

/// `cuCtxDestroy` (the CUDA 2.0 entry): as `cuCtxDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDestroy(ctx: CUcontext) -> CUresult {
    guard("cuCtxDestroy", || destroy(ctx))
}

/// `cuCtxGetCurrent`: the top of the calling thread's stack (even if that context is dead), or
/// NULL.
///
/// # Safety
/// `pctx` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    guard("cuCtxGetCurrent", || {
        state::driver()?;
        let h = current_handle().unwrap_or(0);
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(pctx, h as CUcontext) }
    })
}

/// `cuCtxSetCurrent`: replaces the top of the stack; NULL pops.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    guard("cuCtxSetCurrent", || {
        let drv = state::driver()?;
        if ctx.is_null() {
            with_stack(|s| s.pop());
            return Ok(());
        }
        let handle = ctx as usize;
        check_bindable(&drv.lock(), handle)?;
        with_stack(|s| {
            s.pop();
            s.push(handle);
        });
        Ok(())
    })
}

fn push(ctx: CUcontext) -> Result<(), Fault> {
    let drv = state::driver()?;
    if ctx.is_null() {
        return Err(Fault::PushNullContext);
    }
    let handle = ctx as usize;
    check_bindable(&drv.lock(), handle)?;
    with_stack(|s| s.push(handle));
    Ok(())
}

/// `cuCtxPushCurrent_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    guard("cuCtxPushCurrent_v2", || push(ctx))
}

/// `cuCtxPushCurrent` (the CUDA 2.0 entry): as `cuCtxPushCurrent_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxPushCurrent(ctx: CUcontext) -> CUresult {
    guard("cuCtxPushCurrent", || push(ctx))
}

fn pop(pctx: *mut CUcontext) -> Result<(), Fault> {
    state::driver()?;
    let popped = with_stack(|s| s.pop()).ok_or(Fault::PopEmptyStack)?;
    if !pctx.is_null() {
        // SAFETY: non-null and writable by the contract of the exported entries.
        unsafe { put(pctx, popped as CUcontext)? };
    }
    Ok(())
}

/// `cuCtxPopCurrent_v2`: `pctx` may be NULL.
///
/// # Safety
/// `pctx` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    guard("cuCtxPopCurrent_v2", || pop(pctx))
}

/// `cuCtxPopCurrent` (the CUDA 2.0 entry): as `cuCtxPopCurrent_v2`.
///
/// # Safety
/// `pctx` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent(pctx: *mut CUcontext) -> CUresult {
    guard("cuCtxPopCurrent", || pop(pctx))
}

/// `cuCtxGetDevice`.
///
/// # Safety
/// `device` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    guard("cuCtxGetDevice", || {
        let drv = state::driver()?;
        need(device)?;
        let c = current(&drv.lock())?;
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(device, c.device) }
    })
}

/// `cuCtxSynchronize`: waits for all work of the current context.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    guard("cuCtxSynchronize", || {
        let drv = state::driver()?;
        let c = current(&drv.lock())?;
        synchronize(drv, c);
        Ok(())
    })
}

/// Waits for every stream of context `c`, then lets the device release what stream-ordered frees
/// gave back (as any synchronisation does on the real driver: `pool::synchronized`).
pub fn synchronize(drv: &Driver, c: CtxRef) {
    let streams = streams_of(&drv.lock(), c.handle, c.id);
    stream::wait_all(&streams);
    pool::synchronized(&mut drv.lock(), c.device);
}

/// The streams of context `handle` in its activation `id`.
pub fn streams_of(st: &State, handle: usize, id: u64) -> Vec<Arc<Stream>> {
    match st.contexts.get(&handle) {
        Some(c) if c.alive && c.id == id => c.streams.clone(),
        _ => Vec::new(),
    }
}

/// The streams of every live context on device `dev`.
pub fn streams_of_device(st: &State, dev: i32) -> Vec<Arc<Stream>> {
    st.contexts
        .values()
        .filter(|c| c.alive && c.device == dev)
        .flat_map(|c| c.streams.iter().cloned())
        .collect()
}

/// `cuCtxGetApiVersion`: `ctx` NULL means the current context.
///
/// # Safety
/// `version` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut c_uint) -> CUresult {
    guard("cuCtxGetApiVersion", || {
        let drv = state::driver()?;
        need(version)?;
        given_or_current(&drv.lock(), ctx)?;
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(version, CTX_API_VERSION) }
    })
}

/// `cuCtxGetFlags`: flags of the current context.
///
/// # Safety
/// `flags` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    guard("cuCtxGetFlags", || {
        let drv = state::driver()?;
        need(flags)?;
        let st = drv.lock();
        let c = current(&st)?;
        let f = st.contexts[&c.handle].flags;
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(flags, f) }
    })
}

/// `cuCtxSetFlags`: replaces the flags of the current context.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSetFlags(flags: c_uint) -> CUresult {
    guard("cuCtxSetFlags", || {
        let drv = state::driver()?;
        check_flags(flags)?;
        let mut st = drv.lock();
        let c = current(&st)?;
        if let Some(ctx) = st.contexts.get_mut(&c.handle) {
            ctx.flags = flags;
        }
        Ok(())
    })
}

/// `cuCtxGetId`: `ctx` NULL means the current context.
///
/// # Safety
/// `ctxId` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetId(ctx: CUcontext, ctxId: *mut u64) -> CUresult {
    guard("cuCtxGetId", || {
        let drv = state::driver()?;
        need(ctxId)?;
        let c = given_or_current(&drv.lock(), ctx)?;
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(ctxId, c.id) }
    })
}

/// `cuCtxGetStreamPriorityRange`: either pointer may be NULL.
///
/// # Safety
/// Each pointer is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    leastPriority: *mut c_int,
    greatestPriority: *mut c_int,
) -> CUresult {
    guard("cuCtxGetStreamPriorityRange", || {
        let drv = state::driver()?;
        current(&drv.lock())?;
        // SAFETY: each pointer is NULL or writable by the caller's contract.
        unsafe {
            if !leastPriority.is_null() {
                put(leastPriority, STREAM_PRIORITY_LEAST)?;
            }
            if !greatestPriority.is_null() {
                put(greatestPriority, STREAM_PRIORITY_GREATEST)?;
            }
        }
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// Primary contexts

/// `cuDevicePrimaryCtxRetain`: counts a reference and activates the primary context if it is
/// inactive (never retained, released to zero, or reset).
///
/// # Safety
/// `pctx` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    guard("cuDevicePrimaryCtxRetain", || {
        let drv = state::driver()?;
        need(pctx)?;
        let mut st = drv.lock();
        let handle = st.device(dev)?.primary;
        if !st.contexts[&handle].alive {
            activate(&mut st, handle);
        }
        if let Some(c) = st.contexts.get_mut(&handle) {
            c.refcount += 1;
        }
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(pctx, handle as CUcontext) }
    })
}

fn primary_release(dev: CUdevice) -> Result<(), Fault> {
    let drv = state::driver()?;
    let t = {
        let mut st = drv.lock();
        let handle = st.device(dev)?.primary;
        let Some(c) = st.contexts.get_mut(&handle) else {
            return Err(Fault::Internal);
        };
        if c.refcount == 0 {
            return Err(Fault::PrimaryNotRetained);
        }
        c.refcount -= 1;
        if c.refcount > 0 {
            return Ok(());
        }
        // After a reset the context may already be inactive; then there is nothing to destroy.
        begin_teardown(&mut st, handle)
    };
    if let Some(t) = t {
        finish(drv, t);
    }
    Ok(())
}

/// `cuDevicePrimaryCtxRelease`: drops a reference; the last one destroys the context and frees
/// all its memory.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    guard("cuDevicePrimaryCtxRelease", || primary_release(dev))
}

/// `cuDevicePrimaryCtxRelease_v2`: as `cuDevicePrimaryCtxRelease`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    guard("cuDevicePrimaryCtxRelease_v2", || primary_release(dev))
}

fn primary_reset(dev: CUdevice) -> Result<(), Fault> {
    let drv = state::driver()?;
    let t = {
        let mut st = drv.lock();
        let handle = st.device(dev)?.primary;
        begin_teardown(&mut st, handle)
    };
    if let Some(t) = t {
        finish(drv, t);
    }
    Ok(())
}

/// `cuDevicePrimaryCtxReset`: destroys the primary context whatever its count, freeing all its
/// memory. The retain count is kept (measured: after reset, retain, release, release, the
/// context is gone); the next retain starts a new activation.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset(dev: CUdevice) -> CUresult {
    guard("cuDevicePrimaryCtxReset", || primary_reset(dev))
}

/// `cuDevicePrimaryCtxReset_v2`: as `cuDevicePrimaryCtxReset`.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    guard("cuDevicePrimaryCtxReset_v2", || primary_reset(dev))
}

/// `cuDevicePrimaryCtxGetState`.
///
/// # Safety
/// Both pointers are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    guard("cuDevicePrimaryCtxGetState", || {
        let drv = state::driver()?;
        need(flags)?;
        need(active)?;
        let st = drv.lock();
        let c = &st.contexts[&st.device(dev)?.primary];
        // SAFETY: both checked non-null; writable by the caller's contract.
        unsafe {
            put(flags, c.flags)?;
            put(active, c.alive as c_int)
        }
    })
}

fn primary_set_flags(dev: CUdevice, flags: c_uint, allow_active: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let handle = st.device(dev)?.primary;
    check_flags(flags)?;
    let Some(c) = st.contexts.get_mut(&handle) else {
        return Err(Fault::Internal);
    };
    if c.alive && !allow_active {
        return Err(Fault::PrimaryActive);
    }
    c.flags = flags;
    Ok(())
}

/// `cuDevicePrimaryCtxSetFlags`: only while the primary context is inactive.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags(dev: CUdevice, flags: c_uint) -> CUresult {
    guard("cuDevicePrimaryCtxSetFlags", || {
        primary_set_flags(dev, flags, false)
    })
}

/// `cuDevicePrimaryCtxSetFlags_v2`: also while active.
#[unsafe(no_mangle)]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) -> CUresult {
    guard("cuDevicePrimaryCtxSetFlags_v2", || {
        primary_set_flags(dev, flags, true)
    })
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
