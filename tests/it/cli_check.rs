//! `cuguard check` and `cuguard suppressions` as CI runs them: exit codes, suppressions (matching
//! and unused), baselines (pass and fail), JSON and JUnit output decoded independently; SARIF
//! and GitHub workflow commands from a C program's and a Python program's reports, pointing at
//! their lines (the SARIF validated by the SARIF Multitool).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde::Deserialize;

use crate::support;

fn fixture(name: &str) -> PathBuf {
    support::artifacts().root.join("tests/fixtures").join(name)
}

fn check(args: &[&str], paths: &[&str]) -> Output {
    Command::new(&support::artifacts().cuguard)
        .env("NO_COLOR", "1")
        .arg("check")
        .args(args)
        .args(paths.iter().map(|p| fixture(p)))
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[derive(Deserialize)]
struct JsonVerdict {
    passed: bool,
    failures: Vec<String>,
    counted_bytes: u64,
    counted_leaks: u64,
    suppressed_leaks: u64,
    sites: Vec<JsonSite>,
    suppressions: Vec<JsonRule>,
}

#[derive(Deserialize)]
struct JsonSite {
    site: String,
    status: String,
    counted_bytes: u64,
}

#[derive(Deserialize)]
struct JsonRule {
    line: usize,
    rule: String,
    matched: u64,
}

fn verdict(args: &[&str], paths: &[&str]) -> (i32, JsonVerdict) {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    let out = check(&all, paths);
    let code = out.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        code,
        serde_json::from_slice(&out.stdout).expect("check --format json is JSON"),
    )
}

