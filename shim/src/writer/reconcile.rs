//! The report's `reconciliation`: per device, what is used against what cuguard can explain.
//!
//! "Used" is the device's memory in use by every process (`cuMemGetInfo` in a live context of
//! the device: total − free; NVML where no context is live), and this process's own usage as
//! NVML lists it, where it does (inside a container NVML may see the host's pids: then the
//! report says so rather than guess). What cuguard explains, in this order ([`reckon`]):
//!
//! 1. exactly: the live device allocations in the report by their owner's kind, the pool's
//!    idle memory, and what the driver's stream-ordered memory pools hold unallocated
//!    ([`crate::driver::mem_pools`]);
//! 2. the contexts' own memory, as estimated when each live context was created (NVML's usage
//!    before and after): no more than what is used leaves after (1); the estimate whole is said
//!    when it is more, and by how much cuguard's figures exceed what is used;
//! 3. memory the pool gave back and the driver has not returned: exactly, the chunks queued
//!    for the give-back thread's `cuMemFree` and not freed yet when the report was written (the
//!    process ended first; counted with (1)); and what the pool gave back with
//!    `cuMemFreeAsync` since it last synchronized the device (`tracker::given_back`), which the
//!    driver holds until a synchronizing call: no more of it than what is left after (2), since
//!    the program may have synchronized since.
//!
//! The rest is unexplained, never below zero: other processes' memory when only the device
//! figure is known, and what the driver takes without an allocation call.

use std::collections::HashMap;

use cuguard_format as format;
use cuguard_format::wire::device_ordinal;

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
    if let Some(p) = crate::serving::registry::stats_for_device(device) {
        // What the pool holds that no live allocation asked for: its free and pending bytes, and
        // the rounding of its live blocks (a dedicated chunk is its request rounded to 2 MiB).
        e.pool_idle_bytes =
            p.free_bytes + p.pending_bytes + crate::serving::registry::slack_for_device(device);
    }
    let live: Vec<&ContextInfo> = contexts
        .iter()
        .filter(|c| c.device == device && !c.destroyed)
        .collect();
    let overhead = live.iter().filter_map(|c| c.overhead_bytes).sum();
    // Queued for the give-back thread and not freed yet: still allocated, so counted exactly.
    e.given_back_bytes = crate::serving::giveback::waiting()
        .into_iter()
        .filter(|(ctx, _)| live.iter().any(|c| c.handle == *ctx))
        .map(|(ctx, base)| size_in(ctx, base))
        .sum();
    let given_back = crate::tracker::given_back::pending(device);
    let unloading = crate::phase::unloading();
    if !unloading {
        e.driver_pool_idle_bytes = crate::driver::mem_pools::on_device(device)
            .iter()
            .map(|p| p.idle())
            .sum();
    }
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
    let queued = e.given_back_bytes;
    let r = reckon(basis, e, overhead, given_back);
    format::Reconciliation {
        device: ordinal,
        device_used_bytes: device_used,
        process_used_bytes: process_used,
        process_used_note: note,
        unexplained_note: unexplained_note(process_used, r.unexplained),
        unexplained_bytes: r.unexplained.map(|u| i64::try_from(u).unwrap_or(i64::MAX)),
        context_overhead_estimate_bytes: r.overhead_estimate,
        excess_bytes: r.excess,
        given_back_pending_bytes: Some(given_back + queued).filter(|b| *b > 0),
        explained: r.explained,
    }
}

/// What one device's figures come to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reckoned {
    /// The parts, the estimated ones counted only as far as what is used goes.
    pub explained: format::Explained,
    /// What is used and not explained (`None` without a measure of use).
    pub unexplained: Option<u64>,
    /// The contexts' estimate whole, when less of it is counted.
    pub overhead_estimate: Option<u64>,
    /// By how much the exact parts and the contexts' whole estimate exceed what is used.
    pub excess: Option<u64>,
}

