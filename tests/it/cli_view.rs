//! `cuguard view`: the page is self-contained, and in headless Chromium its charts, table and
//! flame graph render. Skips (with a notice) where Chromium is not installed; CI installs it
//! with `apt-get install -y chromium`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;

fn fixture(name: &str) -> PathBuf {
    support::artifacts().root.join("tests/fixtures").join(name)
}

/// Chromium, from `$CHROMIUM` or the usual names on `PATH`.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser", "google-chrome", "chrome"] {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Chromium for the test `test`, or `None` after saying that it is skipped.
fn chromium_for(test: &str) -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        support::missing(
            test,
            "chromium is not installed (apt-get install -y chromium)",
        );
    }
    found
}

fn write_page(out: &Path, paths: &[PathBuf]) -> String {
    let status = Command::new(&support::artifacts().cuguard)
        .args(["view", "-o"])
        .arg(out)
        .args(paths)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(out).unwrap()
}

/// The DOM after the page's script ran.
fn rendered_dom(chromium: &Path, page: &Path, profile: &Path) -> String {
    rendered_url(chromium, &format!("file://{}", page.display()), profile)
}

/// The DOM of the page at `url` after its script ran.
fn rendered_url(chromium: &Path, url: &str, profile: &Path) -> String {
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn cli_view_page_is_self_contained() {
    let dir = crate::cli::fixture_dir("cli-view-static");
    let html = write_page(&dir.join("r.html"), std::slice::from_ref(&dir));
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("Content-Security-Policy\" content=\"default-src 'none'"));
    for forbidden in [" src=", " href=", "<link", "@import", "url("] {
        assert!(
            !html.contains(forbidden),
            "the page must not load anything: {forbidden}"
        );
    }
    assert_eq!(html.matches("<tr class=\"site\">").count(), 5);
}

