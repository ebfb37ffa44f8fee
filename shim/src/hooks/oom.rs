//! What the shim does when an allocation entry answers `CUDA_ERROR_OUT_OF_MEMORY` (from the
//! driver, from the pool's limit or from the process's limit): it records what held the memory at that moment
//! ([`crate::tracker::ooms`]) with the card's figures and verdict, other processes' memory
//! included where NVML, already loaded, lists them ([`crate::driver::nvml::others`]: one NVML
//! call, never loading it; made by the cuguard thread just after the refusal where it runs,
//! [`crate::tracker::ooms::Ooms::fill_others`]), has the cuguard thread say so
//! in one line on stderr the first time ([`crate::lifecycle::oom_line`]: naming the stacks is
//! not the refused call's to wait for), and asks that thread for a checkpoint report (`reason: oom`, at most one
//! a second), because by the time the process ends the program has usually unwound and freed
//! that memory.

use crate::driver::{Entry, real};
use crate::ffi::*;
use crate::process::clock;
use crate::tracker::Tracker;
use crate::tracker::ooms::{MAX_STACKS, Oom, Ooms, PoolState, RefusedBy};
use cuguard_format::api::FrameworkOom;
use cuguard_format::{IdleHolder, OomLimit};

/// Records refusal of `size` bytes by `api` on `device`, asked from `stack`; `why` is the pool's
/// reason when the pool or the process's limit refused.
pub fn refused(
    t: &Tracker,
    api: Entry,
    size: u64,
    device: i32,
    stack: u32,
    seq: u64,
    why: Option<&str>,
) {
    let started = std::time::Instant::now();
    let refused_by = if why.is_some_and(|w| w.starts_with("CUGUARD_POOL_LIMIT")) {
        RefusedBy::PoolLimit
    } else if why.is_some_and(|w| w.starts_with("CUGUARD_LIMIT")) {
        RefusedBy::Limit
    } else {
        RefusedBy::Driver
    };
    let limit = match refused_by {
        RefusedBy::Limit => crate::tracker::limit::limit(device).map(|l| OomLimit {
            limit_bytes: l,
            held_bytes: crate::tracker::limit::held(device),
        }),
        RefusedBy::PoolLimit => super::shown::pool_limit_bytes(device).map(|l| OomLimit {
            limit_bytes: l,
            held_bytes: crate::serving::registry::reserved_for_device(device),
        }),
        RefusedBy::Driver | RefusedBy::Framework(_) => None,
    };
    record(
        t,
        Refusal {
            api: api.name(),
            size,
            device,
            stack,
            seq,
            refused_by,
            message: why.map(str::to_owned),
            device_memory: device_memory(),
            limit,
            cache: None,
            read_ns: None,
            started,
            device_ns: nanos(started),
        },
    );
}

/// Records a refusal by a framework's allocator, as the Python package tells it from the
/// framework (`cuguard_framework_oom`: PyTorch's out-of-memory observer, CuPy's and JAX's
/// errors as they are made): the request, the framework's limit and its cache's idle memory,
/// beside what the shim itself knows then (live memory by stack, the driver's pools, cuguard's
/// pool). `stack` is the asking thread's, taken as the framework refuses (its request is still
/// on it). False when the framework is not one cuguard reads.
pub fn framework_refused(t: &Tracker, oom: FrameworkOom, stack: u32) -> bool {
    let Some(framework) = cuguard_format::frameworks::named(&oom.framework) else {
        return false;
    };
    let started = std::time::Instant::now();
    let device = i32::try_from(oom.device).unwrap_or(-1);
    let cache = oom.cache.map(|mut c| {
        c.holder = framework.holder.into();
        c
    });
    // The free memory the framework read when it refused, not later; where it read none (JAX
    // has no call for it), the device's now, through the context the framework made.
    let now = device_memory_of(device);
    let device_memory = match oom.device_free {
        Some(free) => now.map(|m| (free, m.1)),
        None => now,
    };
    let device_ns = nanos(started);
    record(
        t,
        Refusal {
            api: framework.api,
            size: oom.requested,
            device,
            stack,
            seq: t.next_seq(),
            refused_by: RefusedBy::Framework(framework),
            message: oom.message,
            device_memory,
            limit: oom.limit.map(|l| OomLimit {
                limit_bytes: l,
                held_bytes: oom.reserved,
            }),
            cache,
            read_ns: oom.read_ns,
            started,
            device_ns,
        },
    );
    true
}

