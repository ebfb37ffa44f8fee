//! `cuguard diff BASE NEW`: what changed between two runs, site by site.
//!
//! Both sides are added up over all their processes (as in [`crate::summary::Summary`]); a
//! site is *new* when only NEW has it, *fixed* when only BASE has it, *grown* when NEW has more
//! bytes (or as many bytes and more leaks), *shrunk* when fewer, else *unchanged*. Events are
//! compared by kind. The [`Diff`] and how two summaries are compared are `model.rs`'s (its types
//! re-exported here). Output formats, one per file, listed in [`FORMATS`] with what each
//! [`Needs`] read: [`text`], [`json`] (whose [`json::Json`] describes the JSON), [`markdown`],
//! [`sarif`] and [`github`] (these two point at the user's code, with `cuguard check`'s SARIF log
//! and workflow commands: [`crate::check::sarif_log`]); each reads the model, not this file.

pub mod github;
pub mod json;
pub mod markdown;
mod model;
pub mod sarif;
pub mod text;

pub use model::{Change, Diff, EventChange, Side, SiteChange, leak_places};

use crate::output::{Registry, Row};

/// The formats of `cuguard diff --format`, the default first (see [`crate::output`]), each with
/// what it [`Needs`] read: the command's value parser.
pub const FORMATS: Registry<Diff, Needs> = Registry::new(&[
    Row::with::<text::Text>(Needs::SUMMARIES),
    Row::with::<json::Json>(Needs::SUMMARIES),
    Row::with::<markdown::Markdown>(Needs::SUMMARIES),
    Row::with::<sarif::Sarif>(Needs::PLACES),
    Row::with::<github::Github>(Needs::PLACES),
]);

/// What a diff format needs read from NEW's reports besides the two summaries: the parts of its
/// row in [`FORMATS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// Where each leak site is in the source ([`leak_places`], into [`Diff::places`]): for the
    /// formats that point at the user's code.
    pub places: bool,
}

impl Needs {
    /// The summaries alone.
    const SUMMARIES: Needs = Needs { places: false };
    /// The summaries and where NEW's leak sites are in the source.
    const PLACES: Needs = Needs { places: true };
}