#[test]
fn cli_view_renders_in_chromium() {
    let Some(chromium) = chromium_for("cli_view_renders_in_chromium") else {
        return;
    };
    let dir = support::scratch_dir("cli-view-chromium");
    let page = dir.join("report.html");
    write_page(
        &page,
        &[fixture("events.json"), fixture("leaks-two-contexts.json")],
    );
    let dom = rendered_dom(&chromium, &page, &dir.join("profile"));
    assert!(
        dom.contains("data-rendered=\"yes\""),
        "the script ran to the end: {}",
        dom.lines()
            .find(|l| l.contains("data-error"))
            .unwrap_or("no data-error")
    );
    // events.json has a six-sample timeline on device 0: one chart, two lines.
    assert_eq!(dom.matches("<svg class=\"timeline\"").count(), 1, "{dom}");
    assert_eq!(dom.matches("<polyline class=\"live\" points=\"").count(), 1);
    assert_eq!(
        dom.matches("<polyline class=\"reserved\" points=\"")
            .count(),
        1
    );
    let live = dom
        .split("<polyline class=\"live\" points=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap();
    assert_eq!(live.split(' ').count(), 6, "one point per sample: {live}");
    // The table: one row per site.
    assert_eq!(dom.matches("<tr class=\"site\">").count(), 4);
    assert!(dom.contains("make_buffers (train.c:42)"));
    // The flame graph: all → main → make_buffers, among others.
    let frames = dom.matches("class=\"frame\"").count();
    assert!(frames >= 8, "{frames} frames");
    for name in [
        ">all<",
        ">main<",
        ">make_buffers<",
        ">cupy_cuda_memory_malloc<",
    ] {
        assert!(dom.contains(name), "flame graph has {name}");
    }
}

#[test]
fn cli_view_renders_attribution_in_chromium() {
    let Some(chromium) = chromium_for("cli_view_renders_attribution_in_chromium") else {
        return;
    };
    let dir = support::scratch_dir("cli-view-chromium-attribution");
    let page = dir.join("report.html");
    write_page(&page, &[fixture("attribution.json")]);
    let dom = rendered_dom(&chromium, &page, &dir.join("profile"));
    assert!(
        dom.contains("data-rendered=\"yes\""),
        "the script ran to the end: {}",
        dom.lines()
            .find(|l| l.contains("data-error"))
            .unwrap_or("no data-error")
    );
    // The timeline of device 0, its peak and its refusal marked.
    assert_eq!(dom.matches("<svg class=\"timeline\"").count(), 1);
    assert_eq!(dom.matches("<line class=\"marker peak\"").count(), 1);
    assert_eq!(dom.matches("<line class=\"marker oom\"").count(), 1);
    assert!(dom.contains("at the peak of 420.0 MiB (418.0 MiB live at 9.1 s, within 1%)"));
    // What grows: one chart, a line per site, each named in the legend.
    assert_eq!(dom.matches("<svg class=\"growth\"").count(), 1);
    assert_eq!(dom.matches("<polyline class=\"series").count(), 4);
    // So few samples (21 on the timeline, 20 times for each of the 4 sites) are dotted.
    assert_eq!(dom.matches("<circle class=\"sample\"").count(), 21 + 4 * 20);
    assert_eq!(dom.matches("<polyline class=\"series grows\"").count(), 1);
    for label in [
        "append_batch (train.py:7)</span>",
        "forward (model.py:40)</span>",
        "step (train.py:12)</span>",
    ] {
        assert!(dom.contains(label), "the legend names {label}");
    }
    // The sections in HTML, the out-of-memory one first.
    let at = |s: &str| dom.find(s).unwrap_or_else(|| panic!("{s}"));
    assert!(at("id=\"oom\"") < at("id=\"charts\""));
    for id in ["id=\"peaks\"", "id=\"growth\"", "id=\"owners\""] {
        at(id);
    }
    // The flame graph: Python functions where the interpreter ran them.
    for name in [
        ">&lt;module&gt; (train.py:30)<",
        ">cache_embeddings (train.py:25)<",
        ">at::native::empty_cuda (EmptyTensor.cpp:51)<",
        ">forward (model.py:40)<",
    ] {
        assert!(dom.contains(name), "flame graph has {name}");
    }
    assert!(!dom.contains(">_PyEval_EvalFrameDefault<"));
}

/// A refusal's marker on the timeline shows its card when clicked (and the section at the top
/// gives the verdict): the click is made by a script added to the page, as a user's would be.
#[test]
fn cli_view_shows_a_refusal_s_card_on_click_in_chromium() {
    let Some(chromium) = chromium_for("cli_view_shows_a_refusal_s_card_on_click_in_chromium")
    else {
        return;
    };
    let dir = support::scratch_dir("cli-view-chromium-oom-card");
    let page = dir.join("report.html");
    let html = write_page(&page, &[fixture("attribution.json")]);
    let verdict = "nothing cuguard can see would: 2.0 GiB asked, 100.0 MiB left and 94.0 MiB idle, 1.8 GiB short; 418.0 MiB is live";
    assert!(
        html.contains(&format!("<b>Verdict</b>: {verdict}")),
        "the section gives the verdict"
    );
    let click = "<script>window.addEventListener('load', function () { setTimeout(function () { \
                 document.querySelector('line.marker.oom').dispatchEvent(new MouseEvent('click', \
                 { bubbles: true })); }, 100); });</script></body>";
    let clicked = dir.join("clicked.html");
    std::fs::write(&clicked, html.replace("</body>", click)).unwrap();
    let out = Command::new("timeout")
        .arg("120")
        .arg(&chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", clicked.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let card = dom
        .split("<pre class=\"oom-card\"")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("no card after the click: {}", &dom[..dom.len().min(400)]));
    assert!(
        card.contains(&format!("verdict: {verdict}")),
        "the card's verdict: {card}"
    );
    assert!(
        card.contains("every byte then: 16.0 GiB = 418.0 MiB live"),
        "{card}"
    );
    assert!(
        card.contains("idle: cuguard's pool holds 94.0 MiB idle"),
        "{card}"
    );
}

/// A Python program's end, recorded: a dashed line on the timeline (its marker) and on the
/// growth chart, named in the legend.
#[test]
fn cli_view_marks_a_python_program_s_end_in_chromium() {
    let Some(chromium) = chromium_for("cli_view_marks_a_python_program_s_end_in_chromium") else {
        return;
    };
    let dir = support::scratch_dir("cli-view-chromium-end");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("attribution.json")).unwrap())
            .unwrap();
    v["python"] = serde_json::json!({
        "end": {"recorded": true, "how": "finished", "time_ms": 9500},
        "view": {"at": "end", "time_ms": 9500, "complete": true, "allocations": []}
    });
    let report = dir.join("ended.json");
    std::fs::write(&report, v.to_string()).unwrap();
    let page = dir.join("report.html");
    write_page(&page, &[report]);
    let dom = rendered_dom(&chromium, &page, &dir.join("profile"));
    assert!(
        dom.contains("data-rendered=\"yes\""),
        "the script ran to the end"
    );
    assert_eq!(dom.matches("<line class=\"marker end\"").count(), 2);
    assert!(dom.contains("the end of the program's code (the interpreter's teardown after it)"));
    assert!(dom.contains("the program's code finished at 9.5 s, 0 B live"));
    assert!(dom.contains(">end of code<"));
}

