//! Peer access between contexts: `cuDeviceCanAccessPeer`, `cuCtxEnablePeerAccess`,
//! `cuCtxDisablePeerAccess`, and the rule device work follows ([`may_touch`]).
//!
//! Every pair of distinct simulated devices can access each other; a device cannot be its own
//! peer (`cuDeviceCanAccessPeer` answers 0, and enabling access to a context of the same device is
//! `CUDA_ERROR_INVALID_DEVICE`, as the CUDA documentation says). Access is one-way, from the
//! context current at `cuCtxEnablePeerAccess` to the peer context given, and kept by context id:
//! it ends with `cuCtxDisablePeerAccess` or when either context is destroyed (a primary context
//! that becomes active again starts with no peers).

use std::ffi::{c_int, c_uint};

use crate::context;
use crate::errors::Fault;
use crate::ffi::{CUcontext, CUdevice, CUresult, guard, need, put};
use crate::state::{self, State};

/// Whether work issued in the context with id `from` (on device `from_device`) may touch memory
/// owned by the context with id `owner` (on device `owner_device`): always on the same device,
/// and across devices once `from` enabled peer access to `owner`.
pub fn may_touch(st: &State, from: u64, from_device: i32, owner: u64, owner_device: i32) -> bool {
    from == owner || from_device == owner_device || st.peer_access.contains(&(from, owner))
}

/// The context with id `id` is gone: every access from or to it ends.
pub fn release_context(st: &mut State, id: u64) {
    st.peer_access.retain(|&(from, to)| from != id && to != id);
}

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
    let cur = context::current(st)?;
    if peer.is_null() {
        return Err(Fault::UnknownContextHandle);
    }
    let p = context::by_handle(st, peer as usize)?;
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
        let key = pair(&st, peerContext)?;
        if st.peer_access.contains(&key) {
            return Err(Fault::PeerAlreadyEnabled);
        }
        st.peer_access.push(key);
        Ok(())
    })
}

/// `cuCtxDisablePeerAccess`.
#[unsafe(no_mangle)]
pub extern "C" fn cuCtxDisablePeerAccess(peerContext: CUcontext) -> CUresult {
    guard("cuCtxDisablePeerAccess", || {
        let drv = state::driver()?;
        let mut st = drv.lock();
        let key = pair(&st, peerContext)?;
        let before = st.peer_access.len();
        st.peer_access.retain(|k| *k != key);
        if st.peer_access.len() == before {
            return Err(Fault::PeerNotEnabled);
        }
        Ok(())
    })
}
