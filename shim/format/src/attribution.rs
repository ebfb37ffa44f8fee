//! The report format's attribution: what the report says about who holds memory and when: the owners ([`OwnerInfo`]), what was
//! live at each device's peak ([`PeakRecord`]), live bytes per stack over time
//! ([`StackSamples`], from which growth is read), what an out-of-memory saw ([`OomRecord`]), and
//! what the device says is used against what cuguard can explain ([`Reconciliation`]).
//!
//! The shim records raw facts by stack id; sites and owners come from the stacks (`stacks[].site`,
//! `stacks[].owner`), so a reader groups by site or owner as it likes. All of it is optional for
//! readers: reports from before it was recorded have none of it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::wire;

/// `owners[]`: an owner that some stack or leak of the report names (`stacks[].owner`,
/// `leaks[].owner`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerInfo {
    /// Stable id, e.g. `"program"`, `"pytorch_caching_allocator"`, `"cublas"`.
    pub id: String,
    /// `"program"`, `"framework_cache"`, `"library"` or `"driver"`.
    pub kind: String,
    /// For people: "PyTorch's caching allocator".
    pub label: String,
    /// For a framework's cache: what its memory means and how to see past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Live bytes and allocations of one stack, at some moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackBytes {
    /// Stack id (`null`: allocations made without a stack, capture off).
    pub stack: Option<u64>,
    /// Live bytes of that stack then.
    pub bytes: u64,
    /// Live allocations of that stack then.
    pub allocations: u64,
}

/// `peaks[]`: what was live on a device at its peak: recorded while the program ran, each time
/// the device's live bytes rose 1% above the last record, so the last one is within 1% of the
/// peak (`stats.devices[].peak_live_bytes`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeakRecord {
    /// Device ordinal.
    #[serde(with = "wire::device")]
    pub device: u32,
    /// When, milliseconds since process start (rounded up).
    pub time_ms: u64,
    /// The same moment in microseconds (rounded up): a peak can last less than a millisecond.
    /// Absent in reports of cuguard before 0.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_us: Option<u64>,
    /// The device's live bytes (the program's device memory) then.
    pub live_bytes: u64,
    /// Live bytes by stack then, most first (stacks that held nothing are left out).
    pub stacks: Vec<StackBytes>,
}

/// `stack_samples`: live device bytes per stack over time, sampled by the shim's cuguard
/// thread with the timeline. Bounded: at most [`StackSamples::MAX_TIMES`] times (when full,
/// every other one is dropped and the interval doubles) and the stacks that held the most.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackSamples {
    /// The sampling interval at the end (it doubles as the buffer fills).
    pub interval_ms: u64,
    /// The sample times, milliseconds since process start, in order.
    pub times_ms: Vec<u64>,
    /// One series per (stack, device).
    pub series: Vec<StackSeries>,
}

impl StackSamples {
    /// The most sample times the shim keeps.
    pub const MAX_TIMES: usize = 256;
    /// The most series the shim keeps (the stacks whose largest sample is largest).
    pub const MAX_SERIES: usize = 128;
}

/// `stack_samples.series[]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackSeries {
    /// Stack id (`null`: allocations made without a stack).
    pub stack: Option<u64>,
    /// Device ordinal.
    #[serde(with = "wire::device")]
    pub device: u32,
    /// Live bytes at each of `times_ms`.
    pub bytes: Vec<u64>,
    /// A framework cache's live blocks (PyTorch's tensors) made from this stack, inside the
    /// cache's segments, whose own series count the same bytes (absent: the driver's
    /// allocations).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cache_blocks: bool,
}

