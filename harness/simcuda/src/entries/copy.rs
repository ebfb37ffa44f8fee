//! The copy family's C entry points: copies and sets (`cuMemcpy*`, `cuMemsetD*`) and the
//! simulated fill (`cusimEnqueueFill`'s work), as work on streams.
//!
//! Every copy or set is an operation on a stream: the synchronous entries use the legacy default
//! stream (their `_ptds` variants the per-thread one), the `Async` entries the stream given. When
//! the call returns follows the CUDA rules (`model/copy.rs`). Device ranges are checked against
//! the allocation they start in (`state/pointer.rs`).
//!
//! Peer copies (`cuMemcpyPeer`, `cuMemcpyPeerAsync`) copy device to device between the memory of
//! two live contexts, on the stream given (or the legacy stream) and without peer access, as the
//! real driver does (it stages them when access is not enabled). The simulated fill stands for a
//! kernel: on another device's memory it needs peer access from the stream's context
//! (`model/peer.rs`), and is refused with `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED` without it.

use std::ffi::{c_uchar, c_uint, c_ushort, c_void};
use std::sync::Arc;
use std::time::Duration;

use super::guard;
use crate::errors::Fault;
use crate::ffi::{CUcontext, CUdeviceptr, CUresult, CUstream};
use crate::model::copy::{Dir, Mode};
use crate::model::pointer::Place;
use crate::model::stream::{Stream, Work};
use crate::state::{self, State};

/// Issues work on the stream `h` names, and waits for it if `wait` says so once the operands'
/// places are known.
fn issue(
    h: CUstream,
    per_thread: bool,
    delayed: bool,
    prepare: impl FnOnce(&State, &Stream) -> Result<Option<(Work, bool)>, Fault>,
) -> Result<(), Fault> {
    let drv = state::driver()?;
    let (s, seq, wait): (Arc<Stream>, u64, bool) = {
        let mut st = drv.lock();
        let s = st.resolve_stream(h as usize, per_thread)?;
        let Some((work, wait)) = prepare(&st, &s)? else {
            return Ok(());
        };
        let delay = match crate::config::get() {
            Some(c) if delayed => c.work_delay,
            _ => Duration::ZERO,
        };
        let work: Work = if delay.is_zero() {
            work
        } else {
            Box::new(move || {
                std::thread::sleep(delay);
                work()
            })
        };
        let seq = st.submit(&s, None, Some(work))?;
        (s, seq, wait)
    };
    if wait {
        s.wait_for(seq);
    }
    Ok(())
}

fn copy(
    h: CUstream,
    per_thread: bool,
    dst: u64,
    src: u64,
    len: usize,
    mode: Mode,
    dir: Dir,
) -> Result<(), Fault> {
    issue(h, per_thread, true, |st, _| {
        if len == 0 {
            return Ok(None);
        }
        if dst == 0 || src == 0 {
            return Err(Fault::BadArgument);
        }
        let n = len as u64;
        let d = st.place(dst, n, true)?;
        let s = st.place(src, n, false)?;
        if dir.refuses(d, s) {
            return Err(Fault::BadRange);
        }
        let wait = mode.copy_waits(d, s);
        let work: Work = if !wait && s == Place::Pageable {
            // SAFETY: the caller's `len` bytes at `src` are readable (pageable host memory, the
            // entry's contract); they are copied aside before the call returns.
            let staged = unsafe { std::slice::from_raw_parts(src as *const u8, len) }.to_vec();
            Box::new(move || {
                // SAFETY: `dst` was checked to lie in driver memory of `len` bytes.
                unsafe { std::ptr::copy_nonoverlapping(staged.as_ptr(), dst as *mut u8, len) }
            })
        } else {
            Box::new(move || {
                // SAFETY: both ranges were checked (driver memory) or are the caller's host
                // buffers, which stay valid until the copy is done: either the call waits for it,
                // or they are pinned or device memory the program must not free before then.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
            })
        };
        Ok(Some((work, wait)))
    })
}

fn set(
    h: CUstream,
    per_thread: bool,
    dst: u64,
    value: u32,
    elem: usize,
    count: usize,
    mode: Mode,
) -> Result<(), Fault> {
    issue(h, per_thread, true, |st, _| {
        let len = elem.checked_mul(count).ok_or(Fault::BadRange)?;
        if len == 0 {
            return Ok(None);
        }
        if !dst.is_multiple_of(elem as u64) {
            return Err(Fault::Misaligned);
        }
        let d = st.place(dst, len as u64, true)?;
        if d == Place::Pageable {
            return Err(Fault::BadRange);
        }
        let wait = mode.set_waits(d);
        let work: Work = Box::new(move || {
            // SAFETY: `[dst, dst + len)` was checked to lie in driver memory, aligned to `elem`.
            unsafe {
                match elem {
                    1 => std::ptr::write_bytes(dst as *mut u8, value as u8, len),
                    2 => std::slice::from_raw_parts_mut(dst as *mut u16, count).fill(value as u16),
                    _ => std::slice::from_raw_parts_mut(dst as *mut u32, count).fill(value),
                }
            }
        });
        Ok(Some((work, wait)))
    })
}

