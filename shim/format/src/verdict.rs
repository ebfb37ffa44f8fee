//! What would have made a refused allocation fit: the out-of-memory card's verdict, worked out
//! from the record's own figures (what was asked, what was free under the refusing limit or on
//! the device, and what each holder kept idle), so the shim's one line at the refusal, the
//! report and every reader of an older report say the same.
//!
//! The rules, in order:
//! - **Room**: what the refuser had left. The driver: the device's free memory. `CUGUARD_LIMIT`
//!   or `CUGUARD_POOL_LIMIT`: the limit less what was held against it.
//! - The request needs its size rounded up to the driver's granularity (2 MiB): that is what the
//!   driver, the driver's pools and cuguard's pool each take for it.
//! - The holders that count: at the driver's refusal, all; at a limit's, cuguard's pool alone
//!   (the only holder whose idle memory is held against the limit).
//! - One holder whose idle memory, with the room, covers the need: its remedy fits (the holder
//!   with the most idle memory, when several would). A driver pool's: a synchronization. The
//!   driver gives a pool's memory to any allocation that needs it, a plain `cuMemAlloc` too,
//!   once a synchronization has observed its frees complete, whatever the release threshold,
//!   and none before (measured on the H100: docs/gpu-runs/2026-12-06-run28 and run29), so what
//!   a pool still holds at a refusal is frees not observed yet; trimming it
//!   (`cuMemPoolTrimTo`) does not release those either. cuguard's pool's: running without it,
//!   since it gives back every chunk with no live block before it refuses, and what it still
//!   holds idle lies between live blocks.
//! - All holders' idle memory together covers it: each remedy together fits.
//! - At the driver's refusal, when nothing in this process would make room but what other
//!   processes held on the device (`other_processes_bytes`, as NVML listed them) would, with
//!   the room: they hold it, and the request fits only once they free it. A remedy inside the
//!   process wins whenever one fits.
//! - A limit: raising it by what is missing fits, when the device has the room.
//! - Otherwise nothing would: the live memory alone leaves too little.
//!
//! - PyTorch's caching allocator refused (`pytorch`, from its out-of-memory observer): the room
//!   is the device's free memory, or less where PyTorch's per-process memory fraction (`limit`,
//!   with PyTorch's reserved bytes held against it) left less. PyTorch gives back every cached
//!   segment with no live block before it refuses, so its idle memory lies in pieces between
//!   live tensors, each too small (else it would have served the request): what counts is the
//!   part in whole 20 MiB pages (`expandable_bytes`), which `expandable_segments:True` would
//!   unmap and map to the request. The other holders count only where the device refused,
//!   not the fraction; raising the fraction fits when the device had the room.
//! - CuPy's memory pool refused (`cupy`, its `OutOfMemoryError`), under its own limit
//!   (`set_limit`, `CUPY_GPU_MEMORY_LIMIT`: the room is the limit less what the pool took) or
//!   after the driver refused. What counts of its idle memory is its whole blocks
//!   (`freeable_bytes`), which `free_all_blocks()` gives back; a block split by a live array
//!   stays. After the driver's refusal CuPy has already given its whole blocks back, so only
//!   other holders, or nothing, can make room. Raising its limit fits when the device had the
//!   room.
//! - RMM's limiting adaptor refused (`rmm_limiting`): its message says the request, not its
//!   limit; with the device's room, raising the limit by the request fits (it refuses only where
//!   what it handed out and the request exceed the limit). RMM's arena (`rmm_arena`) tells
//!   neither its size nor its free blocks: with the device's room, the verdict is unknown.
//! - JAX's allocator refused (`jax`, its `RESOURCE_EXHAUSTED` error): its limit is
//!   `XLA_PYTHON_CLIENT_MEM_FRACTION` of the device, held against the bytes its arrays use.
//!   With room under the limit, its idle memory lay in pieces each too small: the platform
//!   allocator (`XLA_PYTHON_CLIENT_ALLOCATOR=platform`) fits when the device, with JAX's region
//!   given back, holds its live arrays and the request. Without room, a larger fraction fits
//!   when the device had the room beside the region JAX already took.
//!
//! Idle memory of a holder on another device, or of one cuguard cannot read (a framework's cache
//! it was not told of), is not counted, so "nothing" is as far as cuguard can see.

use crate::attribution::{IdleHolder, OomLimit, OomRecord, OtherProcess, Verdict};
use crate::frameworks;
use crate::units::human_bytes;

/// The driver's allocation granularity on the devices measured (2 MiB).
pub const GRANULARITY: u64 = 2 << 20;

