//! The program's names for its memory, command side: `summary --by tag`.
//!
//! A program tags what it allocates (`with cuguard.tag("kv_cache"):` in Python,
//! `cuguard_tag_push`/`cuguard_tag_pop` in C: every allocation the thread makes inside) or names
//! a live allocation after the fact (`cuguard.annotate`, `cuguard_annotate`). The report carries
//! the tag on each allocation (`leaks[].tag`, `python.view.allocations[].tag`), the history on
//! each block ([`cuguard_history::replay::Block::tag`], a name id).
//!
//! [`TagSummary`] is the answer, whatever it was asked of: a report's leaks (what was live at
//! exit; a Python program's at the end of its code, as `summary` reads it), or a history's blocks
//! live at a moment (`--at`) or kept over a window (`--between`). Each tag's bytes and
//! allocations, the largest first and the allocations without a tag last ([`UNTAGGED`]), each
//! with its sites (named as the summary names them). [`Tally`] adds the allocations up; it is
//! what one report condenses to in the input workers.

use std::collections::HashMap;

use cuguard_format::{Memory, Report};
use cuguard_history::replay::Block;
use serde::Serialize;

use crate::history::moment::Span;
use crate::history::{Loaded, stack_key};
use crate::sites::{Site, SiteIndex, SiteRef};

/// How the allocations without a tag are named for people.
pub const UNTAGGED: &str = "(untagged)";

/// `summary --by tag`'s answer (see the module's documentation).
#[derive(Clone, Debug, Serialize)]
pub struct TagSummary {
    /// The process (`train[4242]`), or how many (`3 processes`).
    pub process: String,
    /// `leaked` (reports: live at exit), `at` (a history at a moment) or `between` (what a
    /// history's window kept).
    pub question: &'static str,
    /// The moment asked (`--at`), milliseconds since the start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<f64>,
    /// The window asked (`--between`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_ms: Option<f64>,
    /// The phase asked about, for people (`step #3`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// What the history covers (a history's answer only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span: Option<Span>,
    /// Reports whose Python program's end of code was read (its end view) rather than its exit.
    #[serde(skip_serializing_if = "is_zero")]
    pub end_of_code: usize,
    /// Bytes and allocations in all.
    pub bytes: u64,
    pub allocations: u64,
    /// By tag: the most bytes first (ties by name), the allocations without a tag last.
    pub tags: Vec<TagRow>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One tag's part.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TagRow {
    /// The tag; `null` for the allocations without one.
    pub tag: Option<String>,
    pub bytes: u64,
    pub allocations: u64,
    /// Its sites, the most bytes first, at most `--top`.
    pub sites: Vec<TagSite>,
    /// How many sites it has.
    pub sites_total: usize,
}

impl TagRow {
    /// The tag for people: itself, or [`UNTAGGED`].
    pub fn name(&self) -> &str {
        self.tag.as_deref().unwrap_or(UNTAGGED)
    }
}

/// One site of a tag.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TagSite {
    #[serde(flatten)]
    pub site: SiteRef,
    pub bytes: u64,
    pub allocations: u64,
}

/// Allocations added up by tag and site: what a report condenses to, and what a history's
/// blocks are added into. Grows with the distinct (tag, site) pairs.
#[derive(Debug, Default)]
pub struct Tally {
    tags: HashMap<Option<String>, TagTally>,
}

#[derive(Debug, Default)]
struct TagTally {
    bytes: u64,
    allocations: u64,
    /// By site key: the site as first seen, bytes and allocations.
    sites: HashMap<String, (SiteRef, u64, u64)>,
}

impl Tally {
    /// Adds one allocation of `bytes` at `site`, tagged `tag`.
    pub fn add(&mut self, tag: Option<&str>, site: &Site, bytes: u64) {
        let t = self.tags.entry(tag.map(str::to_string)).or_default();
        t.bytes = t.bytes.saturating_add(bytes);
        t.allocations += 1;
        let s = t
            .sites
            .entry(site.key.clone())
            .or_insert_with(|| (SiteRef::from(site), 0, 0));
        s.1 = s.1.saturating_add(bytes);
        s.2 += 1;
    }

    /// Adds `other` in (another process's).
    pub fn merge(&mut self, other: Tally) {
        for (tag, o) in other.tags {
            let t = self.tags.entry(tag).or_default();
            t.bytes = t.bytes.saturating_add(o.bytes);
            t.allocations += o.allocations;
            for (key, (site, bytes, n)) in o.sites {
                let s = t.sites.entry(key).or_insert((site, 0, 0));
                s.1 = s.1.saturating_add(bytes);
                s.2 += n;
            }
        }
    }

