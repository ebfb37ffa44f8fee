//! Events: a recorded point in a stream, which completes when the stream's work before it has.
//!
//! `cuEventRecord` issues a marker operation on the stream (so on the legacy stream it also
//! covers the blocking streams' earlier work) and remembers it; the marker stamps the time when
//! it runs. Recording again starts a new generation: a marker of an older generation that runs
//! late does not touch the new one.

use std::ffi::c_uint;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::context;
use crate::errors::Fault;
use crate::ffi::consts::{CU_EVENT_BLOCKING_SYNC, CU_EVENT_DISABLE_TIMING, CU_EVENT_INTERPROCESS};
use crate::ffi::{CUevent, CUresult, CUstream, guard, need, put};
use crate::pool;
use crate::state::{self, State};
use crate::stream::{self, Point};

/// An event.
pub struct Event {
    pub ctx_id: u64,
    pub flags: c_uint,
    rec: Mutex<Record>,
}

/// What an event's last record captured (behind the event's lock).
#[derive(Default)]
pub(crate) struct Record {
    generation: u64,
    /// The marker operation of the last record, if any.
    target: Option<Point>,
    /// When that marker ran.
    time: Option<Instant>,
}

impl Event {
    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.rec.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The event's lock, for holding it across a fork (see `fork.rs`).
    pub(crate) fn lock_record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record()
    }

    /// The point the last record captured (`None` if never recorded).
    pub fn target(&self) -> Option<Point> {
        self.record().target.clone()
    }

    /// Whether the recorded work has completed (an event never recorded has).
    pub fn complete(&self) -> bool {
        self.target().is_none_or(|(s, seq)| s.reached(seq))
    }

    fn stamp(&self, generation: u64) {
        let mut r = self.record();
        if r.generation == generation {
            r.time = Some(Instant::now());
        }
    }
}

/// The live event with handle `h`.
pub fn lookup(st: &State, h: CUevent) -> Result<Arc<Event>, Fault> {
    st.events.get(&(h as usize)).cloned().ok_or(Fault::BadEvent)
}

/// Forgets the events of a destroyed context.
pub fn release_context(st: &mut State, ctx_id: u64) {
    st.events.retain(|_, e| e.ctx_id != ctx_id);
}

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
        let c = context::current(&st)?;
        let handle = st.new_handle();
        let ev = Event {
            ctx_id: c.id,
            flags: Flags,
            rec: Mutex::new(Record::default()),
        };
        st.events.insert(handle, Arc::new(ev));
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(phEvent, handle as CUevent) }
    })
}

fn record(ev: CUevent, h: CUstream, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let mut st = drv.lock();
    let e = lookup(&st, ev)?;
    let s = stream::resolve(&mut st, h, per_thread_default)?;
    if s.ctx_id != e.ctx_id {
        return Err(Fault::EventStreamMismatch);
    }
    let mut r = e.record();
    r.generation += 1;
    r.time = None;
    let generation = r.generation;
    let marker = e.clone();
    let seq = stream::submit(
        &st,
        &s,
        None,
        Some(Box::new(move || marker.stamp(generation))),
    )?;
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
        let e = lookup(&drv.lock(), hEvent)?;
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
        let e = lookup(&drv.lock(), hEvent)?;
        if let Some((s, seq)) = e.target() {
            s.wait_for(seq);
            pool::stream_synchronized(&mut drv.lock(), &s);
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
        (lookup(&st, start)?, lookup(&st, end)?)
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