/// Explains `used` bytes (the measure of use, if any) by the `exact` parts (the live
/// allocations by owner, the pool's idle memory, the chunks given back and still allocated in
/// `given_back_bytes`), then the contexts' `overhead` estimate, then what the pool gave back
/// with `cuMemFreeAsync` that the driver may still hold (`given_back`, added to
/// `given_back_bytes`), each estimated part counted only as far as what is used leaves. Without
/// a measure, every part counts whole.
pub fn reckon(
    used: Option<u64>,
    exact: format::Explained,
    overhead: u64,
    given_back: u64,
) -> Reckoned {
    let mut e = exact;
    e.context_overhead_bytes = 0;
    let Some(used) = used else {
        e.context_overhead_bytes = overhead;
        e.given_back_bytes += given_back;
        return Reckoned {
            explained: e,
            unexplained: None,
            overhead_estimate: None,
            excess: None,
        };
    };
    let mut left = used.saturating_sub(e.total());
    e.context_overhead_bytes = overhead.min(left);
    left -= e.context_overhead_bytes;
    let held = given_back.min(left);
    e.given_back_bytes += held;
    left -= held;
    let over = e
        .total()
        .saturating_add(overhead - e.context_overhead_bytes);
    let excess = over.saturating_sub(used);
    Reckoned {
        overhead_estimate: (e.context_overhead_bytes < overhead).then_some(overhead),
        excess: (excess > 0).then_some(excess),
        unexplained: Some(left),
        explained: e,
    }
}

/// What NVML counts for a process and cuguard cannot see, said when it is more than this share
/// of the process's usage.
const UNEXPLAINED_SHARE: f64 = 0.05;

/// Why the unexplained part is there, when NVML listed the process and more than
/// [`UNEXPLAINED_SHARE`] of its usage is unexplained (with the whole device's usage as the
/// basis, other processes are the likelier reason, and `process_used_note` says so).
fn unexplained_note(process_used: Option<u64>, unexplained: Option<u64>) -> Option<String> {
    let (used, u) = (process_used?, unexplained?);
    (used > 0 && u as f64 > UNEXPLAINED_SHARE * used as f64).then(|| {
        "memory the driver takes for the process without an allocation call: the code and data \
         of CUDA modules, loaded as their kernels are first launched (lazy loading), and local \
         memory for kernels' stacks and register spills, which grows with the kernels run"
            .to_string()
    })
}

