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
//! - A limit: raising it by what is missing fits, when the device has the room.
//! - Otherwise nothing would: the live memory alone leaves too little.
//!
//! Idle memory of a holder on another device, or of one cuguard cannot read (a framework's cache
//! it was not told of), is not counted, so "nothing" is as far as cuguard can see.

use crate::attribution::{IdleHolder, OomLimit, OomRecord, Verdict};
use crate::units::human_bytes;

/// The driver's allocation granularity on the devices measured (2 MiB).
pub const GRANULARITY: u64 = 2 << 20;

/// What a verdict is worked out from: a refusal's figures (see [`OomRecord`]).
#[derive(Clone, Copy, Debug)]
pub struct Figures<'a> {
    pub size: u64,
    pub refused_by: &'a str,
    pub device_free_bytes: Option<u64>,
    pub limit: Option<&'a OomLimit>,
    pub live_bytes: u64,
    pub idle: &'a [IdleHolder],
}

impl<'a> From<&'a OomRecord> for Figures<'a> {
    fn from(o: &'a OomRecord) -> Figures<'a> {
        Figures {
            size: o.size,
            refused_by: &o.refused_by,
            device_free_bytes: o.device_free_bytes,
            limit: o.limit.as_ref(),
            live_bytes: o.live_bytes,
            idle: &o.idle,
        }
    }
}

/// The verdict on `oom` (a record's [`Figures`]).
pub fn of<'a>(oom: impl Into<Figures<'a>>) -> Verdict {
    let oom: Figures<'a> = oom.into();
    let need = oom
        .size
        .max(1)
        .checked_next_multiple_of(GRANULARITY)
        .unwrap_or(u64::MAX);
    let room = match (oom.refused_by, oom.limit) {
        ("limit" | "pool_limit", Some(l)) => Some(l.limit_bytes.saturating_sub(l.held_bytes)),
        ("limit" | "pool_limit", None) => None,
        _ => oom.device_free_bytes,
    };
    let Some(room) = room else {
        return Verdict {
            action: "unknown".into(),
            fits: false,
            text: "unknown: the memory left then could not be asked".into(),
        };
    };
    let asked = human_bytes(oom.size);
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
    let idle: Vec<&IdleHolder> = oom
        .idle
        .iter()
        .filter(|h| h.idle_bytes > 0 && (oom.refused_by == "driver" || h.holder == "cuguard_pool"))
        .collect();
    if let Some(h) = idle
        .iter()
        .filter(|h| room.saturating_add(h.idle_bytes) >= need)
        .max_by_key(|h| h.idle_bytes)
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
        .fold(0u64, |sum, h| sum.saturating_add(h.idle_bytes));
    if idle.len() > 1 && room.saturating_add(all) >= need {
        let names: Vec<String> = idle
            .iter()
            .map(|h| format!("{} {}", h.name, human_bytes(h.idle_bytes)))
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
    let missing = need.saturating_sub(room).saturating_sub(all);
    if let (Some(l), Some(free)) = (oom.limit, oom.device_free_bytes)
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
    Verdict {
        action: "nothing".into(),
        fits: false,
        text: format!(
            "nothing cuguard can see would: {asked} asked, {} left and {} idle, {} short; {} is live",
            human_bytes(room),
            human_bytes(all),
            human_bytes(missing),
            human_bytes(oom.live_bytes)
        ),
    }
}

/// What frees `h`'s idle memory, and the verdict's words for it.
fn remedy(h: &IdleHolder) -> (&'static str, String) {
    let idle = human_bytes(h.idle_bytes);
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
        }
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
        }
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
    fn without_the_free_memory_it_is_unknown() {
        let mut o = oom(256 * MIB, 0, Vec::new());
        o.device_free_bytes = None;
        assert_eq!(of(&o).action, "unknown");
    }
}
