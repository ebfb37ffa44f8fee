//! Snapshot tests of the summary formats on the hand-written fixtures.

use std::path::PathBuf;

use super::{ReportSummary, Summary};
use crate::input::{Source, map_reports};
use crate::output::{Format, Options};

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
    text_with(summary, Options::default())
}

fn text_with(summary: &Summary, options: Options) -> String {
    let mut out = Vec::new();
    super::text::Text::write(summary, &mut out, &options).unwrap();
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
    let doc = cuguard_format::Document::from_bytes("e.json".as_ref(), json.into_bytes()).unwrap();
    let report = doc.into_reports().next().unwrap().unwrap();
    let source = Source {
        path: "e.json".into(),
        index: None,
    };
    let s = Summary::new(vec![ReportSummary::new(&source, &report, 3)], 3);
    assert_eq!(s.processes[0].events_dropped, 7);
    assert!(text(&s).contains("\n  and 7 events the shim did not keep\n"));
}

#[test]
fn text_of_every_section() {
    let got = text(&summarize(&["attribution.json"], 10));
    println!("{got}");
    assert_eq!(got, include_str!("snapshots/attribution.txt"));
}

#[test]
fn sections_start_a_line_and_come_in_order() {
    let got = text(&summarize(&["attribution.json"], 10));
    let headings: Vec<&str> = got
        .lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with("=="))
        .map(|l| l.split("  ").next().unwrap())
        .collect();
    assert_eq!(
        headings,
        [
            "leaked",
            "sites (largest first)",
            "by owner",
            "out of memory",
            "process",
            "command",
            "report",
            "largest leaks",
            "at the peak",
            "growing",
            "device memory",
            "events"
        ]
    );
    // Each entry names its site's location once.
    for line in got.lines().filter(|l| l.contains("(train.py:7)")) {
        assert_eq!(line.matches("train.py:7").count(), 1, "{line}");
    }
}

#[test]
fn owners_peaks_growth_and_reconciliation() {
    let s = summarize(&["attribution.json", "leaks-two-contexts.json"], 10);
    let p = &s.processes[0];
    let owners: Vec<(&str, u64, u64)> = p
        .owners
        .iter()
        .map(|o| (o.owner.as_str(), o.bytes, o.count))
        .collect();
    assert_eq!(
        owners,
        [
            ("pytorch_caching_allocator", 22 << 20, 2),
            ("cublas", 4 << 20, 1),
            ("program", (1 << 20) + (512 << 10), 2)
        ]
    );
    // All reports: the other report's leaks are all the program's.
    let program = s.owners.iter().find(|o| o.owner == "program").unwrap();
    assert_eq!(program.bytes, (1 << 20) + (512 << 10) + 15_729_152);
    assert_eq!(s.processes[1].owners.len(), 1);

    assert_eq!(p.ooms.len(), 1);
    assert_eq!(p.ooms_dropped, 2);
    let oom = &p.ooms[0];
    assert_eq!(oom.site.label, "append_batch (train.py:7)");
    assert_eq!(oom.by_owner[0].owner, "program");
    assert_eq!(oom.sites.len(), 4);

    // The last record of the device, not the first.
    assert_eq!(p.peaks.len(), 1);
    assert_eq!(p.peaks[0].time_ms, 9100);
    assert_eq!(p.peaks[0].sites[0].bytes, 384 << 20);
    assert_eq!(p.peaks[0].sites[0].allocations, 96);
    let temporary = p.peaks[0]
        .sites
        .iter()
        .find(|s| s.site.label == "step (train.py:12)");
    assert!(temporary.is_some(), "the temporary is named at the peak");

    // The list grows; the temporary, the cache's segment and the workspace do not.
    let growing: Vec<(&str, u64)> = p
        .growing
        .iter()
        .map(|g| (g.label.as_str(), g.growth.grown_bytes))
        .collect();
    assert_eq!(growing, [("append_batch (train.py:7)", 384 << 20)]);
    assert_eq!(
        (p.growing[0].growth.from_ms, p.growing[0].growth.to_ms),
        (3000, 9000)
    );

    let used: Vec<(u32, Option<u64>, Option<&str>)> = p
        .reconciliation
        .iter()
        .map(|r| (r.device, r.used_bytes, r.used_by))
        .collect();
    assert_eq!(
        used,
        [
            (0, Some(1 << 30), Some("device")),
            (1, Some(300 << 20), Some("process"))
        ]
    );
    assert_eq!(
        p.reconciliation[0].framework_cache_label,
        "PyTorch's caching allocator"
    );
}

#[test]
fn sites_name_their_kind_and_their_mixed_stack() {
    let s = summarize(&["attribution.json"], 10);
    let p = &s.processes[0];
    let labels: Vec<&str> = p.sites.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "forward (model.py:40)",
            "framework: at::cuda::getCurrentCUDABlasHandle (CublasHandlePool.cpp:120)",
            "on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520)",
            "cache_embeddings (train.py:25)"
        ]
    );
    assert_eq!(
        p.sites[3].stack,
        [
            "at::native::empty_cuda (EmptyTensor.cpp:51)",
            "cache_embeddings (train.py:25)",
            "<module> (train.py:30)"
        ]
    );
    assert!(p.sites[0].stack.is_empty(), "one frame left: no chain");
    assert_eq!(
        p.growing[0].stack,
        [
            "at::native::empty_cuda (EmptyTensor.cpp:51)",
            "torch::autograd::THPVariable_ones",
            "append_batch (train.py:7)",
            "train (train.py:20)",
            "<module> (train.py:30)"
        ]
    );
}