/// The work of `cusimEnqueueFill`: on stream `h` (0 is the legacy stream), sleep `delay_us`
/// then write `value` into `[dst, dst + bytes)`. Returns at once.
pub fn fill(h: CUstream, dst: u64, bytes: usize, value: u8, delay_us: u32) -> Result<(), Fault> {
    issue(h, false, false, |st, s| {
        if bytes > 0 && st.place(dst, bytes as u64, true)? == Place::Pageable {
            return Err(Fault::BadRange);
        }
        if let Some(a) = st.containing(dst)
            && !st
                .peer_access
                .may_touch(s.ctx_id, s.device, a.ctx.id, a.ctx.device)
        {
            return Err(Fault::PeerNotEnabled);
        }
        let work: Work = Box::new(move || {
            std::thread::sleep(Duration::from_micros(delay_us as u64));
            if bytes > 0 {
                // SAFETY: `[dst, dst + bytes)` was checked to lie in driver memory.
                unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes) };
            }
        });
        Ok(Some((work, false)))
    })
}

const NULL: CUstream = std::ptr::null_mut();

/// The legacy `cuMemcpyHtoDAsync` (32-bit `CUdeviceptr` and size): not supported.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoDAsync(
    _dstDevice: c_uint,
    _srcHost: *const c_void,
    _ByteCount: c_uint,
    _hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyHtoDAsync", || Err(Fault::LegacyAbi))
}

/// The legacy `cuMemsetD8` (32-bit `CUdeviceptr` and count): not supported.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8(_dstDevice: c_uint, _uc: c_uchar, _N: c_uint) -> CUresult {
    guard("cuMemsetD8", || Err(Fault::LegacyAbi))
}

/// The legacy `cuMemcpyHtoD` (32-bit `CUdeviceptr` and size): not supported.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyHtoD(
    _dstDevice: c_uint,
    _srcHost: *const c_void,
    _ByteCount: c_uint,
) -> CUresult {
    guard("cuMemcpyHtoD", || Err(Fault::LegacyAbi))
}

/// `cuMemcpy`: direction from the addresses (unified addressing).
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, ByteCount: usize) -> CUresult {
    guard("cuMemcpy", || {
        copy(NULL, false, dst, src, ByteCount, Mode::Sync, Dir::Any)
    })
}

/// `cuMemcpy_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, ByteCount: usize) -> CUresult {
    guard("cuMemcpy_ptds", || {
        copy(NULL, true, dst, src, ByteCount, Mode::Sync, Dir::Any)
    })
}

/// `cuMemcpyAsync`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyAsync(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyAsync", || {
        copy(hStream, false, dst, src, ByteCount, Mode::Async, Dir::Any)
    })
}

/// `cuMemcpyAsync_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyAsync_ptsz(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyAsync_ptsz", || {
        copy(hStream, true, dst, src, ByteCount, Mode::Async, Dir::Any)
    })
}

/// A peer copy: both contexts must be live; then a device-to-device copy.
#[allow(clippy::too_many_arguments)]
fn copy_peer(
    h: CUstream,
    per_thread: bool,
    dst: u64,
    dst_ctx: CUcontext,
    src: u64,
    src_ctx: CUcontext,
    len: usize,
    mode: Mode,
) -> Result<(), Fault> {
    {
        let drv = state::driver()?;
        let st = drv.lock();
        for c in [dst_ctx, src_ctx] {
            if c.is_null() {
                return Err(Fault::UnknownContextHandle);
            }
            st.context_by_handle(c as usize)?;
        }
    }
    copy(h, per_thread, dst, src, len, mode, Dir::DtoD)
}

/// `cuMemcpyPeer`: on the legacy default stream of the current context.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeer(
    dstDevice: CUdeviceptr,
    dstContext: CUcontext,
    srcDevice: CUdeviceptr,
    srcContext: CUcontext,
    ByteCount: usize,
) -> CUresult {
    guard("cuMemcpyPeer", || {
        copy_peer(
            NULL,
            false,
            dstDevice,
            dstContext,
            srcDevice,
            srcContext,
            ByteCount,
            Mode::Sync,
        )
    })
}

/// `cuMemcpyPeer_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeer_ptds(
    dstDevice: CUdeviceptr,
    dstContext: CUcontext,
    srcDevice: CUdeviceptr,
    srcContext: CUcontext,
    ByteCount: usize,
) -> CUresult {
    guard("cuMemcpyPeer_ptds", || {
        copy_peer(
            NULL,
            true,
            dstDevice,
            dstContext,
            srcDevice,
            srcContext,
            ByteCount,
            Mode::Sync,
        )
    })
}

