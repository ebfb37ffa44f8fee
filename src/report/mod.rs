//! The report model: serde types for schema `"cuguard-report"`, version 1, and the reader.
//!
//! One report describes one process (see `../shared/REPORT.md` for the contract and
//! `docs/report.schema.json` for the machine-checked form). A *merged* report, written by
//! `cuguard merge`, holds several of them verbatim in a `processes` array under the same schema
//! name and version; [`Document`] reads both shapes and hands out one [`Report`] per process.
//!
//! Reading is lenient where the contract allows growth: unknown fields are ignored, fields added
//! after the first contract (`config`, `modules`, `faults`, `doors`, `timeline`, …) may be absent,
//! and enumerations keep values this version does not know (`Other`). Anything that is not a
//! schema-version-1 report is refused with a [`ReadError`] whose message is one line.

mod addr;
mod intern;
mod read;

pub use addr::Addr;
pub use read::{DEFAULT_MAX_REPORT_BYTES, Document, ReadError, Reports};

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The value of every report's `schema` field.
pub const SCHEMA_NAME: &str = "cuguard-report";
/// The schema version this crate reads and writes.
pub const SCHEMA_VERSION: u64 = 1;

/// Declares an enumeration stored in JSON as a string, keeping values it does not know.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
            /// A value this version of cuguard does not know, kept as written.
            Other(Box<str>),
        }

        impl $name {
            /// The name as written in reports.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)*
                    Self::Other(text) => text,
                }
            }

            /// The variant for a name as written in reports.
            pub fn from_name(text: &str) -> Self {
                match text {
                    $($text => Self::$variant,)*
                    other => Self::Other(other.into()),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl serde::de::Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("a string")
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        Ok($name::from_name(v))
                    }
                }
                d.deserialize_str(V)
            }
        }
    };
}

string_enum! {
    /// Why a report was written (`reason`).
    Reason {
        /// The process ended normally.
        Exit = "exit",
        /// A periodic checkpoint while the process ran.
        Checkpoint = "checkpoint",
        /// A fatal signal cut the process short.
        Signal = "signal",
        /// Someone asked for a report (e.g. a signal configured for it).
        Request = "request",
    }
}

string_enum! {
    /// What kind of memory an allocation is (`leaks[].memory`).
    Memory {
        /// `cuMemAlloc*`.
        Device = "device",
        /// `cuMemAllocPitch*`.
        Pitched = "pitched",
        /// `cuMemAllocManaged`.
        Managed = "managed",
        /// Stream-ordered: `cuMemAllocAsync*`, `cuMemAllocFromPoolAsync*`.
        Async = "async",
        /// Virtual memory management: `cuMemCreate`/`cuMemMap`.
        Vmm = "vmm",
        /// Page-locked host memory: `cuMemAllocHost*`, `cuMemHostAlloc`.
        HostPinned = "host_pinned",
    }
}

string_enum! {
    /// Why an allocation is in `leaks` (`leaks[].state`).
    LeakState {
        /// The program still owned it when the report was written.
        LiveAtExit = "live_at_exit",
        /// Its context was destroyed (or the primary context reset or released) while it was
        /// live, so the memory is gone without a free.
        ReleasedByContextDestroy = "released_by_context_destroy",
    }
}

string_enum! {
    /// What an event is (`events[].kind`). Unknown kinds are valid and kept.
    EventKind {
        /// A pointer freed twice.
        DoubleFree = "double_free",
        /// A free the driver refused (not an allocation, or an interior pointer).
        InvalidFree = "invalid_free",
        /// A free of a pointer the shim never saw allocated; forwarded to the driver.
        UntrackedFree = "untracked_free",
        /// A free made while another context than the allocation's was current.
        FreeInWrongContext = "free_in_wrong_context",
        /// A context went away while allocations in it were live.
        ContextDestroyedWithLiveAllocations = "context_destroyed_with_live_allocations",
        /// An allocation call failed.
        AllocFailed = "alloc_failed",
        /// An IPC export of a pooled pointer was refused.
        IpcRefused = "ipc_refused",
        /// Live memory crossed the configured warning threshold.
        WarnThresholdCrossed = "warn_threshold_crossed",
        /// A problem of the shim itself.
        ShimFault = "shim_fault",
    }
}

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
    /// The process the report describes.
    pub process: Process,
    /// The real CUDA driver the process used.
    pub driver: Driver,
    /// The devices the process saw.
    pub devices: Vec<Device>,
    /// Every context the process created or retained.
    pub contexts: Vec<Context>,
    /// Every allocation still owned by the program when the report was written, or lost with
    /// its context.
    pub leaks: Vec<Leak>,
    /// Misuse and anomalies seen while running.
    pub events: Vec<Event>,
    /// Call stacks, referred to by id from leaks, events and contexts.
    pub stacks: Vec<Stack>,
    /// Allocation statistics.
    pub stats: Stats,
    /// The shim's effective settings (free-form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Map<String, Value>>,
    /// The modules loaded in the process when the report was written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<Module>,
    /// The shim's own problems, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<String>,
    /// How many hooked entries the shim handed out through each door.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doors: Option<Doors>,
    /// Device memory sampled over time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
    /// Events the shim saw but did not keep in `events` (its list is bounded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_dropped: Option<u64>,
}

