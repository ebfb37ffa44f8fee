//! One entry point that runs untrusted bytes through everything that reads reports: the reader,
//! the summary, the check and the diff (each in every format of its registry), suppression
//! generation and the HTML view. The fuzz target (`fuzz/`), the property tests and the replay of
//! `tests/fixtures/hostile/` call it; it must never panic.

use std::path::Path;

use crate::check::suppressions::{Suppressions, combine, propose, write_file};
use crate::check::{Limits, ProcessCheck, Verdict};
use crate::diff::Diff;
use crate::input::Source;
use crate::output::{Options, Registry};
use crate::style::Style;
use crate::summary::{ReportSummary, Summary};
use crate::view::{ProcessView, View};
use cuguard_format::Document;

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
    let colour = Options {
        style: Style { color: true },
        top: 5,
        cost: true,
    };
    let plain = Options {
        style: Style::plain(),
        top: 5,
        cost: false,
    };
    write_all(crate::summary::FORMATS, &summary, &colour);
    let verdict = Verdict::new(&checks, None, &rules, Limits::default());
    write_all(crate::check::FORMATS, &verdict, &plain);
    write_all(
        crate::diff::FORMATS,
        &Diff::new(&summary, &summary),
        &colour,
    );
    let _ = write_file(&combine(proposals), n, sink);
    let _ = crate::view::html::write(&View::new(views, 5), sink);
    Ok(n)
}

/// Writes `value` in every format of `formats` (whatever the parts of their rows), into nothing.
fn write_all<T, P>(formats: Registry<T, P>, value: &T, options: &Options) {
    for format in formats.rows() {
        let _ = format.write(value, &mut std::io::sink(), options);
    }
}

#[cfg(test)]
mod tests;