/// `cuMemcpyPeerAsync`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeerAsync(
    dstDevice: CUdeviceptr,
    dstContext: CUcontext,
    srcDevice: CUdeviceptr,
    srcContext: CUcontext,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyPeerAsync", || {
        copy_peer(
            hStream,
            false,
            dstDevice,
            dstContext,
            srcDevice,
            srcContext,
            ByteCount,
            Mode::Async,
        )
    })
}

/// `cuMemcpyPeerAsync_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyPeerAsync_ptsz(
    dstDevice: CUdeviceptr,
    dstContext: CUcontext,
    srcDevice: CUdeviceptr,
    srcContext: CUcontext,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyPeerAsync_ptsz", || {
        copy_peer(
            hStream,
            true,
            dstDevice,
            dstContext,
            srcDevice,
            srcContext,
            ByteCount,
            Mode::Async,
        )
    })
}

/// `cuMemcpyHtoD_v2`.
///
/// # Safety
/// `srcHost` is readable for `ByteCount` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dstDevice: CUdeviceptr,
    srcHost: *const c_void,
    ByteCount: usize,
) -> CUresult {
    guard("cuMemcpyHtoD_v2", || {
        copy(
            NULL,
            false,
            dstDevice,
            srcHost as u64,
            ByteCount,
            Mode::Sync,
            Dir::HtoD,
        )
    })
}

/// `cuMemcpyHtoD_v2_ptds`.
///
/// # Safety
/// `srcHost` is readable for `ByteCount` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoD_v2_ptds(
    dstDevice: CUdeviceptr,
    srcHost: *const c_void,
    ByteCount: usize,
) -> CUresult {
    guard("cuMemcpyHtoD_v2_ptds", || {
        copy(
            NULL,
            true,
            dstDevice,
            srcHost as u64,
            ByteCount,
            Mode::Sync,
            Dir::HtoD,
        )
    })
}

/// `cuMemcpyDtoH_v2`.
///
/// # Safety
/// `dstHost` is writable for `ByteCount` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dstHost: *mut c_void,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
) -> CUresult {
    guard("cuMemcpyDtoH_v2", || {
        copy(
            NULL,
            false,
            dstHost as u64,
            srcDevice,
            ByteCount,
            Mode::Sync,
            Dir::DtoH,
        )
    })
}

/// `cuMemcpyDtoH_v2_ptds`.
///
/// # Safety
/// `dstHost` is writable for `ByteCount` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoH_v2_ptds(
    dstHost: *mut c_void,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
) -> CUresult {
    guard("cuMemcpyDtoH_v2_ptds", || {
        copy(
            NULL,
            true,
            dstHost as u64,
            srcDevice,
            ByteCount,
            Mode::Sync,
            Dir::DtoH,
        )
    })
}

/// `cuMemcpyDtoD_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoD_v2(
    dstDevice: CUdeviceptr,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
) -> CUresult {
    guard("cuMemcpyDtoD_v2", || {
        copy(
            NULL,
            false,
            dstDevice,
            srcDevice,
            ByteCount,
            Mode::Sync,
            Dir::DtoD,
        )
    })
}

/// `cuMemcpyDtoD_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoD_v2_ptds(
    dstDevice: CUdeviceptr,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
) -> CUresult {
    guard("cuMemcpyDtoD_v2_ptds", || {
        copy(
            NULL,
            true,
            dstDevice,
            srcDevice,
            ByteCount,
            Mode::Sync,
            Dir::DtoD,
        )
    })
}

/// `cuMemcpyHtoDAsync_v2`.
///
/// # Safety
/// `srcHost` is readable for `ByteCount` bytes (until the copy is done if pinned).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dstDevice: CUdeviceptr,
    srcHost: *const c_void,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyHtoDAsync_v2", || {
        copy(
            hStream,
            false,
            dstDevice,
            srcHost as u64,
            ByteCount,
            Mode::Async,
            Dir::HtoD,
        )
    })
}

/// `cuMemcpyHtoDAsync_v2_ptsz`.
///
/// # Safety
/// As `cuMemcpyHtoDAsync_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2_ptsz(
    dstDevice: CUdeviceptr,
    srcHost: *const c_void,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyHtoDAsync_v2_ptsz", || {
        copy(
            hStream,
            true,
            dstDevice,
            srcHost as u64,
            ByteCount,
            Mode::Async,
            Dir::HtoD,
        )
    })
}