#[test]
fn markdown_and_json_carry_every_section() {
    let summary = summarize(&["attribution.json"], 10);
    let mut out = Vec::new();
    super::markdown::Markdown::write(&summary, &mut out, &Options::default()).unwrap();
    let md = String::from_utf8(out).unwrap();
    for heading in [
        "#### Out of memory",
        "#### At the peak",
        "#### Growing",
        "#### Device memory",
        "| held at exit | leaks | owner |",
    ] {
        assert!(md.contains(heading), "{heading}:\n{md}");
    }
    assert!(md.contains(
        "22.0 MiB held by PyTorch's caching allocator at exit: its cache, not necessarily your tensors; PYTORCH\\_NO\\_CUDA\\_MEMORY\\_CACHING=1 shows each tensor."
    ));
    let mut out = Vec::new();
    super::json::Json::write(&summary, &mut out, &Options::default()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let p = &v["processes"][0];
    for key in [
        "owners",
        "ooms",
        "ooms_dropped",
        "peaks",
        "growing",
        "reconciliation",
    ] {
        assert!(!p[key].is_null(), "{key}");
    }
    assert_eq!(p["growing"][0]["grown_bytes"], 384 << 20);
    assert_eq!(p["sites"][2]["kind"], "operation");
    assert_eq!(p["ooms"][0]["site"]["location"], "train.py:7");
    assert_eq!(v["owners"][0]["owner"], "pytorch_caching_allocator");
}

#[test]
fn a_report_written_at_an_oom_says_so() {
    let json = std::fs::read_to_string(fixture("attribution.json")).unwrap();
    let json = json.replacen("\"reason\": \"exit\"", "\"reason\": \"oom\"", 1);
    let json = json.replacen("\"complete\": true", "\"complete\": false", 1);
    let doc = cuguard_format::Document::from_bytes("o.json".as_ref(), json.into_bytes()).unwrap();
    let report = doc.into_reports().next().unwrap().unwrap();
    let source = Source {
        path: "o.json".into(),
        index: None,
    };
    let s = Summary::new(vec![ReportSummary::new(&source, &report, 3)], 3);
    assert!(
        text(&s).contains(
            "report   INCOMPLETE, written when an allocation ran out of memory, by cuguard"
        )
    );
}

/// A report with a `cost` prints it in one short line at the end, whole with `--cost`;
/// everything else is as the same report without it prints.
#[test]
fn text_of_a_report_with_a_cost_adds_one_line() {
    let got = text(&summarize(&["cost.json"], 10));
    let short =
        "cuguard's cost: 1.23 µs per allocation, 3.4 MiB of memory (--cost: the whole bill)";
    assert!(short.chars().count() < 100);
    let expected = include_str!("snapshots/leaks-two-contexts.txt")
        .replace("== leaks-two-contexts.json", "== cost.json");
    assert_eq!(got, format!("{expected}{short}\n"));
    // With `--cost`, the whole bill in its place. An older report: its stacks counted every
    // capture, so they are said per capture.
    let whole = "cuguard's cost: 12.3 ms in hooks over 10,000 allocations (1.23 µs each; \
                 stacks 0.91 µs a capture), 15.0 ms writing 1 report, 3.4 MiB of its own memory";
    let got = text_with(
        &summarize(&["cost.json"], 10),
        Options {
            cost: true,
            ..Options::default()
        },
    );
    assert_eq!(got, format!("{expected}{whole}\n"));
    // Without one, nothing is printed about it.
    let old = text(&summarize(&["leaks-two-contexts.json"], 10));
    assert!(!old.contains("cuguard's cost"));
}

/// Several reports: their costs add up, in a line after the sites and owners across them.
#[test]
fn costs_of_several_reports_add_up() {
    let s = summarize(&["cost.json", "cost.json", "events.json"], 10);
    let c = s.cost.as_ref().unwrap();
    assert_eq!(c.hooks.calls, 20_000);
    assert_eq!(c.reports.written, 2);
    assert_eq!(c.heap_bytes, 2 * 3_565_158);
    let whole = text_with(
        &s,
        Options {
            cost: true,
            ..Options::default()
        },
    );
    let head: Vec<&str> = whole.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(
        head.last().copied(),
        Some(
            "cuguard's cost: 24.7 ms in hooks over 20,000 allocations (1.23 µs each; \
             stacks 0.91 µs a capture), 30.0 ms writing 2 reports, 6.8 MiB of its own memory"
        )
    );
    let short = text(&s);
    let head: Vec<&str> = short.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(
        head.last().copied(),
        Some("cuguard's cost: 1.23 µs per allocation, 6.8 MiB of memory (--cost: the whole bill)")
    );
    assert!(summarize(&["events.json"], 10).cost.is_none());
}

/// The fixtures' reports (every `*.json` directly in `tests/fixtures`).
fn all_fixtures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// What `cuguard summary` writes (leaks folded while parsed, each process written as it is
/// read) is what the whole summary, made from fully parsed reports, writes: every format, on
/// all the fixtures together and on each alone.
#[test]
fn streamed_summary_equals_the_whole_one_on_the_fixtures() {
    use crate::input::for_each_folded;
    use cuguard_format::{LeakFold, Report};
    let files = all_fixtures();
    assert!(files.len() >= 5);
    let mut sets: Vec<Vec<PathBuf>> = files.iter().map(|f| vec![f.clone()]).collect();
    sets.push(files.clone());
    for set in &sets {
        for top in [1, 3, 10, usize::MAX] {
            let whole = map_reports(set, |src, r| ReportSummary::new(src, &r, top)).unwrap();
            let whole = Summary::new(whole.into_iter().map(|(_, s)| s).collect(), top);
            let options = Options {
                top,
                ..Options::default()
            };
            for name in ["text", "json", "markdown"] {
                let (head, process, tail) = super::sections(name).unwrap();
                let mut fold = super::SummaryFold::new(top);
                let mut body = Vec::new();
                let mut n = 0;
                for_each_folded(
                    set,
                    top,
                    |src, r: Report, leaks: LeakFold| ReportSummary::folded(src, &r, &leaks, top),
                    |_, mut p| {
                        fold.count(&mut p);
                        process(n, &p, &mut body, &options).unwrap();
                        n += 1;
                    },
                )
                .unwrap();
                let streamed_summary = fold.finish().unwrap();
                let mut streamed = Vec::new();
                head(&streamed_summary, &mut streamed, &options).unwrap();
                streamed.extend_from_slice(&body);
                tail(n, &mut streamed, &options).unwrap();
                let mut want = Vec::new();
                super::FORMATS
                    .get(name)
                    .unwrap()
                    .write(&whole, &mut want, &options)
                    .unwrap();
                assert_eq!(
                    String::from_utf8(streamed).unwrap(),
                    String::from_utf8(want).unwrap(),
                    "{name}, top {top}, {set:?}"
                );
            }
        }
    }
}

#[test]
fn a_site_whose_bytes_two_owners_hold_says_mostly() {
    let mut r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("attribution.json")).unwrap())
            .unwrap();
    // A second, smaller leak at the first leak's stack (so at its site), held by cuBLAS.
    let mut other = r["leaks"][0].clone();
    assert_eq!(other["owner"], "pytorch_caching_allocator");
    other["address"] = "0x7f3fff000000".into();
    other["size"] = (1u64 << 20).into();
    other["requested"] = (1u64 << 20).into();
    other["owner"] = "cublas".into();
    r["leaks"].as_array_mut().unwrap().push(other);
    let doc = cuguard_format::Document::from_bytes(
        "mixed.json".as_ref(),
        serde_json::to_vec(&r).unwrap(),
    )
    .unwrap();
    let report = doc.into_reports().next().unwrap().unwrap();
    let source = Source {
        path: "mixed.json".into(),
        index: None,
    };
    let s = Summary::new(vec![ReportSummary::new(&source, &report, 10)], 10);
    let site = s.processes[0]
        .sites
        .iter()
        .find(|x| x.owner == "pytorch_caching_allocator" && x.owner_bytes < x.leaked_bytes)
        .expect("the mixed site");
    assert_eq!(site.leaked_bytes - site.owner_bytes, 1 << 20);
    let got = text(&s);
    assert!(
        got.contains("mostly held by PyTorch's caching allocator"),
        "{got}"
    );
    // A site one owner holds whole says plainly who.
    assert!(
        got.contains("  held by") || !got.contains("mostly held by cuBLAS"),
        "{got}"
    );
}

