//! What the shim does when an allocation entry answers `CUDA_ERROR_OUT_OF_MEMORY` (from the
//! driver, from the pool's limit or from the process's limit): it records what held the memory at that moment
//! ([`crate::tracker::ooms`]) with the card's figures and verdict, has the cuguard thread say so
//! in one line on stderr the first time ([`crate::lifecycle::oom_line`]: naming the stacks is
//! not the refused call's to wait for), and asks that thread for a checkpoint report (`reason: oom`, at most one
//! a second), because by the time the process ends the program has usually unwound and freed
//! that memory.

use crate::driver::{Entry, real};
use crate::ffi::*;
use crate::process::clock;
use crate::tracker::Tracker;
use crate::tracker::ooms::{MAX_STACKS, Oom, Ooms, PoolState, RefusedBy};
use cuguard_format::verdict::{self, Figures};
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
    let n = t.ooms.count();
    if !Ooms::wants(n) {
        return;
    }
    let refused_by = if why.is_some_and(|w| w.starts_with("CUGUARD_POOL_LIMIT")) {
        RefusedBy::PoolLimit
    } else if why.is_some_and(|w| w.starts_with("CUGUARD_LIMIT")) {
        RefusedBy::Limit
    } else {
        RefusedBy::Driver
    };
    let live_bytes = t
        .stats
        .snapshot()
        .iter()
        .find(|d| d.device == device)
        .map_or(0, |d| d.live_bytes);
    let mut stacks = crate::tracker::by_stack::snapshot(device);
    stacks.truncate(MAX_STACKS);
    let pool = crate::serving::registry::stats_for_device(device).map(|p| PoolState {
        reserved_bytes: p.reserved_bytes,
        free_bytes: p.free_bytes + p.pending_bytes,
        largest_free_block: p.largest_free_block,
    });
    let device_memory = device_memory();
    let limit = match refused_by {
        RefusedBy::Limit => crate::tracker::limit::limit(device).map(|l| OomLimit {
            limit_bytes: l,
            held_bytes: crate::tracker::limit::held(device),
        }),
        RefusedBy::PoolLimit => super::shown::pool_limit_bytes(device).map(|l| OomLimit {
            limit_bytes: l,
            held_bytes: crate::serving::registry::reserved_for_device(device),
        }),
        RefusedBy::Driver => None,
    };
    let idle = idle_holders(device, pool.as_ref());
    let verdict = verdict::of(Figures {
        size,
        refused_by: refused_by.as_str(),
        device_free_bytes: device_memory.map(|m| m.0),
        limit: limit.as_ref(),
        live_bytes,
        idle: &idle,
    });
    let oom = Oom {
        seq,
        time_ms: clock::moment_ms(),
        thread: clock::thread_id(),
        api,
        size,
        device,
        stack,
        refused_by,
        message: why.map(str::to_owned),
        device_memory,
        live_bytes,
        stacks,
        pool,
        labels: crate::process::labels::all(),
        limit,
        idle,
        verdict,
    };
    t.ooms.push(oom);
    crate::recorder::refused(size, stack, device, seq);
    if n == 1 {
        // Naming the stacks for the line can take long the first time (the binaries' debug
        // information is read): the cuguard thread says it, not the refused call, unless there
        // is no such thread.
        crate::lifecycle::oom_line::pending(crate::lifecycle::reporter::running());
    }
    crate::lifecycle::reporter::request_oom_report();
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
            });
        }
    }
    out.sort_by_key(|h| std::cmp::Reverse(h.idle_bytes));
    out
}

/// The current context's device (free, total), asked of the real driver.
fn device_memory() -> Option<(u64, u64)> {
    let f = real::cuMemGetInfo_v2()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-parameters.
    (unsafe { f(&mut free, &mut total) } == CUDA_SUCCESS).then_some((free as u64, total as u64))
}
