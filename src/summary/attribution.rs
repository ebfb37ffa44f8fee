//! The summary's sections on who held memory and when: what each out-of-memory refusal saw
//! ([`OomSummary`], other processes on the device included where NVML listed them), what was live at each device's peak ([`PeakSummary`]), and what the device
//! says is used against what cuguard can explain ([`ReconciliationSummary`]). (What grows is
//! [`crate::growth`]'s; bytes by owner are [`crate::owners`]'.)
//!
//! Each is condensed from one report's records by stack into sites and owners, so it outlives
//! the report.

use std::collections::HashMap;

use serde::Serialize;

use crate::owners::{OwnerIndex, OwnerKind, OwnerShare, by_owner, share};
use crate::sites::{SiteIndex, SiteRef};
use cuguard_format::{
    Explained, IdleHolder, OomLimit, OomPool, OomRecord, OtherProcess, Report, StackBytes, Verdict,
};

/// Live bytes at one site, held by one owner, at some moment.
#[derive(Clone, Debug, Serialize)]
pub struct SiteBytes {
    /// The site.
    #[serde(flatten)]
    pub site: SiteRef,
    /// Who held it: owner id.
    pub owner: String,
    /// The owner for people.
    pub owner_label: String,
    /// The owner's kind.
    pub owner_kind: OwnerKind,
    /// Live bytes.
    pub bytes: u64,
    /// Live allocations.
    pub allocations: u64,
}

/// Who refused an allocation, for people, from `ooms[].refused_by`: the words, and the setting
/// behind them when there is one (`the pool's limit`, `CUGUARD_POOL_LIMIT`); `None` for a value
/// this version does not know (shown as it is).
pub fn refuser(refused_by: &str) -> Option<(&'static str, Option<&'static str>)> {
    match refused_by {
        "driver" => Some(("the driver", None)),
        "pool_limit" => Some(("the pool's limit", Some("CUGUARD_POOL_LIMIT"))),
        "limit" => Some(("the process's limit", Some("CUGUARD_LIMIT"))),
        other => cuguard_format::frameworks::named(other).map(|f| (f.words, None)),
    }
}

/// [`refuser`]'s words with their setting: `the pool's limit (CUGUARD_POOL_LIMIT)`; `None` for
/// an unknown value.
pub fn refuser_with_setting(refused_by: &str) -> Option<String> {
    refuser(refused_by).map(|(words, setting)| match setting {
        Some(s) => format!("{words} ({s})"),
        None => words.to_string(),
    })
}

/// What an out-of-memory refusal saw (`ooms[]`).
#[derive(Clone, Debug, Serialize)]
pub struct OomSummary {
    /// Global order, shared with allocations and events.
    pub seq: u64,
    /// When, milliseconds since process start.
    pub time_ms: u64,
    /// The asking thread.
    pub thread: u64,
    /// The entry that was refused.
    pub api: String,
    /// Bytes asked for.
    pub size: u64,
    /// Device ordinal.
    pub device: u32,
    /// The site that asked.
    pub site: SiteRef,
    /// The asking stack's frames in the mixed native and Python order, when it has Python
    /// frames.
    pub stack: Vec<String>,
    /// `driver` or `pool_limit`.
    pub refused_by: String,
    /// Why, in words, when the report says.
    pub message: Option<String>,
    /// The device's free memory then, when known.
    pub device_free_bytes: Option<u64>,
    /// The device's total memory, when known.
    pub device_total_bytes: Option<u64>,
    /// The program's live device bytes on that device then (every owner's).
    pub live_bytes: u64,
    /// Live bytes by owner then, most first (`count`: live allocations, 0 where the report
    /// gave only bytes).
    pub by_owner: Vec<OwnerShare>,
    /// Live bytes by site and owner then, most first, at most `--top`.
    pub sites: Vec<SiteBytes>,
    /// How many (site, owner) pairs held memory then.
    pub sites_total: usize,
    /// The pool on that device then, if it had one.
    pub pool: Option<OomPool>,
    /// The limit that refused it, and what was held against it then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<OomLimit>,
    /// What each holder kept idle on the device then, most first.
    pub idle: Vec<IdleHolder>,
    /// What would have made it fit: the report's, or worked out here for an older report.
    pub verdict: Verdict,
    /// The report is from a cuguard that recorded no idle memory nor verdict: the verdict is
    /// worked out from what it has (cuguard's pool alone).
    pub verdict_from_older_report: bool,
    /// For the driver's refusal of a segment a framework's allocator asked for: the framework,
    /// which then refused the request itself (its own card, later, explains it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    /// The other processes on the device then, as NVML listed them, most bytes first (at most
    /// 16); empty when it listed none; absent when not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_processes: Option<Vec<OtherProcess>>,
    /// What all the other processes held then; absent when not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_processes_bytes: Option<u64>,
    /// Why the other processes are not known, when the report says (absent in older reports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_processes_note: Option<String>,
    /// What making the card took the shim inside the refused call, in nanoseconds (absent in
    /// older reports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card_ns: Option<u64>,
    /// A framework's card: what reading its figures took cuguard's Python package before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub framework_ns: Option<u64>,
}