/// `ooms[]`: an allocation the program was refused with `CUDA_ERROR_OUT_OF_MEMORY`, and what
/// held the memory at that moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomRecord {
    /// Global order, shared with allocations and events.
    pub seq: u64,
    /// When, milliseconds since process start.
    pub time_ms: u64,
    /// OS thread id of the asking thread.
    pub thread: u64,
    /// The entry that was refused, e.g. `"cuMemAlloc_v2"`.
    pub api: String,
    /// Bytes asked for.
    pub size: u64,
    /// Device ordinal.
    #[serde(with = "wire::device")]
    pub device: u32,
    /// The stack that asked.
    pub stack: Option<u64>,
    /// Who refused: `"driver"`, `"pool_limit"` (the pool's `CUGUARD_POOL_LIMIT`) or `"limit"`
    /// (the process's `CUGUARD_LIMIT`).
    pub refused_by: String,
    /// Why, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The device's free and total memory then (`cuMemGetInfo`), when it could be asked.
    #[serde(default)]
    pub device_free_bytes: Option<u64>,
    /// See `device_free_bytes`.
    #[serde(default)]
    pub device_total_bytes: Option<u64>,
    /// The program's live device bytes on that device then.
    pub live_bytes: u64,
    /// Live bytes by owner then, most first (from `stacks`' owners).
    #[serde(default)]
    pub by_owner: Vec<OwnerBytes>,
    /// Live bytes by stack then, most first (at most 64).
    pub stacks: Vec<StackBytes>,
    /// The pool on that device then, if it had one.
    #[serde(default)]
    pub pool: Option<OomPool>,
    /// The labels the program had set then (`process.labels` at that moment); absent when it
    /// had set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// The limit that refused it (`refused_by` `limit` or `pool_limit`): the limit and what was
    /// held against it then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<OomLimit>,
    /// Memory held on that device and not handed out, by holder, then: the driver's memory
    /// pools, cuguard's pool. Absent in reports of cuguard before 0.2 (and when nothing was
    /// held idle).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<IdleHolder>,
    /// What would have made the request fit, worked out from the figures above
    /// ([`crate::verdict`]). Absent in reports of cuguard before 0.2: readers work it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// For the driver's or a limit's refusal of a segment a framework's allocator asked for,
    /// which then refused the request itself: the framework (`pytorch`), whose own record (a
    /// later one of the same thread) explains the refusal. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    /// The other processes holding memory on that device then, as NVML lists them (this
    /// process left out), most bytes first, at most [`OomRecord::MAX_OTHER_PROCESSES`]; empty
    /// when NVML listed none. Absent when NVML could not be asked (`other_processes_note` says
    /// why) and in reports of cuguard before 0.2: not known, which is not none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_processes: Option<Vec<OtherProcess>>,
    /// What every other process NVML listed held on that device then, those past the first
    /// [`OomRecord::MAX_OTHER_PROCESSES`] too; absent with `other_processes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_processes_bytes: Option<u64>,
    /// Why `other_processes` is absent, when cuguard tried: NVML not loaded before the refusal
    /// (cuguard never loads it inside a refused call), not present, not answering, or not
    /// listing this process (inside a container its pids may differ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_processes_note: Option<String>,
    /// What making this card took the shim, in nanoseconds, inside the refused call, from its
    /// first question (the device's free memory): its figures, the verdict, the record; not
    /// the report it asks the cuguard thread for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_ns: Option<u64>,
    /// A framework's card: what reading the framework's figures took cuguard's Python package
    /// before it handed them to the shim, in nanoseconds, inside the refused call too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework_ns: Option<u64>,
    /// Where `card_ns` went, by part, so that a slow card can be told from a slow part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card_parts: Option<CardParts>,
}

/// The parts of an out-of-memory card's time inside the refused call
/// ([`OomRecord::card_parts`]), in nanoseconds; what they leave of `card_ns` is the record's own
/// keeping (the list).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardParts {
    /// Asking the driver for the device's free and total memory (`cuMemGetInfo`, through a
    /// context pushed for it where the thread had none on the device).
    pub device_ns: u64,
    /// Asking NVML for the other processes on the device: about nothing where the cuguard
    /// thread asks just after the refusal instead (the refused call asks only without it).
    pub nvml_ns: u64,
    /// The live bytes by stack.
    pub live_ns: u64,
    /// The holders' idle memory: the driver's memory pools' attributes, cuguard's pool.
    pub holders_ns: u64,
    /// The verdict (and the program's labels, read just before it).
    pub verdict_ns: u64,
}

impl OomRecord {
    /// The most other processes a record lists (those holding the most).
    pub const MAX_OTHER_PROCESSES: usize = 16;
}

/// `ooms[].other_processes[]`: another process holding memory on the refusing device, as NVML
/// lists it (`nvmlDeviceGetComputeRunningProcesses`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OtherProcess {
    /// Its pid, as NVML sees it.
    pub pid: u32,
    /// Device memory it used then, as NVML accounts it (its context included).
    pub bytes: u64,
}

