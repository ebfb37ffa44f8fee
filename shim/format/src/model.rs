//! [`Report`] and its parts: one process's report, field by field, in the order the shim writes
//! them.
//!
//! Every field the shim writes is here. Fields that came after the first contract
//! (`docs/report.md`) are optional for readers (`#[serde(default)]`). How each is written
//! follows the shim: a field it always writes, `null` included, is always serialized
//! (`Option::None` as `null`); one it writes only sometimes (`leaks[].handle`,
//! `events[].device`, `stacks[].python`, `timeline`, …) is skipped when absent.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::addr::Addr;
use crate::allocation::Allocation;
use crate::attribution::{OomRecord, OwnerInfo, PeakRecord, Reconciliation, StackSamples};
use crate::config::Config;
use crate::cost::Cost;
use crate::enums::{EventKind, LeakState, Reason};
use crate::history::HistoryInfo;
use crate::python::{PyFrame, Python};
use crate::versions::Versions;
use crate::{intern, wire};

/// The value of every report's `schema` field.
pub const SCHEMA_NAME: &str = "cuguard-report";
/// The schema version the shim writes and `cuguard` reads.
pub const SCHEMA_VERSION: u64 = 1;
/// One process's report (schema `"cuguard-report"`, version 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA_NAME`].
    pub schema: String,
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u64,
    /// The program that wrote the report.
    pub tool: Tool,
    /// `true` for a final report; `false` for a checkpoint or a report cut short.
    pub complete: bool,
    /// Why the report was written.
    pub reason: Reason,
    /// Why `complete` is false, in words; `null` for a complete report.
    #[serde(default)]
    pub cut_short: Option<String>,
    /// The signal that ended the process, for `reason` `signal`; else `null`.
    #[serde(default)]
    pub signal: Option<Signal>,
    /// 1 for the first report this process wrote, 2 for the next, … (a process replaces its
    /// checkpoints and snapshots with its later reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_number: Option<u64>,
    /// The run the process belonged to (`CUGUARD_RUN_ID`, which `cuguard run` sets for every
    /// process it starts); absent outside a run. Reports of one run given one path each keep
    /// their own file; a later run's report replaces an earlier run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The process the report describes.
    pub process: Process,
    /// The real CUDA driver the process used.
    pub driver: Driver,
    /// The devices the process saw.
    pub devices: Vec<Device>,
    /// The shim's effective settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Config>,
    /// Every context the process created or retained.
    pub contexts: Vec<Context>,
    /// Every allocation still owned by the program when the report was written, or lost with
    /// its context. Empty in a report read with its leaks folded
    /// (`Document::read_folding`, in `read/`).
    pub leaks: Vec<Leak>,
    /// Misuse and anomalies seen while running.
    pub events: Vec<Event>,
    /// Events the shim saw but did not keep in `events` (its list is bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_dropped: Option<u64>,
    /// Call stacks, referred to by id from leaks, events and contexts.
    pub stacks: Vec<Stack>,
    /// The modules the stacks' frames are in, as loaded when the report was written.
    #[serde(default)]
    pub modules: Vec<Module>,
    /// Allocation statistics.
    pub stats: Stats,
    /// Device memory sampled over time (absent when sampling is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
    /// How many hooked entries the shim handed out through each door.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doors: Option<Doors>,
    /// The owners that stacks and leaks name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<OwnerInfo>,
    /// What was live at each device's peak (the last record per device is within 1% of it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peaks: Vec<PeakRecord>,
    /// Live bytes per stack over time (what grew).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_samples: Option<StackSamples>,
    /// Allocations refused with `CUDA_ERROR_OUT_OF_MEMORY`, and what held the memory then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ooms: Vec<OomRecord>,
    /// Out-of-memory refusals not kept in `ooms` (its list is bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ooms_dropped: Option<u64>,
    /// Per device: what is used against what cuguard can explain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reconciliation: Vec<Reconciliation>,
    /// What cuguard itself cost the process (absent in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// A Python program's end and what held its memory then (`crate::python`); absent for
    /// processes without Python, and in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<Python>,
    /// The history of every allocation and free: where it is, what it lost (absent when it is
    /// off, and in older reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryInfo>,
    /// The driver's release, the CUDA runtimes and the frameworks the process had loaded
    /// (`crate::versions`); absent in older reports and in the report written at a signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<Versions>,
    /// The shim's own problems, one line each.
    #[serde(default)]
    pub faults: Vec<String>,
}

/// `tool`: the program that wrote a report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// `"cuguard"`.
    pub name: String,
    /// Its version.
    pub version: String,
}

