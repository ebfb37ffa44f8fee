//! The event family's C entry points: `cuEventCreate`, `cuEventRecord(_ptsz)`, queries,
//! synchronisation, destruction and elapsed time.
//!
//! `cuEventRecord` issues a marker operation on the stream (so on the legacy stream it also
//! covers the blocking streams' earlier work) and remembers it in the event (`model/event.rs`).

use std::ffi::c_uint;
use std::sync::Arc;

use super::{guard, need, put};
use crate::errors::Fault;
use crate::ffi::consts::{CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING, CU_EVENT_INTERPROCESS};
use crate::ffi::{CUevent, CUresult, CUstream};
use crate::model::event::Event;
use crate::state;

/// `cuEventCreate`: flags are a combination of `CU_EVENT_BLOCKING_SYNC`,
/// `CU_EVENT_DISABLE_TIMING` and `CU_EVENT_INTERPROCESS` (which needs `DISABLE_TIMING`).
///
/// # Safety
/// `phEvent` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(phEvent: *mut CUevent, Flags: c_uint) -> CUresult {
    guard("cuEventCreate", || {
        let drv = state::driver()?;
        need(phEvent)?;
        let known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
        if Flags & !known != 0
            || (Flags & CU_EVENT_INTERPROCESS != 0 && Flags & CU_EVENT_DISABLE_TIMING == 0)
        {
            return Err(Fault::BadFlags);
        }
        let mut st = drv.lock();
        let c = st.current()?;
        let handle = st.new_handle();
        st.events.insert(handle, Arc::new(Event::new(c.id, Flags)));
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(phEvent, handle as CUevent) }
    })
}

fn record(ev: CUevent, h: CUstream, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let e = st.event(ev as usize)?;
    let s = st.resolve_stream(h as usize, per_thread_default)?;
    if s.ctx_id != e.ctx_id {
        return Err(Fault::EventStreamMismatch);
    }
    let mut r = e.record();
    r.generation += 1;
    r.time = None;
    let generation = r.generation;
    let marker = e.clone();
    let seq = st.submit(&s, None, Some(Box::new(move || marker.stamp(generation))))?;
    r.target = Some((s, seq));
    Ok(())
}

/// `cuEventRecord`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord(hEvent: CUevent, hStream: CUstream) -> CUresult {
    guard("cuEventRecord", || record(hEvent, hStream, false))
}

/// `cuEventRecord_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventRecord_ptsz(hEvent: CUevent, hStream: CUstream) -> CUresult {
    guard("cuEventRecord_ptsz", || record(hEvent, hStream, true))
}

/// `cuEventQuery`: `CUDA_SUCCESS` once the recorded work completed, `CUDA_ERROR_NOT_READY` before.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventQuery(hEvent: CUevent) -> CUresult {
    guard("cuEventQuery", || {
        let drv = state::driver()?;
        let e = drv.lock().event(hEvent as usize)?;
        if e.complete() {
            Ok(())
        } else {
            Err(Fault::NotReady)
        }
    })
}

/// `cuEventSynchronize`: waits for the recorded work.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventSynchronize(hEvent: CUevent) -> CUresult {
    guard("cuEventSynchronize", || {
        let drv = state::driver()?;
        let e = drv.lock().event(hEvent as usize)?;
        if let Some((s, seq)) = e.target() {
            s.wait_for(seq);
            drv.lock().stream_synchronized(&s, false);
        }
        Ok(())
    })
}

/// `cuEventDestroy_v2`: returns at once; a pending marker still runs.
#[unsafe(no_mangle)]
pub extern "C" fn cuEventDestroy_v2(hEvent: CUevent) -> CUresult {
    guard("cuEventDestroy_v2", || {
        let drv = state::driver()?;
        drv.lock()
            .events
            .remove(&(hEvent as usize))
            .map(|_| ())
            .ok_or(Fault::BadEvent)
    })
}

fn elapsed(ms: *mut f32, start: CUevent, end: CUevent) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(ms)?;
    let (a, b) = {
        let st = drv.lock();
        (st.event(start as usize)?, st.event(end as usize)?)
    };
    let mut times = [None; 2];
    for (slot, e) in times.iter_mut().zip([&a, &b]) {
        if e.flags & CU_EVENT_DISABLE_TIMING != 0 {
            return Err(Fault::EventTimingDisabled);
        }
        let r = e.record();
        let Some((s, seq)) = &r.target else {
            return Err(Fault::EventNotRecorded);
        };
        if !s.reached(*seq) {
            return Err(Fault::NotReady);
        }
        *slot = r.time;
    }
    let (Some(t0), Some(t1)) = (times[0], times[1]) else {
        return Err(Fault::NotReady);
    };
    let millis = if t1 >= t0 {
        t1.duration_since(t0).as_secs_f64() * 1e3
    } else {
        -(t0.duration_since(t1).as_secs_f64() * 1e3)
    };
    // SAFETY: checked non-null; writable by the caller's contract.
    unsafe { put(ms, millis as f32) }
}

/// `cuEventElapsedTime`: milliseconds between two completed, timed events.
///
/// # Safety
/// `pMilliseconds` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime(
    pMilliseconds: *mut f32,
    hStart: CUevent,
    hEnd: CUevent,
) -> CUresult {
    guard("cuEventElapsedTime", || {
        elapsed(pMilliseconds, hStart, hEnd)
    })
}

/// `cuEventElapsedTime_v2` (what `cuEventElapsedTime` means in CUDA 13): as the first version.
///
/// # Safety
/// `pMilliseconds` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    pMilliseconds: *mut f32,
    hStart: CUevent,
    hEnd: CUevent,
) -> CUresult {
    guard("cuEventElapsedTime_v2", || {
        elapsed(pMilliseconds, hStart, hEnd)
    })
}
