//! Tests of the view's model (timelines, markers, growth charts, flame paths and their bounds)
//! and of the page's sections, on the hand-written fixtures.

use std::path::PathBuf;

use super::condense::downsample;
use super::*;
use crate::input::{Source, map_reports};
use cuguard_format::{Document, Frame, PyFrame, Report, Stack};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn source() -> Source {
    Source {
        path: "t.json".into(),
        index: None,
    }
}

fn report_of(json: &str) -> Report {
    let doc = Document::from_bytes("t.json".as_ref(), json.as_bytes().to_vec()).unwrap();
    doc.into_reports().next().unwrap().unwrap()
}

fn fixture_report(name: &str) -> Report {
    report_of(&std::fs::read_to_string(fixture(name)).unwrap())
}

fn view_of(names: &[&str], top: usize) -> View {
    let files: Vec<PathBuf> = names.iter().map(|n| fixture(n)).collect();
    let processes = map_reports(&files, |src: &Source, r| ProcessView::new(src, &r)).unwrap();
    View::new(processes.into_iter().map(|(_, p)| p).collect(), top)
}

fn page(view: &View) -> String {
    let mut out = Vec::new();
    html::write(view, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn downsampling_keeps_peaks_and_bounds() {
    let mut points: Vec<[u64; 3]> = (0..10_000).map(|i| [i, i % 7, 1]).collect();
    points[5_000] = [5_000, 1 << 40, 1 << 41];
    let d = downsample(points);
    assert!(d.len() <= MAX_POINTS);
    assert!(d.iter().any(|p| p[1] == 1 << 40 && p[2] == 1 << 41));
    assert_eq!(d.last().unwrap()[0], 9_999);
}

#[test]
fn flame_tree_adds_paths() {
    let mut root = Node::default();
    let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    root.add(&p(&["main", "a"]), 10);
    root.add(&p(&["main", "b"]), 30);
    root.add(&p(&["main", "a"]), 5);
    root.add(&p(&["other"]), 1);
    assert_eq!(root.prune(2), 4);
    assert_eq!(root.bytes, 46);
    assert_eq!(root.children.len(), 1, "other is below the minimum");
    let main = &root.children[0];
    assert_eq!((main.name.as_str(), main.bytes), ("main", 45));
    let kids: Vec<(&str, u64)> = main
        .children
        .iter()
        .map(|c| (c.name.as_str(), c.bytes))
        .collect();
    assert_eq!(kids, [("b", 30), ("a", 15)]);
}

fn frame(module: &str, function: Option<&str>) -> Frame {
    Frame {
        ip: cuguard_format::Addr(0x1000),
        module: module.into(),
        offset: cuguard_format::Addr(0x54caec),
        function: function.map(Into::into),
        file: None,
        line: None,
        inlined: None,
    }
}

/// A PyTorch allocation from Python: the driver, the runtime, the caching allocator,
/// `at::native::empty_cuda`, the interpreter running `step` called from `<module>`, and
/// `main` of the interpreter's executable.
fn torch_stack(entries: [Option<bool>; 2]) -> Stack {
    let py = "/usr/bin/python3.12";
    let pyframe = |function: &str, line, entry| PyFrame {
        file: "/work/train.py".into(),
        line: Some(line),
        function: function.into(),
        entry,
        display: None,
    };
    Stack {
        id: 1,
        frames: vec![
            frame("/opt/cuguard/libcuguard.so", Some("cuMemAlloc_v2")),
            frame("/venv/torch/lib/libcudart.so.13", Some("cudaMalloc")),
            frame(
                "/venv/torch/lib/libc10_cuda.so",
                Some(
                    "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)",
                ),
            ),
            frame(
                "/venv/torch/lib/libtorch_cuda.so",
                Some("at::native::empty_cuda(c10::ArrayRef<long>)"),
            ),
            frame(py, Some("_PyEval_EvalFrameDefault")),
            frame(py, None),
            frame(py, Some("Py_RunMain")),
            frame(py, Some("main")),
        ],
        python: vec![
            pyframe("step", 7, entries[0]),
            pyframe("<module>", 12, entries[1]),
        ],
        site: None,
        owner: None,
        mixed: Vec::new(),
        origin: None,
    }
}

#[test]
fn flame_paths_of_python_stacks_read_like_py_spy_native() {
    let stack = torch_stack([Some(false), Some(true)]);
    let path = flame_path(&stack);
    // The interpreter's `main`, `Py_RunMain` and unnamed frames are its own machinery.
    assert_eq!(
        path,
        [
            "<module> (train.py:12)",
            "step (train.py:7)",
            "at::native::empty_cuda"
        ]
    );
    for name in &path {
        assert!(
            !name.contains("_PyEval_EvalFrameDefault") && !name.contains("python3.12+0x"),
            "the interpreter's machinery is left out: {path:?}"
        );
        assert!(
            !name.contains("cuMemAlloc") && !name.contains("CachingAllocator"),
            "the driver's and allocators' frames are left out: {path:?}"
        );
    }
    // The full depth: a deep Python stack keeps every frame (the summary's chains stop at 8).
    let mut deep = torch_stack([Some(false), Some(true)]);
    deep.python = (0..20)
        .map(|i| PyFrame {
            file: "/work/deep.py".into(),
            line: Some(i),
            function: format!("f{i}"),
            entry: Some(i == 19),
            display: None,
        })
        .collect();
    let path = flame_path(&deep);
    assert!(path.len() >= 21, "{path:?}");
    assert_eq!(path.last().unwrap(), "at::native::empty_cuda");
    assert!(path.contains(&"f0 (deep.py:0)".to_string()));
    assert!(path.contains(&"f19 (deep.py:19)".to_string()));
}

#[test]
fn flame_paths_without_python_frames_stay_native() {
    // Python frames without a way to place them, and no Python frames at all: every native
    // frame, outermost first, by its name.
    for stack in [torch_stack([None, None]), {
        let mut s = torch_stack([None, None]);
        s.python.clear();
        s
    }] {
        let path = flame_path(&stack);
        assert_eq!(path.len(), 8);
        assert_eq!(path[0], "main");
        assert_eq!(path[2], "python3.12+0x54caec");
        assert_eq!(path[7], "cuMemAlloc_v2");
    }
    let empty = Stack {
        frames: Vec::new(),
        python: Vec::new(),
        ..torch_stack([None, None])
    };
    assert_eq!(flame_path(&empty), ["<empty stack>"]);
}

#[test]
fn the_attribution_fixtures_flame_graph_has_python_functions() {
    let view = view_of(&["attribution.json"], 25);
    let root = &view.flame;
    let names = |n: &Node| {
        n.children
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    // cache_embeddings' leak: <module> → cache_embeddings → at::native::empty_cuda.
    let module = root
        .children
        .iter()
        .find(|c| c.name == "<module> (train.py:30)")
        .unwrap_or_else(|| panic!("{:?}", names(root)));
    assert_eq!(module.bytes, 512 << 10);
    assert_eq!(names(module), ["cache_embeddings (train.py:25)"]);
    assert_eq!(
        names(&module.children[0]),
        ["at::native::empty_cuda (EmptyTensor.cpp:51)"]
    );
    // forward's cached blocks: the Python frame alone, past PyTorch's caching allocator.
    let forward = root
        .children
        .iter()
        .find(|c| c.name == "forward (model.py:40)")
        .expect("forward");
    assert_eq!(forward.bytes, 22 << 20);
    // The autograd thread has no Python frames: its native frames, as before.
    assert!(root.children.iter().any(|c| c.name == "start_thread"));
    let json = serde_json::to_string(root).unwrap();
    assert!(!json.contains("_PyEval_EvalFrameDefault"), "{json}");
}

#[test]
fn a_python_program_s_end_is_marked_with_the_device_bytes_live_then() {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("attribution.json")).unwrap())
            .unwrap();
    let allocation = |address: &str, size: u64, memory: &str, device: u32| {
        serde_json::json!({
            "address": address, "size": size, "requested": size, "api": "cuMemAlloc_v2",
            "memory": memory, "device": device, "context": 0, "thread": 1, "seq": 0,
            "time_ms": 100, "stack": null, "class": "lost"
        })
    };
    v["python"] = serde_json::json!({
        "end": {"recorded": true, "how": "raised", "exception": "ValueError", "time_ms": 9500},
        "view": {"at": "end", "time_ms": 9500, "complete": true, "allocations": [
            allocation("0x1000", 3 << 20, "device", 0),
            allocation("0x2000", 1 << 20, "host_pinned", 0),
            allocation("0x3000", 5 << 20, "device", 1),
            allocation("0x4000", 2 << 20, "managed", 0),
        ]}
    });
    let p = ProcessView::new(&source(), &report_of(&v.to_string()));
    let c = &p.charts[0];
    // Between the peak and the refusals; device 0's device memory (not its pinned host memory,
    // nor device 1's).
    let kinds: Vec<&str> = c.markers.iter().map(|m| m.kind).collect();
    assert_eq!(kinds, ["peak", "end", "oom"]);
    assert_eq!(
        c.markers[1],
        Marker {
            kind: "end",
            time_ms: 9500,
            live_bytes: 5 << 20,
            short: "end of code".into(),
            label: "the program's code raised ValueError at 9.5 s, 5.0 MiB live: what follows is the interpreter's teardown".into(),
            card: Vec::new(),
        }
    );
    assert_eq!(p.growth.as_ref().unwrap().end_ms, Some(9500));
    // The legend names it.
    let html = page(&View::new(vec![p], 10));
    assert!(html.contains("the end of the program's code (the interpreter's teardown after it)"));
    // Without a recorded end: no marker, no end on the growth chart.
    v["python"]["end"] = serde_json::json!({"recorded": false, "why": "python -I"});
    let p = ProcessView::new(&source(), &report_of(&v.to_string()));
    assert!(p.charts[0].markers.iter().all(|m| m.kind != "end"));
    assert_eq!(p.growth.as_ref().unwrap().end_ms, None);
}

#[test]
fn charts_mark_the_peak_and_each_oom() {
    let report = fixture_report("attribution.json");
    let p = ProcessView::new(&source(), &report);
    assert_eq!(p.charts.len(), 1, "device 0's timeline");
    let c = &p.charts[0];
    assert_eq!(c.device, 0);
    assert_eq!(
        c.markers,
        [
            Marker {
                kind: "peak",
                time_ms: 9100,
                live_bytes: 418 << 20,
                short: "peak 420.0 MiB".into(),
                label: "at the peak of 420.0 MiB (418.0 MiB live at 9.1 s, within 1%)".into(),
                card: Vec::new(),
            },
            Marker {
                kind: "oom",
                time_ms: 9200,
                live_bytes: 418 << 20,
                short: "OOM 2.0 GiB".into(),
                label: "out of memory at 9.2 s: cuMemAlloc_v2 asking 2.0 GiB at append_batch (train.py:7)"
                    .into(),
                card: vec![
                    "verdict: nothing cuguard can see would: 2.0 GiB asked, 100.0 MiB left and 94.0 MiB idle, 1.8 GiB short; 418.0 MiB is live".into(),
                    "every byte then: 16.0 GiB = 418.0 MiB live + 94.0 MiB idle + 100.0 MiB free + 15.4 GiB else (CUDA's own memory, other processes)".into(),
                    "idle: cuguard's pool holds 94.0 MiB idle of 512.0 MiB reserved, largest free piece 64.0 MiB (fragmentation 32%)".into(),
                ],
            },
        ]
    );
    // A thousand refusals: the markers stay bounded.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("attribution.json")).unwrap())
            .unwrap();
    let one = v["ooms"][0].clone();
    v["ooms"] = serde_json::Value::Array(vec![one; 1000]);
    let report = report_of(&v.to_string());
    let p = ProcessView::new(&source(), &report);
    assert_eq!(p.charts[0].markers.len(), MAX_MARKERS);
    assert_eq!(p.summary.ooms.len(), SECTION_TOP);
    // The fixture says 2 more were not kept.
    assert_eq!(p.summary.ooms_dropped, 1000 - SECTION_TOP as u64 + 2);
}

#[test]
fn growth_chart_puts_growing_sites_first_then_the_largest() {
    let report = fixture_report("attribution.json");
    let p = ProcessView::new(&source(), &report);
    let g = p.growth.expect("stack_samples");
    assert_eq!(g.times.len(), 20);
    assert_eq!((g.times[0], g.times[19]), (0, 9500));
    let lines: Vec<(&str, bool, u64)> = g
        .lines
        .iter()
        .map(|l| {
            (
                l.label.as_str(),
                l.growing,
                l.bytes.iter().copied().max().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        lines,
        [
            ("append_batch (train.py:7)", true, 384 << 20),
            ("forward (model.py:40)", false, 22 << 20),
            ("step (train.py:12)", false, 8 << 20),
            (
                "framework: at::cuda::getCurrentCUDABlasHandle (CublasHandlePool.cpp:120)",
                false,
                4 << 20
            ),
        ]
    );
    assert_eq!(g.lines[0].bytes[19], 0, "freed at shutdown, still drawn");
    // Old reports have no samples: no chart.
    let old = fixture_report("events.json");
    assert!(ProcessView::new(&source(), &old).growth.is_none());
}

#[test]
fn growth_charts_stay_bounded_on_huge_samples() {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("attribution.json")).unwrap())
            .unwrap();
    let times: Vec<u64> = (0..5000).collect();
    let series: Vec<serde_json::Value> = (0..3000u64)
        .map(|i| {
            serde_json::json!({
                "stack": i,
                "device": 0,
                "bytes": (0..5000u64).map(|t| t * (i + 1)).collect::<Vec<_>>(),
            })
        })
        .collect();
    v["stack_samples"] = serde_json::json!({"interval_ms": 1, "times_ms": times, "series": series});
    let report = report_of(&v.to_string());
    let g = ProcessView::new(&source(), &report).growth.unwrap();
    assert!(g.times.len() <= MAX_GROWTH_POINTS, "{}", g.times.len());
    assert_eq!(g.times.last(), Some(&4999));
    assert!(g.lines.len() <= MAX_GROWTH_LINES);
    assert!(g.lines.iter().all(|l| l.bytes.len() == g.times.len()));
}

#[test]
fn the_page_shows_every_attribution_section_for_the_fixture() {
    let html = page(&view_of(&["attribution.json"], 25));
    // cuguard's pool is an idle holder of the card: its own line says it, no second one.
    assert!(!html.contains("<p>Pool: "), "{html}");
    for want in [
        // Out of memory, first on the page.
        "<section id=\"oom\">",
        "<b>cuMemAlloc_v2 asking 2.0 GiB on device 0 at 9.2 s</b>: <span class=\"site\">append_batch (train.py:7)</span>",
        "Refused by the driver: device 0 had 100.0 MiB free of 16.0 GiB; 418.0 MiB live.",
        "Idle: cuguard&#39;s pool holds 94.0 MiB idle of 512.0 MiB reserved, largest free piece 64.0 MiB (fragmentation 32%).",
        "stack: at::native::empty_cuda (EmptyTensor.cpp:51) ← torch::autograd::THPVariable_ones ← append_batch (train.py:7)",
        "<h4>Live by owner then</h4>",
        "<h4>Live by site then</h4>",
        "And 2 more out-of-memory refusals not shown.",
        // The peak.
        "<section id=\"peaks\">",
        "Device 0: at the peak of 420.0 MiB (418.0 MiB live at 9.1 s, within 1%)",
        "<td class=\"num\" title=\"402653184 bytes\">384.0 MiB</td><td class=\"num\">96</td>",
        // What grows.
        "<section id=\"growth\">",
        "<div class=\"growth-chart\" data-growth=\"0\"></div>",
        "<td class=\"num\" title=\"402653184 bytes\">+384.0 MiB</td><td class=\"num\">6.0 s</td><td class=\"num\">0 B → 384.0 MiB</td><td class=\"site\">append_batch (train.py:7)<div class=\"chain\">",
        // Bytes by owner, with the cache's hint.
        "<section id=\"owners\">",
        "<div class=\"bar\">",
        "22.0 MiB held by PyTorch&#39;s caching allocator at exit: its cache, not necessarily your tensors; PYTORCH_NO_CUDA_MEMORY_CACHING=1 shows each tensor",
        "(the program's own: 1.5 MiB in 2 leaks)",
        // Top sites with their owners.
        "<td class=\"site\">forward (model.py:40)</td><td class=\"owner owner-framework_cache\">",
        "on the autograd thread: AddmmBackward0::apply (Functions.cpp:1520)",
        "<td class=\"site\">cache_embeddings (train.py:25)<div class=\"chain\">at::native::empty_cuda (EmptyTensor.cpp:51) ← cache_embeddings (train.py:25) ← &lt;module&gt; (train.py:30)</div>",
        // The legend of the markers.
        "<span class=\"p\">the peak",
        "<span class=\"o\">out of memory</span>",
    ] {
        assert!(html.contains(want), "the page has {want}");
    }
    let at = |s: &str| html.find(s).unwrap();
    assert!(at("<section id=\"oom\">") < at("<h2>Device memory over time</h2>"));
    assert!(at("<h2>Device memory over time</h2>") < at("<section id=\"peaks\">"));
    assert!(at("<section id=\"peaks\">") < at("<section id=\"growth\">"));
    assert!(at("<section id=\"growth\">") < at("<section id=\"owners\">"));
    assert!(at("<section id=\"owners\">") < at("<h2>Top sites</h2>"));
    // The data the script draws: markers and the growth chart.
    let data = html
        .split("<script type=\"application/json\" id=\"data\">")
        .nth(1)
        .and_then(|s| s.split("</script>").next())
        .unwrap();
    let data: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(data["charts"][0]["markers"].as_array().unwrap().len(), 2);
    assert_eq!(
        data["growth"][0]["lines"][0]["label"],
        "append_batch (train.py:7)"
    );
}

#[test]
fn old_reports_leave_the_attribution_sections_out() {
    let html = page(&view_of(&["events.json", "leaks-two-contexts.json"], 25));
    for absent in [
        "id=\"oom\"",
        "id=\"peaks\"",
        "id=\"growth\"",
        "id=\"owners\"",
        "<div class=\"growth-chart\"",
        "<span class=\"p\">",
        "<span class=\"o\">",
        "the program's own",
        "out-of-memory",
    ] {
        assert!(!html.contains(absent), "an old report has no {absent}");
    }
    // What old reports have is still there.
    for present in [
        "<h2>Device memory over time</h2>",
        "<table id=\"sites\">",
        "<div id=\"flame\"></div>",
        "<table id=\"processes\">",
        "make_buffers (train.c:42)",
    ] {
        assert!(html.contains(present), "{present}");
    }
}

#[test]
fn sections_of_many_processes_stay_bounded() {
    let report = fixture_report("attribution.json");
    let processes: Vec<ProcessView> = (0..MAX_PROCESS_ENTRIES + 5)
        .map(|_| ProcessView::new(&source(), &report))
        .collect();
    let view = View::new(processes, 25);
    assert_eq!(view.growth.len(), MAX_CHARTS);
    assert_eq!(view.growth_omitted, MAX_PROCESS_ENTRIES + 5 - MAX_CHARTS);
    let html = page(&view);
    assert_eq!(
        html.matches("<div class=\"oom\">").count(),
        MAX_PROCESS_ENTRIES
    );
    assert_eq!(
        html.matches("<div class=\"peak\">").count(),
        MAX_PROCESS_ENTRIES
    );
    assert_eq!(
        html.matches("<div class=\"growth-chart\"").count(),
        MAX_CHARTS.min(MAX_PROCESS_ENTRIES)
    );
    assert_eq!(html.matches("5 more processes not shown.").count(), 3);
}

/// Inside a cache whose history gave each program line's bytes, the growth chart draws those
/// lines, as the growth criterion reads them, not the cache's segments (charged to whichever
/// line grew a segment).
#[test]
fn the_growth_chart_follows_a_cache_s_lines() {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("attribution.json")).unwrap())
            .unwrap();
    let before = ProcessView::new(&source(), &report_of(&v.to_string()));
    let labels = |p: &ProcessView| -> Vec<String> {
        let mut l: Vec<String> = p
            .growth
            .as_ref()
            .unwrap()
            .lines
            .iter()
            .map(|l| l.label.clone())
            .collect();
        l.sort();
        l
    };
    assert!(labels(&before).contains(&"forward (model.py:40)".to_string()));
    const MIB: u64 = 1 << 20;
    v["python"] = serde_json::json!({
        "end": {"recorded": true, "how": "finished", "time_ms": 9500},
        "view": {"at": "end", "time_ms": 9500, "complete": true, "allocations": [],
            "caches": [{"owner": "pytorch_caching_allocator", "framework": "pytorch",
                "source": "history", "segment_bytes": 22 * MIB, "live_bytes": 3 * MIB,
                "idle_bytes": 19 * MIB,
                "lines": [{"device": 0,
                    "frames": [{"file": "/w/eval.py", "line": 9, "function": "keep"}],
                    "samples": [[1000, MIB], [5000, 2 * MIB], [9000, 3 * MIB]]}]}]}
    });
    let after = ProcessView::new(&source(), &report_of(&v.to_string()));
    let got = labels(&after);
    assert!(
        !got.contains(&"forward (model.py:40)".to_string()),
        "{got:?}"
    );
    let chart = after.growth.as_ref().unwrap();
    let keep = chart
        .lines
        .iter()
        .find(|l| l.label == "keep (eval.py:9)")
        .expect("the cache's line");
    // Its bytes at each sample time: the line's last value at or before it.
    let want: Vec<u64> = chart
        .times
        .iter()
        .map(|&t| match t {
            t if t >= 9000 => 3 * MIB,
            t if t >= 5000 => 2 * MIB,
            t if t >= 1000 => MIB,
            _ => 0,
        })
        .collect();
    assert_eq!(keep.bytes, want);
}