/// What was live on a device at its peak: the last `peaks[]` record of the device.
#[derive(Clone, Debug, Serialize)]
pub struct PeakSummary {
    /// Device ordinal.
    pub device: u32,
    /// When, milliseconds since process start.
    pub time_ms: u64,
    /// The same moment in microseconds, where the report has it.
    pub time_us: Option<u64>,
    /// Live bytes then (within 1% of the peak).
    pub live_bytes: u64,
    /// The peak itself, from `stats`, when the report has it.
    pub peak_live_bytes: Option<u64>,
    /// Live bytes by owner then, most first (`count`: live allocations).
    pub by_owner: Vec<OwnerShare>,
    /// Live bytes by site and owner then, most first, at most `--top`.
    pub sites: Vec<SiteBytes>,
    /// How many (site, owner) pairs held memory then.
    pub sites_total: usize,
}

/// The least idle pool memory [`ReconciliationSummary::notes`] explains.
pub const POOL_IDLE_NOTE: u64 = 32 << 20;

/// What a device says is used against what cuguard can explain (`reconciliation[]`).
#[derive(Clone, Debug, Serialize)]
pub struct ReconciliationSummary {
    /// Device ordinal.
    pub device: u32,
    /// What "used" is: the process's own usage as NVML lists it, else the whole device's.
    pub used_bytes: Option<u64>,
    /// `process` (NVML listed the process) or `device` (the whole device, other processes
    /// included); `null` when neither is known.
    pub used_by: Option<&'static str>,
    /// The whole device's used memory (`cuMemGetInfo`).
    pub device_used_bytes: Option<u64>,
    /// The process's usage as NVML lists it.
    pub process_used_bytes: Option<u64>,
    /// Why NVML's figure is absent, when it is.
    pub process_used_note: Option<String>,
    /// What cuguard can explain, by part.
    pub explained: Explained,
    /// Who the framework caches are, for people: the one framework cache holding memory at
    /// the end, else `framework caches`.
    pub framework_cache_label: String,
    /// Used and not explained; never negative (an older report's negative figure is read as
    /// 0 and an excess of the contexts' estimate).
    pub unexplained_bytes: Option<u64>,
    /// Why so much is not explained, when the report says.
    pub unexplained_note: Option<String>,
    /// The contexts' overhead as estimated when they were created, when less of it is counted
    /// (`explained.context_overhead_bytes`) because what is used leaves no more.
    pub context_overhead_estimate_bytes: Option<u64>,
    /// By how much cuguard's figures, the contexts' whole estimate included, exceed what is
    /// used.
    pub excess_bytes: Option<u64>,
    /// What cuguard's pool gave back with cuMemFreeAsync since it last synchronized the
    /// device (the driver holds it until a synchronizing call); `explained.given_back_bytes`
    /// is the part of it counted.
    pub given_back_pending_bytes: Option<u64>,
}