impl Tool {
    /// This cuguard (every crate of the workspace has the same version).
    pub fn current() -> Tool {
        Tool {
            name: "cuguard".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// `signal`: the signal that ended the process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    /// Its number.
    pub number: i32,
    /// Its name (`"SIGSEGV"`), or `"signal"` for one without a name here.
    pub name: String,
}

/// `process`: the process a report describes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Process {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Path of the executable.
    pub exe: String,
    /// Command line.
    pub argv: Vec<String>,
    /// Host name.
    pub hostname: String,
    /// Rank in a multi-process job (from `RANK`, `OMPI_COMM_WORLD_RANK`, …), if any.
    pub rank: Option<u32>,
    /// When the process started, milliseconds since the Unix epoch.
    pub start_unix_ms: u64,
    /// When the report was written, milliseconds since the Unix epoch.
    pub end_unix_ms: u64,
    /// Labels of the process: those its launcher set in the environment (`RANK`, `LOCAL_RANK`,
    /// `WORLD_SIZE`, `TORCHELASTIC_RUN_ID`, `SLURM_PROCID`, `SLURM_JOB_ID`,
    /// `OMPI_COMM_WORLD_RANK`, under those names) and those the program set through the
    /// in-process API (`cuguard.label(key, value)`, the last value of each key, which wins over
    /// a launcher's of the same name). Absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// `driver`: the real CUDA driver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Driver {
    /// `cuDriverGetVersion`, e.g. 13000; [`wire::UNKNOWN_VERSION`] (written `null`) when the
    /// shim could not ask.
    #[serde(with = "wire::version")]
    pub version: i64,
    /// Path of the driver library (empty when it was never loaded).
    pub path: String,
}

/// `devices[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// Device ordinal.
    #[serde(with = "wire::device")]
    pub ordinal: u32,
    /// Device name.
    pub name: String,
    /// Total device memory in bytes.
    pub total_bytes: u64,
    /// The process's limit on this device (`CUGUARD_LIMIT`), in bytes; absent when it had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
}

/// `contexts[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// Small id, unique in the report; leaks and events refer to it.
    pub id: u32,
    /// The `CUcontext` handle.
    pub handle: Addr,
    /// Device ordinal.
    #[serde(with = "wire::device")]
    pub device: u32,
    /// Whether it is the device's primary context.
    pub primary: bool,
    /// Whether it was destroyed (or reset, or released for the last time).
    pub destroyed: bool,
    /// The entry that destroyed it, e.g. `"cuCtxDestroy_v2"`, `"cuDevicePrimaryCtxReset_v2"`;
    /// `null` while it lives.
    #[serde(default)]
    pub destroyed_by: Option<String>,
    /// When it was created, milliseconds since process start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ms: Option<u64>,
    /// When it was destroyed, milliseconds since process start; `null` while it lives.
    #[serde(default)]
    pub destroyed_ms: Option<u64>,
    /// The stack that created it.
    pub stack: Option<u64>,
    /// Device memory creating it took (in use just after, less just before, as NVML says),
    /// when it could be measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead_bytes: Option<u64>,
}

/// `leaks[]`: an allocation still owned by the program, or lost with its context: its core
/// ([`Allocation`], which it derefs to), then why it is here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Leak {
    /// The allocation: address, size, entry, memory, device, context, thread, order, time and
    /// stack.
    #[serde(flatten)]
    pub allocation: Allocation<Arc<str>>,
    /// Why it is here.
    pub state: LeakState,
    /// The `CUmemGenericAllocationHandle`, for memory made by `cuMemCreate` (VMM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<Addr>,
    /// Who holds it: an owner id of `owners[]` (absent in older reports, and without a stack).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl std::ops::Deref for Leak {
    type Target = Allocation<Arc<str>>;
    fn deref(&self) -> &Allocation<Arc<str>> {
        &self.allocation
    }
}

impl std::ops::DerefMut for Leak {
    fn deref_mut(&mut self) -> &mut Allocation<Arc<str>> {
        &mut self.allocation
    }
}

/// `events[]`: misuse or an anomaly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The address concerned; `null` where none applies.
    pub address: Option<Addr>,
    /// The driver entry concerned; `null` where none applies.
    pub api: Option<String>,
    /// Global order, shared with allocations.
    pub seq: u64,
    /// OS thread id.
    pub thread: u64,
    /// Stack id.
    pub stack: Option<u64>,
    /// The `CUresult` returned to the program; `null` where no call returned.
    pub result: Option<i64>,
    /// Bytes concerned (requested size for `alloc_failed`, live bytes for a threshold, …).
    #[serde(default)]
    pub size: Option<u64>,
    /// Context id.
    #[serde(default)]
    pub context: Option<u32>,
    /// When it happened, milliseconds since process start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<u64>,
    /// A human-readable detail.
    #[serde(default)]
    pub message: Option<String>,
    /// The device concerned, for `warn_threshold_crossed`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "wire::device_opt"
    )]
    pub device: Option<u32>,
}

