//! The context family's C entry points: `cuCtx*` and `cuDevicePrimaryCtx*`.
//!
//! The legacy entries `cuCtxCreate`, `cuCtxDestroy`, `cuCtxPushCurrent` and `cuCtxPopCurrent`
//! have the same C signatures as their `_v2` forms and behave as them. A primary context is
//! reference-counted per device; its last release (or a reset) destroys it, freeing all its
//! memory (`state/context.rs`).

use std::ffi::{c_int, c_uint};

use super::{guard, need, put};
use crate::errors::Fault;
use crate::ffi::{CUcontext, CUctxCreateParams, CUdevice, CUresult};
use crate::model::context::{
    CTX_API_VERSION, Ctx, STREAM_PRIORITY_GREATEST, STREAM_PRIORITY_LEAST, check_flags,
    current_handle, with_stack,
};
use crate::state;

/// Creates a context on `dev` and pushes it on the calling thread's stack.
fn create(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(pctx)?;
    check_flags(flags)?;
    let mut st = drv.lock();
    st.device(dev)?;
    let handle = st.new_handle();
    st.contexts
        .insert(handle, Ctx::new(handle, dev, false, flags));
    st.activate(handle);
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
        if st.known_context(handle)?.primary {
            return Err(Fault::DestroyPrimaryContext);
        }
        st.context_by_handle(handle)?;
        st.begin_teardown(handle)
            .ok_or(Fault::DestroyedContextHandle)?
    };
    with_stack(|s| {
        if s.last() == Some(&handle) {
            s.pop();
        }
    });
    drv.finish_teardown(t);
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
        drv.lock().check_bindable(handle)?;
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
    drv.lock().check_bindable(handle)?;
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
        let c = drv.lock().current()?;
        // SAFETY: NULL or writable by the caller's contract.
        unsafe { put(device, c.device) }
    })
}

/// `cuCtxSynchronize`: waits for all work of the current context.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    guard("cuCtxSynchronize", || {
        let drv = state::driver()?;
        let c = drv.lock().current()?;
        drv.synchronize_context(c);
        Ok(())
    })
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
        drv.lock().given_or_current(ctx as usize)?;
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
        let c = st.current()?;
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
        let c = st.current()?;
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
        let c = drv.lock().given_or_current(ctx as usize)?;
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
        drv.lock().current()?;
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
            st.activate(handle);
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
        st.begin_teardown(handle)
    };
    if let Some(t) = t {
        drv.finish_teardown(t);
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
        st.begin_teardown(handle)
    };
    if let Some(t) = t {
        drv.finish_teardown(t);
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