/// A report may carry a string of hundreds of MiB (an executable's name, a command line): the
/// page shows the first 4,096 characters of it, and nothing that reorders text.
#[test]
fn texts_on_the_page_are_bounded_and_cannot_reorder_it() {
    let long = "x".repeat(200_000);
    let shown = super::escape::esc(&long);
    assert_eq!(shown.chars().count(), 4097);
    assert!(shown.ends_with("x…"));
    assert_eq!(super::escape::esc("a\u{202e}b<"), "a\u{fffd}b&lt;");
}

/// Over [`MAX_LISTED`] processes, the view lists the [`TOP_PROCESSES`] that leaked most, adds up
/// the others, and keeps every process's row in its compressed part, in input order.
#[test]
fn a_view_of_many_processes_lists_the_top_and_keeps_every_row_compressed() {
    use std::io::Read as _;
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("leaks-two-contexts.json")).unwrap())
            .unwrap();
    let n = MAX_LISTED + 50;
    let mut fold = fold::ViewFold::new(25);
    let mut total = 0u64;
    for i in 0..n as u64 {
        let mut v = base.clone();
        v["process"]["pid"] = (1000 + i).into();
        for leak in v["leaks"].as_array_mut().unwrap() {
            leak["size"] = (leak["size"].as_u64().unwrap() * (1 + i % 10)).into();
        }
        let p = ProcessView::new(&source(), &report_of(&v.to_string()));
        total += p.summary.leaked_bytes;
        fold.add(p);
    }
    let view = fold.finish().unwrap();
    assert_eq!(view.summary.reports, n);
    assert_eq!(view.summary.processes.len(), TOP_PROCESSES);
    // Most leaked first; ties, the earliest.
    let pids: Vec<u32> = view
        .summary
        .processes
        .iter()
        .map(|p| p.process.pid)
        .collect();
    assert_eq!(&pids[..3], &[1009, 1019, 1029]);
    let all = view.all.as_ref().unwrap();
    assert_eq!(all.processes, n);
    assert_eq!(all.rest.processes, n - TOP_PROCESSES);
    let listed: u64 = view.summary.processes.iter().map(|p| p.leaked_bytes).sum();
    assert_eq!(all.rest.leaked_bytes, total - listed);
    let mut json = String::new();
    flate2::read::GzDecoder::new(all.gzip.reader())
        .read_to_string(&mut json)
        .unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(rows.len(), n);
    assert_eq!(rows[7][0], 7);
    assert_eq!(rows[7][1], "rank 0");
    assert_eq!(rows[7][5], 1007);
    assert_eq!(rows[7][14], "t.json");
    assert_eq!(rows[7][15].as_array().unwrap().len(), 3, "its three sites");
    let html = page(&view);
    assert!(html.contains(&format!("{} more processes: ", n - TOP_PROCESSES)));
    assert!(html.contains("id=\"find-process\""));
    assert!(html.contains(&format!("Show all {n} processes")));
    assert!(!html.contains("<table id=\"processes\">"));
}

/// A view of few processes lists every one, as it always did, and has no compressed part.
#[test]
fn a_view_of_few_processes_lists_every_one() {
    let view = view_of(&["events.json", "leaks-two-contexts.json"], 25);
    assert!(view.all.is_none());
    assert_eq!(view.summary.processes.len(), 2);
    let html = page(&view);
    assert!(html.contains("<table id=\"processes\">"));
    assert!(!html.contains("application/octet-stream"));
}

#[test]
fn base64_as_rfc_4648() {
    use std::io::Read as _;
    for (plain, coded) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        let mut out = Vec::new();
        processes::base64(&mut plain.as_bytes(), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), coded);
    }
    // Longer than one buffer, read in pieces of odd sizes.
    let long: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut out = Vec::new();
    processes::base64(
        &mut std::io::Cursor::new(&long).take(long.len() as u64),
        &mut out,
    )
    .unwrap();
    assert_eq!(out.len(), long.len().div_ceil(3) * 4);
}
