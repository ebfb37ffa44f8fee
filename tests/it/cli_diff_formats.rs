//! `cuguard diff --format sarif` and `--format github` (issue 55): a warning per leak site new or
//! grown in NEW, and per site new or grown at a compared peak, at its line under `--source-root`;
//! fixed, shrunk and gone sites are not findings. The leak sites come from the fixtures the diff
//! tests read (two sides of two reports each); the peaks from `harness/workloads/c/phase_steps.c`
//! run twice on the simulated driver, the second time with step #4 taking 256 MiB more. The SARIF
//! is validated by the SARIF Multitool, and its fingerprints are the same for the same code.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::cli_check::{sarif_multitool, validate_sarif};
use crate::support::{self, artifacts, c_program, run, scratch_dir, shim_command};

fn cuguard(dir: &Path, args: &[&str]) -> Output {
    Command::new(&artifacts().cuguard)
        .current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// `cuguard diff ARGS` in `dir`, which exits 0 whatever changed; its standard output.
fn diff(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["diff"];
    all.extend_from_slice(args);
    let out = cuguard(dir, &all);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// In `dir`: `base/` (leaks-two-contexts.json, events.json) and `new/` (merged.json,
/// leaks-two-contexts.json), and `root/train.c` (empty), the file the fixtures' frames name.
fn fixture_sides(dir: &Path) {
    let fixtures = artifacts().root.join("tests/fixtures");
    for (side, files) in [
        ("base", ["leaks-two-contexts.json", "events.json"]),
        ("new", ["merged.json", "leaks-two-contexts.json"]),
    ] {
        std::fs::create_dir_all(dir.join(side)).unwrap();
        for f in files {
            std::fs::copy(fixtures.join(f), dir.join(side).join(f)).unwrap();
        }
    }
    std::fs::create_dir_all(dir.join("root")).unwrap();
    std::fs::write(dir.join("root/train.c"), "").unwrap();
}

/// The SARIF Multitool, or `None` after [`support::missing`] (a failure in CI).
fn multitool(test: &str) -> Option<PathBuf> {
    let tool = sarif_multitool();
    if tool.is_none() {
        support::missing(
            test,
            "the SARIF Multitool is not installed (npm install -g @microsoft/sarif-multitool)",
        );
    }
    tool
}

/// A result's rule, level, message, and file and line (`None` without a physical location).
fn result_row(r: &Value) -> (String, String, String, Option<(String, u64)>) {
    let physical = &r["locations"][0]["physicalLocation"];
    let at = physical.get("artifactLocation").map(|a| {
        assert_eq!(a["uriBaseId"], "%SRCROOT%", "{r}");
        (
            a["uri"].as_str().unwrap().to_string(),
            physical["region"]["startLine"].as_u64().unwrap(),
        )
    });
    (
        r["ruleId"].as_str().unwrap().to_string(),
        r["level"].as_str().unwrap().to_string(),
        r["message"]["text"].as_str().unwrap().to_string(),
        at,
    )
}

const NEW_NO_STACK: &str =
    "new leak: 2.0 GiB in 2 allocations (none in the base run); site: <no stack>";
const GROWN_MAKE_BUFFERS: &str = "grown leak: +8.0 MiB, +2 leaks: 8.0 MiB in 2 allocations → 16.0 MiB in 4 allocations; site: make_buffers (train.c:42)";
const GROWN_LIBSCRATCH: &str = "grown leak: +4.0 MiB, +1 leak: 4.0 MiB in 1 allocation → 8.0 MiB in 2 allocations; site: libscratch.so+0x1a2b";
const GROWN_WORKER_LOOP: &str = "grown leak: +3.0 MiB, +2 leaks: 3.0 MiB in 2 allocations → 6.0 MiB in 4 allocations; site: worker_loop (train.c:61)";

#[test]
fn cli_diff_github_warns_at_each_new_or_grown_leak_site() {
    let dir = scratch_dir("cli-diff-github-leaks");
    fixture_sides(&dir);
    // One line per new or grown site, at its line under the root; the fixed site is none. The
    // library's site has no file: it is placed at its first caller's.
    let got = diff(
        &dir,
        &["--format", "github", "--source-root", "root", "base", "new"],
    );
    let want = [
        format!("::warning title=cuguard leak_increase::{NEW_NO_STACK}"),
        format!("::warning file=train.c,line=42,title=cuguard leak_increase::{GROWN_MAKE_BUFFERS}"),
        format!("::warning file=train.c,line=70,title=cuguard leak_increase::{GROWN_LIBSCRATCH}"),
        format!("::warning file=train.c,line=61,title=cuguard leak_increase::{GROWN_WORKER_LOOP}"),
    ];
    assert_eq!(got.lines().collect::<Vec<_>>(), want, "{got}");

    // Without the file under the root (the current directory has no train.c): no file, no line.
    let got = diff(&dir, &["--format", "github", "base", "new"]);
    assert_eq!(got.lines().count(), 4, "{got}");
    assert!(
        got.lines()
            .all(|l| l.starts_with("::warning title=cuguard leak_increase::")),
        "{got}"
    );

    // The other way round: what was fixed is new, what grew shrank and is not a finding.
    let got = diff(
        &dir,
        &["--format", "github", "--source-root", "root", "new", "base"],
    );
    assert_eq!(
        got,
        "::warning title=cuguard leak_increase::new leak: 64.0 KiB in 1 allocation (none in the base run); site: cupy_cuda_memory_malloc\n"
    );
    // Nothing worse: nothing written.
    assert_eq!(diff(&dir, &["--format", "github", "base", "base"]), "");
}

#[test]
fn cli_diff_sarif_has_a_warning_per_new_or_grown_leak_site() {
    let test = "cli_diff_sarif_has_a_warning_per_new_or_grown_leak_site";
    let dir = scratch_dir("cli-diff-sarif-leaks");
    fixture_sides(&dir);
    let text = diff(
        &dir,
        &["--format", "sarif", "--source-root", "root", "base", "new"],
    );
    let log: Value = serde_json::from_str(&text).expect("SARIF is JSON");
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    let driver = &run["tool"]["driver"];
    assert_eq!(driver["name"], "cuguard");
    let rules: Vec<(&str, &str, &str)> = driver["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap(),
                r["name"].as_str().unwrap(),
                r["defaultConfiguration"]["level"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("cuguard/leak_increase", "LeakIncrease", "warning"),
            ("cuguard/peak_increase", "PeakIncrease", "warning"),
        ]
    );
    let root = std::fs::canonicalize(dir.join("root")).unwrap();
    assert_eq!(
        run["originalUriBaseIds"]["%SRCROOT%"]["uri"],
        format!("file://{}/", root.display())
    );
    let results = run["results"].as_array().unwrap();
    let rows: Vec<_> = results.iter().map(result_row).collect();
    let leak = |message: &str, at: Option<(&str, u64)>| {
        (
            "cuguard/leak_increase".to_string(),
            "warning".to_string(),
            message.to_string(),
            at.map(|(f, l)| (f.to_string(), l)),
        )
    };
    assert_eq!(
        rows,
        [
            leak(NEW_NO_STACK, None),
            leak(GROWN_MAKE_BUFFERS, Some(("train.c", 42))),
            leak(GROWN_LIBSCRATCH, Some(("train.c", 70))),
            leak(GROWN_WORKER_LOOP, Some(("train.c", 61))),
        ]
    );
    // A site without a file still says where it is: its function (and module).
    assert_eq!(
        results[0]["locations"][0]["logicalLocations"][0]["name"],
        "<no stack>"
    );
    assert_eq!(
        results[2]["locations"][0]["logicalLocations"][1]["fullyQualifiedName"],
        "/opt/app/lib/libscratch.so"
    );
    assert!(results.iter().all(|r| r["ruleIndex"] == 0), "{text}");
    assert_eq!(run["properties"]["cuguard"]["base"]["leaks"], 6);
    assert_eq!(run["properties"]["cuguard"]["new"]["leaks"], 12);

    // Fingerprints: one per site, the same from another directory and source root.
    let prints = |log: &Value| -> Vec<String> {
        log["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r["partialFingerprints"]["cuguard/v1"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let mut distinct = prints(&log);
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{distinct:?}");
    let elsewhere = scratch_dir("cli-diff-sarif-leaks-elsewhere");
    fixture_sides(&elsewhere);
    let again: Value =
        serde_json::from_str(&diff(&elsewhere, &["--format", "sarif", "base", "new"])).unwrap();
    assert_eq!(prints(&again), prints(&log));

    // Nothing worse: no result.
    let same: Value =
        serde_json::from_str(&diff(&dir, &["--format", "sarif", "base", "base"])).unwrap();
    assert_eq!(same["runs"][0]["results"], serde_json::json!([]));

    let Some(tool) = multitool(test) else { return };
    for (name, text) in [
        ("leaks.sarif", text),
        (
            "none.sarif",
            diff(&dir, &["--format", "sarif", "base", "base"]),
        ),
    ] {
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        validate_sarif(&tool, &file);
    }
}

/// `phase_steps` run twice in `dir`, `base.json` and `new.json` (step #4 heavier); the lines of
/// the HEAVY allocation and of keep_site's.
fn two_runs(dir: &Path) -> (u32, u32) {
    let program = c_program("phase_steps");
    run(&mut shim_command(&program, &dir.join("base.json")), true);
    let heavy = run(
        shim_command(&program, &dir.join("new.json")).arg("heavy"),
        true,
    );
    let heavy: u32 = String::from_utf8_lossy(&heavy.stdout)
        .trim()
        .parse()
        .unwrap();
    let source =
        std::fs::read_to_string(artifacts().root.join("harness/workloads/c/phase_steps.c"))
            .unwrap();
    // keep_site allocates two lines below its first.
    let keep = source
        .lines()
        .position(|l| l.contains("CUdeviceptr keep_site(size_t bytes) {"))
        .expect("keep_site in phase_steps.c") as u32
        + 3;
    (heavy, keep)
}

#[test]
fn cli_diff_sarif_and_github_warn_at_the_site_new_or_grown_at_a_peak() {
    let test = "cli_diff_sarif_and_github_warn_at_the_site_new_or_grown_at_a_peak";
    let dir = scratch_dir("cli-diff-formats-peaks");
    let (heavy, keep) = two_runs(&dir);
    let root = artifacts().root.join("harness/workloads/c");
    let root = root.to_str().unwrap();
    // The leaks are the same: only the peaks differ. heavy_site is new at the run's peak and at
    // step #4's: one warning, naming both; keep_site shrank at the run's peak: none.
    let message = format!(
        "new at the run's peak (144.0 MiB → 384.0 MiB, +240.0 MiB): 256.0 MiB, none in the base run; also at step #4's peak; site: heavy_site (phase_steps.c:{heavy})"
    );
    let got = diff(
        &dir,
        &[
            "--format",
            "github",
            "--source-root",
            root,
            "base.json",
            "new.json",
        ],
    );
    assert_eq!(
        got,
        format!(
            "::warning file=phase_steps.c,line={heavy},title=cuguard peak_increase::{message}\n"
        )
    );
    // The other way round: heavy_site is gone (no finding), keep_site grew at the run's peak.
    let got = diff(
        &dir,
        &[
            "--format",
            "github",
            "--source-root",
            root,
            "new.json",
            "base.json",
        ],
    );
    assert_eq!(
        got,
        format!(
            "::warning file=phase_steps.c,line={keep},title=cuguard peak_increase::grown at the run's peak (384.0 MiB → 144.0 MiB, -240.0 MiB): +16.0 MiB, 32.0 MiB → 48.0 MiB; site: keep_site (phase_steps.c:{keep})\n"
        )
    );
    assert_eq!(
        diff(&dir, &["--format", "github", "base.json", "base.json"]),
        ""
    );

    let text = diff(
        &dir,
        &[
            "--format",
            "sarif",
            "--source-root",
            root,
            "base.json",
            "new.json",
        ],
    );
    let log: Value = serde_json::from_str(&text).unwrap();
    let results = log["runs"][0]["results"].as_array().unwrap();
    let rows: Vec<_> = results.iter().map(result_row).collect();
    assert_eq!(
        rows,
        [(
            "cuguard/peak_increase".to_string(),
            "warning".to_string(),
            message,
            Some(("phase_steps.c".to_string(), u64::from(heavy))),
        )]
    );
    assert_eq!(results[0]["ruleIndex"], 1);
    // Another pair of runs of the same code (other pids, times, directory): the same fingerprint.
    let other = scratch_dir("cli-diff-formats-peaks-again");
    two_runs(&other);
    let again: Value = serde_json::from_str(&diff(
        &other,
        &["--format", "sarif", "base.json", "new.json"],
    ))
    .unwrap();
    let print =
        |log: &Value| log["runs"][0]["results"][0]["partialFingerprints"]["cuguard/v1"].clone();
    assert!(print(&log).is_string(), "{text}");
    assert_eq!(print(&again), print(&log));

    let Some(tool) = multitool(test) else { return };
    let file = dir.join("peaks.sarif");
    std::fs::write(&file, &text).unwrap();
    validate_sarif(&tool, &file);
}

/// `go tool pprof -unit=B -top ARGS` in `dir`: each row's flat bytes and name, or `None` (after
/// [`support::missing`]) where there is no `go`.
fn pprof_top(test: &str, dir: &Path, args: &[&str]) -> Option<Vec<(String, String)>> {
    let Ok(out) = Command::new("go")
        .current_dir(dir)
        .args(["tool", "pprof", "-unit=B", "-top"])
        .args(args)
        .output()
    else {
        support::missing(test, "go is not installed (apt-get install golang-go)");
        return None;
    };
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[5..].join(" "))
        })
        .collect();
    Some(rows)
}

#[test]
fn cli_diff_peaks_as_a_pprof_pair_for_diff_base() {
    let test = "cli_diff_peaks_as_a_pprof_pair_for_diff_base";
    let dir = scratch_dir("cli-diff-formats-pprof");
    two_runs(&dir);
    for side in ["base", "new"] {
        let out = cuguard(
            &dir,
            &[
                "export",
                "--format",
                "pprof",
                "--at",
                "peak",
                &format!("{side}.json"),
                "-o",
                &format!("{side}.pb.gz"),
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // pprof's difference of the two peaks is diff's: heavy_site +256 MiB, keep_site -16 MiB
    // (+240 MiB in all), nothing else.
    let Some(rows) = pprof_top(test, &dir, &["-diff_base=base.pb.gz", "new.pb.gz"]) else {
        return;
    };
    assert_eq!(
        rows[0],
        ("268435456B".to_string(), "heavy_site".to_string())
    );
    assert_eq!(rows[1], ("-16777216B".to_string(), "keep_site".to_string()));
    assert!(rows[2..].iter().all(|r| r.0 == "0"), "{rows:?}");
    let json = diff(&dir, &["--format", "json", "base.json", "new.json"]);
    let d: Value = serde_json::from_str(&json).unwrap();
    let run = &d["peaks"]["peaks"][0];
    assert_eq!(run["what"], "the run");
    assert_eq!(run["delta_bytes"], 240u64 << 20);
    let sites: Vec<(String, i64)> = run["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let label = s["label"].as_str().unwrap();
            let name = label.split(' ').next().unwrap().to_string();
            (name, s["delta_bytes"].as_i64().unwrap())
        })
        .collect();
    assert_eq!(
        sites,
        [
            ("heavy_site".to_string(), 256 << 20),
            ("keep_site".to_string(), -(16 << 20))
        ]
    );
}
