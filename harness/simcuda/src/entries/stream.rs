//! The stream family's C entry points: `cuStream*` (creation, destruction, synchronisation,
//! queries, waiting on an event), with their `_ptsz` forms where handle 0 is the calling
//! thread's per-thread default stream.

use std::ffi::{c_int, c_uint};
use std::sync::Arc;

use super::{guard, need, put};
use crate::errors::Fault;
use crate::ffi::consts::{
    CU_EVENT_WAIT_DEFAULT, CU_EVENT_WAIT_EXTERNAL, CU_STREAM_DEFAULT, CU_STREAM_NON_BLOCKING,
};
use crate::ffi::{CUevent, CUresult, CUstream};
use crate::model::context::{STREAM_PRIORITY_GREATEST, STREAM_PRIORITY_LEAST};
use crate::model::stream::{Stream, StreamKind};
use crate::state;

/// Synchronises with stream `h`: for the legacy stream this includes the blocking streams'
/// earlier work. Then the device releases what stream-ordered frees on that stream gave back
/// (`state/pool.rs`, `stream_synchronized`).
fn synchronize(h: CUstream, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let (s, target) = {
        let mut st = drv.lock();
        let s = st.resolve_stream(h as usize, per_thread_default)?;
        let target = if s.kind == StreamKind::Legacy {
            st.submit(&s, None, None)?
        } else {
            s.tail()
        };
        (s, target)
    };
    s.wait_for(target);
    drv.lock().stream_synchronized(&s, true);
    Ok(())
}

fn query(h: CUstream, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let s = drv.lock().resolve_stream(h as usize, per_thread_default)?;
    if s.idle() {
        Ok(())
    } else {
        Err(Fault::NotReady)
    }
}

fn wait_event(
    h: CUstream,
    ev: CUevent,
    flags: c_uint,
    per_thread_default: bool,
) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let s = st.resolve_stream(h as usize, per_thread_default)?;
    let e = st.event(ev as usize)?;
    if flags != CU_EVENT_WAIT_DEFAULT && flags != CU_EVENT_WAIT_EXTERNAL {
        return Err(Fault::BadFlags);
    }
    if let Some(point) = e.target() {
        st.submit(&s, Some(point), None)?;
    }
    Ok(())
}

fn create(ph: *mut CUstream, flags: c_uint, priority: c_int) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(ph)?;
    if flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING {
        return Err(Fault::BadFlags);
    }
    let mut st = drv.lock();
    let c = st.current()?;
    let handle = st.new_handle();
    let kind = if flags == CU_STREAM_NON_BLOCKING {
        StreamKind::NonBlocking
    } else {
        StreamKind::Blocking
    };
    let priority = priority.clamp(STREAM_PRIORITY_GREATEST, STREAM_PRIORITY_LEAST);
    let s = Stream::new(c.handle, c.id, c.device, kind, flags, priority);
    st.streams.insert(handle, s.clone());
    if let Some(ctx) = st.contexts.get_mut(&c.handle) {
        ctx.streams.push(s);
    }
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(ph, handle as CUstream) }
}

/// `cuStreamCreate`: `Flags` is `CU_STREAM_DEFAULT` or `CU_STREAM_NON_BLOCKING`.
///
/// # Safety
/// `phStream` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(phStream: *mut CUstream, Flags: c_uint) -> CUresult {
    guard("cuStreamCreate", || create(phStream, Flags, 0))
}

/// `cuStreamCreateWithPriority`: the priority is clamped to the context's range.
///
/// # Safety
/// `phStream` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    phStream: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    guard("cuStreamCreateWithPriority", || {
        create(phStream, flags, priority)
    })
}

/// Destroys a created stream; work already issued still runs.
fn destroy(hStream: CUstream) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let h = hStream as usize;
    let s = st.streams.remove(&h).ok_or(Fault::BadStream)?;
    st.stream_gone(Arc::as_ptr(&s) as usize);
    s.close();
    if let Some(ctx) = st.contexts.get_mut(&s.ctx_handle) {
        // Forget streams that are closed and drained.
        ctx.streams.retain(|t| !(t.closed() && t.idle()));
    }
    Ok(())
}

/// `cuStreamDestroy_v2`: returns at once; work already issued still runs.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy_v2(hStream: CUstream) -> CUresult {
    guard("cuStreamDestroy_v2", || destroy(hStream))
}

/// `cuStreamDestroy` (the CUDA 2.0 entry): as `cuStreamDestroy_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamDestroy(hStream: CUstream) -> CUresult {
    guard("cuStreamDestroy", || destroy(hStream))
}

/// `cuStreamSynchronize`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize(hStream: CUstream) -> CUresult {
    guard("cuStreamSynchronize", || synchronize(hStream, false))
}

/// `cuStreamSynchronize_ptsz`: handle 0 is the per-thread default stream.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamSynchronize_ptsz(hStream: CUstream) -> CUresult {
    guard("cuStreamSynchronize_ptsz", || synchronize(hStream, true))
}

/// `cuStreamQuery`: `CUDA_SUCCESS` when idle, `CUDA_ERROR_NOT_READY` otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamQuery(hStream: CUstream) -> CUresult {
    guard("cuStreamQuery", || query(hStream, false))
}

/// `cuStreamQuery_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamQuery_ptsz(hStream: CUstream) -> CUresult {
    guard("cuStreamQuery_ptsz", || query(hStream, true))
}

/// `cuStreamWaitEvent`: later work on the stream waits for the event's recorded point (an event
/// never recorded is already complete).
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent(hStream: CUstream, hEvent: CUevent, Flags: c_uint) -> CUresult {
    guard("cuStreamWaitEvent", || {
        wait_event(hStream, hEvent, Flags, false)
    })
}

/// `cuStreamWaitEvent_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamWaitEvent_ptsz(
    hStream: CUstream,
    hEvent: CUevent,
    Flags: c_uint,
) -> CUresult {
    guard("cuStreamWaitEvent_ptsz", || {
        wait_event(hStream, hEvent, Flags, true)
    })
}

fn get_flags(h: CUstream, out: *mut c_uint, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(out)?;
    let s = drv.lock().resolve_stream(h as usize, per_thread_default)?;
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(out, s.flags) }
}

fn get_priority(h: CUstream, out: *mut c_int, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(out)?;
    let s = drv.lock().resolve_stream(h as usize, per_thread_default)?;
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(out, s.priority) }
}

/// `cuStreamGetFlags`.
///
/// # Safety
/// `flags` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetFlags(hStream: CUstream, flags: *mut c_uint) -> CUresult {
    guard("cuStreamGetFlags", || get_flags(hStream, flags, false))
}

/// `cuStreamGetFlags_ptsz`.
///
/// # Safety
/// `flags` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetFlags_ptsz(hStream: CUstream, flags: *mut c_uint) -> CUresult {
    guard("cuStreamGetFlags_ptsz", || get_flags(hStream, flags, true))
}

/// `cuStreamGetPriority`.
///
/// # Safety
/// `priority` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetPriority(hStream: CUstream, priority: *mut c_int) -> CUresult {
    guard("cuStreamGetPriority", || {
        get_priority(hStream, priority, false)
    })
}

/// `cuStreamGetPriority_ptsz`.
///
/// # Safety
/// `priority` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamGetPriority_ptsz(
    hStream: CUstream,
    priority: *mut c_int,
) -> CUresult {
    guard("cuStreamGetPriority_ptsz", || {
        get_priority(hStream, priority, true)
    })
}