/// The history's timeline: drawn from a real run's history (a report, and the history file
/// alone), the moment asked in the address listed with the spike's call path.
#[test]
fn cli_view_draws_the_history_timeline_in_chromium() {
    let Some(chromium) = chromium_for("cli_view_draws_the_history_timeline_in_chromium") else {
        return;
    };
    let dir = support::scratch_dir("cli-view-history");
    let (said, r) = crate::cli_history::spike_run(&dir);
    let inside = crate::cli_history::at(&said["spike"][0], &r, 150);
    let inside = inside.trim_end_matches("ms");
    for source in ["r.json", "r.history"] {
        let page = dir.join(format!("{source}.html"));
        let html = write_page(&page, &[dir.join(source)]);
        assert!(html.contains("<section id=\"history\">"), "{source}");
        let dom = rendered_url(
            &chromium,
            &format!("file://{}#at={inside}", page.display()),
            &dir.join("profile"),
        );
        assert!(dom.contains("data-rendered=\"yes\""), "{source}: {dom}");
        assert!(!dom.contains("data-error=\""), "{source}");
        assert!(
            dom.contains("data-drawn=\"800\""),
            "{source}: the whole run in 800 columns"
        );
        let list = dom
            .split("class=\"history-at\"")
            .nth(1)
            .unwrap_or_else(|| panic!("{source}: no list: {dom}"));
        assert!(list.contains("512.0 MiB"), "{source}: {list}");
        assert!(
            list.contains("spike_site (history_spike.c:")
                && list.contains("main (history_spike.c:"),
            "{source}: {list}"
        );
    }
}

/// A history given beside the report that names it is that report's process, shown once: the
/// page is the report's own page.
#[test]
fn cli_view_of_a_report_and_its_history_shows_the_process_once() {
    let dir = support::scratch_dir("cli-view-report-and-history");
    crate::cli_history::spike_run(&dir);
    let alone = write_page(&dir.join("alone.html"), &[dir.join("r.json")]);
    let both = write_page(
        &dir.join("both.html"),
        &[dir.join("r.json"), dir.join("r.history")],
    );
    assert!(alone.contains("<section id=\"history\">"));
    assert!(both.contains("<p class=\"totals\">1 process report: "));
    assert!(
        !both.contains("<details class=\"process\""),
        "one process: no list of them"
    );
    assert!(
        both == alone,
        "the page differs when the history is given beside its report"
    );
    // Given alone, the history is the process.
    let history = write_page(&dir.join("history.html"), &[dir.join("r.history")]);
    assert!(history.contains("<section id=\"history\">"));
    assert!(history.contains("<p class=\"totals\">1 process report: "));
}

