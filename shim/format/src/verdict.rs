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
                human_bytes(l.limit_bytes.saturating_add(missing)),
                human_bytes(free)
            ),
        };
    }
    nothing(&oom, room, all, missing, &counts)
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
            human_bytes(to),
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
            human_bytes(to),
            human_bytes(free)
        )
    } else {
        format!(
            "raising {} to {} fits: the device had {} free",
            f.limit_setting,
            human_bytes(to),
            human_bytes(free)
        )
    };
    Some(Verdict {
        action: "raise_limit".into(),
        fits: true,
        text,
    })
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
mod tests {
    use super::*;
    use crate::attribution::OomLimit;

    const MIB: u64 = 1 << 20;

    fn oom(size: u64, free: u64, idle: Vec<IdleHolder>) -> OomRecord {
        OomRecord {
            seq: 1,
            time_ms: 1,
            thread: 1,
            api: "cuMemAlloc_v2".into(),
            size,
            device: 0,
            stack: None,
            refused_by: "driver".into(),
            message: None,
            device_free_bytes: Some(free),
            device_total_bytes: Some(1024 * MIB),
            live_bytes: 64 * MIB,
            by_owner: Vec::new(),
            stacks: Vec::new(),
            pool: None,
            labels: None,
            limit: None,
            idle,
            verdict: None,
            within: None,
            other_processes: None,
            other_processes_bytes: None,
            other_processes_note: None,
            card_ns: None,
            framework_ns: None,
        }
    }

    /// `oom` with other processes on the device: `(pid, bytes)`.
    fn beside(mut o: OomRecord, others: &[(u32, u64)]) -> OomRecord {
        o.other_processes = Some(
            others
                .iter()
                .map(|&(pid, bytes)| OtherProcess { pid, bytes })
                .collect(),
        );
        o.other_processes_bytes = Some(others.iter().map(|p| p.1).sum());
        o
    }

    fn driver_pool(reserved: u64, idle: u64, threshold: u64) -> IdleHolder {
        IdleHolder {
            holder: "driver_pool".into(),
            name: "the default memory pool of device 0".into(),
            handle: Some(0x10),
            reserved_bytes: reserved,
            idle_bytes: idle,
            release_threshold: Some(threshold),
            largest_free_bytes: None,
            ..Default::default()
        }
    }

    fn torch_cache(reserved: u64, idle: u64, pieces: u64, largest: u64, pages: u64) -> IdleHolder {
        IdleHolder {
            holder: PYTORCH_CACHE.into(),
            name: "PyTorch's caching allocator".into(),
            reserved_bytes: reserved,
            idle_bytes: idle,
            largest_free_bytes: Some(largest),
            pieces: Some(pieces),
            expandable_bytes: Some(pages),
            ..Default::default()
        }
    }

    /// PyTorch refused under its per-process fraction (8 GiB; 7 GiB reserved).
    fn torch_oom(size: u64, free: u64, idle: Vec<IdleHolder>) -> OomRecord {
        OomRecord {
            refused_by: PYTORCH.into(),
            limit: Some(OomLimit {
                limit_bytes: 8192 * MIB,
                held_bytes: 7168 * MIB,
            }),
            device_total_bytes: Some(80 * 1024 * MIB),
            live_bytes: 7168 * MIB,
            ..oom(size, free, idle)
        }
    }