/// A PyTorch stack as deep as a real one (ATen's dispatcher between the allocator and the
/// Python binding): the summary's one-line stack folds it and reaches the user's lines.
#[test]
fn a_deep_framework_stack_reads_folded_with_the_users_lines() {
    let json = std::fs::read_to_string(fixture("attribution.json")).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let stack = doc["stacks"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|s| {
            s["python"]
                .as_array()
                .is_some_and(|p| p.iter().any(|f| f["function"] == "append_batch"))
        })
        .expect("append_batch's stack");
    let frames = stack["frames"].as_array_mut().unwrap();
    let at = frames
        .iter()
        .position(|f| {
            f["function"]
                .as_str()
                .is_some_and(|n| n.starts_with("torch::autograd::THPVariable_ones"))
        })
        .unwrap();
    let template = frames[at].clone();
    for (i, name) in [
        "at::_ops::ones::call",
        "c10::impl::wrap_kernel_functor_unboxed_<ones>::call",
        "at::_ops::ones::redispatch",
        "at::native::ones",
        "at::_ops::empty_memory_format::call",
        "at::detail::empty_cuda",
    ]
    .iter()
    .enumerate()
    {
        let mut f = template.clone();
        f["function"] = (*name).into();
        f["ip"] = format!("0x{:x}", 0x7000_0000 + i).into();
        frames.insert(at, f);
    }
    // The mixed order then comes from the Python frames' entry marks.
    stack.as_object_mut().unwrap().remove("mixed");
    let bytes = serde_json::to_vec(&doc).unwrap();
    let doc = cuguard_format::Document::from_bytes("deep.json".as_ref(), bytes).unwrap();
    let report = doc.into_reports().next().unwrap().unwrap();
    let source = Source {
        path: "deep.json".into(),
        index: None,
    };
    let s = Summary::new(vec![ReportSummary::new(&source, &report, 10)], 10);
    let got = text(&s);
    assert!(
        got.contains(
            "    stack: … 8 frames in libtorch_cuda.so, libtorch_python.so ← append_batch \
             (train.py:7) ← train (train.py:20) ← <module> (train.py:30)"
        ),
        "{got}"
    );
}

