//! `summary --by tag`: the program's tags ([`crate::tags::TagSummary`]) as text, Markdown or
//! JSON: each summary format's [`TagsFormat`]. Of reports, what leaked; of a history with `--at`
//! or `--between`, what was live or kept, with the history's span as `--at` says it.
//!
//! ```text
//! == r.json  tag_steps[3493]
//! leaked: 98.0 MiB in 6 allocations, by tag
//!   kv_cache     64.0 MiB  2 allocations
//!     64.0 MiB  2 allocations  kv_site (tag_steps.c:50)
//!   weights      16.0 MiB  1 allocation
//!     16.0 MiB  1 allocation  weights_site (tag_steps.c:47)
//!   (untagged)    2.0 MiB  1 allocation
//!     2.0 MiB  1 allocation  plain_site (tag_steps.c:48)
//! ```
//!
//! JSON: the answer's fields with `source` first: `process`, `question` (`leaked`, `at`,
//! `between`), `at_ms`/`from_ms`/`to_ms` and `phase` (a history's), `span` (as `--at`'s JSON
//! has it, a history's), `end_of_code` (reports read at a Python program's end of code, when
//! any), `bytes`, `allocations`, and `tags[]`: `{tag (null: the allocations without one), bytes,
//! allocations, sites[] {site, label, location, kind, bytes, allocations}, sites_total}`, the
//! most bytes first and the untagged last.

use std::io::{self, Write};

use super::moment::{Asked, window_headline};
use crate::output::Options;
use crate::style::Table;
use crate::tags::{TagRow, TagSummary};
use crate::wording::{bytes, one_line, plural};

/// A summary format's answer to `--by tag`: every format of [`super::FORMATS`] is one.
pub trait TagsFormat {
    /// Writes `s`, asked of `source`. Of `options`, only the style applies.
    fn tags(s: &TagSummary, source: &str, out: &mut dyn Write, options: &Options)
    -> io::Result<()>;
}

/// A [`TagsFormat`]'s writer, as a row holds it.
pub type TagsWriter = fn(&TagSummary, &str, &mut dyn Write, &Options) -> io::Result<()>;

impl TagsFormat for super::text::Text {
    fn tags(s: &TagSummary, source: &str, out: &mut dyn Write, o: &Options) -> io::Result<()> {
        text(s, source, out, o)
    }
}

impl TagsFormat for super::markdown::Markdown {
    fn tags(s: &TagSummary, source: &str, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        markdown(s, source, out)
    }
}

impl TagsFormat for super::json::Json {
    fn tags(s: &TagSummary, source: &str, out: &mut dyn Write, _: &Options) -> io::Result<()> {
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            source: &'a str,
            #[serde(flatten)]
            tags: &'a TagSummary,
        }
        serde_json::to_writer_pretty(&mut *out, &Doc { source, tags: s })?;
        writeln!(out)
    }
}

/// An allocation count for people.
fn allocations(n: u64) -> String {
    plural(n, "allocation", "allocations")
}

/// The headline: what was asked, the total, by tag (and a history's span).
fn headline(s: &TagSummary) -> String {
    if let Some(span) = &s.span {
        let asked = Asked {
            at_ms: s.at_ms,
            from_ms: s.from_ms,
            to_ms: s.to_ms,
            phase: s.phase.as_deref(),
        };
        return window_headline(&asked, span, s.bytes, s.allocations, ", by tag");
    }
    let end = match s.end_of_code {
        0 => String::new(),
        n => format!(
            " (live at exit; for {} of a Python program, at the end of its code)",
            plural(n as u64, "report", "reports")
        ),
    };
    format!(
        "leaked{end}: {} in {}, by tag",
        bytes(s.bytes),
        allocations(s.allocations)
    )
}

/// What to say when nothing carries a tag.
const NO_TAGS: &str = "none of them carries a tag: name memory with `with cuguard.tag(\"NAME\"):` \
     (Python) or cuguard_tag_push/cuguard_tag_pop (C), or a live allocation with cuguard.annotate";

fn text(s: &TagSummary, source: &str, out: &mut dyn Write, o: &Options) -> io::Result<()> {
    let style = o.style;
    writeln!(
        out,
        "{}",
        style.bold(&format!(
            "== {}  {}",
            one_line(source),
            one_line(&s.process)
        ))
    )?;
    writeln!(out, "{}", headline(s))?;
    if s.tags.is_empty() {
        writeln!(out, "  nothing")?;
        return Ok(());
    }
    let mut heads = Table::new(&[false, true, false]);
    for r in &s.tags {
        heads.row([
            one_line(r.name()),
            bytes(r.bytes),
            allocations(r.allocations),
        ]);
    }
    let heads = heads.render("  ");
    for (r, head) in s.tags.iter().zip(heads.lines()) {
        writeln!(out, "{}", style.bold(head))?;
        let mut t = Table::new(&[true, false, false]);
        for site in &r.sites {
            t.row([
                bytes(site.bytes),
                allocations(site.allocations),
                one_line(&site.site.label),
            ]);
        }
        write!(out, "{}", t.render("    "))?;
        more_text(r, out)?;
    }
    if s.tags.iter().all(|r| r.tag.is_none()) {
        writeln!(out, "  {NO_TAGS}")?;
    }
    Ok(())
}

/// `… 3 more sites (see --top)` under a tag whose sites were not all listed.
fn more_text(r: &TagRow, out: &mut dyn Write) -> io::Result<()> {
    if r.sites_total > r.sites.len() {
        writeln!(
            out,
            "    … {} (see --top; 0 lists all)",
            plural(
                (r.sites_total - r.sites.len()) as u64,
                "more site",
                "more sites"
            )
        )?;
    }
    Ok(())
}

fn markdown(s: &TagSummary, source: &str, out: &mut dyn Write) -> io::Result<()> {
    use super::markdown::cell;
    writeln!(
        out,
        "### {} `{}`\n",
        cell(&s.process),
        one_line(source).replace('`', "'")
    )?;
    writeln!(out, "{}\n", cell(&headline(s)))?;
    if s.tags.is_empty() {
        writeln!(out, "Nothing.")?;
        return Ok(());
    }
    writeln!(out, "| tag | bytes | allocations | sites |")?;
    writeln!(out, "|---|---:|---:|---|")?;
    for r in &s.tags {
        let mut sites: Vec<String> = r
            .sites
            .iter()
            .map(|site| format!("{} {}", cell(&site.site.label), bytes(site.bytes)))
            .collect();
        if r.sites_total > r.sites.len() {
            sites.push(format!("… {} more", r.sites_total - r.sites.len()));
        }
        writeln!(
            out,
            "| {} | {} | {} | {} |",
            cell(r.name()),
            bytes(r.bytes),
            r.allocations,
            sites.join("<br>")
        )?;
    }
    if s.tags.iter().all(|r| r.tag.is_none()) {
        writeln!(out, "\n{}", cell(NO_TAGS))?;
    }
    Ok(())
}