impl ReconciliationSummary {
    /// The explained parts for people, in order: `program`, the framework caches (by
    /// [`ReconciliationSummary::framework_cache_label`]), `CUDA libraries`, `driver and
    /// runtime`, `pool idle`, `contexts`, `given back, not yet returned`; the program's always,
    /// the others when not zero.
    pub fn parts(&self) -> Vec<(String, u64)> {
        let e = &self.explained;
        let mut parts = vec![("program".to_string(), e.program_bytes)];
        for (label, value) in [
            (self.framework_cache_label.clone(), e.framework_cache_bytes),
            ("CUDA libraries".to_string(), e.library_bytes),
            ("driver and runtime".to_string(), e.driver_bytes),
            ("pool idle".to_string(), e.pool_idle_bytes),
            (
                "driver's memory pools idle".to_string(),
                e.driver_pool_idle_bytes,
            ),
            ("contexts".to_string(), e.context_overhead_bytes),
            (
                "given back, not yet returned".to_string(),
                e.given_back_bytes,
            ),
        ] {
            if value > 0 {
                parts.push((label, value));
            }
        }
        parts
    }

    /// What the estimated parts are, in words, when a person needs it: the memory given back
    /// and held by the driver, and a contexts' estimate over what is used.
    ///
    /// ```text
    /// given back: cuguard's pool gave back 3.0 GiB the driver may not have returned yet (freed with cuMemFreeAsync, which the driver holds until a synchronizing call such as cuCtxSynchronize, or still queued to be freed when the process ended)
    /// contexts: estimated at 523.6 MiB when they were created, 3.6 MiB more than what is used leaves for them; 520.0 MiB counted
    /// ```
    ///
    /// And when the pool keeps more idle than the program holds (at least
    /// [`POOL_IDLE_NOTE`]), what keeps it and how to give it back:
    ///
    /// ```text
    /// pool idle: cuguard's pool keeps 36.0 MiB reserved for reuse after the program freed it, more than the program holds (4.0 MiB): what a spike left; CUGUARD_POOL_KEEP (…) bounds it, …
    /// ```
    pub fn notes(&self) -> Vec<String> {
        let bytes = crate::wording::bytes;
        let mut notes = Vec::new();
        if let Some(pending) = self.given_back_pending_bytes.filter(|p| *p > 0) {
            let counted = self.explained.given_back_bytes;
            let mut n = format!(
                "given back: cuguard's pool gave back {} the driver may not have returned yet \
                 (freed with cuMemFreeAsync, which the driver holds until a synchronizing call \
                 such as cuCtxSynchronize, or still queued to be freed when the process ended)",
                bytes(pending)
            );
            if counted < pending {
                n.push_str(&format!(
                    "; what is used leaves at most {} of it (the driver has returned the rest)",
                    bytes(counted)
                ));
            }
            notes.push(n);
        }
        let idle = self.explained.pool_idle_bytes;
        if idle >= POOL_IDLE_NOTE && idle > self.explained.program_bytes {
            notes.push(format!(
                "pool idle: cuguard's pool keeps {} reserved for reuse after the program freed \
                 it, more than the program holds ({}): what a spike left; CUGUARD_POOL_KEEP \
                 (default 10% of the device) bounds it, CUGUARD_POOL_KEEP=0 gives back every \
                 chunk that holds no live block, CUGUARD_POOL=0 turns the pool off",
                bytes(idle),
                bytes(self.explained.program_bytes)
            ));
        }
        if let Some(estimate) = self.context_overhead_estimate_bytes {
            let counted = self.explained.context_overhead_bytes;
            let over = self
                .excess_bytes
                .unwrap_or_else(|| estimate.saturating_sub(counted));
            notes.push(format!(
                "contexts: estimated at {} when they were created, {} more than what is used \
                 leaves for them; {} counted",
                bytes(estimate),
                bytes(over),
                bytes(counted)
            ));
        } else if let Some(over) = self.excess_bytes.filter(|o| *o > 0) {
            notes.push(format!(
                "what cuguard explains is {} more than what is used",
                bytes(over)
            ));
        }
        notes
    }
}

