//! The report's `reconciliation`: per device, what is used against what cuguard can explain.
//!
//! "Used" is the device's memory in use by every process (`cuMemGetInfo` in a live context of
//! the device: total − free; NVML where no context is live), and this process's own usage as
//! NVML lists it, where it does (inside a container NVML may see the host's pids: then the
//! report says so rather than guess). What cuguard explains is the live device allocations in
//! the report by their owner's kind, the pool's idle memory, and what creating each live context
//! took (measured by NVML when it was created). The rest is unexplained: other processes'
//! memory when only the device figure is known.

use std::collections::HashMap;

use cuguard_report as format;
use cuguard_report::wire::device_ordinal;

use crate::driver::nvml::{self, ProcessUsage};
use crate::driver::real;
use crate::ffi::*;
use crate::tracker::contexts::ContextInfo;

/// One device's reconciliation. `leaks` are the report's (with owners), `kinds` each owner id's
/// kind, `contexts` the tracker's.
pub fn device(
    device: i32,
    leaks: &[format::Leak],
    kinds: &HashMap<&str, &str>,
    contexts: &[ContextInfo],
) -> format::Reconciliation {
    let mut e = format::Explained::default();
    let ordinal = device_ordinal(device);
    for l in leaks.iter().filter(|l| {
        l.device == ordinal
            && l.state == format::LeakState::LiveAtExit
            && l.memory != format::Memory::HostPinned
    }) {
        let kind = l
            .owner
            .as_deref()
            .and_then(|o| kinds.get(o).copied())
            .unwrap_or("program");
        let slot = match kind {
            "framework_cache" => &mut e.framework_cache_bytes,
            "library" => &mut e.library_bytes,
            "driver" => &mut e.driver_bytes,
            _ => &mut e.program_bytes,
        };
        *slot += l.size;
    }
    if let Some(p) = crate::pool::registry::stats_for_device(device) {
        // What the pool holds that no live allocation asked for: its free and pending bytes, and
        // the rounding of its live blocks (a dedicated chunk is its request rounded to 2 MiB).
        e.pool_idle_bytes =
            p.free_bytes + p.pending_bytes + crate::pool::registry::slack_for_device(device);
    }
    let live: Vec<&ContextInfo> = contexts
        .iter()
        .filter(|c| c.device == device && !c.destroyed)
        .collect();
    e.context_overhead_bytes = live.iter().filter_map(|c| c.overhead_bytes).sum();
    let unloading = crate::phase::unloading();
    let device_used = if unloading {
        None
    } else {
        live.iter()
            .find_map(|c| used_in(c.handle))
            .or_else(|| nvml::device_used(device))
    };
    let (process_used, note) = if unloading {
        (
            None,
            Some("the process was unloading the shim: NVML not asked".into()),
        )
    } else {
        match nvml::process_used(device) {
            ProcessUsage::Bytes(b) => (Some(b), None),
            ProcessUsage::NotListed => (
                None,
                Some(format!(
                    "NVML does not list this process (pid {}): inside a container its pids may differ",
                    std::process::id()
                )),
            ),
            ProcessUsage::Unavailable => (None, Some("NVML is not available".into())),
        }
    };
    let basis = process_used.or(device_used);
    let unexplained = basis.map(|b| b as i64 - e.total() as i64);
    format::Reconciliation {
        device: ordinal,
        device_used_bytes: device_used,
        process_used_bytes: process_used,
        process_used_note: note,
        unexplained_note: unexplained_note(process_used, unexplained),
        unexplained_bytes: unexplained,
        explained: e,
    }
}

/// What NVML counts for a process and cuguard cannot see, said when it is more than this share
/// of the process's usage.
const UNEXPLAINED_SHARE: f64 = 0.05;

/// Why the unexplained part is there, when NVML listed the process and more than
/// [`UNEXPLAINED_SHARE`] of its usage is unexplained (with the whole device's usage as the
/// basis, other processes are the likelier reason, and `process_used_note` says so).
fn unexplained_note(process_used: Option<u64>, unexplained: Option<i64>) -> Option<String> {
    let (used, u) = (process_used?, unexplained?);
    (used > 0 && u as f64 > UNEXPLAINED_SHARE * used as f64).then(|| {
        "memory the driver takes for the process without an allocation call: the code and data \
         of CUDA modules, loaded as their kernels are first launched (lazy loading), and local \
         memory for kernels' stacks and register spills, which grows with the kernels run"
            .to_string()
    })
}

/// Device memory in use (total − free) as the driver says in context `handle`, made current on
/// this thread for the question.
fn used_in(handle: u64) -> Option<u64> {
    let (push, pop, info) = (
        real::cuCtxPushCurrent_v2()?,
        real::cuCtxPopCurrent_v2()?,
        real::cuMemGetInfo_v2()?,
    );
    // SAFETY: handle is a live context the tracker knows; it is pushed and popped around one
    // query with valid out-parameters.
    unsafe {
        if push(handle as CUcontext) != CUDA_SUCCESS {
            return None;
        }
        let (mut free, mut total) = (0usize, 0usize);
        let r = info(&mut free, &mut total);
        let mut popped: CUcontext = std::ptr::null_mut();
        pop(&mut popped);
        (r == CUDA_SUCCESS).then(|| (total - free.min(total)) as u64)
    }
}
