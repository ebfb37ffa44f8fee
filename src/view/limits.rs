//! The page's bounds: how many points, charts, markers, growth lines, processes, timelines and
//! phases `cuguard view` draws or lists at most, whatever the number of processes.

/// Most points kept per device timeline.
pub const MAX_POINTS: usize = 2000;
/// Most timeline charts on a page; also the most growth charts.
pub const MAX_CHARTS: usize = 32;
/// Flame-graph nodes narrower than total/`MIN_FRACTION` are left out.
pub const MIN_FRACTION: u64 = 1000;
/// How many out-of-memory records, and sites in each out-of-memory and peak breakdown, a
/// process keeps for the page (as `cuguard summary --top` does).
pub const SECTION_TOP: usize = 10;
/// Most processes whose out-of-memory records, peaks and growing sites the page lists.
pub const MAX_PROCESS_ENTRIES: usize = 32;
/// Most markers (the peak, out-of-memory refusals) on one timeline chart.
pub const MAX_MARKERS: usize = 64;
/// Most lines on a growth chart.
pub const MAX_GROWTH_LINES: usize = 8;
/// Most points per line on a growth chart (the shim keeps at most 256 sample times).
pub const MAX_GROWTH_POINTS: usize = 256;
/// Most active-memory timelines on a page.
pub const MAX_TIMELINES: usize = 8;
/// Most phases (NVTX ranges, `cuguard.phase`s) drawn on an active-memory timeline.
pub const MAX_PHASES: usize = 2000;
/// Most lanes of phases above an active-memory timeline.
pub const MAX_PHASE_LANES: usize = 16;

/// Up to this many processes, the page lists every one (as it always did); beyond, the
/// [`TOP_PROCESSES`] that leaked most, the others added up and kept in the page's compressed
/// part.
pub const MAX_LISTED: usize = 100;
/// How many processes a page of more than [`MAX_LISTED`] lists.
pub const TOP_PROCESSES: usize = 25;