/// Summarizes `attribution.json` with its reconciliation replaced by `reconciliation`.
fn with_reconciliation(test: &str, reconciliation: serde_json::Value) -> Summary {
    let text = std::fs::read_to_string(fixture("attribution.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["reconciliation"] = reconciliation;
    let dir = std::env::temp_dir().join(format!("cuguard-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("attribution.json");
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let processes = map_reports(std::slice::from_ref(&path), |src: &Source, r| {
        ReportSummary::new(src, &r, 10)
    })
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Summary::new(processes.into_iter().map(|(_, s)| s).collect(), 10)
}

/// Memory given back and held by the driver is named, a contexts' estimate over what is used
/// is said, and no figure is negative, in a report written now and in an older one (whose
/// unexplained figure could be negative).
#[test]
fn the_reconciliation_says_what_it_knows_and_nothing_is_negative() {
    const MIB: u64 = 1 << 20;
    let explained = |program: u64, contexts: u64, given_back: Option<u64>| {
        let mut e = serde_json::json!({
            "program_bytes": program, "framework_cache_bytes": 0, "library_bytes": 0,
            "driver_bytes": 0, "pool_idle_bytes": 0, "context_overhead_bytes": contexts,
        });
        if let Some(g) = given_back {
            e["given_back_bytes"] = g.into();
        }
        e
    };
    let s = with_reconciliation(
        "reconcile-now",
        serde_json::json!([
            // PyTorch after empty_cache(), the pool's give-back held by the driver.
            {"device": 0, "device_used_bytes": 3686 * MIB, "process_used_bytes": 3686 * MIB,
             "explained": explained(0, 500 * MIB, Some(3072 * MIB)),
             "given_back_pending_bytes": 3072 * MIB, "unexplained_bytes": 114 * MIB},
            // CuPy on the H200: the contexts' estimate over what is used.
            {"device": 1, "device_used_bytes": 520 * MIB, "process_used_bytes": 520 * MIB,
             "explained": explained(0, 520 * MIB, None),
             "context_overhead_estimate_bytes": 523 * MIB + 614 * 1024,
             "excess_bytes": 3 * MIB + 614 * 1024, "unexplained_bytes": 0},
        ]),
    );
    let got = text(&s);
    let section: Vec<&str> = got
        .lines()
        .skip_while(|l| *l != "device memory")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(
        section,
        [
            "  device 0: used 3.6 GiB: program 0 B, contexts 500.0 MiB, given back, not yet \
             returned 3.0 GiB, unexplained 114.0 MiB",
            "    given back: cuguard's pool gave back 3.0 GiB the driver may not have returned \
             yet (freed with cuMemFreeAsync, which the driver holds until a synchronizing call \
             such as cuCtxSynchronize, or still queued to be freed when the process ended)",
            "  device 1: used 520.0 MiB: program 0 B, contexts 520.0 MiB, unexplained 0 B",
            "    contexts: estimated at 523.6 MiB when they were created, 3.6 MiB more than what \
             is used leaves for them; 520.0 MiB counted",
        ],
        "{got}"
    );

    // An older report: the estimate counted whole, the unexplained figure negative.
    let old = with_reconciliation(
        "reconcile-old",
        serde_json::json!([
            {"device": 0, "device_used_bytes": 520 * MIB, "process_used_bytes": 520 * MIB,
             "explained": explained(0, 523 * MIB + 614 * 1024, None),
             "unexplained_bytes": -(3 * (MIB as i64) + 614 * 1024)},
        ]),
    );
    let r = &old.processes[0].reconciliation[0];
    assert_eq!(r.unexplained_bytes, Some(0));
    assert_eq!(r.explained.context_overhead_bytes, 520 * MIB);
    assert_eq!(
        r.context_overhead_estimate_bytes,
        Some(523 * MIB + 614 * 1024)
    );
    assert_eq!(r.excess_bytes, Some(3 * MIB + 614 * 1024));
    let got = text(&old);
    assert!(
        got.contains(
            "  device 0: used 520.0 MiB: program 0 B, contexts 520.0 MiB, unexplained 0 B\n    \
             contexts: estimated at 523.6 MiB when they were created, 3.6 MiB more than what is \
             used leaves for them; 520.0 MiB counted\n"
        ),
        "{got}"
    );
    assert!(!got.contains("unexplained -"), "{got}");
    let mut md = Vec::new();
    super::markdown::Markdown::write(&old, &mut md, &Options::default()).unwrap();
    let md = String::from_utf8(md).unwrap();
    assert!(md.contains("unexplained 0 B"), "{md}");
    assert!(md.contains("  - contexts: estimated at 523.6 MiB"), "{md}");
}

/// A report written now: the steady cost per allocation after each thread's first calls, its
/// parts per allocation within it, the first calls, work done once and the other stacks apart.
#[test]
fn the_cost_line_adds_up_and_says_one_time_costs_apart() {
    use cuguard_format::CostTiming;
    let timing = |calls, ns, first_calls, first_ns| CostTiming {
        calls,
        timed: calls,
        dropped: 0,
        ns,
        first_calls,
        first_ns,
    };
    let mut c = cuguard_format::Cost {
        sample_every: 32,
        first_timed: 8,
        // 10,008 allocations: 1.2 ms after the first 8, which took 0.4 ms.
        hooks: timing(10_008, 1_600_000, 8, 400_000),
        stacks: timing(10_008, 1_100_000, 8, 200_000),
        python: timing(5_000, 310_000, 8, 10_000),
        captures: Some(timing(3, 200_000, 3, 200_000)),
        cache_blocks: None,
        one_time: Some(timing(2, 3_100_000, 0, 0)),
        unwind: Some(cuguard_format::CostUnwind {
            evaluated: 110,
            ..Default::default()
        }),
        pool_growth: Some(cuguard_format::CostGrowth {
            chunks: 3,
            bytes: 36 << 20,
            ns: 600_000,
        }),
        ..Default::default()
    };
    c.reports.written = 1;
    c.reports.ns = 15_000_000;
    c.heap_bytes = 3_565_158;
    assert_eq!(
        super::cost_line(&c),
        "cuguard's cost: 1.6 ms in hooks over 10,008 allocations (0.12 µs each after each \
         thread's first 8, of which stacks 0.09 µs, Python frames 0.03 µs; the first 8 of each \
         thread 400.0 µs in all), 3.1 ms once (module tables, 110 unwind rules, thread set-up, \
         arming), 3 pool chunks (36.0 MiB) from the driver in 600.0 µs, 200.0 µs for 3 other \
         stacks, 15.0 ms writing 1 report, 3.4 MiB of its own memory"
    );
    // PyTorch's tensors the hook recorded: their bill, and a tensor's steady cost in the
    // short line.
    c.cache_blocks = Some(timing(20_008, 18_400_000, 8, 400_000));
    assert!(
        super::cost_line(&c).contains(
            ", 18.4 ms recording 20,008 allocations and frees of PyTorch's tensors (0.90 µs each), 200.0 µs for 3 other stacks"
        ),
        "{}",
        super::cost_line(&c)
    );
    assert_eq!(
        super::cost_short(&c),
        "cuguard's cost: 0.12 µs per allocation, 0.90 µs per tensor, 3.4 MiB of memory (--cost: the whole bill)"
    );
    c.cache_blocks = None;
    // All of them among the first: the parts per allocation over every call.
    c.hooks = timing(4, 80_000, 4, 80_000);
    c.stacks = timing(4, 60_000, 4, 60_000);
    c.python = CostTiming::default();
    assert!(
        super::cost_line(&c).starts_with(
            "cuguard's cost: 80.0 µs in hooks over 4 allocations (20.0 µs each, of which \
             stacks 15.0 µs), 3.1 ms once"
        ),
        "{}",
        super::cost_line(&c)
    );
}

/// The summary of attribution.json with a Python end at 100 ms whose view holds `allocations`.
fn summary_at_the_end(allocations: serde_json::Value) -> ReportSummary {
    let json = std::fs::read_to_string(fixture("attribution.json")).unwrap();
    let mut doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    doc["python"] = serde_json::json!({
        "end": {"recorded": true, "how": "finished", "time_ms": 100},
        "view": {"at": "end", "time_ms": 100, "complete": true, "allocations": allocations}
    });
    let bytes = serde_json::to_vec(&doc).unwrap();
    let doc = cuguard_format::Document::from_bytes("end.json".as_ref(), bytes).unwrap();
    let report = doc.into_reports().next().unwrap().unwrap();
    let source = Source {
        path: "end.json".into(),
        index: None,
    };
    ReportSummary::new(&source, &report, 10)
}

/// Held allocations that read alike are one line (a list's items: the indices they span, at
/// any depth); another name, or a step that is not an index (a dict's string key) that
/// differs, stays its own line.
#[test]
fn held_allocations_that_read_alike_are_one_line() {
    let mut n = 0u64;
    let mut held = |size: u64, path: &[&str], holder: &str, weak: bool| {
        n += 1;
        let mut steps: Vec<String> = path.iter().map(|s| s.to_string()).collect();
        if weak {
            steps.push(format!("int 0x{:x}", n << 20));
        }
        serde_json::json!({
            "address": format!("0x{:x}", n << 20), "size": size, "requested": size,
            "api": "cuMemAlloc_v2", "memory": "device", "device": 0, "context": 0, "thread": 1,
            "seq": n, "time_ms": 10, "stack": null, "class": "held",
            "holders": [{"path": steps, "holder": holder, "kind": if weak { "int" } else { "ref" },
                         "weak": weak, "address": format!("0x{:x}", n << 20), "bytes": size}]
        })
    };
    const MIB: u64 = 1 << 20;
    let mut allocations = Vec::new();
    for i in [3, 0, 7, 1] {
        allocations.push(held(
            MIB,
            &["KEPT", &format!("[{i}]"), ".ptr"],
            "Buffer",
            true,
        ));
    }
    allocations.push(held(2 * MIB, &["KEPT", "[4]", ".ptr"], "Buffer", true));
    allocations.push(held(MIB, &["OTHER", "[0]", ".ptr"], "Buffer", true));
    allocations.push(held(MIB, &["CACHE", "['a']"], "torch.Tensor", false));
    allocations.push(held(MIB, &["CACHE", "['b']"], "torch.Tensor", false));
    allocations.push(held(MIB, &["GRID", "[0]", "[5]"], "torch.Tensor", false));
    allocations.push(held(MIB, &["GRID", "[2]", "[5]"], "torch.Tensor", false));
    let s = summary_at_the_end(serde_json::Value::Array(allocations));
    let py = s.python.as_ref().unwrap();
    let lines: Vec<(u64, u64, u64, String)> = py
        .held
        .lines
        .iter()
        .map(|h| {
            let path = h.path.clone().unwrap_or_default();
            (h.bytes, h.allocations, h.size, path.join(" "))
        })
        .collect();
    let weak = |n: u64| format!(" int 0x{:x}", n << 20);
    assert_eq!(
        lines,
        [
            // KEPT's five: all of them, one line; the index as the range; the first's number.
            (6 * MIB, 5, 2 * MIB, format!("KEPT [0…7] .ptr{}", weak(1))),
            (2 * MIB, 2, MIB, "GRID [0…2] [5]".to_string()),
            (MIB, 1, MIB, "CACHE ['a']".to_string()),
            (MIB, 1, MIB, "CACHE ['b']".to_string()),
            (MIB, 1, MIB, format!("OTHER [0] .ptr{}", weak(6))),
        ]
    );
    assert_eq!(py.held.allocations, 10);
    let summary = Summary::new(vec![s], 10);
    let out = text(&summary);
    assert!(
        out.contains(
            "  6.0 MiB  5 allocations  KEPT → [0…7] → .ptr (a number inside it: a weak match)"
        ),
        "{out}"
    );
}

/// Inside a cache, a line's live blocks held through one path but for its index read as the
/// range (`CLONES → [0…3] → torch.Tensor`, without what the first said of its one block's
/// size); a block held another way does not widen it.
#[test]
fn a_cache_line_s_blocks_held_by_a_list_read_as_its_range() {
    const MIB: u64 = 1 << 20;
    let block = |at: u64, path: &[&str]| {
        serde_json::json!({
            "address": format!("0x{:x}", (1 << 30) + at * MIB), "size": MIB, "state": "live",
            "holders": [{"path": path, "holder": "torch.Tensor", "kind": "ref", "weak": false,
                         "address": format!("0x{:x}", (1 << 30) + at * MIB), "bytes": MIB}],
            "frames": [{"file": "/w/train.py", "line": 20, "function": "main"}]
        })
    };
    let tensor = |of: u64| format!("torch.Tensor (1.0 MiB of a {of}.0 MiB allocation)");
    let blocks = vec![
        block(0, &["CLONES", "[2]", &tensor(8)]),
        block(1, &["CLONES", "[0]", &tensor(8)]),
        block(2, &["CLONES", "[3]", &tensor(2)]),
        block(3, &["CLONES", "[1]", &tensor(8)]),
        block(4, &["SPARE", "[9]", &tensor(8)]),
    ];
    let s = summary_at_the_end(serde_json::json!([{
        "address": "0x40000000", "size": 8 * MIB, "requested": 8 * MIB,
        "api": "cuMemAlloc_v2", "memory": "device", "device": 0, "context": 0, "thread": 1,
        "seq": 1, "time_ms": 10, "stack": null, "class": "cache", "blocks": blocks
    }]));
    let [cache] = &s.python.as_ref().unwrap().caches[..] else {
        panic!("one cache");
    };
    let [site] = &cache.sites[..] else {
        panic!("one line");
    };
    assert_eq!((site.bytes, site.blocks), (5 * MIB, 5));
    assert_eq!(
        site.holder,
        Some(vec!["CLONES → [0…3] → torch.Tensor".to_string()])
    );
}

/// One process's totals per site: (site, bytes, leaks).
type Sites = Vec<(u32, u64, u64)>;
/// One group: its key, its member count, and its sites by label: (label, bytes, leaks).
type GroupSites = (String, usize, Vec<(String, u64, u64)>);

/// The job section of many ranks, as the command builds it (its per-process state in logs,
/// the groups' sites added up in bounded passes), finds the same outliers and the same group
/// figures as the direct computation over every process's every site held in memory: 300
/// ranks, then 20 more processes with ranks already seen (a rank's group adds up processes
/// far apart in the input), 40 sites of which some most processes have (a median above 0) and
/// some few, and planted outliers at both.
#[test]
fn the_bounded_job_finds_what_the_exact_computation_finds() {
    use std::collections::{BTreeMap, HashMap};

    use crate::identity::GroupBy;

    const MIB: u64 = 1 << 20;
    let template = summarize(&["leaks-two-contexts.json"], usize::MAX).processes[0].clone();
    let site_template = template.sites[0].clone();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let planted: [(u32, u32, u64); 4] = [
        (7, 3, 2048 * MIB),
        (123, 17, 900 * MIB),
        (250, 39, 700 * MIB),
        // A site no other process has: compared against a median of 0.
        (42, 40, 100 * MIB),
    ];
    let key = |site: u32| format!("s{site} (t.py:{site})");
    // Every process's (rank, sites as (site, bytes, leaks)).
    let mut processes: Vec<(u32, Sites)> = Vec::new();
    for i in 0..320u32 {
        let rank = if i < 300 { i } else { (i - 300) * 13 };
        let mut sites = Vec::new();
        for site in 0..40u32 {
            // Site s is had by about (s % 10) tenths of the processes.
            if next() % 10 < u64::from(site % 10) {
                sites.push((site, (next() % 60 + 1) * MIB, next() % 9 + 1));
            }
        }
        for &(r, site, bytes) in &planted {
            if i == r {
                sites.retain(|s| s.0 != site);
                sites.push((site, bytes, 3));
            }
        }
        processes.push((rank, sites));
    }
    let summary_of = |i: usize, rank: u32, sites: &[(u32, u64, u64)]| {
        let mut p = template.clone();
        p.source = format!("cuguard.train.{i}.json");
        p.process.pid = 1000 + i as u32;
        p.process.rank = Some(rank);
        p.growing.clear();
        p.sites = sites
            .iter()
            .map(|&(site, bytes, leaks)| {
                let mut s = site_template.clone();
                s.site = key(site);
                s.label = key(site);
                s.location = Some(format!("t.py:{site}"));
                s.leaked_bytes = bytes;
                s.leaks = leaks;
                s.owner_bytes = bytes;
                s
            })
            .collect();
        super::report::sort_sites(&mut p.sites, |s| (s.leaked_bytes, s.leaks, s.site.clone()));
        p.sites_total = p.sites.len();
        p
    };

    // The direct computation: every value in memory, each site's median taken over all.
    let n = processes.len();
    let mut want: Vec<(usize, String, u64, u64)> = Vec::new();
    for site in 0..=40u32 {
        let values: Vec<(usize, u64)> = processes
            .iter()
            .enumerate()
            .filter_map(|(i, (_, sites))| sites.iter().find(|s| s.0 == site).map(|s| (i, s.1)))
            .collect();
        let mut all: Vec<u64> = values.iter().map(|v| v.1).collect();
        all.resize(n, 0);
        all.sort_unstable();
        let median = (all[n / 2 - 1] + all[n / 2]) / 2;
        for (i, bytes) in values {
            if bytes >= 4 * median && bytes - median >= 64 * MIB {
                want.push((i, key(site), bytes, median));
            }
        }
    }
    want.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)).then(a.1.cmp(&b.1)));
    for &(r, site, bytes) in &planted {
        assert!(
            want.iter()
                .any(|w| (w.0, &w.1, w.2) == (r as usize, &key(site), bytes)),
            "planted at rank {r}, site {site}"
        );
    }
    assert!(want.iter().any(|w| w.3 > 0) && want.iter().any(|w| w.3 == 0));
    // Each rank's sites added up, then its three largest.
    let mut groups: BTreeMap<u32, HashMap<u32, (u64, u64)>> = BTreeMap::new();
    for (rank, sites) in &processes {
        let g = groups.entry(*rank).or_default();
        for &(site, bytes, leaks) in sites {
            let t = g.entry(site).or_default();
            *t = (t.0 + bytes, t.1 + leaks);
        }
    }
    let want_groups: Vec<GroupSites> = groups
        .iter()
        .map(|(rank, sites)| {
            let mut top: Vec<(String, u64, u64)> =
                sites.iter().map(|(&s, &(b, l))| (key(s), b, l)).collect();
            top.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
            top.truncate(super::groups::GROUP_SITES);
            (format!("rank {rank}"), sites.len(), top)
        })
        .collect();

    // The command's way, on disk and in memory alike.
    for on_disk in [true, false] {
        let mut fold = if on_disk {
            super::SummaryFold::on_disk(usize::MAX, Some(GroupBy::Rank))
        } else {
            super::SummaryFold::grouped(usize::MAX, Some(GroupBy::Rank))
        };
        for (i, (rank, sites)) in processes.iter().enumerate() {
            let mut p = summary_of(i, *rank, sites);
            fold.count(&mut p);
        }
        let job = fold.finish().unwrap().job.unwrap();
        let got: Vec<(usize, String, u64, u64)> = job
            .outliers
            .iter()
            .map(|o| {
                let o = &o.outlier;
                (o.process, o.site.clone(), o.bytes, o.median_bytes)
            })
            .collect();
        assert_eq!(got, want, "on disk: {on_disk}");
        assert_eq!(job.outliers_total, want.len());
        assert!(
            job.outliers[0]
                .sentence
                .starts_with("rank 7 holds 2.0 GiB at s3 (t.py:3), ")
        );
        let got_groups: Vec<GroupSites> = job
            .groups
            .iter()
            .map(|g| {
                let top = g
                    .sites
                    .iter()
                    .map(|s| (s.site.clone(), s.leaked_bytes, s.leaks))
                    .collect();
                (g.name.clone(), g.sites_total, top)
            })
            .collect();
        assert_eq!(got_groups, want_groups, "on disk: {on_disk}");
        assert_eq!(job.groups[0].processes.len(), 2, "rank 0 twice");
    }
}

/// Every `--format` of the summary is written in parts, and only those: one registration.
#[test]
fn every_summary_format_is_written_in_parts() {
    let names: Vec<&str> = super::FORMATS.rows().iter().map(|r| r.name()).collect();
    assert_eq!(names, ["text", "json", "markdown"]);
    for name in names {
        assert!(super::sections(name).is_some(), "{name}");
    }
    assert!(super::sections("sarif").is_none());
}

/// `attribution.json` with its refusal's record changed by `edit`, summarized.
fn summarize_oom(edit: impl Fn(&mut serde_json::Value)) -> Summary {
    let json = std::fs::read_to_string(fixture("attribution.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    edit(&mut v["ooms"][0]);
    let doc =
        cuguard_format::Document::from_bytes("o.json".as_ref(), serde_json::to_vec(&v).unwrap())
            .unwrap();
    let report = doc.into_reports().next().unwrap().unwrap();
    let source = Source {
        path: "o.json".into(),
        index: None,
    };
    Summary::new(vec![ReportSummary::new(&source, &report, 10)], 10)
}

/// Other processes NVML listed at a refusal: the card names them, counts them in every byte of
/// the device (what is left "else" drops by their bytes), and the verdict worked out for the
/// record says they hold what was missing; in text, markdown and JSON alike.
#[test]
fn other_processes_at_a_refusal_are_named_and_counted() {
    let s = summarize_oom(|o| {
        o["other_processes"] = serde_json::json!([
            {"pid": 4242, "bytes": 12u64 << 30},
            {"pid": 17, "bytes": 3u64 << 30},
        ]);
        o["other_processes_bytes"] = serde_json::json!(15u64 << 30);
    });
    let got = text(&s);
    let card: Vec<&str> = got
        .lines()
        .skip_while(|l| *l != "out of memory")
        .take(7)
        .collect();
    assert_eq!(
        card[2..],
        [
            "    verdict: other processes hold 15.0 GiB of device 0 (pid 4242: 12.0 GiB, pid 17: \
             3.0 GiB): the request fits only once they free it (an older report: only cuguard's \
             pool's idle memory is known)",
            "    refused by the driver: device 0 had 100.0 MiB free of 16.0 GiB; 418.0 MiB live",
            "    CUDA_ERROR_OUT_OF_MEMORY (out of memory)",
            "    other processes: 15.0 GiB (pid 4242: 12.0 GiB, pid 17: 3.0 GiB)",
            "    every byte then: 16.0 GiB = 418.0 MiB live + 94.0 MiB idle + 100.0 MiB free + \
             15.0 GiB other processes + 412.0 MiB else (CUDA's own memory)",
        ],
        "{got}"
    );
    let mut out = Vec::new();
    super::markdown::Markdown::write(&s, &mut out, &Options::default()).unwrap();
    let md = String::from_utf8(out).unwrap();
    assert!(
        md.contains("  - other processes: 15.0 GiB (pid 4242: 12.0 GiB, pid 17: 3.0 GiB)\n"),
        "{md}"
    );
    assert!(
        md.contains("+ 15.0 GiB other processes + 412.0 MiB else"),
        "{md}"
    );
    let mut out = Vec::new();
    super::json::Json::write(&s, &mut out, &Options::default()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let oom = &v["processes"][0]["ooms"][0];
    assert_eq!(oom["other_processes"][0]["pid"], 4242, "{oom:#}");
    assert_eq!(oom["other_processes_bytes"], 15u64 << 30);
    assert_eq!(oom["verdict"]["action"], "other_processes");
}

/// Other processes not known (NVML could not be asked): the card says so; everything else
/// reads as before. NVML listing none adds nothing but what "else" holds: CUDA's own memory
/// alone; a report that says nothing of them reads as before.
#[test]
fn other_processes_not_known_are_said_to_be_not_known() {
    let before = text(&summarize_oom(|_| {}));
    assert!(!before.contains("other processes:"), "{before}");
    let got = text(&summarize_oom(|o| {
        o["other_processes_note"] = serde_json::json!("NVML is not available");
    }));
    assert_eq!(
        got.replace(
            "    other processes: not known (NVML is not available)\n",
            ""
        ),
        before
    );
    assert!(got.contains("    CUDA_ERROR_OUT_OF_MEMORY (out of memory)\n    other processes: not known (NVML is not available)\n"), "{got}");
    let none = text(&summarize_oom(|o| {
        o["other_processes"] = serde_json::json!([]);
        o["other_processes_bytes"] = serde_json::json!(0);
    }));
    assert_eq!(
        none,
        before.replace(
            "else (CUDA's own memory, other processes)",
            "else (CUDA's own memory)"
        )
    );
    assert_ne!(none, before);
    // A remedy inside the process fits: what others held would not change it, and the card
    // says nothing of them.
    let fits = |o: &mut serde_json::Value| {
        o["verdict"] = serde_json::json!({
            "action": "without_cuguard_pool", "fits": true, "text": "without cuguard's pool"
        });
    };
    let remedied = text(&summarize_oom(fits));
    let got = text(&summarize_oom(|o| {
        fits(o);
        o["other_processes_note"] = serde_json::json!("NVML is not available");
    }));
    assert_eq!(got, remedied);
}

#[test]
fn cuguard_s_pool_idle_without_a_free_piece_is_said_as_such_not_as_fragmentation() {
    let h = |largest: u64| cuguard_format::attribution::IdleHolder {
        holder: "cuguard_pool".into(),
        name: "cuguard's pool".into(),
        reserved_bytes: 4 << 30,
        idle_bytes: 1 << 20,
        largest_free_bytes: Some(largest),
        ..Default::default()
    };
    assert_eq!(
        super::attribution::idle_words(&h(0)),
        "cuguard's pool holds 1.0 MiB idle of 4.0 GiB reserved, no free piece (its live blocks' rounding, frees waiting for their streams)"
    );
    assert_eq!(
        super::attribution::idle_words(&h(512 << 10)),
        "cuguard's pool holds 1.0 MiB idle of 4.0 GiB reserved, largest free piece 512.0 KiB (fragmentation 50%)"
    );
}
