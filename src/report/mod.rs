//! Reports: the model (the `cuguard-report` crate's types, re-exported here) and the reader.
//!
//! One report describes one process (see `../shared/REPORT.md` for the contract and
//! `docs/report.schema.json` for the machine-checked form). A *merged* report, written by
//! `cuguard merge`, holds several of them verbatim in a `processes` array under the same schema
//! name and version; [`Document`] reads both shapes and hands out one [`Report`] per process.
//!
//! Reading is lenient where the contract allows growth: unknown fields are ignored, fields added
//! after the first contract (`config`, `modules`, `faults`, `doors`, `timeline`, `owners`,
//! `peaks`, `stack_samples`, `ooms`, `reconciliation`, …) may be absent,
//! and enumerations keep values this version does not know (`Other`). Anything that is not a
//! schema-version-1 report is refused with a [`ReadError`] whose message is one line.
//!
//! [`fold`] folds a report's leaks while it is parsed, for the commands that read millions. The
//! reader parses `leaks` and `stacks` by hand where it can (`fast`), with serde_json's result.

mod fast;
pub mod fold;
mod read;

pub use cuguard_report::{
    Addr, Config, Context, Cost, CostGrowth, CostReports, CostTiming, CostUnwind, Device,
    DeviceStats, Doors, Driver, Event, EventKind, Explained, Frame, HeldClass, Leak, LeakState,
    Memory, MixedRef, Module, OomPool, OomRecord, OwnerBytes, OwnerInfo, PeakRecord, PoolStats,
    Process, PyAllocation, PyBlock, PyCache, PyEnd, PyFrame, PyHolder, PyView, Python, Reason,
    Reconciliation, Report, SCHEMA_NAME, SCHEMA_VERSION, Sample, Signal, Stack, StackBytes,
    StackSamples, StackSeries, StackSite, Stats, Timeline, Tool,
};
pub use fold::{LeakFold, LeakGroup};
pub use read::{DEFAULT_MAX_REPORT_BYTES, Document, ReadError, Reports};

#[cfg(test)]
mod tests;