/// What a verdict is worked out from: a refusal's figures (see [`OomRecord`]).
#[derive(Clone, Copy, Debug)]
pub struct Figures<'a> {
    pub size: u64,
    pub refused_by: &'a str,
    pub device_free_bytes: Option<u64>,
    pub device_total_bytes: Option<u64>,
    pub limit: Option<&'a OomLimit>,
    pub live_bytes: u64,
    pub idle: &'a [IdleHolder],
    /// The refusing device's ordinal (for the words).
    pub device: u32,
    /// The other processes on the device, most bytes first, and what they all held; `None`
    /// when not known.
    pub other_processes: Option<(&'a [OtherProcess], u64)>,
}

impl<'a> From<&'a OomRecord> for Figures<'a> {
    fn from(o: &'a OomRecord) -> Figures<'a> {
        Figures {
            size: o.size,
            refused_by: &o.refused_by,
            device_free_bytes: o.device_free_bytes,
            device_total_bytes: o.device_total_bytes,
            limit: o.limit.as_ref(),
            live_bytes: o.live_bytes,
            idle: &o.idle,
            device: o.device,
            other_processes: o.other_processes.as_deref().zip(o.other_processes_bytes),
        }
    }
}

/// What the refuser had left (see the module doc), and whether a framework's own limit (PyTorch's
/// memory fraction, CuPy's pool limit, JAX's), not the device, left too little.
fn room(oom: &Figures<'_>) -> (Option<u64>, bool) {
    let device = oom.device_free_bytes;
    let framework = frameworks::named(oom.refused_by).is_some();
    if oom.refused_by == frameworks::JAX.name
        && let Some(l) = oom.limit
    {
        // XLA's allocator serves from the region it took: what it has left there, and beyond
        // it what its limit lets it take from the device's free memory. Its limit is what
        // refuses: the device's other free memory is not its to use.
        let region = oom
            .idle
            .iter()
            .find(|h| h.holder == frameworks::JAX.holder)
            .map_or(l.limit_bytes, |h| h.reserved_bytes);
        let beyond = l
            .limit_bytes
            .saturating_sub(region)
            .min(device.unwrap_or(0));
        return (
            Some(region.saturating_sub(l.held_bytes).saturating_add(beyond)),
            true,
        );
    }
    let room = match (oom.refused_by, oom.limit) {
        ("limit" | "pool_limit", Some(l)) => Some(l.limit_bytes.saturating_sub(l.held_bytes)),
        ("limit" | "pool_limit", None) => None,
        (_, Some(l)) if framework => Some(
            l.limit_bytes
                .saturating_sub(l.held_bytes)
                .min(device.unwrap_or(u64::MAX)),
        ),
        _ => device,
    };
    let limit_refused = framework
        && oom.limit.is_some_and(|l| {
            l.limit_bytes.saturating_sub(l.held_bytes) < device.unwrap_or(u64::MAX)
        });
    (room, limit_refused)
}

