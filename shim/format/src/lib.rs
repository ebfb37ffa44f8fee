//! The cuguard report format, shared by the shim that writes reports (`libcuguard.so`) and the
//! `cuguard` command that reads them: the types of every field, the reader, the writers.
//!
//! # What a report is
//!
//! One JSON document per process (schema [`SCHEMA_NAME`], version [`SCHEMA_VERSION`]), written
//! by the shim when the process ends, and also at checkpoints, on request and, cut short, at a
//! fatal signal. It holds raw facts: the process, the driver and devices, every context, every
//! allocation still owned by the program (`leaks`), the misuse seen (`events`), call stacks as
//! instruction pointers with their module and offset (names where the shim could find them in
//! time), per-device statistics, the pool's figures, a memory timeline, and the shim's settings
//! and faults. `cuguard merge` puts several processes' reports in one document ([`merged`]).
//! The contract is `docs/report.md`; `docs/report.schema.json` is its machine-checked form,
//! and this crate's tests check the types, and the reader's fast path, against it. Adding a
//! field touches this crate and the schema, then the shim where it fills the field in.
//!
//! # The types
//!
//! [`Report`] and its parts ([`Process`], [`Driver`], [`Device`], [`Config`], [`Context`],
//! [`Leak`], [`Event`], [`Stack`] with [`Frame`], [`PyFrame`] and [`StackSite`], [`Module`],
//! [`Stats`] with [`DeviceStats`] and [`PoolStats`], [`Timeline`], [`Doors`], [`Cost`], [`Versions`]) describe every
//! field the shim writes, in the order it writes them. Fields added after the first contract are
//! optional for readers. Every record of an allocation (a leak, its borrowed form
//! [`LeakView`], a Python view's [`PyAllocation`]) holds one core, [`Allocation`], declared once
//! in [`allocation`] with how the reader's fast path reads each field. Enumerations ([`Reason`], [`Memory`], [`LeakState`], [`EventKind`]) keep
//! values they do not know. Addresses are [`Addr`] (`"0x…"` in JSON); device ordinals and the
//! driver version have a spelling for "unknown" ([`wire`]).
//!
//! # Reading and writing
//!
//! Every type reads with plain serde (`serde_json::from_slice::<Report>`). [`read`] is the
//! reader the `cuguard` command uses: [`Document`] reads a file, single or merged, with one-line
//! errors ([`ReadError`]); it parses a report's `leaks` and `stacks` by hand where it can, calls
//! [`intern::reset`] before each report so that repeated strings share one allocation, and on
//! request folds a report's leaks as it parses them ([`LeakFold`]) instead of holding them.
//! Writing goes through [`write()`] or [`to_vec`]. Besides, the crate holds:
//!
//! - [`template`]: the report path template (`CUGUARD_REPORT`), expanded by the shim to write
//!   and by `cuguard snapshot` to look;
//! - [`signal`]: the report of last resort, rendered in advance and completed in a signal handler
//!   without allocating;
//! - [`merged`]: the merged report's writer;
//! - [`edit`]: rewriting a report's stacks in place, keeping every other field as it was;
//! - [`alert`]: the alert line the shim sends to the logs (`CUGUARD_ALERT`);
//! - [`api`]: the other JSON documents of the shim's in-process C ABI (a `track` window, the
//!   live allocations).
//!
//! # Example
//!
//! ```
//! use cuguard_format::{Addr, Allocation, Leak, LeakState, Memory, Process, Reason, Report};
//!
//! let process = Process {
//!     pid: 4242,
//!     ppid: 1,
//!     exe: "/opt/app/train".into(),
//!     argv: vec!["train".into()],
//!     hostname: "node7".into(),
//!     rank: None,
//!     start_unix_ms: 1_764_461_000_000,
//!     end_unix_ms: 1_764_461_003_000,
//!     labels: None,
//! };
//! let mut report = Report::new(true, Reason::Exit, process);
//! report.leaks.push(Leak {
//!     allocation: Allocation {
//!         address: Addr(0x7f2a_4000_0000),
//!         size: 1 << 20,
//!         requested: 1 << 20,
//!         api: "cuMemAlloc_v2".into(),
//!         memory: Memory::Device,
//!         device: 0,
//!         context: None,
//!         thread: 4242,
//!         seq: 1,
//!         time_ms: 12,
//!         stack: None,
//!         tag: Some("kv_cache".into()),
//!     },
//!     state: LeakState::LiveAtExit,
//!     handle: None,
//!     owner: None,
//! });
//! let text = cuguard_format::to_vec(&report);
//! let back: Report = serde_json::from_slice(&text)?;
//! assert_eq!(back, report);
//! assert_eq!(back.process_name(), "train[4242]");
//! assert_eq!(back.leaked_bytes(), 1 << 20);
//! # Ok::<(), serde_json::Error>(())
//! ```

extern crate self as cuguard_format;

mod addr;
pub mod alert;
pub mod allocation;
pub mod api;
pub mod attribution;
mod config;
mod cost;
pub mod edit;
mod enums;
pub mod frameworks;
mod history;
pub mod intern;
mod leak;
pub mod merged;
mod model;
pub mod python;
pub mod read;
pub mod rmm_oom;
pub mod signal;
pub mod template;
pub mod text;
mod units;
pub mod verdict;
mod versions;
pub mod wire;
mod write;

pub use addr::Addr;
pub use allocation::Allocation;
pub use attribution::{
    CardParts, Explained, IdleHolder, OomLimit, OomPool, OomRecord, OtherProcess, OwnerBytes,
    OwnerInfo, PeakRecord, Pinning, Reconciliation, StackBytes, StackSamples, StackSeries, Verdict,
};
pub use config::Config;
pub use cost::{Cost, CostGrowth, CostReports, CostTiming, CostUnwind};
pub use enums::{
    EventKind, HeldClass, LeakState, Memory, MemoryKind, OwnerKind, Reason, site_list,
};
pub use history::{HistoryInfo, HistoryLost};
pub use leak::LeakView;
pub use model::{
    Context, Device, DeviceStats, Doors, Driver, Event, Frame, Leak, MixedRef, Module, PoolStats,
    Process, Report, SCHEMA_NAME, SCHEMA_VERSION, Sample, Signal, Stack, StackSite, Stats,
    Timeline, Tool,
};
pub use python::{
    Classification, Classified, PyAllocation, PyBlock, PyCache, PyCacheLine, PyEnd, PyFrame,
    PyHolder, PyView, Python,
};
pub use read::{DEFAULT_MAX_REPORT_BYTES, Document, LeakFold, LeakGroup, ReadError, Reports};
pub use text::Text;
pub use units::{escaped, human_bytes, needs_escape, one_line, push_escaped};
pub use versions::{Framework, Runtime, Versions};
pub use write::{to_vec, write};