/// `stacks[]`: a call stack, innermost frame first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stack {
    /// Id, unique in the report.
    pub id: u64,
    /// Native frames, innermost first.
    pub frames: Vec<Frame>,
    /// Python frames, innermost first, where the shim could read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python: Vec<PyFrame>,
    /// The shim's site for this stack: the first frame that is the user's own, and a stable
    /// fingerprint; `null` when no frame qualifies. Absent in older reports.
    #[serde(default)]
    pub site: Option<StackSite>,
    /// Who holds what this stack allocated: an owner id of `owners[]`. Absent in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The stack as one list, native and Python frames in call order, innermost first: each
    /// frame of the interpreter's evaluation loop is replaced by the Python frames it was
    /// running, and the interpreter's own machinery between them is left out. Empty when the
    /// stack has no Python frames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mixed: Vec<MixedRef>,
    /// Where the work this stack's allocations were made for was started: the id of another
    /// stack of `stacks[]`, that of the thread that opened an *origin* (`cuguard_origin_begin`:
    /// the thread that called PyTorch's `backward()`, through cuguard's Python package) while
    /// this stack's thread, which had no Python frames of its own, allocated. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<u64>,
}

/// `stacks[].mixed[]`: one frame of the mixed stack, as an index into `frames` or `python`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MixedRef {
    /// Index into `frames`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<usize>,
    /// Index into `python`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<usize>,
}

/// `stacks[].site`: which frame is the site, as the shim decided when it wrote the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StackSite {
    /// [`site_list::FRAMES`](crate::enums::site_list::FRAMES) (native) or
    /// [`site_list::PYTHON`](crate::enums::site_list::PYTHON).
    #[serde(rename = "in")]
    pub in_: String,
    /// Index into that list.
    pub index: usize,
    /// Stable across runs and install paths (module file name, function, file and line).
    pub fingerprint: String,
    /// `"user"` (the user's own frame), `"operation"` (no user frame: the framework operation
    /// that asked, e.g. an autograd node) or `"fallback"` (neither: the first framework frame).
    /// Absent in older reports (where it was always the user's frame).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// `stacks[].frames[]`: one native frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    /// Instruction pointer.
    pub ip: Addr,
    /// Path of the module holding `ip`.
    #[serde(deserialize_with = "intern::string")]
    pub module: Arc<str>,
    /// `ip` relative to the module's load base.
    pub offset: Addr,
    /// Function name, if known.
    #[serde(default, deserialize_with = "intern::optional")]
    pub function: Option<Arc<str>>,
    /// Source file, if known.
    #[serde(default, deserialize_with = "intern::optional")]
    pub file: Option<Arc<str>>,
    /// Source line, if known.
    pub line: Option<u32>,
    /// Whether this frame was inlined into the next one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inlined: Option<bool>,
}

/// `modules[]`: a loaded module.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Module {
    /// Path.
    pub path: String,
    /// GNU build id, hex, if present.
    pub build_id: Option<String>,
    /// Load bias: `ip - base` is the offset symbol tables use (0 for a non-PIE executable).
    pub base: Addr,
    /// Lowest address its loadable segments cover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Addr>,
    /// Bytes its loadable segments cover, from `start`.
    pub size: u64,
}

/// `stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Per device.
    pub devices: Vec<DeviceStats>,
    /// Virtual address ranges reserved with `cuMemAddressReserve` and not freed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm_reserved_ranges: Option<u64>,
    /// Bytes in those ranges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm_reserved_bytes: Option<u64>,
}

/// `stats.devices[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// Device ordinal.
    #[serde(with = "wire::device")]
    pub device: u32,
    /// Bytes the program owned when the report was written.
    pub live_bytes: u64,
    /// The most bytes the program owned at once.
    pub peak_live_bytes: u64,
    /// Bytes allocated over the whole run.
    pub total_allocated_bytes: u64,
    /// Allocation calls that succeeded.
    pub allocations: u64,
    /// Free calls that succeeded.
    pub frees: u64,
    /// Bytes that went away with their destroyed context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_bytes: Option<u64>,
    /// Pinned host memory made in this device's contexts and still live (not in `live_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pinned_live_bytes: Option<u64>,
    /// The pool's figures, or `null` when the pool is off.
    pub pool: Option<PoolStats>,
}