/// The size of the allocation at `base` as the driver says in context `handle` (a chunk the
/// pool gave back and has not freed yet); 0 when it does not say.
fn size_in(handle: u64, base: u64) -> u64 {
    let (Some(push), Some(pop), Some(range)) = (
        real::cuCtxPushCurrent_v2(),
        real::cuCtxPopCurrent_v2(),
        real::cuMemGetAddressRange_v2(),
    ) else {
        return 0;
    };
    // SAFETY: handle is a live context the tracker knows; it is pushed and popped around one
    // query with valid out-parameters.
    unsafe {
        if push(handle as CUcontext) != CUDA_SUCCESS {
            return 0;
        }
        let (mut start, mut size): (CUdeviceptr, usize) = (0, 0);
        let r = range(&mut start, &mut size, base);
        let mut popped: CUcontext = std::ptr::null_mut();
        pop(&mut popped);
        if r == CUDA_SUCCESS { size as u64 } else { 0 }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn exact(program: u64, pool_idle: u64) -> format::Explained {
        format::Explained {
            program_bytes: program,
            pool_idle_bytes: pool_idle,
            ..Default::default()
        }
    }

    /// Every part and the unexplained add up to what is used, and none is negative.
    fn adds_up(used: u64, r: &Reckoned) {
        assert_eq!(
            r.explained.total() + r.unexplained.unwrap(),
            used.max(r.explained.program_bytes + r.explained.pool_idle_bytes),
            "{r:?}"
        );
    }

    #[test]
    fn the_contexts_estimate_counts_only_as_far_as_what_is_used() {
        // CuPy on the H200: 520 MiB used, the contexts estimated at 523.6 MiB.
        let used = 520 * MIB;
        let estimate = 523 * MIB + 600 * 1024;
        let r = reckon(Some(used), exact(0, 0), estimate, 0);
        assert_eq!(r.explained.context_overhead_bytes, used);
        assert_eq!(r.unexplained, Some(0));
        assert_eq!(r.overhead_estimate, Some(estimate));
        assert_eq!(r.excess, Some(estimate - used));
        adds_up(used, &r);
        // Within what is used: counted whole, nothing said of it.
        let r = reckon(Some(600 * MIB), exact(10 * MIB, 2 * MIB), 500 * MIB, 0);
        assert_eq!(r.explained.context_overhead_bytes, 500 * MIB);
        assert_eq!(r.unexplained, Some(88 * MIB));
        assert_eq!((r.overhead_estimate, r.excess), (None, None));
        adds_up(600 * MIB, &r);
    }

    #[test]
    fn memory_given_back_and_held_is_named() {
        // PyTorch after empty_cache(): 3.6 GiB used, 3 GiB given back with cuMemFreeAsync.
        let (used, given) = (3686 * MIB, 3 << 30);
        let r = reckon(Some(used), exact(0, 0), 500 * MIB, given);
        assert_eq!(r.explained.context_overhead_bytes, 500 * MIB);
        assert_eq!(r.explained.given_back_bytes, given);
        assert_eq!(r.unexplained, Some(used - 500 * MIB - given));
        adds_up(used, &r);
        // The program synchronized since: the device no longer counts it; no more of it is
        // counted than what is used leaves.
        let r = reckon(Some(600 * MIB), exact(0, 0), 500 * MIB, given);
        assert_eq!(r.explained.given_back_bytes, 100 * MIB);
        assert_eq!(r.unexplained, Some(0));
        assert_eq!((r.overhead_estimate, r.excess), (None, None));
    }

    #[test]
    fn exact_parts_over_what_is_used_leave_nothing_negative() {
        // NVML's figure behind the allocations just made.
        let r = reckon(Some(100 * MIB), exact(120 * MIB, 0), 50 * MIB, 7);
        assert_eq!(r.explained.program_bytes, 120 * MIB);
        assert_eq!(r.explained.context_overhead_bytes, 0);
        assert_eq!(r.explained.given_back_bytes, 0);
        assert_eq!(r.unexplained, Some(0));
        assert_eq!(r.overhead_estimate, Some(50 * MIB));
        assert_eq!(r.excess, Some(70 * MIB));
        // Nothing at all.
        let r = reckon(Some(0), exact(0, 0), 0, 0);
        assert_eq!(
            (r.unexplained, r.overhead_estimate, r.excess),
            (Some(0), None, None)
        );
    }

    #[test]
    fn chunks_still_queued_count_exactly_before_the_estimates() {
        // 64 MiB queued for the give-back thread when the process ended, 200 MiB used.
        let mut e = exact(100 * MIB, 0);
        e.given_back_bytes = 64 * MIB;
        let r = reckon(Some(200 * MIB), e, 50 * MIB, 10 * MIB);
        assert_eq!(r.explained.given_back_bytes, 64 * MIB);
        assert_eq!(r.explained.context_overhead_bytes, 36 * MIB);
        assert_eq!(r.overhead_estimate, Some(50 * MIB));
        assert_eq!(r.excess, Some(14 * MIB));
        assert_eq!(r.unexplained, Some(0));
    }

    #[test]
    fn without_a_measure_every_part_counts_whole() {
        let r = reckon(None, exact(1, 2), 3, 4);
        assert_eq!(r.explained.total(), 10);
        assert_eq!(
            (r.unexplained, r.overhead_estimate, r.excess),
            (None, None, None)
        );
    }
}
