//! The peer family's C entry points: `cuDeviceCanAccessPeer`, `cuCtxEnablePeerAccess`,
//! `cuCtxDisablePeerAccess` (the rule device work follows: `model/peer.rs`).
//!
//! Enabling access to a context of the same device is `CUDA_ERROR_INVALID_DEVICE`, as the CUDA
//! documentation says.

use std::ffi::{c_int, c_uint};

use super::{guard, need, put};
use crate::errors::Fault;
use crate::ffi::{CUcontext, CUdevice, CUresult};
use crate::state::{self, State};

/// `cuDeviceCanAccessPeer`: 1 for two distinct devices, 0 for a device and itself.
///
/// # Safety
/// `canAccessPeer` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    canAccessPeer: *mut c_int,
    dev: CUdevice,
    peerDev: CUdevice,
) -> CUresult {
    guard("cuDeviceCanAccessPeer", || {
        let drv = state::driver()?;
        need(canAccessPeer)?;
        {
            let st = drv.lock();
            st.device(dev)?;
            st.device(peerDev)?;
        }
        // SAFETY: checked non-null; writable by the caller's contract.
        unsafe { put(canAccessPeer, c_int::from(dev != peerDev)) }
    })
}

/// The (current, peer) context ids of a peer-access call, checked.
fn pair(st: &State, peer: CUcontext) -> Result<(u64, u64), Fault> {
    let cur = st.current()?;
    if peer.is_null() {
        return Err(Fault::UnknownContextHandle);
    }
    let p = st.context_by_handle(peer as usize)?;
    if p.device == cur.device {
        return Err(Fault::PeerSameDevice);
    }
    Ok((cur.id, p.id))
}

/// `cuCtxEnablePeerAccess`: work of the current context may touch `peerContext`'s memory.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxEnablePeerAccess(peerContext: CUcontext, Flags: c_uint) -> CUresult {
    guard("cuCtxEnablePeerAccess", || {
        let drv = state::driver()?;
        if Flags != 0 {
            return Err(Fault::BadFlags);
        }
        let mut st = drv.lock();
        let (from, to) = pair(&st, peerContext)?;
        st.peer_access.enable(from, to)
    })
}

/// `cuCtxDisablePeerAccess`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDisablePeerAccess(peerContext: CUcontext) -> CUresult {
    guard("cuCtxDisablePeerAccess", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        let (from, to) = pair(&st, peerContext)?;
        st.peer_access.disable(from, to)
    })
}