/// `ooms[].limit`: the limit that refused an allocation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomLimit {
    /// The limit, in bytes (`CUGUARD_LIMIT` on the device, or `CUGUARD_POOL_LIMIT`).
    pub limit_bytes: u64,
    /// What was held against it then: for `CUGUARD_LIMIT`, the program's live memory outside
    /// cuguard's pool and everything the pool reserved (its idle chunks included); for
    /// `CUGUARD_POOL_LIMIT`, what the pool reserved.
    pub held_bytes: u64,
}

/// `ooms[].idle[]`: memory one holder kept on the device without handing it out, when an
/// allocation was refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleHolder {
    /// Which kind of holder: `driver_pool` (a memory pool of the driver's stream-ordered
    /// allocator: `cuMemAllocAsync`) or `cuguard_pool`.
    pub holder: String,
    /// Which one, for people: "the default memory pool of device 0", "memory pool 0x5f00…".
    pub name: String,
    /// The pool's handle (`driver_pool`), to trim it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<u64>,
    /// Bytes it held on the device.
    pub reserved_bytes: u64,
    /// Of those, bytes no allocation had (free, waiting to be reused, or the rounding of live
    /// blocks; for a driver pool, blocks freed with `cuMemFreeAsync` from the moment the free
    /// is enqueued, as the driver counts them).
    pub idle_bytes: u64,
    /// `CU_MEMPOOL_ATTR_RELEASE_THRESHOLD` (`driver_pool`): reserved memory the pool keeps at
    /// a synchronization; `u64::MAX` is unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_threshold: Option<u64>,
    /// The largest free piece, where the holder says (`cuguard_pool`, `pytorch_cache`,
    /// `cupy_pool`, `jax_allocator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_free_bytes: Option<u64>,
    /// How many free pieces the idle bytes are in, where the holder says (`pytorch_cache`,
    /// `cupy_pool`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pieces: Option<u64>,
    /// Of the idle bytes, those in whole pages of PyTorch's expandable segments (20 MiB): what
    /// `expandable_segments:True` could map to another request (`pytorch_cache`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expandable_bytes: Option<u64>,
    /// Of the idle bytes, those in whole blocks that CuPy's `free_all_blocks()` gives back to
    /// the device; a block split by a live array stays (`cupy_pool`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freeable_bytes: Option<u64>,
    /// The live blocks that split the idle bytes into pieces (those in a segment that has idle
    /// pieces), by the line that made them, most bytes first (`pytorch_cache`; at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinning: Vec<Pinning>,
}

impl IdleHolder {
    /// 1 − largest free piece / idle bytes, where the largest piece is known.
    pub fn fragmentation(&self) -> Option<f64> {
        let largest = self.largest_free_bytes?;
        (self.idle_bytes > 0)
            .then(|| 1.0 - largest.min(self.idle_bytes) as f64 / self.idle_bytes as f64)
    }
}

/// `ooms[].idle[].pinning[]`: live blocks of one line that split a holder's idle memory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinning {
    /// Where they were made, for people: `function (file:line)`, or `unknown` where the holder
    /// kept no lines.
    pub site: String,
    /// `file:line`, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// Their bytes.
    pub bytes: u64,
    /// How many blocks.
    pub blocks: u64,
}

/// `ooms[].verdict`: what would have made a refused request fit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// `sync_driver_pool` (a driver pool held it: frees no synchronization had observed),
    /// `without_cuguard_pool` (its idle memory lies between live blocks),
    /// `all_idle` (every holder's idle memory
    /// together), `raise_limit`, `other_processes` (at the driver's refusal, only what other
    /// processes held would make room), `nothing` (the live memory alone leaves too little), or
    /// `unknown` (the figures needed were not there).
    pub action: String,
    /// Whether that would have let the request through.
    pub fits: bool,
    /// The verdict in one line.
    pub text: String,
}

/// Bytes held by one owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerBytes {
    /// Owner id (see `owners[]`).
    pub owner: String,
    /// Bytes.
    pub bytes: u64,
}