/// Live bytes of `stacks` by (site, owner), most first, cut to `top`; their total count; and
/// by owner.
fn by_site_and_owner(
    stacks: &[StackBytes],
    sites: &SiteIndex<'_>,
    owners: &mut OwnerIndex<'_>,
    top: usize,
) -> (Vec<SiteBytes>, usize, Vec<OwnerShare>) {
    let mut groups: HashMap<(String, usize), SiteBytes> = HashMap::new();
    let mut per_owner = Vec::with_capacity(stacks.len());
    for s in stacks {
        let o = owners.of_stack(s.stack, Some("device"));
        per_owner.push((o, s.bytes, s.allocations));
        let site = sites.site(s.stack);
        let owner = owners.owner(o);
        let e = groups
            .entry((site.key.clone(), o))
            .or_insert_with(|| SiteBytes {
                site: SiteRef::from(&*site),
                owner: owner.id.clone(),
                owner_label: owner.label.clone(),
                owner_kind: owner.kind,
                bytes: 0,
                allocations: 0,
            });
        e.bytes = e.bytes.saturating_add(s.bytes);
        e.allocations = e.allocations.saturating_add(s.allocations);
    }
    let mut list: Vec<SiteBytes> = groups.into_values().collect();
    list.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(b.allocations.cmp(&a.allocations))
            .then(a.site.site.cmp(&b.site.site))
            .then(a.owner.cmp(&b.owner))
    });
    let total = list.len();
    list.truncate(top);
    (list, total, by_owner(owners, per_owner))
}

/// The report's out-of-memory records, in order, at most `top`.
pub fn ooms(
    report: &Report,
    sites: &SiteIndex<'_>,
    owners: &mut OwnerIndex<'_>,
    top: usize,
) -> Vec<OomSummary> {
    report
        .ooms
        .iter()
        .take(top)
        .map(|r| {
            let (list, total, computed) = by_site_and_owner(&r.stacks, sites, owners, top);
            let by_owner = if r.by_owner.is_empty() {
                computed
            } else {
                let mut shares: Vec<OwnerShare> = r
                    .by_owner
                    .iter()
                    .map(|b| {
                        let owner = owners.of_id(&b.owner);
                        let owner = owners.owner(owner);
                        share(owner, b.bytes, 0)
                    })
                    .collect();
                crate::owners::sort_shares(&mut shares);
                shares
            };
            OomSummary {
                seq: r.seq,
                time_ms: r.time_ms,
                thread: r.thread,
                api: r.api.clone(),
                size: r.size,
                device: r.device,
                site: SiteRef::from(&*sites.site(r.stack)),
                stack: sites.chain(r.stack),
                refused_by: r.refused_by.clone(),
                message: r.message.clone(),
                device_free_bytes: r.device_free_bytes,
                device_total_bytes: r.device_total_bytes,
                live_bytes: r.live_bytes,
                by_owner,
                sites: list,
                sites_total: total,
                pool: r.pool.clone(),
                limit: r.limit.clone(),
                idle: idle_of(r),
                verdict: r
                    .verdict
                    .clone()
                    .unwrap_or_else(|| cuguard_format::verdict::of(&with_idle(r))),
                verdict_from_older_report: r.verdict.is_none(),
                within: r.within.clone(),
                other_processes: r.other_processes.clone(),
                other_processes_bytes: r.other_processes_bytes,
                other_processes_note: r.other_processes_note.clone(),
                card_ns: r.card_ns,
                framework_ns: r.framework_ns,
            }
        })
        .collect()
}

