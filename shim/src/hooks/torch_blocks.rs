//! PyTorch's tensors in the history: the blocks its CUDA caching allocator hands out and takes
//! back inside the segments it took from the driver, as it reports them to its own profiler.
//!
//! `libc10_cuda.so` calls `c10::reportMemoryUsageToProfiler(ptr, ±size, allocated, reserved,
//! device)` (exported by `libc10.so`) for every block it hands out (`+size`) and every block
//! the program frees (`-size`: PyTorch's `free_requested`), whether or not PyTorch's profiler
//! runs. The shim exports the same symbol; preloaded, its definition is the one the call binds
//! to. Each call is recorded as a [`MemoryKind::CacheBlock`] event with the calling thread's
//! stack (its Python line: the GIL is released there, so the shim's own frame reader finds it),
//! then forwarded, always, to PyTorch's own function, so its profiler works as before.
//! docs/architecture.md says why this hook and not PyTorch's trace tracker or memory history.
//!
//! The real function is taken from `libc10.so` itself (`dlopen` with `RTLD_NOLOAD`): Python
//! loads PyTorch's libraries in a scope of their own, which `dlsym(RTLD_NEXT)` from the shim
//! does not search. `CUGUARD_CACHE_BLOCKS=0` turns the recording off (the call is still
//! forwarded).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use cuguard_format::MemoryKind;

use crate::guard::Guard;
use crate::tracker::record::NONE;

use crate::writer::cache_blocks::SYMBOL;

/// `c10::Device`: a device type and an index, one byte each, passed by value in a register.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Device {
    pub kind: i8,
    pub index: i8,
}

/// `c10::DeviceType::CUDA`.
const CUDA: i8 = 1;

type ReportFn = unsafe extern "C" fn(*mut c_void, i64, u64, u64, Device);

/// The real function's address: 0 not looked for yet, 1 not found.
static REAL: AtomicUsize = AtomicUsize::new(0);
static MISSING_SAID: AtomicBool = AtomicBool::new(false);

/// PyTorch's own `reportMemoryUsageToProfiler`, found once.
fn real() -> Option<ReportFn> {
    let mut p = REAL.load(Ordering::Acquire);
    if p == 0 {
        p = find_real().unwrap_or(1);
        REAL.store(p, Ordering::Release);
    }
    // SAFETY: a value above 1 is the address of PyTorch's function of this signature.
    (p > 1).then(|| unsafe { std::mem::transmute::<usize, ReportFn>(p) })
}

fn find_real() -> Option<usize> {
    let dlsym = crate::driver::loader::real_dlsym()?;
    let ours = report_memory_usage as *const () as usize;
    crate::driver::loader::symbol_in_loaded(c"libc10.so", SYMBOL)
        .flatten()
        .or_else(|| {
            // SAFETY: libc's dlsym with RTLD_NEXT and a NUL-terminated name.
            let p = unsafe { dlsym(libc::RTLD_NEXT, SYMBOL.as_ptr()) } as usize;
            (p != 0 && p != ours).then_some(p)
        })
}

/// The exported hook (see the module doc).
///
/// # Safety
///
/// Called by PyTorch with its own arguments; `ptr` is never dereferenced.
#[unsafe(export_name = "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE")]
pub unsafe extern "C" fn report_memory_usage(
    ptr: *mut c_void,
    alloc_size: i64,
    total_allocated: u64,
    total_reserved: u64,
    device: Device,
) {
    crate::writer::cache_blocks::reached();
    if device.kind == CUDA && alloc_size != 0 && crate::config::get().cache_blocks {
        crate::guard::shield((), || record(ptr as u64, alloc_size, device.index));
    }
    match real() {
        // SAFETY: PyTorch's own function, with the arguments it was called with.
        Some(f) => unsafe { f(ptr, alloc_size, total_allocated, total_reserved, device) },
        None => crate::process::diag::log_once(
            &MISSING_SAID,
            "PyTorch's c10::reportMemoryUsageToProfiler was called but its own definition \
             could not be found: its profiler sees no memory events in this process",
        ),
    }
}

/// Whether PyTorch's blocks are recorded here with their stacks, as far as can be told before
/// its first block: the history is on, `CUGUARD_CACHE_BLOCKS` is not 0, PyTorch's `libc10.so`
/// is loaded and defines the call (a PyTorch that changed it never calls this hook), and
/// PyTorch's calls bind to this hook (the shim was preloaded: its definition is the first in
/// the global scope).
/// The Python package asks (`cuguard_cache_blocks`) before it turns on PyTorch's own memory
/// history for the blocks' lines, which then come from here ([`crate::tracker::cache_blocks`]).
pub fn recorded() -> bool {
    if !crate::config::get().cache_blocks || !crate::recorder::on() {
        return false;
    }
    if !matches!(
        crate::driver::loader::symbol_in_loaded(c"libc10.so", SYMBOL),
        Some(Some(_))
    ) {
        return false;
    }
    let Some(dlsym) = crate::driver::loader::real_dlsym() else {
        return false;
    };
    // SAFETY: libc's dlsym with RTLD_DEFAULT and a NUL-terminated name.
    let bound = unsafe { dlsym(libc::RTLD_DEFAULT, SYMBOL.as_ptr()) } as usize;
    bound == report_memory_usage as *const () as usize
}

/// Records one block handed out (`size > 0`) or freed (`size < 0`) on device `index`: in the
/// history, and in the live blocks' map that names their lines.
fn record(addr: u64, size: i64, index: i8) {
    if !crate::recorder::on() {
        return;
    }
    let Some(_inside) = Guard::enter() else {
        return;
    };
    let _bill = crate::process::cost::begin(crate::process::cost::Metric::Blocks);
    let device = i32::from(index);
    if size > 0 {
        let stack = crate::tracker::capture_stack();
        crate::tracker::cache_blocks::allocated(addr, size.unsigned_abs(), device, stack);
        crate::recorder::allocated_at(
            None,
            addr,
            size.unsigned_abs(),
            MemoryKind::CacheBlock,
            stack,
            NONE,
            device,
            0,
            crate::tracker::tags::current(),
        );
    } else {
        crate::tracker::cache_blocks::freed(addr);
        crate::recorder::freed(
            addr,
            MemoryKind::CacheBlock,
            NONE,
            device,
            crate::recorder::now_tsc(),
            0,
        );
    }
}
