//! Reports, as `cuguard` names them: the `cuguard-format` crate's model and reader, re-exported
//! here (the crate holds the types, the reader and the leak fold; `docs/report.md` is the
//! contract and `docs/report.schema.json` its machine-checked form).

pub use cuguard_format::{
    Addr, Config, Context, Cost, CostGrowth, CostReports, CostTiming, CostUnwind,
    DEFAULT_MAX_REPORT_BYTES, Device, DeviceStats, Document, Doors, Driver, Event, EventKind,
    Explained, Frame, HeldClass, Leak, LeakFold, LeakGroup, LeakState, Memory, MixedRef, Module,
    OomPool, OomRecord, OwnerBytes, OwnerInfo, PeakRecord, PoolStats, Process, PyAllocation,
    PyBlock, PyCache, PyEnd, PyFrame, PyHolder, PyView, Python, ReadError, Reason, Reconciliation,
    Report, Reports, SCHEMA_NAME, SCHEMA_VERSION, Sample, Signal, Stack, StackBytes, StackSamples,
    StackSeries, StackSite, Stats, Timeline, Tool,
};