    #[test]
    fn pytorch_s_idle_pieces_in_whole_pages_call_for_expandable_segments() {
        // 3.4 GiB idle in 35 pieces of 100 MiB: 5 whole 20 MiB pages each (3.4 GiB).
        let pieces = torch_cache(7168 * MIB, 3500 * MIB, 35, 100 * MIB, 3500 * MIB);
        let v = of(&torch_oom(
            2560 * MIB,
            70 * 1024 * MIB,
            vec![pieces.clone()],
        ));
        assert_eq!(v.action, "expandable_segments");
        assert!(v.fits);
        assert_eq!(
            v.text,
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True fits: PyTorch's cache held 3.4 GiB \
             idle in 35 pieces between live tensors, the largest 100.0 MiB, each too small; 3.4 GiB \
             of it in whole 20 MiB pages, which expandable segments give back and map to the \
             request"
        );
        assert_eq!(pieces.fragmentation(), Some(1.0 - 100.0 / 3500.0));
        // Pieces of 10 MiB hold no whole page: nothing of it counts; the device has the room,
        // so raising the fraction fits.
        let small = torch_cache(7168 * MIB, 3500 * MIB, 350, 10 * MIB, 0);
        let v = of(&torch_oom(2560 * MIB, 70 * 1024 * MIB, vec![small.clone()]));
        assert_eq!(v.action, "raise_limit");
        assert_eq!(
            v.text,
            "raising PyTorch's memory fraction (torch.cuda.set_per_process_memory_fraction) to \
             9.5 GiB fits: the device had 70.0 GiB free"
        );
        // Against the whole device (no fraction), with nothing else idle: nothing would; the
        // live figure leaves out the cache's idle bytes inside its segments.
        let v = of(&OomRecord {
            limit: None,
            ..torch_oom(2560 * MIB, 512 * MIB, vec![small])
        });
        assert_eq!(v.action, "nothing");
        assert_eq!(
            v.text,
            "nothing cuguard can see would: 2.5 GiB asked, 512.0 MiB left and 0 B idle, 2.0 GiB \
             short; 3.6 GiB is live; PyTorch's caching allocator held 3.4 GiB more idle, in pieces \
             it could not give to this request"
        );
    }

    #[test]
    fn under_pytorch_s_fraction_other_holders_do_not_count() {
        // cuguard's pool holds 4 GiB idle, but the fraction refused: only PyTorch's cache counts.
        let pool = IdleHolder {
            holder: "cuguard_pool".into(),
            name: "cuguard's pool".into(),
            reserved_bytes: 8192 * MIB,
            idle_bytes: 4096 * MIB,
            largest_free_bytes: Some(2 * MIB),
            ..Default::default()
        };
        let v = of(&torch_oom(2560 * MIB, 2048 * MIB, vec![pool.clone()]));
        assert_eq!(v.action, "nothing");
        // Against the device, it counts.
        let v = of(&OomRecord {
            limit: None,
            ..torch_oom(2560 * MIB, 2048 * MIB, vec![pool])
        });
        assert_eq!(v.action, "without_cuguard_pool");
    }

    #[test]
    fn an_idle_driver_pool_that_covers_the_request_calls_for_a_synchronization() {
        let v = of(&oom(
            512 * MIB,
            384 * MIB,
            vec![driver_pool(576 * MIB, 576 * MIB, u64::MAX)],
        ));
        assert_eq!(v.action, "sync_driver_pool");
        assert!(v.fits);
        assert_eq!(
            v.text,
            "synchronizing before the request fits: the default memory pool of device 0 held \
             576.0 MiB freed with cuMemFreeAsync and not yet synchronized, which the driver lends \
             no other allocation until cuStreamSynchronize or cuCtxSynchronize (release \
             threshold unlimited)"
        );
    }

    #[test]
    fn a_limit_counts_only_cuguards_pool() {
        let mut o = oom(
            256 * MIB,
            600 * MIB,
            vec![driver_pool(512 * MIB, 512 * MIB, 0)],
        );
        o.refused_by = "limit".into();
        o.limit = Some(OomLimit {
            limit_bytes: 512 * MIB,
            held_bytes: 400 * MIB,
        });
        assert_eq!(of(&o).action, "raise_limit");
    }

    #[test]
    fn too_little_idle_anywhere_is_nothing() {
        let v = of(&oom(
            900 * MIB,
            384 * MIB,
            vec![driver_pool(64 * MIB, 64 * MIB, 0)],
        ));
        assert_eq!(v.action, "nothing");
        assert!(!v.fits);
        assert_eq!(
            v.text,
            "nothing cuguard can see would: 900.0 MiB asked, 384.0 MiB left and 64.0 MiB idle, 452.0 MiB short; 64.0 MiB is live"
        );
    }

