//! The hooks on work of one context that can touch another context's memory, watched for the pool's fences
//! ([`crate::serving::peers`]): peer access enabled and disabled, and the copies that may reach
//! another context's memory (the `copy` rows: `cuMemcpyPeer*`, `cuMemcpy3DPeer*`, and the
//! unified-address `cuMemcpy`/`cuMemcpyAsync`, whose operands are found in the pools).
//!
//! A copy is noted before it is forwarded and counted as a submission, and the note is closed
//! once it was counted ([`Touch`]). A copy between a context and its own memory notes nothing,
//! and no copy notes anything (or asks the pools) while no pool exists.

#![allow(non_snake_case, clippy::too_many_arguments)]

use std::ffi::c_void;

use crate::driver::{Entry, current_context, sig};
use crate::ffi::*;
use crate::guard::shield;
use crate::serving::peers::{self, Touch};
use crate::serving::registry;

use super::submit;

/// `cuCtxEnablePeerAccess`: the current context's work may now touch `peer`'s memory.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuCtxEnablePeerAccess(
    _e: Entry,
    real: sig::cuCtxEnablePeerAccess,
    peer: CUcontext,
    flags: u32,
) -> CUresult {
    // SAFETY: the program's own arguments, forwarded unchanged.
    let r = unsafe { real(peer, flags) };
    if r == CUDA_SUCCESS {
        shield((), || {
            if let Some(cur) = current_context() {
                peers::enabled(peer as u64, cur);
            }
        });
    }
    r
}

/// `cuCtxDisablePeerAccess`: what the current context issued so far may still touch `peer`'s
/// memory, until a fence covers it.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuCtxDisablePeerAccess(
    _e: Entry,
    real: sig::cuCtxDisablePeerAccess,
    peer: CUcontext,
) -> CUresult {
    // SAFETY: the program's own argument, forwarded unchanged.
    let r = unsafe { real(peer) };
    if r == CUDA_SUCCESS {
        shield((), || {
            if let Some(cur) = current_context() {
                peers::disabled(peer as u64, cur);
            }
        });
    }
    r
}

/// Notes a copy, issued in the current context, touching the memory of `targets`. Nothing
/// while no pool exists: memory pooled later is not what the copy touches.
fn touching(targets: [u64; 2]) -> Option<Touch> {
    if targets == [0, 0] || !registry::any() {
        return None;
    }
    shield(None, || Touch::begin(current_context()?, targets))
}

/// The contexts whose pools hold `dst` and `src` (0 where none does).
fn pool_contexts(dst: u64, src: u64) -> [u64; 2] {
    if !registry::any() {
        return [0, 0];
    }
    shield([0, 0], || {
        let ctx = |addr: u64| registry::owner(addr).map_or(0, |(pool, _)| pool.device().handle);
        [ctx(dst), ctx(src)]
    })
}

/// The contexts a `CUDA_MEMCPY3D_PEER` names.
///
/// # Safety
/// `p` is NULL or points to a `CUDA_MEMCPY3D_PEER`.
unsafe fn copy3d_contexts(p: *mut c_void) -> [u64; 2] {
    if p.is_null() {
        return [0, 0];
    }
    // SAFETY: p points to the program's CUDA_MEMCPY3D_PEER (the entry's contract); only read.
    let c = unsafe { &*(p as *const cudarc::driver::sys::CUDA_MEMCPY3D_PEER_st) };
    [c.dstContext as u64, c.srcContext as u64]
}

/// The key of the stream a copy row's call `e` is issued on: `stream`, or the default stream
/// for the synchronous copies (`None`).
fn key(e: Entry, stream: Option<*mut c_void>) -> u64 {
    let per_thread = submit::is_per_thread(e);
    match stream {
        Some(s) => submit::key_of(s as u64, per_thread),
        None => submit::default_key(per_thread),
    }
}