/// The DOM of the page at `url` once its script, and what it started (reading the page's
/// compressed part), ran: Chromium's virtual time lets the page's tasks run before it dumps.
fn settled_dom(chromium: &Path, url: &str, profile: &Path) -> String {
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// 300 reports of one job, rank r leaking (1 + r % 7) times the fixture's leaks and rank 137
/// a hundred times: the page lists the 25 that leaked most, adds up the other 275 in a line,
/// calls rank 137 out, and finds any process (by rank, by host) in its compressed part.
#[test]
fn cli_view_of_many_processes_lists_the_top_and_finds_any_in_chromium() {
    let dir = support::scratch_dir("cli-view-many");
    let reports = dir.join("reports");
    std::fs::create_dir_all(&reports).unwrap();
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("leaks-two-contexts.json")).unwrap())
            .unwrap();
    for rank in 0..300u64 {
        let mut v = base.clone();
        v["process"]["pid"] = (10_000 + rank).into();
        v["process"]["rank"] = rank.into();
        v["process"]["hostname"] = format!("node{:03}", rank / 8).into();
        let factor = if rank == 137 { 100 } else { 1 + rank % 7 };
        for leak in v["leaks"].as_array_mut().unwrap() {
            leak["size"] = (leak["size"].as_u64().unwrap() * factor).into();
        }
        std::fs::write(reports.join(format!("r{rank:03}.json")), v.to_string()).unwrap();
    }
    let page = dir.join("many.html");
    let html = write_page(&page, std::slice::from_ref(&reports));
    assert!(html.contains(
        "<script type=\"application/octet-stream\" id=\"all-processes\" data-processes=\"300\">"
    ));
    assert_eq!(html.matches("<tr id=\"process-row-").count(), 25);
    assert_eq!(html.matches("<details class=\"process\"").count(), 25);
    // The first listed leaked most: rank 137; then the ranks leaking 7 times, earliest first.
    let first = html.split("<tr id=\"process-row-0\">").nth(1).unwrap();
    assert!(first.starts_with("<td>rank 137</td>"), "{first:.200}");
    let second = html.split("<tr id=\"process-row-1\">").nth(1).unwrap();
    assert!(second.starts_with("<td>rank 6</td>"), "{second:.200}");
    assert!(
        html.contains("<p class=\"rest\" id=\"process-rest\">275 more processes: "),
        "the others added up"
    );
    let called_out = html
        .split("<ul class=\"called-out\">")
        .nth(1)
        .and_then(|s| s.split("</ul>").next())
        .expect("rank 137 called out");
    assert!(called_out.contains("rank 137"), "{called_out}");
    assert!(!called_out.contains("rank 6 "), "{called_out}");
    assert!(!html.contains("<table id=\"processes\">"));
    assert!(
        std::fs::metadata(&page).unwrap().len() < 400_000,
        "the page stays small"
    );

    let Some(chromium) =
        chromium_for("cli_view_of_many_processes_lists_the_top_and_finds_any_in_chromium")
    else {
        return;
    };
    let url = |find: &str| format!("file://{}#find={find}", page.display());
    let dom = settled_dom(&chromium, &url("rank%20250"), &dir.join("profile"));
    assert!(dom.contains("data-rendered=\"yes\""), "{dom}");
    assert!(!dom.contains("data-error=\""), "{dom}");
    assert!(dom.contains("data-found=\"1\""), "one process: {dom}");
    let found = dom.split("id=\"found\"").nth(1).unwrap();
    assert_eq!(found.matches("<tr class=\"found-process\"").count(), 1);
    assert!(
        found.contains("<td>rank 250</td><td></td><td class=\"num\">250</td><td>node031</td><td class=\"num\">10250</td><td>complete</td>"),
        "{found}"
    );
    assert!(found.contains("r250.json"), "its report file: {found}");
    // A host: its eight ranks.
    let dom = settled_dom(&chromium, &url("node010"), &dir.join("profile"));
    assert!(dom.contains("data-found=\"8\""), "{dom}");
    let found = dom.split("id=\"found\"").nth(1).unwrap();
    for rank in 80..88 {
        assert!(found.contains(&format!("<td>rank {rank}</td>")), "{found}");
    }
}