    #[test]
    fn two_holders_together() {
        let mut cg = driver_pool(200 * MIB, 200 * MIB, 0);
        cg.holder = "cuguard_pool".into();
        cg.name = "cuguard's pool".into();
        let v = of(&oom(
            800 * MIB,
            384 * MIB,
            vec![driver_pool(300 * MIB, 300 * MIB, 0), cg],
        ));
        assert_eq!(v.action, "all_idle");
        assert!(v.fits);
    }

    #[test]
    fn the_request_is_rounded_to_the_granularity() {
        // 1 byte more than is free and idle together needs another 2 MiB.
        let v = of(&oom(
            (64 * MIB) + 1,
            32 * MIB,
            vec![driver_pool(32 * MIB, 32 * MIB, 0)],
        ));
        assert_eq!(v.action, "nothing");
    }

    #[test]
    fn a_limit_with_room_on_the_device_is_raised() {
        let mut o = oom(256 * MIB, 600 * MIB, Vec::new());
        o.refused_by = "limit".into();
        o.limit = Some(OomLimit {
            limit_bytes: 512 * MIB,
            held_bytes: 400 * MIB,
        });
        let v = of(&o);
        assert_eq!(v.action, "raise_limit");
        assert_eq!(
            v.text,
            "raising CUGUARD_LIMIT to 656.0 MiB fits: the device had 600.0 MiB free"
        );
    }

    #[test]
    fn hostile_figures_never_overflow() {
        let mut o = oom(
            u64::MAX,
            u64::MAX - 1,
            vec![driver_pool(u64::MAX, u64::MAX, 0)],
        );
        o.refused_by = "limit".into();
        o.limit = Some(OomLimit {
            limit_bytes: u64::MAX,
            held_bytes: 0,
        });
        let _ = of(&o);
        o.refused_by = "driver".into();
        let _ = of(&o);
    }

    #[test]
    fn what_other_processes_hold_is_named_when_only_it_would_fit() {
        // 1 GiB device, 600 MiB held by pid 4242, nothing live here: 424 MiB left of 512.
        let mut o = beside(oom(512 * MIB, 424 * MIB, Vec::new()), &[(4242, 600 * MIB)]);
        o.live_bytes = 0;
        let v = of(&o);
        assert_eq!(v.action, OTHER_PROCESSES);
        assert!(v.fits);
        assert_eq!(
            v.text,
            "other processes hold 600.0 MiB of device 0 (pid 4242: 600.0 MiB): the request fits \
             only once they free it"
        );
        // Several: the first three by pid, the rest counted.
        let o = beside(
            oom(3 << 30, 1 << 30, Vec::new()),
            &[
                (17, 2 << 30),
                (18, 1 << 30),
                (19, 512 * MIB),
                (20, 256 * MIB),
                (21, 256 * MIB),
            ],
        );
        assert_eq!(
            of(&o).text,
            "other processes hold 4.0 GiB of device 0 (pid 17: 2.0 GiB, pid 18: 1.0 GiB, pid 19: \
             512.0 MiB, and 2 more (512.0 MiB)): the request fits only once they free it"
        );
    }

    #[test]
    fn a_remedy_inside_the_process_wins_over_other_processes() {
        let o = beside(
            oom(
                512 * MIB,
                384 * MIB,
                vec![driver_pool(576 * MIB, 576 * MIB, u64::MAX)],
            ),
            &[(4242, 600 * MIB)],
        );
        assert_eq!(of(&o).action, "sync_driver_pool");
        // Too little even with theirs: nothing, as before.
        let o = beside(oom(900 * MIB, 100 * MIB, Vec::new()), &[(4242, 200 * MIB)]);
        assert_eq!(of(&o).action, "nothing");
        // None listed, or not known: as before.
        let o = beside(oom(512 * MIB, 424 * MIB, Vec::new()), &[]);
        assert_eq!(of(&o).action, "nothing");
        let o = oom(512 * MIB, 424 * MIB, Vec::new());
        assert_eq!(of(&o).action, "nothing");
        // A limit's refusal is the limit's, whatever other processes hold.
        let mut o = beside(oom(256 * MIB, 600 * MIB, Vec::new()), &[(4242, 600 * MIB)]);
        o.refused_by = "limit".into();
        o.limit = Some(OomLimit {
            limit_bytes: 512 * MIB,
            held_bytes: 400 * MIB,
        });
        assert_eq!(of(&o).action, "raise_limit");
    }