/// `tool`: the program that wrote a report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// `"cuguard"`.
    pub name: String,
    /// Its version.
    pub version: String,
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
}

/// `driver`: the real CUDA driver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Driver {
    /// `cuDriverGetVersion`, e.g. 13000.
    pub version: i64,
    /// Path of the driver library.
    pub path: String,
}

/// `devices[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// Device ordinal.
    pub ordinal: u32,
    /// Device name.
    pub name: String,
    /// Total device memory in bytes.
    pub total_bytes: u64,
}

/// `contexts[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Context {
    /// Small id, unique in the report; leaks and events refer to it.
    pub id: u32,
    /// The `CUcontext` handle.
    pub handle: Addr,
    /// Device ordinal.
    pub device: u32,
    /// Whether it is the device's primary context.
    pub primary: bool,
    /// Whether it was destroyed (or reset, or released for the last time).
    pub destroyed: bool,
    /// The stack that created it.
    pub stack: Option<u64>,
    /// The entry that destroyed it, e.g. `"cuCtxDestroy_v2"`, `"cuDevicePrimaryCtxReset_v2"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destroyed_by: Option<String>,
    /// When it was created, milliseconds since process start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ms: Option<u64>,
    /// When it was destroyed, milliseconds since process start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destroyed_ms: Option<u64>,
}

/// `leaks[]`: an allocation still owned by the program, or lost with its context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Leak {
    /// The pointer the program received.
    pub address: Addr,
    /// Bytes the program received (pitch × height for pitched allocations).
    pub size: u64,
    /// Bytes asked for (width × height for pitched allocations).
    pub requested: u64,
    /// The driver entry that made it, e.g. `"cuMemAlloc_v2"`.
    #[serde(deserialize_with = "intern::string")]
    pub api: Arc<str>,
    /// What kind of memory it is.
    pub memory: Memory,
    /// Device ordinal.
    pub device: u32,
    /// Context id.
    pub context: Option<u32>,
    /// OS thread id of the allocating thread.
    pub thread: u64,
    /// Global allocation order.
    pub seq: u64,
    /// When it was made, milliseconds since process start.
    pub time_ms: u64,
    /// Stack id.
    pub stack: Option<u64>,
    /// Why it is here.
    pub state: LeakState,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Context id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<u32>,
    /// When it happened, milliseconds since process start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<u64>,
    /// A human-readable detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
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
    /// fingerprint. Absent in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<StackSite>,
}

/// `stacks[].site`: which frame is the site, as the shim decided when it wrote the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StackSite {
    /// `"frames"` (native) or `"python"`.
    #[serde(rename = "in")]
    pub in_: String,
    /// Index into that list.
    pub index: usize,
    /// Stable across runs and install paths (module file name, function, file and line).
    pub fingerprint: String,
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

/// `stacks[].python[]`: one Python frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyFrame {
    /// Source file.
    pub file: String,
    /// Line number.
    pub line: Option<u32>,
    /// Function name.
    pub function: String,
}

/// `stats`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Per device.
    pub devices: Vec<DeviceStats>,
}

/// `stats.devices[]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceStats {
    /// Device ordinal.
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
    /// How many times it gave memory back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trims: Option<u64>,
    /// Reserved bytes not handed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_bytes: Option<u64>,
    /// The largest free block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub largest_free_block: Option<u64>,
}

/// `modules[]`: a loaded module.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Module {
    /// Path.
    pub path: String,
    /// GNU build id, hex, if present.
    pub build_id: Option<String>,
    /// Load base.
    pub base: Addr,
    /// Bytes mapped.
    pub size: u64,
}

/// `doors`: hooked entries handed out through each door.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Doors {
    /// Calls that reached the shim's exported symbols (a program linked with `-lcuda` binds to
    /// them directly); 0 in reports from before it was counted.
    #[serde(default)]
    pub exported: u64,
    /// Hooks returned by `dlsym`.
    pub dlsym: u64,
    /// Hooks returned by `cuGetProcAddress*`.
    pub get_proc_address: u64,
}

/// `timeline`: device memory sampled over time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Sampling interval.
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
    pub device: u32,
    /// Bytes the program owned.
    pub live_bytes: u64,
    /// Bytes held from the driver (pool included).
    pub reserved_bytes: u64,
}

impl Report {
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

#[cfg(test)]
mod tests;
