//! One entry point that runs untrusted bytes through everything that reads reports: the reader,
//! the summary (and its three formats), the check (and its three formats), suppression
//! generation and the HTML view. The fuzz target (`fuzz/`), the property tests and the replay of
//! `tests/fixtures/hostile/` call it; it must never panic.

use std::path::Path;

use crate::check::suppressions::{Suppressions, combine, propose, write_file};
use crate::check::{Limits, ProcessCheck, Verdict};
use crate::input::Source;
use crate::report::Document;
use crate::style::Style;
use crate::summary::{ReportSummary, Summary};
use crate::view::{ProcessView, View};

/// Reads `data` as a report file and, if it is one, produces every output from it. Returns the
/// number of processes read, or the reader's one-line refusal.
pub fn exercise(data: &[u8]) -> Result<usize, String> {
    let doc = Document::from_bytes(Path::new("fuzz.json"), data.to_vec()).map_err(|e| {
        let text = e.to_string();
        assert!(!text.contains('\n'), "one-line errors");
        text
    })?;
    let source = Source {
        path: "fuzz.json".into(),
        index: None,
    };
    let mut summaries = Vec::new();
    let mut checks = Vec::new();
    let mut views = Vec::new();
    let mut proposals = Vec::new();
    let rules = Suppressions::parse(
        "fuzz",
        "leak:main\nevent:double_free frame:*\napi:cuMemAllocHost*",
    )
    .map_err(|e| e.to_string())?;
    for report in doc.into_reports() {
        let report = report.map_err(|e| e.to_string())?;
        summaries.push(ReportSummary::new(&source, &report, 3));
        checks.push(ProcessCheck::new(&source, &report, &rules));
        views.push(ProcessView::new(&source, &report));
        proposals.extend(propose(&report));
    }
    let n = summaries.len();
    let summary = Summary::new(summaries, 3);
    let sink = &mut std::io::sink();
    let _ = crate::summary::text::write(&summary, sink, Style { color: true });
    let _ = crate::summary::json::write(&summary, sink);
    let _ = crate::summary::markdown::write(&summary, sink);
    let verdict = Verdict::new(&checks, None, &rules, Limits::default());
    let _ = crate::check::text::write(&verdict, sink, Style::plain(), 5);
    let _ = crate::check::json::write(&verdict, sink);
    let _ = crate::check::junit::write(&verdict, sink);
    let _ = write_file(&combine(proposals), n, sink);
    let _ = crate::view::html::write(&View::new(views, 5), sink);
    Ok(n)
}
