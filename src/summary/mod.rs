//! The summary: per process, what leaked where (device, context, site) and who holds it (by
//! owner), the largest leaks, the events; what each out-of-memory refusal saw, what was live at
//! each device's peak, what grew, and what the device says is used against what cuguard can
//! explain; and across processes, the sites that leaked most and bytes by owner.
//!
//! [`ReportSummary::new`] condenses one [`Report`](cuguard_format::Report) (`report.rs`; it runs
//! in the input workers, so only the condensed form outlives the report); [`Summary::new`]
//! combines them into a [`Summary`] (`model.rs`), and [`SummaryFold`] (`fold.rs`) one process at a
//! time, as they are read. The sites across processes are added up in [`overall`], the job in
//! [`groups`]. The sections on who held memory and when are in [`attribution`]; cuguard's own
//! cost in words ([`cost_line`], [`cost_short`]) in `cost.rs`. The output formats live one per
//! file, [`text`], [`json`] (whose [`json::Json`] describes the JSON format) and [`markdown`],
//! each written in three parts ([`Sections`], `sections.rs`), and are listed in [`FORMATS`],
//! each with its [`Parts`] (its sections and its answer to `--at`); every format renders every
//! section.

pub mod attribution;
mod cost;
mod fold;
pub mod groups;
pub mod json;
pub mod markdown;
mod model;
pub mod moment;
pub mod overall;
pub mod phases;
pub mod python;
mod report;
mod sections;
pub mod tags;
pub mod text;

use crate::output::{Format, Registry, Row};

pub use cost::{cost_line, cost_short};
pub use fold::SummaryFold;
pub use model::Summary;
pub use overall::OverallSite;
pub use report::{
    CHAIN_SITES, ContextSummary, DeviceSummary, EventCount, LeakLine, ProcessInfo, ReportSummary,
    SiteSummary, count_events,
};
pub use sections::{SectionWriters, Sections, write_in_sections};

/// The formats of `cuguard summary --format`, the default first (see [`crate::output`]), each
/// with its [`Parts`]: a [`crate::output::Format`] (its name and whole writer), [`Sections`] (its
/// parts, written as the processes come) and [`moment::MomentFormat`] (its answer to `--at` and
/// `--between`). The command's value parser.
pub const FORMATS: Registry<Summary, Parts> = Registry::new(&[
    row::<text::Text>(),
    row::<json::Json>(),
    row::<markdown::Markdown>(),
]);

/// What a summary format writes besides a whole summary, as its row in [`FORMATS`] holds it.
#[derive(Clone, Copy, Debug)]
pub struct Parts {
    /// The summary in three parts, processes written as they are read (see [`Sections`]).
    pub sections: SectionWriters,
    /// One process's history asked for a moment or a window (see [`moment`]).
    pub moment: moment::MomentWriter,
    /// One process's history by phase (see [`phases`]).
    pub phases: phases::PhasesWriter,
    /// Reports' leaks, or a history's moment or window, by tag (see [`tags`]).
    pub tags: tags::TagsWriter,
}

/// The row of format `F`, with its parts.
const fn row<
    F: Format<Summary> + Sections + moment::MomentFormat + phases::PhasesFormat + tags::TagsFormat,
>() -> Row<Summary, Parts> {
    Row::with::<F>(Parts {
        sections: (F::head, F::process, F::tail),
        moment: F::moment,
        phases: F::phases,
        tags: F::tags,
    })
}

/// The three parts of the format named `name`, one of [`FORMATS`].
pub fn sections(name: &str) -> Option<SectionWriters> {
    FORMATS.get(name).map(|row| row.parts().sections)
}

#[cfg(test)]
mod tests;