/// The page's answer at a moment says the events lost before it (issue 51), as `--at` does: a
/// history that lost 7 events between 400 and 450 ms, read at its end and before the loss.
#[test]
fn cli_view_says_the_events_lost_before_a_moment_in_chromium() {
    let Some(chromium) = chromium_for("cli_view_says_the_events_lost_before_a_moment_in_chromium")
    else {
        return;
    };
    let dir = support::scratch_dir("cli-view-lost");
    let history = crate::cli_history::lost_history(&dir);
    let page = dir.join("h.html");
    write_page(&page, &[history]);
    let list_at = |ms: f64| {
        let dom = rendered_url(
            &chromium,
            &format!("file://{}#at={ms}", page.display()),
            &dir.join("profile"),
        );
        dom.split("class=\"history-at\"")
            .nth(1)
            .unwrap_or_else(|| panic!("no list at {ms}: {dom}"))
            .split("</p>")
            .next()
            .unwrap()
            .to_string()
    };
    let at_end = list_at(990.0);
    assert!(
        at_end.contains(
            "3.0 MiB — NOT WHOLE: 7 events lost before this moment (the last at 400 ms–450 ms): a \
             row may hold an allocation freed in a lost window, or miss one made in it"
        ),
        "{at_end}"
    );
    let before = list_at(200.0);
    assert!(before.contains("1.0 MiB"), "{before}");
    assert!(!before.contains("NOT WHOLE"), "{before}");
}

/// The history's timeline says the stream of each allocation made on one other than the
/// default: a run that allocates on two streams and the per-thread default stream, asked at its
/// end, lists each with its stream (`, on stream 0x…`), and the default stream's without one.
#[test]
fn cli_view_says_the_streams_of_the_allocations_listed() {
    let Some(chromium) = chromium_for("cli_view_says_the_streams_of_the_allocations_listed") else {
        return;
    };
    let dir = support::scratch_dir("cli-view-streams");
    let out = support::run(
        &mut support::shim_command(&support::c_program("history_streams"), &dir.join("r.json")),
        true,
    );
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let page = dir.join("r.html");
    write_page(&page, &[dir.join("r.json")]);
    // The history's end, where every allocation the program kept is live and the two it freed
    // are gone.
    let at_end = Command::new(&support::artifacts().cuguard)
        .args(["summary", "--at", "end", "--format", "json"])
        .arg(dir.join("r.json"))
        .output()
        .unwrap();
    let at_end: serde_json::Value = serde_json::from_slice(&at_end.stdout).unwrap();
    let end = at_end["at_ms"].as_f64().unwrap();
    let dom = rendered_url(
        &chromium,
        &format!("file://{}#at={end}", page.display()),
        &dir.join("profile"),
    );
    let list = dom
        .split("largest allocations then: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no list: {dom}"))
        .split('<')
        .next()
        .unwrap();
    let streams: Vec<&str> = said["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    // 2 MiB on the first stream, 3 MiB and 5 MiB on the second, 7 MiB on the per-thread
    // default stream (0x2), 6 MiB on the legacy stream and 4 MiB by cuMemAlloc: no stream said.
    for (size, stream) in [
        ("2.0 MiB", Some(streams[0])),
        ("3.0 MiB", Some(streams[1])),
        ("5.0 MiB", Some(streams[1])),
        ("7.0 MiB", Some("0x2")),
        ("6.0 MiB", None),
        ("4.0 MiB", None),
    ] {
        // Items are `SIZE SITE (from T[, on stream S])`, joined by ", ".
        let item = list
            .split("), ")
            .find(|i| i.starts_with(size))
            .map(|i| i.trim_end_matches(')').to_string() + ")")
            .unwrap_or_else(|| panic!("{size}: {list}"));
        match stream {
            Some(s) => assert!(item.ends_with(&format!("on stream {s})")), "{size}: {item}"),
            None => assert!(!item.contains("on stream"), "{size}: {item}"),
        }
    }
}