/// The verdict on `oom` (a record's [`Figures`]).
pub fn of<'a>(oom: impl Into<Figures<'a>>) -> Verdict {
    let oom: Figures<'a> = oom.into();
    let need = oom
        .size
        .max(1)
        .checked_next_multiple_of(GRANULARITY)
        .unwrap_or(u64::MAX);
    let (room, limit_refused) = room(&oom);
    let framework = frameworks::named(oom.refused_by);
    let Some(room) = room else {
        return Verdict {
            action: "unknown".into(),
            fits: false,
            text: "unknown: the memory left then could not be asked".into(),
        };
    };
    let asked = human_bytes(oom.size);
    if room >= need
        && framework == Some(&frameworks::JAX)
        && let Some(v) = jax_fragmented(&oom, need)
    {
        return v;
    }
    if room >= need
        && let Some(f) = framework
        && oom.limit.is_none()
        && let Some(v) = untold_limit(f, &asked, room)
    {
        return v;
    }
    if room >= need {
        return Verdict {
            action: "unknown".into(),
            fits: false,
            text: format!(
                "unknown: {} was left, enough for the {asked} asked; what refused it is not among what cuguard reads",
                human_bytes(room)
            ),
        };
    }
    let counts = |h: &IdleHolder| match (oom.refused_by, framework) {
        ("driver", _) => true,
        (_, Some(f)) if limit_refused => h.holder == f.holder,
        (_, Some(_)) => true,
        _ => h.holder == "cuguard_pool",
    };
    let idle: Vec<&IdleHolder> = oom
        .idle
        .iter()
        .filter(|h| usable(h) > 0 && counts(h))
        .collect();
    if let Some(h) = idle
        .iter()
        .filter(|h| room.saturating_add(usable(h)) >= need)
        .max_by_key(|h| usable(h))
    {
        let (action, text) = remedy(h);
        return Verdict {
            action: action.into(),
            fits: true,
            text,
        };
    }
    let all = idle
        .iter()
        .fold(0u64, |sum, h| sum.saturating_add(usable(h)));
    if idle.len() > 1 && room.saturating_add(all) >= need {
        let names: Vec<String> = idle
            .iter()
            .map(|h| format!("{} {}", h.name, human_bytes(usable(h))))
            .collect();
        return Verdict {
            action: "all_idle".into(),
            fits: true,
            text: format!(
                "only every holder's idle memory together fits: {} left, and idle: {}",
                human_bytes(room),
                names.join(", ")
            ),
        };
    }
    if let Some(v) = others_hold_it(&oom, room, need) {
        return v;
    }
    let missing = need.saturating_sub(room).saturating_sub(all);
    if let Some(f) = framework
        && limit_refused
        && let Some(v) = raise_framework_limit(&oom, f, need)
    {
        return v;
    }
    if framework.is_none()
        && let (Some(l), Some(free)) = (oom.limit, oom.device_free_bytes)
        && free >= need
    {
        let setting = if oom.refused_by == "pool_limit" {
            "CUGUARD_POOL_LIMIT"
        } else {
            "CUGUARD_LIMIT"
        };
        return Verdict {
            action: "raise_limit".into(),
            fits: true,
            text: format!(
                "raising {setting} to {} fits: the device had {} free",
                raised_to(l.limit_bytes, l.limit_bytes.saturating_add(missing)),
                human_bytes(free)
            ),
        };
    }
    nothing(&oom, room, all, missing, &counts)
}

/// RMM's limiting adaptor or arena refused with the device's `room` enough for the `asked`: a
/// limit of theirs that their message does not tell. The adaptor refuses when what it handed
/// out and the request exceed its limit, so raising the limit by the request fits; the arena's
/// room depends on its free blocks, which it does not tell either.
fn untold_limit(f: &frameworks::Framework, asked: &str, room: u64) -> Option<Verdict> {
    let room = human_bytes(room);
    if *f == frameworks::RMM_LIMITING {
        Some(Verdict {
            action: "raise_limit".into(),
            fits: true,
            text: format!(
                "raising {} by the {asked} asked fits: the device had {room} free",
                f.limit_setting
            ),
        })
    } else if *f == frameworks::RMM_ARENA {
        Some(Verdict {
            action: "unknown".into(),
            fits: false,
            text: format!(
                "unknown: the device had {room} free, enough for the {asked} asked; {} refused within {}, which it does not tell, nor its free blocks",
                f.words, f.limit_setting
            ),
        })
    } else {
        None
    }
}

/// The verdict that nothing cuguard can see would make room: `all` idle bytes the request
/// could have had (of the holders that `counts`), `missing` short.
fn nothing(
    oom: &Figures<'_>,
    room: u64,
    all: u64,
    missing: u64,
    counts: &dyn Fn(&IdleHolder) -> bool,
) -> Verdict {
    let mut text = format!(
        "nothing cuguard can see would: {} asked, {} left and {} idle, {} short; {} is live",
        human_bytes(oom.size),
        human_bytes(room),
        human_bytes(all),
        human_bytes(missing),
        human_bytes(live_outside_idle(oom.live_bytes, oom.idle))
    );
    // A framework's idle memory that no remedy gives this request: said, so that the verdict's
    // idle bytes do not read as the card's.
    for h in oom.idle.iter().filter(|h| counts(h)) {
        let kept = h.idle_bytes.saturating_sub(usable(h));
        if kept > 0 && frameworks::holding(&h.holder).is_some() {
            text.push_str(&format!(
                "; {} held {} more idle, in pieces it could not give to this request",
                h.name,
                human_bytes(kept)
            ));
        }
    }
    if let Some(f) = frameworks::named(oom.refused_by)
        && !f.tells_idle
        && !oom.idle.iter().any(|h| h.holder == f.holder)
    {
        text.push_str(&format!(
            "; {} does not tell its free blocks: part of what is live may be free inside it",
            f.words
        ));
    }
    Verdict {
        action: "nothing".into(),
        fits: false,
        text,
    }
}

