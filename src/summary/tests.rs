//! Snapshot tests of the summary formats on the hand-written fixtures.

use std::path::PathBuf;

use super::{ReportSummary, Summary};
use crate::format::{Format, Options};
use crate::input::{Source, map_reports};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn summarize(names: &[&str], top: usize) -> Summary {
    let files: Vec<PathBuf> = names.iter().map(|n| fixture(n)).collect();
    let processes = map_reports(&files, |src: &Source, r| {
        let src = Source {
            path: PathBuf::from(src.path.file_name().unwrap()),
            index: src.index,
        };
        ReportSummary::new(&src, &r, top)
    })
    .unwrap();
    Summary::new(processes.into_iter().map(|(_, s)| s).collect(), top)
}

fn text(summary: &Summary) -> String {
    let mut out = Vec::new();
    super::text::Text::write(summary, &mut out, &Options::default()).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn text_of_one_report() {
    let got = text(&summarize(&["leaks-two-contexts.json"], 10));
    println!("{got}");
    assert_eq!(got, include_str!("snapshots/leaks-two-contexts.txt"));
}

#[test]
fn text_of_several_reports_has_totals_and_overall_sites() {
    let got = text(&summarize(
        &["leaks-two-contexts.json", "events.json", "incomplete.json"],
        2,
    ));
    let head: Vec<&str> = got.lines().take(5).collect();
    assert_eq!(
        head,
        [
            "3 reports (2 complete), leaked 2.0 GiB in 8 leaks, 11 events",
            "sites across all reports (largest first)",
            "  2.0 GiB  2 leaks  1 process  <no stack>",
            "  8.0 MiB  2 leaks  1 process  make_buffers (train.c:42)",
            "  … 3 more sites (see --top)",
        ]
    );
    assert!(got.contains("INCOMPLETE, cut short by a signal"));
    assert!(got.contains("\n  2  double_free\n"));
    assert!(got.contains("shim faults\n  report directory not writable"));
    assert!(!got.contains('\x1b'), "no colour when plain");
}

#[test]
fn totals_per_device_and_context() {
    let s = summarize(&["leaks-two-contexts.json"], 10);
    let p = &s.processes[0];
    assert_eq!((p.leaked_bytes, p.leaks), (15_729_152, 5));
    assert_eq!(p.released_by_context_destroy, 1);
    let devices: Vec<(u32, u64, u64)> = p
        .devices
        .iter()
        .map(|d| (d.device, d.leaked_bytes, d.leaks))
        .collect();
    assert_eq!(devices, [(0, 11_534_848, 4), (1, 4_194_304, 1)]);
    let contexts: Vec<(Option<u32>, u64)> =
        p.contexts.iter().map(|c| (c.context, c.leaks)).collect();
    assert_eq!(contexts, [(Some(1), 4), (Some(2), 1)]);
    let sites: Vec<&str> = p.sites.iter().map(|s| s.site.as_str()).collect();
    assert_eq!(
        sites,
        ["make_buffers", "libscratch.so+0x1a2b", "worker_loop"]
    );
}

#[test]
fn top_limits_lists_but_not_totals() {
    let s = summarize(&["leaks-two-contexts.json"], 1);
    let p = &s.processes[0];
    assert_eq!(p.sites.len(), 1);
    assert_eq!(p.sites_total, 3);
    assert_eq!(p.largest_leaks.len(), 1);
    assert_eq!(p.largest_leaks[0].size, 8 << 20);
    assert_eq!(p.leaks, 5);
}

#[test]
fn markdown_escapes_and_lists_sites() {
    let mut out = Vec::new();
    let summary = summarize(&["leaks-two-contexts.json"], 10);
    super::markdown::Markdown::write(&summary, &mut out, &Options::default()).unwrap();
    let md = String::from_utf8(out).unwrap();
    assert!(md.starts_with("## cuguard summary\n"));
    assert!(md.contains(
        "| 8.0 MiB | 2 | make\\_buffers (train.c:42) | cuMemAllocManaged, cuMemAlloc\\_v2 |"
    ));
}

#[test]
fn dropped_events_are_mentioned() {
    let json = std::fs::read_to_string(fixture("events.json")).unwrap();
    let json = json.replacen('{', "{\"events_dropped\": 7,", 1);
    let doc = crate::report::Document::from_bytes("e.json".as_ref(), json.into_bytes()).unwrap();
    let report = doc.into_reports().next().unwrap().unwrap();
    let source = Source {
        path: "e.json".into(),
        index: None,
    };
    let s = Summary::new(vec![ReportSummary::new(&source, &report, 3)], 3);
    assert_eq!(s.processes[0].events_dropped, 7);
    assert!(text(&s).contains("\n  and 7 events the shim did not keep\n"));
}