/// `stats.devices[].pool`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolStats {
    /// Device memory the pool holds from the driver.
    pub reserved_bytes: u64,
    /// The most it held at once.
    pub peak_reserved_bytes: u64,
    /// Driver allocations (chunks) it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<u64>,
    /// Chunks it took from the driver over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks_added: Option<u64>,
    /// How many times it gave memory back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trims: Option<u64>,
    /// Bytes it gave back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trimmed_bytes: Option<u64>,
    /// Reserved bytes not handed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    /// The largest free block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_free_block: Option<u64>,
    /// `1 - largest_free_block / free_bytes`; `null` when nothing is free.
    #[serde(default, serialize_with = "wire::decimal")]
    pub fragmentation: Option<f64>,
    /// Bytes freed but waiting for a fence before reuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_bytes: Option<u64>,
    /// Fences recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fences: Option<u64>,
    /// Context synchronizations made to reclaim memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syncs: Option<u64>,
    /// Host waits for the oldest fence in flight, made to reclaim memory in place of a
    /// synchronization (work submitted after that fence kept running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_waits: Option<u64>,
    /// Fences and synchronizations that also waited for work of other contexts that can reach
    /// the pool's memory (peer access, peer copies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_waits: Option<u64>,
    /// Frees made reusable at once because all their pending work was on one stream
    /// (`CUGUARD_POOL_STREAM_REUSE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_reuses: Option<u64>,
    /// Stream waits inserted so that another stream's work runs after an early-reused block's
    /// pending work (`CUGUARD_POOL_STREAM_REUSE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_waits: Option<u64>,
    /// Allocations refused because of `CUGUARD_POOL_LIMIT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_refusals: Option<u64>,
}

/// `timeline`: device memory sampled over time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Sampling interval (doubled each time the bounded sample list was thinned).
    pub interval_ms: u64,
    /// The samples, in time order.
    pub samples: Vec<Sample>,
}

/// `timeline.samples[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Milliseconds since process start.
    pub time_ms: u64,
    /// Device ordinal.
    #[serde(with = "wire::device")]
    pub device: u32,
    /// Bytes the program owned.
    pub live_bytes: u64,
    /// Bytes held from the driver (pool included).
    pub reserved_bytes: u64,
}

/// `doors`: hooked entries handed out through each door.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Doors {
    /// Hooks returned by `dlsym`.
    pub dlsym: u64,
    /// Hooks returned by `cuGetProcAddress*`.
    pub get_proc_address: u64,
    /// Calls that reached the shim's exported symbols (a program linked with `-lcuda` binds to
    /// them directly). Absent in reports from before it was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exported: Option<u64>,
}

impl Report {
    /// Whether `event` is a context destroyed after a Python program's code ended, while the
    /// interpreter tore down (numba destroys its context at exit, with the arrays it had not
    /// freed yet): the framework's teardown, no finding against the program.
    pub fn at_python_teardown(&self, event: &Event) -> bool {
        let end = self
            .python
            .as_ref()
            .filter(|p| p.end.recorded)
            .and_then(|p| p.end.time_ms);
        event.kind == EventKind::ContextDestroyedWithLiveAllocations
            && matches!((end, event.time_ms), (Some(end), Some(t)) if t >= end)
    }

    /// An empty report of this cuguard for `process`: no devices, contexts, leaks, events or
    /// stacks, the driver unknown; the caller fills in the rest.
    pub fn new(complete: bool, reason: Reason, process: Process) -> Report {
        Report {
            schema: SCHEMA_NAME.into(),
            schema_version: SCHEMA_VERSION,
            tool: Tool::current(),
            complete,
            reason,
            cut_short: None,
            signal: None,
            report_number: None,
            run_id: None,
            process,
            driver: Driver {
                version: wire::UNKNOWN_VERSION,
                path: String::new(),
            },
            devices: Vec::new(),
            config: None,
            contexts: Vec::new(),
            leaks: Vec::new(),
            events: Vec::new(),
            events_dropped: None,
            stacks: Vec::new(),
            modules: Vec::new(),
            stats: Stats {
                devices: Vec::new(),
                vmm_reserved_ranges: None,
                vmm_reserved_bytes: None,
            },
            timeline: None,
            doors: None,
            owners: Vec::new(),
            peaks: Vec::new(),
            stack_samples: None,
            ooms: Vec::new(),
            ooms_dropped: None,
            reconciliation: Vec::new(),
            cost: None,
            python: None,
            history: None,
            versions: None,
            faults: Vec::new(),
        }
    }

    /// A short name for the process: the executable's file name and pid, e.g. `train[4242]`.
    pub fn process_name(&self) -> String {
        let exe = self.process.exe.rsplit('/').next().unwrap_or_default();
        format!("{exe}[{}]", self.process.pid)
    }

    /// Total bytes in `leaks`.
    pub fn leaked_bytes(&self) -> u64 {
        self.leaks
            .iter()
            .map(|l| l.size)
            .fold(0, u64::saturating_add)
    }
}