/// Every byte of the refusing device then, adding up to its total, when its free and total
/// memory are known:
///
/// ```text
/// every byte then: 1.0 GiB = 64.0 MiB live + 576.0 MiB idle + 384.0 MiB free + 0 B else (CUDA's own memory, other processes)
/// ```
///
/// Where NVML listed other processes holding memory there, they are a part of their own and
/// "else" is CUDA's own memory alone:
///
/// ```text
/// every byte then: 1.0 GiB = 0 B live + 0 B idle + 424.0 MiB free + 600.0 MiB other processes + 0 B else (CUDA's own memory)
/// ```
pub fn device_bytes_line(o: &OomSummary) -> Option<String> {
    device_bytes(
        o.device_free_bytes,
        o.device_total_bytes,
        o.live_bytes,
        &o.idle,
        o.other_processes_bytes,
    )
}

/// [`device_bytes_line`] of a refusal's figures; `others` is what other processes held, when
/// known.
pub fn device_bytes(
    free: Option<u64>,
    total: Option<u64>,
    live: u64,
    idle: &[IdleHolder],
    others: Option<u64>,
) -> Option<String> {
    let (free, total) = (free?, total?);
    let bytes = crate::wording::bytes;
    // A framework's idle memory inside its segments is counted live by the driver: it is told
    // apart here, not counted twice.
    let live = cuguard_format::verdict::live_outside_idle(live, idle);
    let idle = idle
        .iter()
        .fold(0u64, |sum, h| sum.saturating_add(h.idle_bytes));
    let else_bytes = total.saturating_sub(
        free.saturating_add(live)
            .saturating_add(idle)
            .saturating_add(others.unwrap_or(0)),
    );
    // Other processes known (NVML listed the device's): their bytes apart, and none in "else".
    let (others, else_is) = match others {
        Some(0) => (String::new(), "CUDA's own memory"),
        Some(b) => (
            format!(" + {} other processes", bytes(b)),
            "CUDA's own memory",
        ),
        None => (String::new(), "CUDA's own memory, other processes"),
    };
    Some(format!(
        "every byte then: {} = {} live + {} idle + {} free{others} + {} else ({else_is})",
        bytes(total),
        bytes(live),
        bytes(idle),
        bytes(free),
        bytes(else_bytes)
    ))
}

/// What other processes held on the refusing device, in words, where NVML listed any, the
/// first three by pid:
///
/// ```text
/// other processes: 3.0 GiB (pid 4242: 3.0 GiB)
/// other processes: 4.5 GiB (pid 17: 2.0 GiB, pid 18: 1.5 GiB, pid 19: 512.0 MiB, and 2 more (512.0 MiB))
/// ```
///
/// or, where the report says why they are not known and `verdict` found nothing in the process
/// that would have made room (when one fits, what others held does not change it), that they
/// are not known: `other processes: not known (NVML is not available)`. `None` when NVML listed
/// none, and for older reports, which say nothing of them.
pub fn other_processes_words(
    list: Option<&[OtherProcess]>,
    held: Option<u64>,
    note: Option<&str>,
    verdict: &Verdict,
) -> Option<String> {
    let bytes = crate::wording::bytes;
    let Some((list, held)) = list.zip(held) else {
        return note
            .filter(|_| !verdict.fits)
            .map(|n| format!("other processes: not known ({n})"));
    };
    if held == 0 && list.is_empty() {
        return None;
    }
    Some(format!(
        "other processes: {} ({})",
        bytes(held),
        cuguard_format::verdict::pids(list, held)
    ))
}

/// For a framework that tells what it holds but not what of it is free (RMM's pool), that the
/// card's live bytes include its free blocks: `idle: RMM's pool held 208.0 MiB of its 256.0 MiB
/// maximum; what of it was free, RMM does not tell`.
pub fn untold_idle_line(o: &OomSummary) -> Option<String> {
    let f = cuguard_format::frameworks::named(&o.refused_by)?;
    if f.tells_idle || o.idle.iter().any(|h| h.holder == f.holder) {
        return None;
    }
    // RMM's limiting adaptor holds no memory of its own: it counts what its upstream handed out.
    if *f == cuguard_format::frameworks::RMM_LIMITING {
        return None;
    }
    Some(match &o.limit {
        Some(l) => format!(
            "idle: {} held {} of its {} maximum; what of it was free, RMM does not tell",
            f.words,
            crate::wording::bytes(l.held_bytes),
            crate::wording::bytes(l.limit_bytes)
        ),
        None => format!("idle: what of {} was free, RMM does not tell", f.words),
    })
}

