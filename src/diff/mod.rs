//! `cuguard diff BASE NEW`: what changed between two runs, site by site.
//!
//! Both sides are added up over all their processes (as in [`crate::summary::Summary`]); a
//! site is *new* when only NEW has it, *fixed* when only BASE has it, *grown* when NEW has more
//! bytes (or as many bytes and more leaks), *shrunk* when fewer, else *unchanged*. Events are
//! compared by kind. The [`Diff`] and how two summaries are compared are `model.rs`'s (its types
//! re-exported here). Output formats, one per file, listed in [`FORMATS`]: [`text`], [`json`]
//! (whose [`json::Json`] describes the JSON), [`markdown`]; each reads the model, not this file.

pub mod json;
pub mod markdown;
mod model;
pub mod text;

pub use model::{Change, Diff, EventChange, Side, SiteChange};

use crate::output::{Registry, Row};

/// The formats of `cuguard diff --format`, the default first (see [`crate::output`]).
pub const FORMATS: Registry<Diff> = Registry::new(&[
    Row::of::<text::Text>(),
    Row::of::<json::Json>(),
    Row::of::<markdown::Markdown>(),
]);
