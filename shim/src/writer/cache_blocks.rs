//! Why PyTorch's tensors are missing from the history though PyTorch is loaded, for the
//! report's `history.cache_blocks_unrecorded`: the blocks of its CUDA caching allocator reach
//! the history through the call `crate::hooks::torch_blocks` stands in for, and a PyTorch that
//! renamed or reshaped that call makes none reach it. Said once, in the report; the program runs
//! on unchanged.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The call's name: `c10::reportMemoryUsageToProfiler(void*, long, unsigned long, unsigned
/// long, c10::Device)`, the same in PyTorch 2.5 to 2.11's sources.
pub const SYMBOL: &CStr = c"_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE";

/// Whether the hook was ever called.
static REACHED: AtomicBool = AtomicBool::new(false);

/// The hook was called (cheap: one store, once).
pub fn reached() {
    if !REACHED.load(Ordering::Relaxed) {
        REACHED.store(true, Ordering::Relaxed);
    }
}

/// Why PyTorch's blocks are not in the history, in words; `None` when PyTorch's `libc10.so` is
/// not loaded or its blocks reached the hook (or could: it defines the call and was never
/// asked to report, as when no tensor was made on a GPU).
pub fn unrecorded() -> Option<String> {
    let defined = crate::driver::loader::symbol_in_loaded(c"libc10.so", SYMBOL)?;
    if !crate::config::get().cache_blocks {
        return Some(
            "CUGUARD_CACHE_BLOCKS=0: PyTorch's caching allocator's blocks (tensors) were not \
             recorded; the history holds its segments"
                .into(),
        );
    }
    if defined.is_some() || REACHED.load(Ordering::Relaxed) {
        return None;
    }
    Some(
        "this PyTorch's libc10.so does not define c10::reportMemoryUsageToProfiler(void*, long, \
         unsigned long, unsigned long, c10::Device), the call cuguard's hook receives (PyTorch \
         changed it): its caching allocator's blocks (tensors) were not recorded; the history \
         holds its segments"
            .into(),
    )
}