/// What the card cost the refused call, where the report says: `cuguard's card: 0.21 ms in the
/// refused call, and 3.4 ms reading PyTorch's caching allocator before it`.
pub fn card_cost_line(o: &OomSummary) -> Option<String> {
    let ms = |ns: u64| format!("{:.2} ms", ns as f64 / 1e6);
    let mut line = format!("cuguard's card: {} in the refused call", ms(o.card_ns?));
    if let Some(read) = o.framework_ns {
        let whose = crate::summary::attribution::refuser(&o.refused_by)
            .map_or(o.refused_by.as_str(), |(words, _)| words);
        line.push_str(&format!(", and {} reading {whose} before it", ms(read)));
    }
    Some(line)
}

/// [`other_processes_words`] of a refusal's summary.
pub fn other_processes_line(o: &OomSummary) -> Option<String> {
    other_processes_words(
        o.other_processes.as_deref(),
        o.other_processes_bytes,
        o.other_processes_note.as_deref(),
        &o.verdict,
    )
}

/// One holder's idle memory, in words:
///
/// ```text
/// the default memory pool of device 0 holds 576.0 MiB idle of 576.0 MiB reserved (release threshold unlimited)
/// cuguard's pool holds 30.0 MiB idle of 94.0 MiB reserved, largest free piece 2.0 MiB (fragmentation 93%)
/// PyTorch's caching allocator holds 3.4 GiB idle of 7.0 GiB reserved in 35 pieces, largest free piece 100.0 MiB (fragmentation 97%)
/// ```
pub fn idle_words(h: &IdleHolder) -> String {
    let bytes = crate::wording::bytes;
    let mut s = format!(
        "{} holds {} idle of {} reserved",
        h.name,
        bytes(h.idle_bytes),
        bytes(h.reserved_bytes)
    );
    if let Some(t) = h.release_threshold {
        let t = if t == u64::MAX {
            "unlimited".to_string()
        } else {
            bytes(t)
        };
        s.push_str(&format!(" (release threshold {t})"));
    }
    if let Some(n) = h.pieces.filter(|_| h.idle_bytes > 0) {
        s.push_str(&format!(
            " in {}",
            crate::wording::plural(n, "piece", "pieces")
        ));
    }
    if h.holder == "cuguard_pool" && h.largest_free_bytes == Some(0) && h.idle_bytes > 0 {
        // Idle, but no free block: the rounding of its live blocks and frees still waiting for
        // their streams. No piece to fragment.
        s.push_str(", no free piece (its live blocks' rounding, frees waiting for their streams)");
    } else if let Some(largest) = h.largest_free_bytes.filter(|_| h.idle_bytes > 0) {
        let fragmentation =
            100 - (u128::from(largest.min(h.idle_bytes)) * 100 / u128::from(h.idle_bytes));
        s.push_str(&format!(
            ", largest free piece {} (fragmentation {fragmentation}%)",
            bytes(largest)
        ));
    }
    s
}

/// Whether the card's `pool:` line says anything the idle lines do not: not when cuguard's pool
/// is one of its idle holders (the same reserved bytes, its free memory and largest piece).
pub fn pool_line_wanted(o: &OomSummary) -> bool {
    o.pool.is_some() && !o.idle.iter().any(|h| h.holder == "cuguard_pool")
}