/// The verdict's `action` when only other processes' memory would make room.
pub const OTHER_PROCESSES: &str = "other_processes";

/// At the driver's refusal, that other processes hold what is missing, when their memory with
/// the `room` left covers the `need`.
fn others_hold_it(oom: &Figures<'_>, room: u64, need: u64) -> Option<Verdict> {
    let (list, held) = oom.other_processes?;
    (oom.refused_by == "driver" && held > 0 && room.saturating_add(held) >= need).then(|| Verdict {
        action: OTHER_PROCESSES.into(),
        fits: true,
        text: format!(
            "other processes hold {} of device {} ({}): the request fits only once they free it",
            human_bytes(held),
            oom.device,
            pids(list, held)
        ),
    })
}

/// JAX's allocator refused with room under its limit: its idle memory lies in pieces, each too
/// small. The platform allocator (`XLA_PYTHON_CLIENT_ALLOCATOR=platform`) takes each array from
/// the driver as it is made, so it fits where the device, with JAX's region given back, holds
/// what JAX had live and the request.
fn jax_fragmented(oom: &Figures<'_>, need: u64) -> Option<Verdict> {
    let h = oom
        .idle
        .iter()
        .find(|h| h.holder == frameworks::JAX.holder)?;
    let live = oom
        .limit
        .map_or(h.reserved_bytes.saturating_sub(h.idle_bytes), |l| {
            l.held_bytes
        });
    let without_region = oom
        .device_free_bytes
        .unwrap_or(0)
        .saturating_add(h.reserved_bytes)
        .saturating_sub(live);
    (without_region >= need).then(|| {
        let largest = h
            .largest_free_bytes
            .map(|b| format!(", the largest free piece {}", human_bytes(b)))
            .unwrap_or_default();
        Verdict {
            action: "jax_platform_allocator".into(),
            fits: true,
            text: format!(
                "XLA_PYTHON_CLIENT_ALLOCATOR=platform fits: JAX's allocator held {} idle under its limit{largest}, too small for the {} asked; the platform allocator takes each array from the driver as it is made and gives it back when it is freed (slower)",
                human_bytes(h.idle_bytes),
                human_bytes(oom.size)
            ),
        }
    })
}

/// A framework's own limit refused: raising it fits when the device had the room, beside what
/// the framework already took from it (JAX's region holds more than its live arrays).
fn raise_framework_limit(
    oom: &Figures<'_>,
    f: &frameworks::Framework,
    need: u64,
) -> Option<Verdict> {
    let (l, free) = (oom.limit?, oom.device_free_bytes?);
    let taken = oom
        .idle
        .iter()
        .find(|h| h.holder == f.holder)
        .map_or(l.held_bytes, |h| h.reserved_bytes);
    let spare = taken.saturating_sub(l.held_bytes);
    if free.saturating_add(spare) < need {
        return None;
    }
    let to = l.held_bytes.saturating_add(need);
    let text = if *f == frameworks::PYTORCH {
        format!(
            "raising PyTorch's memory fraction (torch.cuda.set_per_process_memory_fraction) to {} fits: the device had {} free",
            raised_to(l.limit_bytes, to),
            human_bytes(free)
        )
    } else if *f == frameworks::JAX
        && let Some(total) = oom.device_total_bytes.filter(|&t| t > 0)
    {
        // Two decimals, rounded up, so that the fraction holds the request.
        let hundredths = to.saturating_mul(100).div_ceil(total).min(100);
        format!(
            "raising XLA_PYTHON_CLIENT_MEM_FRACTION to {}.{:02} ({}) fits: the device had {} free beside JAX's allocator",
            hundredths / 100,
            hundredths % 100,
            raised_to(l.limit_bytes, to),
            human_bytes(free)
        )
    } else {
        format!(
            "raising {} to {} fits: the device had {} free",
            f.limit_setting,
            raised_to(l.limit_bytes, to),
            human_bytes(free)
        )
    };
    Some(Verdict {
        action: "raise_limit".into(),
        fits: true,
        text,
    })
}

/// A limit raised from `from` to `to` bytes, in words: `17.0 GiB`, and where that reads as the
/// limit it was (`16.0 GiB` with a few MiB more), what it adds too: `16.0 GiB (16.0 MiB more)`.
fn raised_to(from: u64, to: u64) -> String {
    let words = human_bytes(to);
    if words == human_bytes(from) {
        format!("{words} ({} more)", human_bytes(to.saturating_sub(from)))
    } else {
        words
    }
}