/// Counts the submission on stream `key`, then closes the copy's note.
#[inline]
fn counted(result: CUresult, touch: Option<Touch>, key: u64) -> CUresult {
    let r = submit::counted_on(result, key);
    drop(touch);
    r
}

/// `cuMemcpy` and its `_ptsz`, `_ptds` forms: unified addresses.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemcpy(e: Entry, real: sig::cuMemcpy, dst: u64, src: u64, n: usize) -> CUresult {
    let touch = touching(pool_contexts(dst, src));
    let key = key(e, None);
    submit::before(key);
    // SAFETY: the program's own arguments, forwarded unchanged.
    counted(unsafe { real(dst, src, n) }, touch, key)
}

/// `cuMemcpyAsync` and its `_ptsz`, `_ptds` forms: unified addresses.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemcpyAsync(
    e: Entry,
    real: sig::cuMemcpyAsync,
    dst: u64,
    src: u64,
    n: usize,
    stream: *mut c_void,
) -> CUresult {
    let touch = touching(pool_contexts(dst, src));
    let key = key(e, Some(stream));
    submit::before(key);
    // SAFETY: the program's own arguments, forwarded unchanged.
    counted(unsafe { real(dst, src, n, stream) }, touch, key)
}

/// `cuMemcpyPeer` and its `_ptsz`, `_ptds` forms.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemcpyPeer(
    e: Entry,
    real: sig::cuMemcpyPeer,
    dst: u64,
    dst_ctx: *mut c_void,
    src: u64,
    src_ctx: *mut c_void,
    n: usize,
) -> CUresult {
    let touch = touching([dst_ctx as u64, src_ctx as u64]);
    let key = key(e, None);
    submit::before(key);
    // SAFETY: the program's own arguments, forwarded unchanged.
    counted(unsafe { real(dst, dst_ctx, src, src_ctx, n) }, touch, key)
}

/// `cuMemcpyPeerAsync` and its `_ptsz`, `_ptds` forms.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemcpyPeerAsync(
    e: Entry,
    real: sig::cuMemcpyPeerAsync,
    dst: u64,
    dst_ctx: *mut c_void,
    src: u64,
    src_ctx: *mut c_void,
    n: usize,
    stream: *mut c_void,
) -> CUresult {
    let touch = touching([dst_ctx as u64, src_ctx as u64]);
    let key = key(e, Some(stream));
    submit::before(key);
    // SAFETY: the program's own arguments, forwarded unchanged.
    counted(
        unsafe { real(dst, dst_ctx, src, src_ctx, n, stream) },
        touch,
        key,
    )
}

/// `cuMemcpy3DPeer` and its `_ptsz`, `_ptds` forms.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemcpy3DPeer(e: Entry, real: sig::cuMemcpy3DPeer, p: *mut c_void) -> CUresult {
    // SAFETY: p is the program's CUDA_MEMCPY3D_PEER or NULL (the entry's contract).
    let touch = touching(unsafe { copy3d_contexts(p) });
    let key = key(e, None);
    submit::before(key);
    // SAFETY: the program's own argument, forwarded unchanged.
    counted(unsafe { real(p) }, touch, key)
}

/// `cuMemcpy3DPeerAsync` and its `_ptsz`, `_ptds` forms.
///
/// # Safety
/// The program's arguments, under the driver's contract.
pub unsafe fn cuMemcpy3DPeerAsync(
    e: Entry,
    real: sig::cuMemcpy3DPeerAsync,
    p: *mut c_void,
    stream: *mut c_void,
) -> CUresult {
    // SAFETY: p is the program's CUDA_MEMCPY3D_PEER or NULL (the entry's contract).
    let touch = touching(unsafe { copy3d_contexts(p) });
    let key = key(e, Some(stream));
    submit::before(key);
    // SAFETY: the program's own arguments, forwarded unchanged.
    counted(unsafe { real(p, stream) }, touch, key)
}