/// One refusal, as its hook saw it.
struct Refusal {
    api: &'static str,
    size: u64,
    device: i32,
    stack: u32,
    seq: u64,
    refused_by: RefusedBy,
    message: Option<String>,
    device_memory: Option<(u64, u64)>,
    limit: Option<OomLimit>,
    /// A framework's cache's idle memory, where a framework refused and says it.
    cache: Option<IdleHolder>,
    /// What reading the framework's figures took the Python package.
    read_ns: Option<u64>,
    /// When the hook began the card (before it asked the device's memory).
    started: std::time::Instant,
    /// What asking the device's memory took.
    device_ns: u64,
}

/// Nanoseconds since `from`.
fn nanos(from: std::time::Instant) -> u64 {
    u64::try_from(from.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Records `r` with what held the memory then, its verdict, the line and the checkpoint.
fn record(t: &Tracker, r: Refusal) {
    let n = t.ooms.count();
    if !Ooms::wants(n) {
        return;
    }
    let (device, started) = (r.device, r.started);
    let mut parts = cuguard_format::CardParts {
        device_ns: r.device_ns,
        ..Default::default()
    };
    let mut lap = std::time::Instant::now();
    let mut part = |slot: &mut u64| {
        let now = std::time::Instant::now();
        *slot = u64::try_from(now.duration_since(lap).as_nanos()).unwrap_or(u64::MAX);
        lap = now;
    };
    // NVML's listing of the device's processes can take most of a millisecond: where the
    // cuguard thread runs and NVML is loaded, that thread lists them just after (and works the
    // verdict out again); else one NVML call now, before any lock of the shim's is taken.
    let others_pending = crate::lifecycle::reporter::running() && crate::driver::nvml::loaded();
    let others = if others_pending {
        Err(crate::tracker::ooms::PENDING_NOTE.into())
    } else {
        crate::tracker::ooms::others_of(device)
    };
    part(&mut parts.nvml_ns);
    let live_bytes = t
        .stats
        .snapshot()
        .iter()
        .find(|d| d.device == device)
        .map_or(0, |d| d.live_bytes);
    let mut stacks = crate::tracker::by_stack::snapshot(device);
    stacks.truncate(MAX_STACKS);
    part(&mut parts.live_ns);
    let pool = crate::serving::registry::stats_for_device(device).map(|p| PoolState {
        reserved_bytes: p.reserved_bytes,
        free_bytes: p.free_bytes + p.pending_bytes,
        largest_free_block: p.largest_free_block,
    });
    let framework = matches!(r.refused_by, RefusedBy::Framework(_));
    let mut idle = idle_holders(device, pool.as_ref());
    idle.extend(r.cache);
    idle.sort_by_key(|h| std::cmp::Reverse(h.idle_bytes));
    part(&mut parts.holders_ns);
    let mut oom = Oom {
        seq: r.seq,
        time_ms: clock::moment_ms(),
        thread: clock::thread_id(),
        api: r.api,
        size: r.size,
        device,
        stack: r.stack,
        refused_by: r.refused_by,
        message: r.message,
        device_memory: r.device_memory,
        live_bytes,
        stacks,
        pool,
        labels: crate::process::labels::all(),
        limit: r.limit,
        idle,
        verdict: cuguard_format::Verdict {
            action: "unknown".into(),
            fits: false,
            text: String::new(),
        },
        within: None,
        others,
        others_pending,
        card_ns: 0,
        framework_ns: r.read_ns,
        card_parts: parts,
    };
    oom.verdict = crate::tracker::ooms::verdict_of(&oom);
    part(&mut oom.card_parts.verdict_ns);
    if framework {
        t.ooms
            .mark_within(r.refused_by, oom.thread, device, r.size, oom.time_ms);
    }
    oom.card_ns = nanos(started);
    t.ooms.push(oom);
    if others_pending {
        t.ooms.others_wanted();
        crate::lifecycle::reporter::request_others();
    }
    crate::recorder::refused(r.size, r.stack, device, r.seq);
    if n == 1 {
        // Naming the stacks for the line can take long the first time (the binaries' debug
        // information is read): the cuguard thread says it, not the refused call, unless there
        // is no such thread.
        crate::lifecycle::oom_line::pending(crate::lifecycle::reporter::running());
    }
    if framework {
        crate::lifecycle::reporter::request_oom_report_now();
    } else {
        crate::lifecycle::reporter::request_oom_report();
    }
}

/// What each holder kept idle on `device`: the driver's memory pools, and cuguard's pool
/// (`pool`, its free and pending bytes and the rounding of its live blocks), most idle first.
fn idle_holders(device: i32, pool: Option<&PoolState>) -> Vec<IdleHolder> {
    let mut out: Vec<IdleHolder> = crate::driver::mem_pools::on_device(device)
        .into_iter()
        .filter(|p| p.idle() > 0)
        .map(|p| IdleHolder {
            holder: "driver_pool".into(),
            name: p.name(device),
            handle: Some(p.handle),
            reserved_bytes: p.reserved,
            idle_bytes: p.idle(),
            release_threshold: Some(p.release_threshold),
            largest_free_bytes: None,
            ..Default::default()
        })
        .collect();
    if let Some(p) = pool {
        let idle = p.free_bytes + crate::serving::registry::slack_for_device(device);
        if idle > 0 {
            out.push(IdleHolder {
                holder: "cuguard_pool".into(),
                name: "cuguard's pool".into(),
                handle: None,
                reserved_bytes: p.reserved_bytes,
                idle_bytes: idle.min(p.reserved_bytes),
                release_threshold: None,
                largest_free_bytes: Some(p.largest_free_block),
                ..Default::default()
            });
        }
    }
    out
}

/// Device `device`'s (free, total) memory, asked of the real driver: through the calling
/// thread's current context when it is on that device, else through the device's primary
/// context when it is active (a framework made it; JAX's thread has none current once its call
/// returned), pushed on this thread for the one question and popped. Never one that is not
/// active: retaining that would create a context.
fn device_memory_of(device: i32) -> Option<(u64, u64)> {
    if current_device() == Some(device) {
        return device_memory();
    }
    let (state, retain, release, push, pop) = (
        real::cuDevicePrimaryCtxGetState()?,
        real::cuDevicePrimaryCtxRetain()?,
        real::cuDevicePrimaryCtxRelease_v2().or_else(real::cuDevicePrimaryCtxRelease)?,
        real::cuCtxPushCurrent_v2()?,
        real::cuCtxPopCurrent_v2()?,
    );
    let (mut flags, mut active) = (0u32, 0 as std::ffi::c_int);
    // SAFETY: valid out-parameters.
    if unsafe { state(device, &mut flags, &mut active) } != CUDA_SUCCESS || active == 0 {
        return None;
    }
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: valid out-parameter; the context is active, so retaining it creates nothing.
    if unsafe { retain(&mut ctx, device) } != CUDA_SUCCESS {
        return None;
    }
    let mut asked = None;
    // SAFETY: `ctx` is the device's primary context, retained above.
    if unsafe { push(ctx) } == CUDA_SUCCESS {
        asked = device_memory();
        let mut popped: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-parameter; pops what was pushed just above.
        unsafe { pop(&mut popped) };
    }
    // SAFETY: releases the retain above.
    unsafe { release(device) };
    asked
}

/// The device of the calling thread's current context, asked of the real driver.
pub fn current_device() -> Option<i32> {
    real::current_context().and_then(|_| {
        let get = real::cuCtxGetDevice()?;
        let mut d: CUdevice = -1;
        // SAFETY: valid out-parameter.
        (unsafe { get(&mut d) } == CUDA_SUCCESS).then_some(d)
    })
}

/// The current context's device (free, total), asked of the real driver.
fn device_memory() -> Option<(u64, u64)> {
    let f = real::cuMemGetInfo_v2()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-parameters.
    (unsafe { f(&mut free, &mut total) } == CUDA_SUCCESS).then_some((free as u64, total as u64))
}