/// `ooms[].pool`: the pool when the allocation was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomPool {
    /// Device memory the pool held from the driver.
    pub reserved_bytes: u64,
    /// Of that, bytes not handed out (free, or waiting for a fence).
    pub free_bytes: u64,
    /// The largest free block.
    pub largest_free_block: u64,
}

/// `reconciliation[]`: per device, what the device says is used against what cuguard can
/// explain, when the report was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    /// Device ordinal.
    #[serde(with = "wire::device")]
    pub device: u32,
    /// Used memory on the whole device (`cuMemGetInfo`: total − free), by every process.
    #[serde(default)]
    pub device_used_bytes: Option<u64>,
    /// This process's own usage as NVML lists it, when it does.
    #[serde(default)]
    pub process_used_bytes: Option<u64>,
    /// Why `process_used_bytes` is absent, when it is: NVML not present, or this process not
    /// among those it lists (inside a container NVML may see other pids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_used_note: Option<String>,
    /// What cuguard can explain, by part.
    pub explained: Explained,
    /// The contexts' overhead as estimated when each was created, when it is more than what is
    /// used leaves for it once the exact parts are counted: `explained.context_overhead_bytes`
    /// then counts only what is left, and `excess_bytes` says by how much the estimate is over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_overhead_estimate_bytes: Option<u64>,
    /// By how much cuguard's figures (the exact parts and the contexts' whole estimate) exceed
    /// what is used, when they do; nothing is then unexplained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excess_bytes: Option<u64>,
    /// What cuguard's pool gave back and the driver may not have returned, when there is any:
    /// chunks queued for the give-back thread's `cuMemFree` and not freed yet (the process
    /// ended first), and what it gave back with `cuMemFreeAsync` since it last synchronized the
    /// device, which the driver holds until a synchronizing call. `explained.given_back_bytes`
    /// counts the first whole and no more of the second than what is used leaves (the program
    /// may have synchronized since, unseen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given_back_pending_bytes: Option<u64>,
    /// What is used and not explained: `process_used_bytes − explained` when NVML listed the
    /// process, else `device_used_bytes − explained`, which includes other processes. Never
    /// negative (reports of cuguard 0.1 before this could be: read those as 0, the rest an
    /// excess).
    #[serde(default)]
    pub unexplained_bytes: Option<i64>,
    /// Why so much is not explained, when NVML listed the process and more than 5% of its
    /// usage is: what the driver takes without an allocation call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unexplained_note: Option<String>,
}

/// `reconciliation[].explained`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explained {
    /// Live device memory held by the program itself (owner kind `program`).
    pub program_bytes: u64,
    /// Held by frameworks' caches (owner kind `framework_cache`).
    pub framework_cache_bytes: u64,
    /// Held by CUDA libraries' workspaces (owner kind `library`).
    pub library_bytes: u64,
    /// Held by the driver and runtime as allocations (owner kind `driver`).
    pub driver_bytes: u64,
    /// cuguard's pool: reserved from the driver and not asked for (free, waiting for a fence,
    /// or the rounding of live blocks).
    pub pool_idle_bytes: u64,
    /// Contexts' own memory, measured when each context was created (live contexts only), no
    /// more than what is used leaves once the parts above are counted.
    pub context_overhead_bytes: u64,
    /// Given back by cuguard's pool and, as far as it knows, not yet returned by the driver:
    /// chunks queued to be freed and still allocated, and what it freed with `cuMemFreeAsync`
    /// (which the driver holds until a synchronizing call), the latter no more than what is used
    /// leaves once the parts above are counted.
    #[serde(default)]
    pub given_back_bytes: u64,
    /// Held by the driver's stream-ordered memory pools and not allocated: their reserved
    /// memory less their used memory (`cuMemPoolGetAttribute`): blocks freed with
    /// `cuMemFreeAsync`, kept up to the pool's release threshold once a synchronization observes
    /// their frees, and held until one does.
    #[serde(default)]
    pub driver_pool_idle_bytes: u64,
}

impl Explained {
    /// Everything explained.
    pub fn total(&self) -> u64 {
        self.program_bytes
            + self.framework_cache_bytes
            + self.library_bytes
            + self.driver_bytes
            + self.pool_idle_bytes
            + self.context_overhead_bytes
            + self.given_back_bytes
            + self.driver_pool_idle_bytes
    }
}
