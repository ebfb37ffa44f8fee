//! `cuguard view`: one self-contained HTML page (no network) with what each out-of-memory
//! refusal saw, device memory over time per device (live and reserved, from each report's
//! `timeline`, its peak and out-of-memory moments marked), what was live at each device's peak,
//! what grows (the top sites' live bytes over time, from `stack_samples`), bytes held at exit by
//! owner, the top sites table, and a flame graph of leaked bytes by stack in the mixed native and
//! Python order.
//!
//! [`ProcessView::new`] condenses one report in the input workers: its summary (the sections on
//! who held memory and when come from [`crate::summary::attribution`] and [`crate::growth`], as
//! `cuguard summary` prints them), timelines downsampled to at most [`MAX_POINTS`] points per
//! device (keeping peaks), the top sites' series over time ([`GrowthChart`]), and stacks reduced
//! to frame-name paths ([`flame_path`]). [`View::new`] combines them; [`html::write`] writes the
//! page; with several processes, [`processes`] writes the per-process view.
//!
//! Its files import one another, never this one, which declares them and re-exports what the
//! rest of the crate names: `limits.rs`, the page's bounds ([`MAX_POINTS`], [`MAX_LISTED`], …);
//! `model.rs`, what the page draws ([`View`], [`Chart`], [`GrowthChart`], the flame graph's
//! [`Node`]); `condense.rs`, [`ProcessView`] and its parts; [`fold`], the [`View`] built one
//! process at a time (and [`View::new`]); [`html`], with `escape.rs`, the page; [`processes`],
//! the per-process view; [`timeline`], a history's active-memory timeline, and [`phases`], the
//! program's phases drawn above it.

mod condense;
mod escape;
pub mod fold;
pub mod html;
mod limits;
mod model;
pub mod phases;
pub mod processes;
pub mod timeline;

pub use condense::{ProcessView, flame_path};
pub use limits::{
    MAX_CHARTS, MAX_GROWTH_LINES, MAX_GROWTH_POINTS, MAX_LISTED, MAX_MARKERS, MAX_PHASE_LANES,
    MAX_PHASES, MAX_POINTS, MAX_PROCESS_ENTRIES, MAX_TIMELINES, MIN_FRACTION, SECTION_TOP,
    TOP_PROCESSES,
};
pub use model::{Chart, GrowthChart, GrowthLine, Marker, Node, View};

#[cfg(test)]
mod tests;