/// The program's tags (`tag_steps`, see `cli_tags.rs`) on the history's timeline: at the peak,
/// where every allocation is live, each of the largest allocations listed says its tag after its
/// site (`[kv_cache]`), the one given after the fact (`activations`) included, and the untagged
/// one says none.
#[test]
fn cli_view_says_the_tags_of_the_allocations_listed() {
    let Some(chromium) = chromium_for("cli_view_says_the_tags_of_the_allocations_listed") else {
        return;
    };
    let dir = support::scratch_dir("cli-view-tags");
    let (report, site) = crate::cli_tags::tagged_run(&dir);
    let page = dir.join("r.html");
    write_page(&page, &[report]);
    // The page shows the history's peak when no moment is asked.
    let dom = rendered_dom(&chromium, &page, &dir.join("profile"));
    let list = dom
        .split("largest allocations then: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no list: {dom}"))
        .split('<')
        .next()
        .unwrap();
    // Items are `SIZE SERIES[ [TAG]] (from T)`, joined by ", "; a series is the site and its
    // caller.
    let mut items: Vec<(String, Option<String>)> = list
        .split("), ")
        .map(|i| {
            let (head, _) = i
                .rsplit_once(" (from ")
                .unwrap_or_else(|| panic!("{i}: {list}"));
            let (size, series) = head.split_at(head.find(" MiB ").unwrap() + 4);
            let (series, tag) = match series.strip_suffix(']') {
                Some(s) => {
                    let (series, tag) = s.rsplit_once(" [").unwrap();
                    (series, Some(tag.to_string()))
                }
                None => (series, None),
            };
            let site = series.trim().split(" ← ").next().unwrap().to_string();
            (format!("{size} {site}"), tag)
        })
        .collect();
    items.sort();
    let tagged = |size: &str, name: &str, tag: Option<&str>| {
        (format!("{size} {}", site[name]), tag.map(str::to_string))
    };
    let mut want = vec![
        tagged("32.0 MiB", "kv", Some("kv_cache")),
        tagged("32.0 MiB", "kv", Some("kv_cache")),
        tagged("16.0 MiB", "weights", Some("weights")),
        tagged("8.0 MiB", "late", Some("activations")),
        tagged("8.0 MiB", "scratch", Some("scratch")),
        tagged("4.0 MiB", "temp", Some("scratch")),
        tagged("2.0 MiB", "plain", None),
    ];
    want.sort();
    assert_eq!(items, want, "{list}");
}