    #[test]
    fn older_reports_read_without_other_processes() {
        let o = oom(512 * MIB, 424 * MIB, Vec::new());
        let mut v = serde_json::to_value(&o).unwrap();
        let keys = v.as_object().unwrap();
        assert!(
            !keys.keys().any(|k| k.starts_with("other_processes")),
            "{v}"
        );
        v.as_object_mut().unwrap().remove("within");
        let back: OomRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back.other_processes, None);
        // Known and none: an empty list, which is not "not known".
        let o = beside(o, &[]);
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["other_processes"], serde_json::json!([]));
        assert_eq!(v["other_processes_bytes"], 0);
    }

    #[test]
    fn without_the_free_memory_it_is_unknown() {
        let mut o = oom(256 * MIB, 0, Vec::new());
        o.device_free_bytes = None;
        assert_eq!(of(&o).action, "unknown");
    }

    /// CuPy refused: its pool `reserved` of which `idle` idle in `pieces`, `freeable` of it
    /// in whole blocks; under a limit of `limit` where one is given.
    fn cupy_oom(
        size: u64,
        free: u64,
        reserved: u64,
        idle: u64,
        freeable: u64,
        limit: Option<u64>,
    ) -> OomRecord {
        OomRecord {
            refused_by: "cupy".into(),
            limit: limit.map(|l| OomLimit {
                limit_bytes: l,
                held_bytes: reserved,
            }),
            live_bytes: reserved,
            ..oom(
                size,
                free,
                vec![IdleHolder {
                    holder: "cupy_pool".into(),
                    name: "CuPy's memory pool".into(),
                    reserved_bytes: reserved,
                    idle_bytes: idle,
                    pieces: Some(2),
                    freeable_bytes: Some(freeable),
                    ..Default::default()
                }],
            )
        }
    }

    #[test]
    fn cupy_s_whole_idle_blocks_under_its_limit_call_for_free_all_blocks() {
        let v = of(&cupy_oom(
            512 * MIB,
            900 * MIB,
            768 * MIB,
            512 * MIB,
            512 * MIB,
            Some(1024 * MIB),
        ));
        assert_eq!(v.action, "free_all_blocks");
        assert!(v.fits);
        assert_eq!(
            v.text,
            "cupy.get_default_memory_pool().free_all_blocks() fits: CuPy's pool held 512.0 MiB idle, \
             512.0 MiB of it in whole blocks, which it gives back to the device"
        );
    }

    #[test]
    fn cupy_s_split_blocks_under_its_limit_call_for_a_higher_limit_where_the_device_has_room() {
        // The same idle memory, all of it in blocks split by live arrays.
        let v = of(&cupy_oom(
            512 * MIB,
            900 * MIB,
            768 * MIB,
            512 * MIB,
            0,
            Some(1024 * MIB),
        ));
        assert_eq!(v.action, "raise_limit");
        assert_eq!(
            v.text,
            "raising CuPy's pool limit (MemoryPool.set_limit, CUPY_GPU_MEMORY_LIMIT) to 1.2 GiB \
             fits: the device had 900.0 MiB free"
        );
        // Without the room on the device, nothing would.
        let v = of(&cupy_oom(
            512 * MIB,
            300 * MIB,
            768 * MIB,
            512 * MIB,
            0,
            Some(1024 * MIB),
        ));
        assert_eq!(v.action, "nothing");
    }

    #[test]
    fn after_the_driver_refused_cupy_s_idle_pieces_are_not_counted_but_other_holders_are() {
        // No limit: the device refused; CuPy gave back its whole blocks already.
        let mut o = cupy_oom(512 * MIB, 100 * MIB, 768 * MIB, 512 * MIB, 0, None);
        assert_eq!(of(&o).action, "nothing");
        o.idle.push(driver_pool(600 * MIB, 600 * MIB, 0));
        assert_eq!(of(&o).action, "sync_driver_pool");
    }

    /// JAX refused: its region of `region` bytes (its limit too), `in_use` of it used, the
    /// largest free piece `largest`; the device had `free` beside it, of `total`.
    fn jax_oom(size: u64, free: u64, region: u64, in_use: u64, largest: u64) -> OomRecord {
        OomRecord {
            refused_by: "jax".into(),
            limit: Some(OomLimit {
                limit_bytes: region,
                held_bytes: in_use,
            }),
            device_total_bytes: Some(16 * 1024 * MIB),
            live_bytes: region,
            ..oom(
                size,
                free,
                vec![IdleHolder {
                    holder: "jax_allocator".into(),
                    name: "JAX's allocator".into(),
                    reserved_bytes: region,
                    idle_bytes: region - in_use,
                    largest_free_bytes: Some(largest),
                    ..Default::default()
                }],
            )
        }
    }

    #[test]
    fn jax_refusing_with_room_under_its_limit_calls_for_the_platform_allocator() {
        let gib = 1024 * MIB;
        let v = of(&jax_oom(gib, 4 * gib, 12 * gib, 10 * gib, 100 * MIB));
        assert_eq!(v.action, "jax_platform_allocator");
        assert!(v.fits);
        assert_eq!(
            v.text,
            "XLA_PYTHON_CLIENT_ALLOCATOR=platform fits: JAX's allocator held 2.0 GiB idle under its \
             limit, the largest free piece 100.0 MiB, too small for the 1.0 GiB asked; the platform \
             allocator takes each array from the driver as it is made and gives it back when it is \
             freed (slower)"
        );
    }

    #[test]
    fn jax_refusing_past_its_limit_calls_for_a_larger_fraction_where_the_device_has_room() {
        let gib = 1024 * MIB;
        let v = of(&jax_oom(3 * gib, 4 * gib, 12 * gib, 10 * gib, 2 * gib));
        assert_eq!(v.action, "raise_limit");
        assert_eq!(
            v.text,
            "raising XLA_PYTHON_CLIENT_MEM_FRACTION to 0.82 (13.0 GiB) fits: the device had 4.0 GiB \
             free beside JAX's allocator"
        );
        // The region's idle 2 GiB and 512 MiB of the device are too little for 3 GiB.
        let v = of(&jax_oom(3 * gib, 512 * MIB, 12 * gib, 10 * gib, 2 * gib));
        assert_eq!(v.action, "nothing");
    }

    #[test]
    fn jax_s_device_memory_beyond_its_region_is_not_its_room() {
        // JAX 0.11.2 on the H100 (run 46): 59.38 GiB asked of a 59.4 GiB region with 2.2 GiB
        // in use; the device had 19.2 GiB free beside the region, which XLA may not take.
        let gib = 1024 * MIB;
        let asked = 59.38 * gib as f64;
        let mut o = jax_oom(
            asked as u64,
            19 * gib,
            59 * gib + 400 * MIB,
            2 * gib + 200 * MIB,
            55 * gib,
        );
        o.device_total_bytes = Some(79 * gib + 200 * MIB);
        let v = of(&o);
        assert_eq!(v.action, "raise_limit", "{}", v.text);
        // (2.2 GiB + 59.38 GiB) / 79.2 GiB = 0.7775…, rounded up.
        assert!(
            v.text
                .starts_with("raising XLA_PYTHON_CLIENT_MEM_FRACTION to 0.78 (61.6 GiB) fits"),
            "{}",
            v.text
        );
    }

    #[test]
    fn a_framework_s_idle_memory_is_not_counted_live_twice() {
        let gib = 1024 * MIB;
        let o = jax_oom(3 * gib, 4 * gib, 12 * gib, 10 * gib, 2 * gib);
        assert_eq!(live_outside_idle(o.live_bytes, &o.idle), 10 * gib);
    }
}
