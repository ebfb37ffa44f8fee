//! `cuguard check`: the CI gate. Reads reports, drops what suppressions cover, compares with a
//! baseline when given, and decides pass or fail against the limits.
//!
//! The rule, in order:
//! 1. every leak and event is charged to its site ([`crate::sites`]), and every leak to its
//!    owner ([`crate::owners`]);
//! 2. leaks and events matched by a suppression ([`suppressions`]) are set aside and counted;
//! 3. leaks whose owner is not checked are set aside and counted by owner: by default only the
//!    program's own leaks are checked (owners of kind `program`, and leaks without a known
//!    owner); `--owners` adds owner ids or kinds, or `all`
//!    ([`OwnerFilter`](crate::owners::OwnerFilter));
//! 4. with a baseline, a site's leaks *count* only where the site is new, or has grown (more
//!    bytes or more leaks than in the baseline; then only the growth counts); events likewise
//!    per kind and site; without a baseline everything left counts;
//! 5. the check fails when the counted bytes exceed `--max-leaked-bytes` or the counted leaks
//!    exceed `--max-leaks` (see [`Limits`]: with neither given both are 0, so any leak fails;
//!    with one given the other is not limited), when a site of a checked owner grew by more
//!    than `--max-growth` in one process ([`crate::growth`]; off unless given; baselines and
//!    suppressions do not apply to growth), when counted events of a failing kind remain
//!    (`--fail-on-events`, by default `double_free`, `invalid_free`, `free_in_wrong_context`),
//!    or, with `--require-complete`, when a report is incomplete;
//! 6. with `--max-peak-growth` and a baseline, when the run's peak (with `--by phase`, a phase
//!    occurrence's) grew past it ([`peaks`]: each side one process with a history, or merged
//!    reports judged rank by rank).
//!
//! [`ProcessCheck::new`] condenses one report (in the input workers; `condense.rs`, with what a
//! Python program's end view counts in `end.rs`); [`CheckFold`] (`fold.rs`, with the
//! [`Baseline`]) adds the processes up one at a time, in compact tables and a log of the
//! processes ([`kept`]), and decides; [`Verdict::new`] does both for processes in memory. The
//! [`Verdict`] and the [`Limits`] it applies are in `verdict.rs`, its entries (sites, growth,
//! events, processes, rules) in `entries.rs`. Output formats, one per file, listed in
//! [`FORMATS`] with what each [`Needs`] condensed: [`text`], [`json`] (whose [`json::Json`]
//! describes the JSON), [`junit`], [`sarif`] and [`github`] (these two point at the user's code:
//! [`places`]; the SARIF log's frame and the workflow commands are shared with `cuguard diff`:
//! [`sarif_log`], [`github::command`]).

mod condense;
mod end;
mod entries;
mod fold;
pub mod github;
pub mod json;
pub mod junit;
pub mod kept;
pub mod peaks;
pub mod places;
pub mod sarif;
pub mod sarif_log;
pub mod suppressions;
pub mod text;
mod verdict;

use crate::output::{Registry, Row};

pub use condense::{Condense, ProcessCheck, SiteLeaks, SuppressedSite};
pub use entries::{
    EventVerdict, GrowthNotTold, GrowthVerdict, HeldAtEnd, ProcessVerdict, RuleUse, SiteStatus,
    SiteVerdict, SuppressedFinding,
};
pub use fold::{Baseline, CheckFold};
pub use verdict::{DEFAULT_FAILING_EVENTS, FailingEvents, Limits, Verdict};

/// The formats of `cuguard check --format`, the default first (see [`crate::output`]), each with
/// what it [`Needs`] condensed: the command's value parser.
pub const FORMATS: Registry<Verdict, Needs> = Registry::new(&[
    Row::with::<text::Text>(Needs::VERDICT),
    Row::with::<json::Json>(Needs::VERDICT),
    Row::with::<junit::Junit>(Needs::VERDICT),
    Row::with::<sarif::Sarif>(Needs::PLACES),
    Row::with::<github::Github>(Needs::PLACES),
]);

/// What a check format needs condensed from each report besides what every format reads: the
/// parts of its row in [`FORMATS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// Where each site is in the source ([`Condense::places`]): for the formats that point at
    /// the user's code.
    pub places: bool,
}

impl Needs {
    /// The verdict alone.
    const VERDICT: Needs = Needs { places: false };
    /// The verdict and where each site is in the source.
    const PLACES: Needs = Needs { places: true };
}

#[cfg(test)]
mod tests;