#[test]
fn cli_check_exit_codes() {
    let out = check(&[], &["leaks-two-contexts.json"]);
    assert_eq!(out.status.code(), Some(1), "any leak fails by default");
    assert!(text(&out).starts_with("cuguard check: FAIL: 1 report, 15.0 MiB leaked in 5 leaks\n"));
    let out = check(
        &["--max-leaked-bytes", "16MiB", "--max-leaks", "5"],
        &["leaks-two-contexts.json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).starts_with("cuguard check: PASS"));
    let out = check(
        &["--max-leaked-bytes", "16MiB", "--max-leaks", "4"],
        &["leaks-two-contexts.json"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("5 leaks exceed --max-leaks 4"));
    // Events fail even without leaks over the limit, unless allowed.
    let loose = ["--max-leaked-bytes", "1GiB", "--max-leaks", "100"];
    assert_eq!(check(&loose, &["events.json"]).status.code(), Some(1));
    let mut none = loose.to_vec();
    none.extend(["--fail-on-events", "none"]);
    assert_eq!(check(&none, &["events.json"]).status.code(), Some(0));
    // Usage and input errors are 2.
    let out = check(&["--max-leaks", "lots"], &["events.json"]);
    assert_eq!(out.status.code(), Some(2));
    let out = check(&["--suppressions", "/nonexistent/supp"], &["events.json"]);
    assert_eq!(out.status.code(), Some(2));
    let out = check(&[], &["no-such-report.json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn cli_check_suppressions_matching_and_unused() {
    let dir = support::scratch_dir("cli-check-supp");
    let supp = dir.join("supp");
    std::fs::write(
        &supp,
        "# known\nleak:make_buffers\nleak:libscratch.so api:cuMemAlloc_v2\nleak:no_such_function\nmemory:pitched\n",
    )
    .unwrap();
    let (code, v) = verdict(
        &["--suppressions", supp.to_str().unwrap()],
        &["leaks-two-contexts.json"],
    );
    assert_eq!(code, 1, "one cuMemAlloc_v2 at worker_loop is left");
    assert_eq!(v.suppressed_leaks, 4);
    assert_eq!((v.counted_bytes, v.counted_leaks), (1_048_576, 1));
    assert_eq!(v.sites.len(), 1);
    assert_eq!(v.sites[0].site, "worker_loop");
    let used: Vec<(usize, u64)> = v.suppressions.iter().map(|r| (r.line, r.matched)).collect();
    assert_eq!(used, [(2, 2), (3, 1), (4, 0), (5, 1)]);
    assert_eq!(v.suppressions[2].rule, "leak:no_such_function");
    let out = check(
        &["--suppressions", supp.to_str().unwrap()],
        &["leaks-two-contexts.json"],
    );
    let t = text(&out);
    assert!(
        t.contains(&format!(
            "unused suppressions\n  {}:4: leak:no_such_function\n",
            supp.display()
        )),
        "{t}"
    );

    std::fs::write(&supp, "leak:ok\nthis is not a rule\n").unwrap();
    let out = check(
        &["--suppressions", supp.to_str().unwrap()],
        &["events.json"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("supp:2: \"this\" is not TYPE:PATTERN"),
        "{err}"
    );
}

#[test]
fn cli_check_baseline_pass_and_fail() {
    let base = fixture("leaks-two-contexts.json");
    let base = base.to_str().unwrap();
    let (code, v) = verdict(&["--baseline", base], &["leaks-two-contexts.json"]);
    assert_eq!(code, 0, "{:?}", v.failures);
    assert!(v.passed);
    assert!(v.sites.iter().all(|s| s.status == "baselined"));
    let (code, v) = verdict(&["--baseline", base], &["merged.json"]);
    assert_eq!(code, 1);
    assert_eq!(v.sites[0].site, "<no stack>");
    assert_eq!(v.sites[0].status, "new");
    assert_eq!(v.sites[0].counted_bytes, 2_147_487_744);
    assert_eq!(v.counted_bytes, 2_147_487_744);
    // The same process twice (a copy: one path given twice counts once).
    let dir = support::scratch_dir("cli-check-baseline");
    let copy = dir.join("copy.json");
    std::fs::copy(fixture("leaks-two-contexts.json"), &copy).unwrap();
    let (code, v) = verdict(
        &["--baseline", base],
        &["leaks-two-contexts.json", copy.to_str().unwrap()],
    );
    assert_eq!(code, 1, "a site that doubled has grown");
    assert!(v.sites.iter().all(|s| s.status == "grown"));
    let out = check(&["--baseline", base], &["merged.json"]);
    assert!(
        text(&out).contains("2.0 GiB  2 leaks  new  <no stack>"),
        "{}",
        text(&out)
    );
}

#[test]
fn cli_check_junit() {
    let out = check(&["--format", "junit"], &["merged.json", "events.json"]);
    assert_eq!(out.status.code(), Some(1));
    let xml = text(&out);
    assert!(xml.starts_with("<?xml"));
    assert!(
        xml.contains(r#"<testsuite name="cuguard check" tests="4" failures="4""#),
        "{xml}"
    );
    assert!(xml.contains(r#"name="python3.12[777] (ci-runner-3)""#));
    assert!(xml.contains("2 × double_free at cupy_cuda_memory_free"));
    assert_eq!(
        xml.matches("<testcase").count(),
        xml.matches("</testcase>").count()
    );
}

#[test]
fn cli_suppressions_generates_a_file_that_passes_check() {
    let dir = support::scratch_dir("cli-gen-supp");
    let supp = dir.join("generated.supp");
    let out = Command::new(&support::artifacts().cuguard)
        .args(["suppressions", "-o"])
        .arg(&supp)
        .arg(fixture("leaks-two-contexts.json"))
        .arg(fixture("events.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
    let rules = std::fs::read_to_string(&supp).unwrap();
    assert!(rules.contains("\nsite:^make_buffers$\n"), "{rules}");
    let (code, v) = verdict(
        &[
            "--suppressions",
            supp.to_str().unwrap(),
            "--fail-on-events",
            "all",
        ],
        &["leaks-two-contexts.json", "events.json"],
    );
    assert_eq!(code, 0, "{:?}", v.failures);
    assert!(v.suppressions.iter().all(|r| r.matched > 0));
}

#[test]
fn cli_check_a_limit_on_one_measure_leaves_the_other_unlimited() {
    // 5 leaks, 15.0 MiB: the byte limit alone no longer fails on the count.
    let out = check(
        &["--max-leaked-bytes", "100000000"],
        &["leaks-two-contexts.json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = check(&["--max-leaks", "5"], &["leaks-two-contexts.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = check(
        &["--max-leaked-bytes", "1MiB"],
        &["leaks-two-contexts.json"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).starts_with(
            "cuguard check: FAIL: 1 report, 15.0 MiB leaked in 5 leaks\n  ✗ 15.0 MiB in leaks exceeds --max-leaked-bytes 1.0 MiB\nleak sites\n"
        ),
        "{}",
        text(&out)
    );
    let (_, v) = verdict(&["--max-leaks", "5"], &["leaks-two-contexts.json"]);
    assert!(v.passed);
    let out = check(
        &["--format", "json", "--max-leaks", "5"],
        &["leaks-two-contexts.json"],
    );
    let limits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        limits["limits"]["max_leaked_bytes"],
        serde_json::Value::Null
    );
    assert_eq!(limits["limits"]["max_leaks"], 5);
}

#[test]
fn cli_check_counts_the_programs_own_leaks_unless_told() {
    let out = check(&[], &["attribution.json"]);
    assert_eq!(out.status.code(), Some(1));
    let t = text(&out);
    assert!(
        t.starts_with("cuguard check: FAIL: 1 report, 1.5 MiB leaked in 2 leaks\n"),
        "{t}"
    );
    assert!(
        t.contains(
            "not checked (--owners to include them)\n  22.0 MiB  2 leaks  PyTorch's caching allocator\n   4.0 MiB   1 leak  cuBLAS/cuBLASLt\n"
        ),
        "{t}"
    );
    // The program's 1.5 MiB fit under 2 MiB; the cache's do not.
    let out = check(&["--max-leaked-bytes", "2MiB"], &["attribution.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = check(
        &["--max-leaked-bytes", "2MiB", "--owners", "framework_cache"],
        &["attribution.json"],
    );
    assert_eq!(out.status.code(), Some(1));
    let (code, v) = verdict(&["--owners", "all"], &["attribution.json"]);
    assert_eq!(code, 1);
    assert_eq!(v.counted_leaks, 5);
    let out = check(&["--owners", "PyTorch cache"], &["attribution.json"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad --owners is a usage error"
    );
}

#[test]
fn cli_check_max_growth_names_the_site() {
    let loose = ["--max-leaked-bytes", "1GiB"];
    let mut args = loose.to_vec();
    args.extend(["--max-growth", "100MiB"]);
    let out = check(&args, &["attribution.json"]);
    assert_eq!(out.status.code(), Some(1));
    let t = text(&out);
    assert!(
        t.contains("  ✗ append_batch (train.py:7) grew by 384.0 MiB over 6.0 s in python3.12[5150] (more than --max-growth 100.0 MiB)\n"),
        "{t}"
    );
    assert!(
        t.contains("growing\n  +384.0 MiB  over 6.0 s  append_batch (train.py:7)  python3.12[5150]  fails\n"),
        "{t}"
    );
    let mut args = loose.to_vec();
    args.extend(["--max-growth", "1GiB"]);
    assert_eq!(check(&args, &["attribution.json"]).status.code(), Some(0));
    // Without --max-growth, growth is mentioned and does not fail.
    let out = check(&loose, &["attribution.json"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).contains(
        "1 site grew while running (cuguard summary lists them; --max-growth SIZE fails on them)\n"
    ));
    let out = check(
        &[
            "--format",
            "junit",
            "--max-leaked-bytes",
            "1GiB",
            "--max-growth",
            "1MiB",
        ],
        &["attribution.json"],
    );
    assert!(
        text(&out).contains("append_batch (train.py:7) grew by 384.0 MiB"),
        "{}",
        text(&out)
    );
}

#[test]
fn cli_check_help_states_the_defaults() {
    let out = Command::new(&support::artifacts().cuguard)
        .args(["check", "--help"])
        .output()
        .unwrap();
    let t = text(&out);
    for want in [
        "with neither --max-leaked-bytes nor --max-leaks, both are 0",
        "Given one, only that measure is limited",
        "--owners <LIST>",
        "Default: the program's only",
        "--max-growth <SIZE>",
        "Default: growth is not checked",
    ] {
        assert!(t.contains(want), "{want:?} in:\n{t}");
    }
}

/// Runs `stack_named` under the shim into a fresh directory; returns the report's path and the
/// program's lines (`kind 0xaddr line [caller line]`).
fn stack_named_report(test: &str) -> (PathBuf, Vec<Vec<String>>) {
    let program = support::c_program("stack_named");
    let dir = support::scratch_dir(test);
    let report = dir.join("report.json");
    let out = support::run(&mut support::shim_command(&program, &report), true);
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    (report, lines)
}

fn check_report(args: &[&str], report: &std::path::Path) -> Output {
    Command::new(&support::artifacts().cuguard)
        .env("NO_COLOR", "1")
        .arg("check")
        .args(args)
        .arg(report)
        .output()
        .unwrap()
}

fn workloads_dir() -> String {
    let dir = support::artifacts().root.join("harness/workloads/c");
    dir.to_str().unwrap().to_string()
}

/// The lines `stack_named` allocated at, sorted.
fn allocation_lines(lines: &[Vec<String>]) -> Vec<u64> {
    let mut want: Vec<u64> = lines.iter().map(|w| w[2].parse().unwrap()).collect();
    want.sort();
    want
}

#[test]
fn cli_check_sarif_points_at_the_leaking_lines() {
    let root = workloads_dir();
    let mut fingerprints = Vec::new();
    for run in ["cli-check-sarif-1", "cli-check-sarif-2"] {
        let (report, lines) = stack_named_report(run);
        assert_eq!(lines.len(), 4, "{lines:?}");
        let out = check_report(&["--format", "sarif", "--source-root", &root], &report);
        assert_eq!(
            out.status.code(),
            Some(1),
            "the format leaves the verdict alone"
        );
        let log: serde_json::Value = serde_json::from_slice(&out.stdout).expect("SARIF is JSON");
        assert_eq!(log["version"], "2.1.0");
        let run0 = &log["runs"][0];
        assert_eq!(run0["tool"]["driver"]["name"], "cuguard");
        let rules = run0["tool"]["driver"]["rules"].as_array().unwrap();
        assert!(rules.iter().any(|r| r["id"] == "cuguard/leak"), "{rules:?}");
        let base = run0["originalUriBaseIds"]["%SRCROOT%"]["uri"]
            .as_str()
            .unwrap();
        assert!(
            base.starts_with("file:///") && base.ends_with('/'),
            "{base}"
        );
        let results = run0["results"].as_array().unwrap();
        assert_eq!(
            results.len(),
            4,
            "one result per leaking site: {results:#?}"
        );
        let mut got = Vec::new();
        let mut prints = Vec::new();
        for r in results {
            assert_eq!(r["ruleId"], "cuguard/leak");
            assert_eq!(r["level"], "error");
            let text = r["message"]["text"].as_str().unwrap();
            assert!(
                text.contains("leaked in 1 allocation") && text.contains("1 process"),
                "{text}"
            );
            let physical = &r["locations"][0]["physicalLocation"];
            assert_eq!(physical["artifactLocation"]["uri"], "stack_named.c", "{r}");
            assert_eq!(physical["artifactLocation"]["uriBaseId"], "%SRCROOT%");
            got.push(physical["region"]["startLine"].as_u64().unwrap());
            prints.push(
                r["partialFingerprints"]["cuguard/v1"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        got.sort();
        assert_eq!(got, allocation_lines(&lines));
        prints.sort();
        fingerprints.push(prints);

        // No file under the root: no physical location, but the function still.
        let elsewhere = report.parent().unwrap().to_str().unwrap().to_string();
        let out = check_report(&["--format", "sarif", "--source-root", &elsewhere], &report);
        assert_eq!(out.status.code(), Some(1));
        let log: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for r in log["runs"][0]["results"].as_array().unwrap() {
            let loc = &r["locations"][0];
            assert!(loc.get("physicalLocation").is_none(), "{r}");
            assert!(loc["logicalLocations"][0]["name"].as_str().is_some(), "{r}");
        }
    }
    assert_eq!(
        fingerprints[0], fingerprints[1],
        "the same code, the same fingerprints"
    );
    let mut distinct = fingerprints[0].clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "one fingerprint per site");
}

#[test]
fn cli_check_sarif_keeps_suppressed_sites() {
    let (report, lines) = stack_named_report("cli-check-sarif-supp");
    let supp = report.parent().unwrap().join("supp");
    std::fs::write(&supp, "leak:thread_start\n").unwrap();
    let out = check_report(
        &[
            "--format",
            "sarif",
            "--source-root",
            &workloads_dir(),
            "--suppressions",
            supp.to_str().unwrap(),
        ],
        &report,
    );
    assert_eq!(out.status.code(), Some(1), "three sites still fail");
    let log: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 4, "{results:#?}");
    let thread_line: u64 = lines.iter().find(|w| w[0] == "thread").unwrap()[2]
        .parse()
        .unwrap();
    for r in results {
        let line = r["locations"][0]["physicalLocation"]["region"]["startLine"]
            .as_u64()
            .unwrap();
        match r.get("suppressions") {
            Some(s) => {
                assert_eq!(line, thread_line, "{r}");
                assert_eq!(s[0]["kind"], "external", "{r}");
                assert_eq!(r["level"], "note", "{r}");
            }
            None => assert_ne!(line, thread_line, "{r}"),
        }
    }
}

#[test]
fn cli_check_github_annotates_each_failing_site() {
    let (report, lines) = stack_named_report("cli-check-github");
    let out = check_report(
        &["--format", "github", "--source-root", &workloads_dir()],
        &report,
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "the format leaves the verdict alone"
    );
    let text = text(&out);
    let commands: Vec<&str> = text.lines().collect();
    assert_eq!(commands.len(), 4, "one command per failing site: {text}");
    let mut got = Vec::new();
    for c in &commands {
        let rest = c
            .strip_prefix("::error file=stack_named.c,line=")
            .unwrap_or_else(|| panic!("{c}"));
        let (line, rest) = rest.split_once(',').unwrap();
        got.push(line.parse::<u64>().unwrap());
        assert!(rest.starts_with("title=cuguard leak::"), "{c}");
        assert!(rest.contains("leaked in 1 allocation"), "{c}");
    }
    got.sort();
    assert_eq!(got, allocation_lines(&lines));

    // Nothing under the root: the commands name no file.
    let elsewhere = report.parent().unwrap().to_str().unwrap().to_string();
    let out = check_report(
        &["--format", "github", "--source-root", &elsewhere],
        &report,
    );
    assert_eq!(out.status.code(), Some(1));
    let text = self::text(&out);
    assert_eq!(text.lines().count(), 4, "{text}");
    assert!(
        text.lines()
            .all(|l| l.starts_with("::error title=cuguard leak::")),
        "{text}"
    );

    // A passing check says nothing.
    let out = check_report(&["--format", "github", "--max-leaks", "10"], &report);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(self::text(&out), "");
}

/// The SARIF Multitool: `$SARIF_MULTITOOL`, or `sarif-multitool` on `PATH` (`npm install -g
/// @microsoft/sarif-multitool`; `.ci/run` installs it).
pub(crate) fn sarif_multitool() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SARIF_MULTITOOL") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("sarif-multitool"))
        .find(|p| p.is_file())
}

#[test]
fn cli_check_sarif_passes_the_sarif_multitool() {
    let test = "cli_check_sarif_passes_the_sarif_multitool";
    let Some(tool) = sarif_multitool() else {
        support::missing(
            test,
            "the SARIF Multitool is not installed (npm install -g @microsoft/sarif-multitool)",
        );
        return;
    };
    let (report, _) = stack_named_report("cli-check-sarif-valid");
    let dir = report.parent().unwrap().to_path_buf();
    let supp = dir.join("supp");
    std::fs::write(&supp, "leak:thread_start\n").unwrap();
    // Placed in the source, and not (logical locations only); with a suppressed site.
    for (name, root) in [
        ("in.sarif", workloads_dir()),
        ("out.sarif", dir.to_str().unwrap().to_string()),
    ] {
        let out = check_report(
            &[
                "--format",
                "sarif",
                "--source-root",
                &root,
                "--suppressions",
                supp.to_str().unwrap(),
            ],
            &report,
        );
        assert_eq!(out.status.code(), Some(1));
        let log = dir.join(name);
        std::fs::write(&log, &out.stdout).unwrap();
        validate_sarif(&tool, &log);
    }
    // A Python program's, placed in its script.
    let py = support::scratch_dir("cli-check-sarif-valid-py");
    let Some(_) = support::python_program(test, &py, "profile_leak", "r.json", &["2"]) else {
        return;
    };
    let root = py.to_str().unwrap().to_string();
    let out = check_report(
        &["--format", "sarif", "--source-root", &root],
        &py.join("r.json"),
    );
    assert_eq!(out.status.code(), Some(1));
    let log = py.join("py.sarif");
    std::fs::write(&log, &out.stdout).unwrap();
    validate_sarif(&tool, &log);
}

/// Validates the SARIF log at `log` with the SARIF Multitool: no error or warning.
pub(crate) fn validate_sarif(tool: &std::path::Path, log: &std::path::Path) {
    let name = log.file_name().unwrap().to_string_lossy().into_owned();
    let verdict = log.with_extension("sarif.validation");
    let run = Command::new(tool)
        // .NET without ICU (CI's image may lack it): no culture data is needed here.
        .env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
        .arg("validate")
        .arg("-o")
        .arg(&verdict)
        .arg(log)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(run.status.success(), "{said}");
    let found: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&verdict).unwrap()).expect("its log is JSON");
    // Allowed: SARIF2005's advice that the driver name an `informationUri`. The property is
    // optional in SARIF 2.1.0 and cuguard has no public site to name (`src/check/sarif_log.rs`).
    let no_information_uri = |r: &serde_json::Value| {
        r["ruleId"] == "SARIF2005" && r["message"]["id"] == "Warning_ProvideToolnformationUri"
    };
    let problems: Vec<_> = found["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| matches!(r["level"].as_str(), Some("error") | Some("warning") | None))
        .filter(|r| !no_information_uri(r))
        .collect();
    assert!(problems.is_empty(), "{name}: {said}");
    let text = std::fs::read_to_string(log).unwrap();
    assert!(
        !text.contains("example.invalid"),
        "{name}: a placeholder URI"
    );
}

/// Runs `harness/workloads/python/profile_leak.py 2` (it loses two blocks at one line and one at
/// another) under `cuguard run --driver sim` in a fresh directory; the directory and the lines
/// (leak, weights). `None` where there is no `python3`.
fn python_leaks(test: &str, run: &str) -> Option<(PathBuf, u64, u64)> {
    let dir = support::scratch_dir(run);
    let said = support::python_program(test, &dir, "profile_leak", "r.json", &["2"])?;
    let line = |what: &str| -> u64 {
        said.lines()
            .find_map(|l| l.strip_prefix(what)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{what} in {said}"))
    };
    Some((dir.clone(), line("leak "), line("weights ")))
}

#[test]
fn cli_check_sarif_and_github_point_at_a_python_program_s_lines() {
    let test = "cli_check_sarif_and_github_point_at_a_python_program_s_lines";
    let mut fingerprints = Vec::new();
    for run in ["cli-check-sarif-py-1", "cli-check-sarif-py-2"] {
        let Some((dir, leak, weights)) = python_leaks(test, run) else {
            return;
        };
        let report = dir.join("r.json");
        let root = dir.to_str().unwrap().to_string();
        let out = check_report(&["--format", "sarif", "--source-root", &root], &report);
        assert_eq!(out.status.code(), Some(1), "lost memory fails the check");
        let log: serde_json::Value = serde_json::from_slice(&out.stdout).expect("SARIF is JSON");
        let results = log["runs"][0]["results"].as_array().unwrap();
        let mut got: Vec<(u64, String)> = results
            .iter()
            .map(|r| {
                assert_eq!(r["ruleId"], "cuguard/leak");
                let physical = &r["locations"][0]["physicalLocation"];
                assert_eq!(
                    physical["artifactLocation"]["uri"], "profile_leak.py",
                    "{r}"
                );
                assert_eq!(physical["artifactLocation"]["uriBaseId"], "%SRCROOT%");
                (
                    physical["region"]["startLine"].as_u64().unwrap(),
                    r["message"]["text"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            [leak, weights],
            "{results:#?}"
        );
        assert!(
            got[0]
                .1
                .starts_with("2.0 MiB leaked in 2 allocations (cuMemAlloc_v2)"),
            "{}",
            got[0].1
        );
        let mut prints: Vec<String> = results
            .iter()
            .map(|r| {
                r["partialFingerprints"]["cuguard/v1"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        prints.sort();
        fingerprints.push(prints);

        // GitHub: one exact line per failing site.
        let out = check_report(&["--format", "github", "--source-root", &root], &report);
        assert_eq!(out.status.code(), Some(1));
        let text = text(&out);
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort();
        assert_eq!(lines.len(), 2, "{text}");
        let process = format!(
            "python3.{}",
            lines[0]
                .split("by 1 process (python3.")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .unwrap_or_else(|| panic!("{text}"))
        );
        let want = |line: u64, what: &str, n: u32, site: &str| {
            format!(
                "::error file=profile_leak.py,line={line},title=cuguard leak::{what} leaked in {n} allocation{} (cuMemAlloc_v2) by 1 process ({process}); owner: the program; site: {site} (profile_leak.py:{line})",
                if n == 1 { "" } else { "s" }
            )
        };
        let mut expected = vec![
            want(leak, "2.0 MiB", 2, "leak_blocks"),
            want(weights, "3.0 MiB", 1, "load_weights"),
        ];
        expected.sort();
        assert_eq!(lines, expected);
    }
    assert_eq!(
        fingerprints[0], fingerprints[1],
        "the same code, the same fingerprints"
    );
    assert_ne!(fingerprints[0][0], fingerprints[0][1]);
}

/// `cuguard check` of `paths` as given (not fixtures), in `dir`.
fn check_in(dir: &std::path::Path, args: &[&str], paths: &[&str]) -> Output {
    Command::new(&support::artifacts().cuguard)
        .env("NO_COLOR", "1")
        .current_dir(dir)
        .arg("check")
        .args(args)
        .args(paths)
        .output()
        .unwrap()
}

#[test]
fn cli_check_refuses_an_input_with_no_report() {
    let dir = support::scratch_dir("cli-check-empty");
    std::fs::create_dir_all(dir.join("cuguard-reports")).unwrap();
    std::fs::create_dir_all(dir.join("other/deeper")).unwrap();
    std::fs::write(dir.join("other/notes.txt"), "not a report\n").unwrap();
    let hint = "(did the program run under cuguard? --allow-empty passes an empty input)";
    for (paths, shown) in [
        (&["cuguard-reports/"][..], "cuguard-reports/"),
        (
            &["cuguard-reports/cuguard.*.json"],
            "cuguard-reports/cuguard.*.json",
        ),
        (
            &["cuguard-reports", "other", "cuguard-reports/*.json"],
            "cuguard-reports, other, cuguard-reports/*.json",
        ),
    ] {
        for format in ["text", "json", "junit", "sarif", "github"] {
            let out = check_in(&dir, &["--format", format], paths);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{paths:?} {format}: {err}");
            assert_eq!(
                err,
                format!("cuguard: error: no report in {shown} {hint}\n"),
                "{paths:?} {format}"
            );
            assert!(
                out.stdout.is_empty(),
                "{paths:?} {format}: before any output"
            );
        }
        // --allow-empty: the old answer.
        let out = check_in(&dir, &["--allow-empty"], paths);
        assert_eq!(out.status.code(), Some(0), "{paths:?}");
        assert_eq!(
            text(&out),
            "cuguard check: PASS: 0 reports, 0 B leaked in 0 leaks\n",
            "{paths:?}"
        );
        assert!(out.stderr.is_empty(), "{paths:?}");
    }
    // A glob that matches nothing beside PATHs that do hold reports is still a mistake.
    let report = fixture("events.json");
    let out = check_in(
        &dir,
        &["--allow-empty"],
        &[report.to_str().unwrap(), "cuguard-reports/*.json"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "cuguard: error: cuguard-reports/*.json: no file matches\n"
    );
}

#[test]
fn cli_check_sarif_rules_say_what_they_mean_and_what_to_do() {
    // An event kind cuguard has no rule for gets one of its own, with help too.
    let dir = support::scratch_dir("cli-check-sarif-help");
    let events = std::fs::read_to_string(fixture("events.json")).unwrap();
    let future = dir.join("future.json");
    std::fs::write(
        &future,
        events.replacen("\"invalid_free\"", "\"future_kind\"", 1),
    )
    .unwrap();
    let out = check_in(
        &dir,
        &["--format", "sarif", "--fail-on-events", "all"],
        &[
            fixture("leaks-two-contexts.json").to_str().unwrap(),
            future.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let raw = text(&out);
    assert!(!raw.contains("example.invalid"), "a placeholder URI: {raw}");
    let log: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let driver = &log["runs"][0]["tool"]["driver"];
    if let Some(uri) = driver.get("informationUri") {
        assert!(uri.as_str().unwrap().starts_with("https://"), "{uri}");
    }
    let rules = driver["rules"].as_array().unwrap();
    assert!(
        rules.iter().any(|r| r["id"] == "cuguard/future_kind"),
        "{rules:#?}"
    );
    for rule in rules {
        for text in [
            &rule["shortDescription"]["text"],
            &rule["fullDescription"]["text"],
            &rule["help"]["text"],
            &rule["help"]["markdown"],
        ] {
            let text = text.as_str().unwrap_or_default();
            assert!(!text.trim().is_empty(), "{rule:#}");
            assert!(!text.contains('\n'), "{rule:#}");
        }
        let help = rule["help"]["text"].as_str().unwrap();
        assert!(!help.contains('`'), "plain text: {help}");
        assert!(
            help.contains("cuguard suppressions") || help.contains("suppress"),
            "how to suppress it: {rule:#}"
        );
    }
    let leak = rules.iter().find(|r| r["id"] == "cuguard/leak").unwrap();
    let help = leak["help"]["text"].as_str().unwrap();
    assert!(help.contains("Free"), "{help}");
}