/// The other processes in words, the first three by pid: `pid 4242: 3.0 GiB, pid 17: 1.0 GiB,
/// and 2 more (512.0 MiB)`; `held` is what they all held (the list may be cut). The verdict
/// and the card's line (the command's summary) both say them so.
pub fn pids(list: &[OtherProcess], held: u64) -> String {
    const NAMED: usize = 3;
    let mut parts: Vec<String> = list
        .iter()
        .take(NAMED)
        .map(|p| format!("pid {}: {}", p.pid, human_bytes(p.bytes)))
        .collect();
    let named = list
        .iter()
        .take(NAMED)
        .fold(0u64, |sum, p| sum.saturating_add(p.bytes));
    let rest = held.saturating_sub(named);
    if rest > 0 {
        let more = list.len().saturating_sub(NAMED);
        let who = if more > 0 && list.len() < OomRecord::MAX_OTHER_PROCESSES {
            format!("{more} more")
        } else {
            "more".to_string()
        };
        parts.push(format!("and {who} ({})", human_bytes(rest)));
    }
    parts.join(", ")
}

/// `ooms[].refused_by` of PyTorch's caching allocator, and its holder's `holder`.
pub const PYTORCH: &str = frameworks::PYTORCH.name;
/// See [`PYTORCH`].
pub const PYTORCH_CACHE: &str = frameworks::PYTORCH.holder;

/// What of `h`'s idle memory another request could have: PyTorch's cache's whole pages (its
/// pieces are each too small), CuPy's pool's whole blocks (`free_all_blocks()` gives back
/// those; a block split by a live array stays), none of JAX's (its region stays whole), every
/// other holder's idle bytes.
fn usable(h: &IdleHolder) -> u64 {
    match frameworks::holding(&h.holder) {
        Some(f) if *f == frameworks::PYTORCH => h.expandable_bytes.unwrap_or(0),
        Some(f) if *f == frameworks::CUPY => h.freeable_bytes.unwrap_or(0),
        Some(_) => 0,
        None => h.idle_bytes,
    }
}

/// Live bytes less the idle memory that lies inside live allocations (a framework's cache's,
/// inside the segments, blocks or region the driver counts live).
pub fn live_outside_idle(live: u64, idle: &[IdleHolder]) -> u64 {
    let inside = idle
        .iter()
        .filter(|h| frameworks::holding(&h.holder).is_some())
        .fold(0u64, |sum, h| sum.saturating_add(h.idle_bytes));
    live.saturating_sub(inside)
}

/// What frees `h`'s idle memory, and the verdict's words for it.
fn remedy(h: &IdleHolder) -> (&'static str, String) {
    let idle = human_bytes(h.idle_bytes);
    if h.holder == PYTORCH_CACHE {
        let pieces = h
            .pieces
            .map(|n| format!(" in {n} pieces"))
            .unwrap_or_default();
        let largest = h
            .largest_free_bytes
            .map(|b| format!(", the largest {}", human_bytes(b)))
            .unwrap_or_default();
        return (
            "expandable_segments",
            format!(
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True fits: PyTorch's cache held {idle} idle{pieces} between live tensors{largest}, each too small; {} of it in whole 20 MiB pages, which expandable segments give back and map to the request",
                human_bytes(usable(h))
            ),
        );
    }
    if h.holder == frameworks::CUPY.holder {
        return (
            "free_all_blocks",
            format!(
                "cupy.get_default_memory_pool().free_all_blocks() fits: CuPy's pool held {idle} idle, {} of it in whole blocks, which it gives back to the device",
                human_bytes(usable(h))
            ),
        );
    }
    if h.holder == "cuguard_pool" {
        let largest = h
            .largest_free_bytes
            .map(|b| format!(" (largest free piece {})", human_bytes(b)))
            .unwrap_or_default();
        return (
            "without_cuguard_pool",
            format!(
                "without cuguard's pool it fits (CUGUARD_POOL=0): the pool held {idle} idle between live blocks{largest}, which it cannot give back while they live"
            ),
        );
    }
    let threshold = match h.release_threshold {
        Some(u64::MAX) => "unlimited".to_string(),
        Some(t) => human_bytes(t),
        None => "unknown".to_string(),
    };
    (
        "sync_driver_pool",
        format!(
            "synchronizing before the request fits: {} held {idle} freed with cuMemFreeAsync and not yet synchronized, which the driver lends no other allocation until cuStreamSynchronize or cuCtxSynchronize (release threshold {threshold})",
            h.name
        ),
    )
}

#[cfg(test)]
mod tests;