    /// The rows (see [`TagSummary::tags`]), each with at most `top` sites; with the bytes and
    /// allocations in all.
    pub fn rows(self, top: usize) -> (Vec<TagRow>, u64, u64) {
        let mut rows: Vec<TagRow> = self
            .tags
            .into_iter()
            .map(|(tag, t)| {
                let mut sites: Vec<TagSite> = t
                    .sites
                    .into_values()
                    .map(|(site, bytes, allocations)| TagSite {
                        site,
                        bytes,
                        allocations,
                    })
                    .collect();
                sites.sort_by(|a, b| {
                    b.bytes
                        .cmp(&a.bytes)
                        .then(b.allocations.cmp(&a.allocations))
                        .then_with(|| a.site.label.cmp(&b.site.label))
                });
                let sites_total = sites.len();
                sites.truncate(top);
                TagRow {
                    tag,
                    bytes: t.bytes,
                    allocations: t.allocations,
                    sites,
                    sites_total,
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            a.tag
                .is_none()
                .cmp(&b.tag.is_none())
                .then(b.bytes.cmp(&a.bytes))
                .then_with(|| a.tag.cmp(&b.tag))
        });
        let bytes = rows.iter().map(|r| r.bytes).fold(0, u64::saturating_add);
        let allocations = rows.iter().map(|r| r.allocations).sum();
        (rows, bytes, allocations)
    }
}

/// One report condensed: its leaks by tag and site, or for a Python program whose end of code
/// was recorded, what was live then (as `summary` and the pprof export read it); and whether
/// that end was read.
pub fn of_report(report: &Report) -> (Tally, bool) {
    let sites = SiteIndex::new(report);
    let mut tally = Tally::default();
    let end_view = report
        .python
        .as_ref()
        .and_then(|py| py.view.as_ref())
        .filter(|v| v.at == "end");
    match end_view {
        Some(view) => {
            for a in view
                .allocations
                .iter()
                .filter(|a| a.memory != Memory::HostPinned)
            {
                tally.add(a.tag.as_deref(), &sites.site(a.stack), a.size);
            }
        }
        None => {
            for l in &report.leaks {
                tally.add(l.tag.as_deref(), &sites.site(l.stack), l.size);
            }
        }
    }
    (tally, end_view.is_some())
}

/// The answer for reports: `tally` added up over `processes` (their names when one).
pub fn of_reports(
    tally: Tally,
    processes: &[String],
    end_of_code: usize,
    top: usize,
) -> TagSummary {
    let (tags, bytes, allocations) = tally.rows(top);
    let process = match processes {
        [one] => one.clone(),
        all => crate::wording::plural(all.len() as u64, "process", "processes"),
    };
    TagSummary {
        process,
        question: "leaked",
        at_ms: None,
        from_ms: None,
        to_ms: None,
        phase: None,
        span: None,
        end_of_code,
        bytes,
        allocations,
        tags,
    }
}

/// The answer for a history's `blocks` (live at a moment, or kept over a window), pinned host
/// memory aside, as `--at` counts; `moment` is that moment's answer, whose question, times,
/// phase and span it takes.
pub fn of_blocks(
    loaded: &Loaded,
    blocks: &[&Block],
    moment: &crate::history::moment::Moment,
    top: usize,
) -> TagSummary {
    let sites = SiteIndex::new(&loaded.report);
    let mut tally = Tally::default();
    for b in blocks
        .iter()
        .filter(|b| b.memory != cuguard_format::MemoryKind::HostPinned)
    {
        let site = sites.site(stack_key(b.stack));
        tally.add(loaded.replay.tag_of(b), &site, b.size);
    }
    let (tags, bytes, allocations) = tally.rows(top);
    TagSummary {
        process: moment.process.clone(),
        question: moment.question,
        at_ms: moment.at_ms,
        from_ms: moment.from_ms,
        to_ms: moment.to_ms,
        phase: moment.phase.clone(),
        span: Some(moment.span.clone()),
        end_of_code: 0,
        bytes,
        allocations,
        tags,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(key: &str) -> Site {
        Site::placeholder(key.into())
    }

    #[test]
    fn tags_are_added_up_largest_first_and_the_untagged_last() {
        let mut a = Tally::default();
        a.add(Some("kv_cache"), &site("kv"), 64);
        a.add(None, &site("plain"), 1000);
        a.add(Some("weights"), &site("w"), 16);
        a.add(Some("kv_cache"), &site("kv"), 64);
        let mut b = Tally::default();
        b.add(Some("scratch"), &site("s"), 16);
        b.add(Some("kv_cache"), &site("kv2"), 8);
        a.merge(b);
        let (rows, bytes, allocations) = a.rows(1);
        let seen: Vec<(&str, u64, u64, usize)> = rows
            .iter()
            .map(|r| (r.name(), r.bytes, r.allocations, r.sites_total))
            .collect();
        assert_eq!(
            seen,
            [
                ("kv_cache", 136, 3, 2),
                // A tie is broken by name.
                ("scratch", 16, 1, 1),
                ("weights", 16, 1, 1),
                (UNTAGGED, 1000, 1, 1),
            ]
        );
        assert_eq!((bytes, allocations), (1168, 6));
        // At most `top` sites, the largest.
        assert_eq!(rows[0].sites.len(), 1);
        assert_eq!(rows[0].sites[0].site.site, "kv");
        assert_eq!(
            (rows[0].sites[0].bytes, rows[0].sites[0].allocations),
            (128, 2)
        );
    }
}