/// The live blocks that split a holder's idle memory, by line, each a line:
///
/// ```text
/// pinned by 35 blocks (3.4 GiB) live between its pieces: 30 blocks (3.0 GiB) at <module> (train.py:88), 5 blocks (500.0 MiB) at …
/// ```
///
/// None when the holder named none.
pub fn pinning_words(h: &IdleHolder) -> Option<String> {
    if h.pinning.is_empty() {
        return None;
    }
    let bytes = crate::wording::bytes;
    let plural = crate::wording::plural;
    let (all_bytes, all_blocks) = h.pinning.iter().fold((0u64, 0u64), |(b, n), p| {
        (b.saturating_add(p.bytes), n.saturating_add(p.blocks))
    });
    let sites: Vec<String> = h
        .pinning
        .iter()
        .map(|p| {
            format!(
                "{} ({}) at {}",
                plural(p.blocks, "block", "blocks"),
                bytes(p.bytes),
                p.site
            )
        })
        .collect();
    Some(format!(
        "pinned by {} ({}) live between its pieces: {}",
        plural(all_blocks, "block", "blocks"),
        bytes(all_bytes),
        sites.join(", ")
    ))
}

/// For the refusal (`refused_by`: the driver's, or a limit's) of a segment a framework's
/// allocator asked for (`within`): that its card is the framework's, which follows.
pub fn within_words(refused_by: &str, within: Option<&str>) -> Option<String> {
    let framework = within?;
    let who = refuser(framework).map_or(framework, |r| r.0);
    let by = match refused_by {
        "limit" => "CUGUARD_LIMIT",
        "pool_limit" => "CUGUARD_POOL_LIMIT",
        _ => "the driver",
    };
    Some(format!(
        "refused by {by} inside {who}, which then refused the request itself: its card follows"
    ))
}

/// The card of a refusal in lines, the verdict first (for the view's out-of-memory markers):
/// the verdict, what other processes held (where the report says), every byte of the device
/// then, and each holder's idle memory.
pub fn card_lines(r: &OomRecord) -> Vec<String> {
    if let Some(line) = within_words(&r.refused_by, r.within.as_deref()) {
        return vec![line];
    }
    let idle = idle_of(r);
    let verdict = r
        .verdict
        .clone()
        .unwrap_or_else(|| cuguard_format::verdict::of(&with_idle(r)));
    let mut lines = vec![format!("verdict: {}", verdict.text)];
    lines.extend(other_processes_words(
        r.other_processes.as_deref(),
        r.other_processes_bytes,
        r.other_processes_note.as_deref(),
        &verdict,
    ));
    lines.extend(device_bytes(
        r.device_free_bytes,
        r.device_total_bytes,
        r.live_bytes,
        &idle,
        r.other_processes_bytes,
    ));
    for h in &idle {
        lines.push(format!("idle: {}", idle_words(h)));
        lines.extend(pinning_words(h));
    }
    lines
}

/// What held memory idle at a refusal: the record's holders, or for a report from before they
/// were recorded, cuguard's pool from `ooms[].pool`.
fn idle_of(r: &OomRecord) -> Vec<IdleHolder> {
    if !r.idle.is_empty() || r.verdict.is_some() {
        return r.idle.clone();
    }
    r.pool
        .iter()
        .filter(|p| p.free_bytes > 0)
        .map(|p| IdleHolder {
            holder: "cuguard_pool".into(),
            name: "cuguard's pool".into(),
            handle: None,
            reserved_bytes: p.reserved_bytes,
            idle_bytes: p.free_bytes,
            release_threshold: None,
            largest_free_bytes: Some(p.largest_free_block),
            ..Default::default()
        })
        .collect()
}

/// `r` with [`idle_of`]'s holders, to work out the verdict of an older report.
fn with_idle(r: &OomRecord) -> OomRecord {
    OomRecord {
        idle: idle_of(r),
        ..r.clone()
    }
}