/// `cuMemcpyDtoHAsync_v2`.
///
/// # Safety
/// `dstHost` is writable for `ByteCount` bytes (until the copy is done if pinned).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dstHost: *mut c_void,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyDtoHAsync_v2", || {
        copy(
            hStream,
            false,
            dstHost as u64,
            srcDevice,
            ByteCount,
            Mode::Async,
            Dir::DtoH,
        )
    })
}

/// `cuMemcpyDtoHAsync_v2_ptsz`.
///
/// # Safety
/// As `cuMemcpyDtoHAsync_v2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2_ptsz(
    dstHost: *mut c_void,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyDtoHAsync_v2_ptsz", || {
        copy(
            hStream,
            true,
            dstHost as u64,
            srcDevice,
            ByteCount,
            Mode::Async,
            Dir::DtoH,
        )
    })
}

/// `cuMemcpyDtoDAsync_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoDAsync_v2(
    dstDevice: CUdeviceptr,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyDtoDAsync_v2", || {
        copy(
            hStream,
            false,
            dstDevice,
            srcDevice,
            ByteCount,
            Mode::Async,
            Dir::DtoD,
        )
    })
}

/// `cuMemcpyDtoDAsync_v2_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemcpyDtoDAsync_v2_ptsz(
    dstDevice: CUdeviceptr,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemcpyDtoDAsync_v2_ptsz", || {
        copy(
            hStream,
            true,
            dstDevice,
            srcDevice,
            ByteCount,
            Mode::Async,
            Dir::DtoD,
        )
    })
}

/// `cuMemsetD8_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8_v2(dstDevice: CUdeviceptr, uc: c_uchar, N: usize) -> CUresult {
    guard("cuMemsetD8_v2", || {
        set(NULL, false, dstDevice, uc as u32, 1, N, Mode::Sync)
    })
}

/// `cuMemsetD8_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8_v2_ptds(dstDevice: CUdeviceptr, uc: c_uchar, N: usize) -> CUresult {
    guard("cuMemsetD8_v2_ptds", || {
        set(NULL, true, dstDevice, uc as u32, 1, N, Mode::Sync)
    })
}

/// `cuMemsetD16_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16_v2(dstDevice: CUdeviceptr, us: c_ushort, N: usize) -> CUresult {
    guard("cuMemsetD16_v2", || {
        set(NULL, false, dstDevice, us as u32, 2, N, Mode::Sync)
    })
}

/// `cuMemsetD16_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16_v2_ptds(dstDevice: CUdeviceptr, us: c_ushort, N: usize) -> CUresult {
    guard("cuMemsetD16_v2_ptds", || {
        set(NULL, true, dstDevice, us as u32, 2, N, Mode::Sync)
    })
}

/// `cuMemsetD32_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32_v2(dstDevice: CUdeviceptr, ui: c_uint, N: usize) -> CUresult {
    guard("cuMemsetD32_v2", || {
        set(NULL, false, dstDevice, ui, 4, N, Mode::Sync)
    })
}

/// `cuMemsetD32_v2_ptds`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32_v2_ptds(dstDevice: CUdeviceptr, ui: c_uint, N: usize) -> CUresult {
    guard("cuMemsetD32_v2_ptds", || {
        set(NULL, true, dstDevice, ui, 4, N, Mode::Sync)
    })
}

/// `cuMemsetD8Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async(
    dstDevice: CUdeviceptr,
    uc: c_uchar,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemsetD8Async", || {
        set(hStream, false, dstDevice, uc as u32, 1, N, Mode::Async)
    })
}

/// `cuMemsetD8Async_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD8Async_ptsz(
    dstDevice: CUdeviceptr,
    uc: c_uchar,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemsetD8Async_ptsz", || {
        set(hStream, true, dstDevice, uc as u32, 1, N, Mode::Async)
    })
}

/// `cuMemsetD16Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16Async(
    dstDevice: CUdeviceptr,
    us: c_ushort,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemsetD16Async", || {
        set(hStream, false, dstDevice, us as u32, 2, N, Mode::Async)
    })
}

/// `cuMemsetD16Async_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD16Async_ptsz(
    dstDevice: CUdeviceptr,
    us: c_ushort,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemsetD16Async_ptsz", || {
        set(hStream, true, dstDevice, us as u32, 2, N, Mode::Async)
    })
}

/// `cuMemsetD32Async`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32Async(
    dstDevice: CUdeviceptr,
    ui: c_uint,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemsetD32Async", || {
        set(hStream, false, dstDevice, ui, 4, N, Mode::Async)
    })
}

/// `cuMemsetD32Async_ptsz`.
#[unsafe(no_mangle)]
pub extern "C" fn cuMemsetD32Async_ptsz(
    dstDevice: CUdeviceptr,
    ui: c_uint,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    guard("cuMemsetD32Async_ptsz", || {
        set(hStream, true, dstDevice, ui, 4, N, Mode::Async)
    })
}