/// The program's phases, marked through the shim's C ABI as NVTX ranges are recorded: bands
/// above the history's timeline, the three steps in one lane at increasing x labelled
/// `step #1`..`step #3`, `forward` in the lane below, each with its span and peak (112, 152
/// and 192 MiB for the steps, as `summary --by phase` counts them).
#[test]
fn cli_view_draws_the_program_s_phases_above_the_timeline_in_chromium() {
    let Some(chromium) =
        chromium_for("cli_view_draws_the_program_s_phases_above_the_timeline_in_chromium")
    else {
        return;
    };
    let dir = support::scratch_dir("cli-view-phases");
    support::run(
        &mut support::shim_command(&support::c_program("history_phases"), &dir.join("r.json")),
        true,
    );
    let page = dir.join("r.html");
    let html = write_page(&page, &[dir.join("r.json")]);
    assert!(html.contains("The program's phases (NVTX ranges, cuguard.phase) are the bands"));
    let dom = rendered_dom(&chromium, &page, &dir.join("profile"));
    assert!(dom.contains("data-rendered=\"yes\""), "{dom}");
    assert!(!dom.contains("data-error=\""), "{dom}");
    let svg = dom
        .split("<svg class=\"history-phases\"")
        .nth(1)
        .and_then(|rest| rest.split("</svg>").next())
        .unwrap_or_else(|| panic!("no phases drawn: {dom}"));
    // Each band: `<g class="phase" data-label="…" data-x="…"><rect …><text …>…</text><title>`.
    let bands: Vec<(String, f64, String)> = svg
        .split("<g class=\"phase\" data-label=\"")
        .skip(1)
        .map(|g| {
            let (label, rest) = g.split_once('"').unwrap();
            let x = rest.split("data-x=\"").nth(1).unwrap();
            let x: f64 = x.split('"').next().unwrap().parse().unwrap();
            let title = rest.split("<title>").nth(1).unwrap();
            let title = title.split("</title>").next().unwrap();
            (label.to_string(), x, title.to_string())
        })
        .collect();
    let labels: Vec<&str> = bands.iter().map(|b| b.0.as_str()).collect();
    assert_eq!(
        labels,
        [
            "load #1",
            "step #1",
            "forward #1",
            "step #2",
            "forward #2",
            "step #3",
            "forward #3"
        ],
        "{svg}"
    );
    let steps: Vec<&(String, f64, String)> =
        bands.iter().filter(|b| b.0.starts_with("step")).collect();
    assert!(
        steps[0].1 < steps[1].1 && steps[1].1 < steps[2].1,
        "increasing x: {steps:?}"
    );
    for (step, peak) in steps.iter().zip(["112.0 MiB", "152.0 MiB", "192.0 MiB"]) {
        assert!(
            step.2.contains(&format!("; peak {peak} at ")) && step.2.contains("; thread "),
            "{step:?}"
        );
    }
    // Each step's label is drawn on it; `forward` a lane below (depth 1).
    assert_eq!(
        svg.matches("class=\"phase-label\">step #").count(),
        3,
        "{svg}"
    );
    assert!(
        bands
            .iter()
            .all(|b| !b.0.starts_with("forward") || b.2.contains(", depth 1"))
    );
}

/// PyTorch's tensors inside its cache's segments (`torch_blocks.rs`'s stand-in run): the page,
/// opened on the history's peak (the step's temporary just carved), lists what was live by
/// series: the tensors at their lines and the segments' rest as the cache's idle bytes, as
/// `summary --at phase:step` says them; after the step (`#at=` the pause), the temporary's
/// bytes read idle.
#[test]
fn cli_view_draws_pytorch_s_tensors_inside_their_segments_in_chromium() {
    let Some(chromium) =
        chromium_for("cli_view_draws_pytorch_s_tensors_inside_their_segments_in_chromium")
    else {
        return;
    };
    let (dir, _) = crate::torch_blocks::torch_run("cli-view-tensors", &[]);
    let page = dir.join("r.html");
    write_page(&page, &[dir.join("r.json")]);
    // The rows of the "live at" table: (bytes, series' site).
    let rows = |dom: &str| -> Vec<(String, String)> {
        let table = dom
            .split("<table class=\"history-list\">")
            .nth(1)
            .unwrap_or_else(|| panic!("no table: {dom}"))
            .split("</table>")
            .next()
            .unwrap();
        table
            .split("<tr>")
            .skip(1)
            .map(|tr| {
                let cells: Vec<&str> = tr
                    .split("<td")
                    .skip(1)
                    .map(|td| td.split('>').nth(1).unwrap().split('<').next().unwrap())
                    .collect();
                (cells[0].to_string(), cells[1].to_string())
            })
            .collect()
    };
    let line = |marker: &str| format!("torch_blocks.py:{}", crate::torch_blocks::line_of(marker));
    let idle = "idle in a cache: freed, kept for reuse".to_string();
    let at_line = |(bytes, label): (String, String)| {
        let place = if label == idle {
            label
        } else {
            label.split(['(', ')']).nth(1).unwrap_or(&label).to_string()
        };
        (bytes, place)
    };
    let dom = rendered_dom(&chromium, &page, &dir.join("profile"));
    let peak: Vec<_> = rows(&dom).into_iter().map(at_line).collect();
    assert_eq!(
        peak,
        [
            ("4.0 MiB".to_string(), line("# temporary")),
            ("3.0 MiB".to_string(), line("# activations")),
            ("2.0 MiB".to_string(), idle.clone()),
            ("1.0 MiB".to_string(), line("# weights")),
        ],
        "{dom}"
    );
}