/// What was live at each device's peak, by device: its last `peaks[]` record.
pub fn peaks(
    report: &Report,
    sites: &SiteIndex<'_>,
    owners: &mut OwnerIndex<'_>,
    top: usize,
) -> Vec<PeakSummary> {
    let mut last: std::collections::BTreeMap<u32, &cuguard_format::PeakRecord> =
        std::collections::BTreeMap::new();
    for p in &report.peaks {
        let keep = last
            .get(&p.device)
            .is_none_or(|q| (p.live_bytes, p.time_ms) >= (q.live_bytes, q.time_ms));
        if keep {
            last.insert(p.device, p);
        }
    }
    last.into_values()
        .map(|p| {
            let (list, total, by_owner) = by_site_and_owner(&p.stacks, sites, owners, top);
            PeakSummary {
                device: p.device,
                time_ms: p.time_ms,
                time_us: p.time_us,
                live_bytes: p.live_bytes,
                peak_live_bytes: report
                    .stats
                    .devices
                    .iter()
                    .find(|d| d.device == p.device)
                    .map(|d| d.peak_live_bytes),
                by_owner,
                sites: list,
                sites_total: total,
            }
        })
        .collect()
}

/// The peak and when its breakdown was taken: `1.6 GiB (at 12.345 s)`, a moment `--at` reads
/// back ([`crate::wording::moment`]), or, when the shim's last
/// record (taken at each 1% rise) is below the peak itself, `16.0 GiB (15.9 GiB live at 74 ms,
/// within 1%)`.
pub fn peak_when(peak: &PeakSummary) -> String {
    // To the microsecond where the report has it: a peak can last less than a millisecond,
    // and the millisecond (rounded up) then comes after it.
    let when = match peak.time_us {
        Some(us) => crate::wording::moment_us(us),
        None => crate::wording::moment(peak.time_ms),
    };
    match peak.peak_live_bytes {
        Some(top) if top > peak.live_bytes => format!(
            "{} ({} live at {when}, within 1%)",
            crate::wording::bytes(top),
            crate::wording::bytes(peak.live_bytes),
        ),
        _ => format!("{} (at {when})", crate::wording::bytes(peak.live_bytes)),
    }
}

/// The report's reconciliation, by device; `held` is what was held at the end by owner (to
/// name the framework cache).
pub fn reconciliation(report: &Report, held: &[OwnerShare]) -> Vec<ReconciliationSummary> {
    let caches: Vec<&OwnerShare> = held
        .iter()
        .filter(|s| s.kind == OwnerKind::FrameworkCache && s.bytes > 0)
        .collect();
    let framework_cache_label = match caches.as_slice() {
        [one] => one.label.clone(),
        _ => "framework caches".to_string(),
    };
    let mut out: Vec<ReconciliationSummary> = report
        .reconciliation
        .iter()
        .map(|r| {
            let (used_bytes, used_by) = match (r.process_used_bytes, r.device_used_bytes) {
                (Some(p), _) => (Some(p), Some("process")),
                (None, Some(d)) => (Some(d), Some("device")),
                (None, None) => (None, None),
            };
            let mut explained = r.explained.clone();
            let mut estimate = r.context_overhead_estimate_bytes;
            let mut excess = r.excess_bytes;
            // An older report said an excess as a negative unexplained figure, the contexts'
            // estimate counted whole: read it as a report written now says it.
            if let Some(u) = r.unexplained_bytes.filter(|u| *u < 0) {
                let over = u.unsigned_abs();
                let whole = explained.context_overhead_bytes;
                estimate = estimate.or(Some(whole));
                excess = excess.or(Some(over));
                explained.context_overhead_bytes = whole.saturating_sub(over);
            }
            ReconciliationSummary {
                device: r.device,
                used_bytes,
                used_by,
                device_used_bytes: r.device_used_bytes,
                process_used_bytes: r.process_used_bytes,
                process_used_note: r.process_used_note.clone(),
                explained,
                framework_cache_label: framework_cache_label.clone(),
                unexplained_bytes: r.unexplained_bytes.map(|u| u.max(0).unsigned_abs()),
                unexplained_note: r.unexplained_note.clone(),
                context_overhead_estimate_bytes: estimate,
                excess_bytes: excess,
                given_back_pending_bytes: r.given_back_pending_bytes,
            }
        })
        .collect();
    out.sort_by_key(|r| r.device);
    out
}
