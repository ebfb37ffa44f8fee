//! Stream capture, as far as the shim's tests need it: a created stream begins and ends a
//! capture (`cuStreamBeginCapture_v2`, `cuStreamEndCapture`, and their `_ptsz` forms), and the
//! graph it gives back is destroyed (`cuGraphDestroy`). Only the state is kept: work issued to
//! a capturing stream still runs (it is not recorded into a graph, which is an empty
//! placeholder), so a test issues no work to the stream it captures.

use std::ffi::c_uint;
use std::sync::Mutex;

use crate::errors::Fault;
use crate::ffi::{CUresult, CUstream, guard, need};
use crate::state;
use crate::stream;

/// `CUgraph`.
pub type CUgraph = *mut std::ffi::c_void;

/// Handles of the streams capturing now.
static CAPTURING: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn capturing() -> std::sync::MutexGuard<'static, Vec<usize>> {
    CAPTURING.lock().unwrap_or_else(|p| p.into_inner())
}

/// The capture modes: global, thread-local, relaxed.
const MODES: c_uint = 3;

fn begin(h: CUstream, mode: c_uint, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    let s = stream::resolve(&mut drv.lock(), h, per_thread_default)?;
    if mode >= MODES {
        return Err(Fault::BadArgument);
    }
    // The legacy stream cannot be captured; a created stream is named by its own handle.
    if s.kind == stream::StreamKind::Legacy {
        return Err(Fault::BadStream);
    }
    let mut c = capturing();
    let key = std::sync::Arc::as_ptr(&s) as usize;
    if c.contains(&key) {
        return Err(Fault::CaptureState);
    }
    c.push(key);
    Ok(())
}

fn end(h: CUstream, graph: *mut CUgraph, per_thread_default: bool) -> Result<(), Fault> {
    let drv = state::driver()?;
    need(graph)?;
    let s = stream::resolve(&mut drv.lock(), h, per_thread_default)?;
    let key = std::sync::Arc::as_ptr(&s) as usize;
    let mut c = capturing();
    let Some(i) = c.iter().position(|k| *k == key) else {
        return Err(Fault::CaptureState);
    };
    c.swap_remove(i);
    // SAFETY: graph was checked non-null; the caller's out-parameter.
    unsafe { *graph = Box::into_raw(Box::new(0u64)) as CUgraph };
    Ok(())
}

/// `cuStreamBeginCapture_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamBeginCapture_v2(hStream: CUstream, mode: c_uint) -> CUresult {
    guard("cuStreamBeginCapture_v2", || begin(hStream, mode, false))
}

/// `cuStreamBeginCapture_v2_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamBeginCapture_v2_ptsz(hStream: CUstream, mode: c_uint) -> CUresult {
    guard("cuStreamBeginCapture_v2_ptsz", || {
        begin(hStream, mode, true)
    })
}

/// `cuStreamEndCapture`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamEndCapture(hStream: CUstream, phGraph: *mut CUgraph) -> CUresult {
    guard("cuStreamEndCapture", || end(hStream, phGraph, false))
}

/// `cuStreamEndCapture_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuStreamEndCapture_ptsz(hStream: CUstream, phGraph: *mut CUgraph) -> CUresult {
    guard("cuStreamEndCapture_ptsz", || end(hStream, phGraph, true))
}

/// `cuGraphDestroy`: a graph `cuStreamEndCapture` gave.
#[unsafe(no_mangle)]
pub extern "C" fn cuGraphDestroy(hGraph: CUgraph) -> CUresult {
    guard("cuGraphDestroy", || {
        need(hGraph)?;
        // SAFETY: a graph this module made with Box::into_raw, destroyed once (the driver's
        // contract).
        drop(unsafe { Box::from_raw(hGraph as *mut u64) });
        Ok(())
    })
}
