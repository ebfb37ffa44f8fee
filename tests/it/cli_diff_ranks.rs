//! `cuguard diff` and `cuguard check --max-peak-growth` on merged reports, rank by rank (issue
//! 55): `harness/workloads/c/phase_steps.c` run as a job of three ranks (`RANK` set, as torchrun
//! sets it) twice on the simulated driver, the second time with rank 1 alone taking 256 MiB more
//! in step #4 (`heavy`); each job merged with `cuguard merge`. The two merged reports' processes
//! are paired by rank and each pair's peaks compared: rank 1's block names step #4, the site's
//! line and +256.0 MiB, ranks 0 and 2 are one line; `check` fails rank 1 alone (exit 1), in
//! text, JSON, SARIF (validated by the SARIF Multitool) and workflow annotations. Sides of other
//! shapes (one process against a job, a rank missing, a rank without a history) compare what
//! pairs and say the rest.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::cli_check::{sarif_multitool, validate_sarif};
use crate::support::{self, artifacts, c_program, read_report, run, scratch_dir, shim_command};

const MIB: u64 = 1 << 20;

fn cuguard(dir: &Path, args: &[&str]) -> Output {
    Command::new(&artifacts().cuguard)
        .current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// `cuguard ARGS` in `dir`, which must exit `code`; its standard output.
fn stdout(dir: &Path, args: &[&str], code: i32) -> String {
    let out = cuguard(dir, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "cuguard {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The two jobs a test runs, in its directory.
struct Jobs {
    dir: PathBuf,
    /// The line of phase_steps.c that allocates the heavy step's 256 MiB.
    heavy: u32,
    /// The line of phase_steps.c where keep_site allocates.
    keep: u32,
}

impl Jobs {
    /// `phase_steps` run as `SIDE.R.json` (and its history) with `RANK=R` for each of `ranks`,
    /// `heavy` for the ranks `heavy` names, with `env` besides; the HEAVY line, when printed.
    fn side(&self, side: &str, ranks: &[u32], heavy: &[u32], env: &[(&str, &str)]) -> u32 {
        let program = c_program("phase_steps");
        let mut line = 0;
        for &r in ranks {
            let mut cmd = shim_command(&program, &self.dir.join(format!("{side}.{r}.json")));
            cmd.env("RANK", r.to_string()).env("CUGUARD_QUIET", "1");
            for (k, v) in env {
                cmd.env(k, v);
            }
            if heavy.contains(&r) {
                cmd.arg("heavy");
            }
            let out = run(&mut cmd, true);
            let printed: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            line = line.max(printed);
        }
        line
    }

    /// `cuguard merge -o OUT` of `SIDE.R.json` for each of `ranks`.
    fn merge(&self, out: &str, side: &str, ranks: &[u32]) {
        let inputs: Vec<String> = ranks.iter().map(|r| format!("{side}.{r}.json")).collect();
        let mut args = vec!["merge", "-o", out];
        args.extend(inputs.iter().map(String::as_str));
        stdout(&self.dir, &args, 0);
    }

    /// `SIDE.R.json`'s process as cuguard names it: `EXE[PID]`.
    fn process(&self, side: &str, rank: u32) -> String {
        let r = read_report(&self.dir.join(format!("{side}.{rank}.json")));
        assert_eq!(r["process"]["rank"], rank);
        let exe = r["process"]["exe"].as_str().unwrap();
        format!(
            "{}[{}]",
            exe.rsplit('/').next().unwrap(),
            r["process"]["pid"]
        )
    }

    /// phase_steps.c's directory, where the findings point.
    fn source_root() -> String {
        let root = artifacts().root.join("harness/workloads/c");
        root.to_str().unwrap().to_string()
    }
}

/// Ranks 0, 1 and 2 run as `base` and as `new` (rank 1 heavy), merged as `base.json` and
/// `new.json` in a fresh directory.
fn two_jobs(test: &str) -> Jobs {
    let source =
        std::fs::read_to_string(artifacts().root.join("harness/workloads/c/phase_steps.c"))
            .unwrap();
    // keep_site allocates two lines below its first.
    let keep = source
        .lines()
        .position(|l| l.contains("CUdeviceptr keep_site(size_t bytes) {"))
        .expect("keep_site in phase_steps.c") as u32
        + 3;
    let mut jobs = Jobs {
        dir: scratch_dir(test),
        heavy: 0,
        keep,
    };
    jobs.side("base", &[0, 1, 2], &[], &[]);
    jobs.heavy = jobs.side("new", &[0, 1, 2], &[1], &[]);
    assert!(jobs.heavy > 0);
    jobs.merge("base.json", "base", &[0, 1, 2]);
    jobs.merge("new.json", "new", &[0, 1, 2]);
    jobs
}

/// Rank 1's block as `diff` prints it (its processes named).
fn rank_1_block(jobs: &Jobs) -> Vec<String> {
    let heavy = format!("heavy_site (phase_steps.c:{})", jobs.heavy);
    vec![
        format!(
            "rank 1  {} → {}",
            jobs.process("base", 1),
            jobs.process("new", 1)
        ),
        "  the run  144.0 MiB  → 384.0 MiB  +240.0 MiB  (+166.7%)".into(),
        format!("      +256.0 MiB  new     {heavy}  0 B → 256.0 MiB"),
        format!(
            "       -16.0 MiB  shrunk  keep_site (phase_steps.c:{})   48.0 MiB → 32.0 MiB",
            jobs.keep
        ),
        "  step #4  128.0 MiB  → 384.0 MiB  +256.0 MiB  (+200.0%)".into(),
        format!("      +256.0 MiB  new  {heavy}  0 B → 256.0 MiB"),
        "  6 phase occurrences with the same peak".into(),
    ]
}

/// The lines of `text` from the one that starts `peaks` on.
fn peak_lines(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with("peaks "))
        .map(str::to_string)
        .collect()
}

#[test]
fn cli_diff_ranks_compares_merged_reports_rank_by_rank() {
    let jobs = two_jobs("cli-diff-ranks-text");
    let text = stdout(&jobs.dir, &["diff", "base.json", "new.json"], 0);
    let mut want = vec!["peaks rank by rank (3 processes in BASE, 3 in NEW)".to_string()];
    want.extend(rank_1_block(&jobs));
    want.push("2 ranks with the same peaks: rank 0, rank 2".into());
    assert_eq!(peak_lines(&text), want, "{text}");
    // The leaks are the same: the jobs differ only at rank 1's peaks.
    assert!(
        text.starts_with("cuguard diff: base 336.0 MiB in 21 leaks (3 reports) → new 336.0 MiB in 21 leaks (3 reports): 0 B, +0 leaks\n"),
        "{text}"
    );

    let json = stdout(
        &jobs.dir,
        &["diff", "--format", "json", "base.json", "new.json"],
        0,
    );
    let d: Value = serde_json::from_str(&json).unwrap();
    let p = &d["peaks"];
    assert_eq!(p["by"], "rank");
    assert_eq!(
        (p["base_processes"].as_u64(), p["new_processes"].as_u64()),
        (Some(3), Some(3))
    );
    for empty in ["not_compared", "only_base", "only_new", "notes"] {
        assert_eq!(p[empty], json!([]), "{empty}");
    }
    let processes = p["processes"].as_array().unwrap();
    let names: Vec<(&str, u64)> = processes
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["rank"].as_u64().unwrap()))
        .collect();
    assert_eq!(names, [("rank 0", 0), ("rank 1", 1), ("rank 2", 2)]);
    for (r, rank) in processes.iter().zip(0..) {
        assert_eq!(r["base_process"], jobs.process("base", rank).as_str());
        assert_eq!(r["new_process"], jobs.process("new", rank).as_str());
        assert_eq!(r["notes"], json!([]));
        // The run and seven phase occurrences (load, step #1 to #6) on every rank.
        assert_eq!(r["peaks"].as_array().unwrap().len(), 8, "{r}");
    }
    for same in [&processes[0], &processes[2]] {
        let deltas: Vec<i64> = same["peaks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["delta_bytes"].as_i64().unwrap())
            .collect();
        assert_eq!(deltas, [0; 8], "{same}");
    }
    let rank1 = &processes[1]["peaks"];
    let heavy_site = json!({
        "label": format!("heavy_site (phase_steps.c:{})", jobs.heavy),
        "site": format!("heavy_site (phase_steps.c:{})", jobs.heavy),
        "location": format!("phase_steps.c:{}", jobs.heavy),
        "base_bytes": 0,
        "new_bytes": 256 * MIB,
        "delta_bytes": 256 * MIB,
        "change": "new",
    });
    let run = &rank1[0];
    assert_eq!(run["what"], "the run");
    assert_eq!(
        (
            run["base_peak_bytes"].as_u64(),
            run["new_peak_bytes"].as_u64(),
            run["delta_bytes"].as_u64()
        ),
        (Some(144 * MIB), Some(384 * MIB), Some(240 * MIB))
    );
    assert_eq!(run["sites"][0], heavy_site);
    assert_eq!(
        run["sites"][1]["label"],
        format!("keep_site (phase_steps.c:{})", jobs.keep)
    );
    assert_eq!(run["sites"][1]["delta_bytes"], -(16 * MIB as i64));
    let step = &rank1[1];
    assert_eq!(step["what"], "step #4");
    assert_eq!(step["phase"], "step");
    assert_eq!(
        (
            step["base_peak_bytes"].as_u64(),
            step["new_peak_bytes"].as_u64(),
            step["delta_bytes"].as_u64()
        ),
        (Some(128 * MIB), Some(384 * MIB), Some(256 * MIB))
    );
    // What step #4 kept is the same: the heavy buffer is freed before it ends.
    assert_eq!(
        (
            step["base_stayed_bytes"].as_u64(),
            step["new_stayed_bytes"].as_u64()
        ),
        (Some(8 * MIB), Some(8 * MIB))
    );
    assert_eq!(step["sites"], json!([heavy_site]));
    assert!(
        rank1.as_array().unwrap()[2..]
            .iter()
            .all(|c| c["delta_bytes"] == 0),
        "{rank1}"
    );

    let md = stdout(
        &jobs.dir,
        &["diff", "--format", "markdown", "base.json", "new.json"],
        0,
    );
    let heavy = format!("heavy\\_site (phase\\_steps.c:{})", jobs.heavy);
    let table: Vec<&str> = md
        .lines()
        .skip_while(|l| !l.starts_with("**Peaks**"))
        .collect();
    assert_eq!(
        table,
        [
            "**Peaks**, rank by rank (3 processes in BASE, 3 in NEW)",
            "",
            "| rank | peak of | base | new | change | at it |",
            "|---|---|---:|---:|---:|---|",
            &format!(
                "| rank 1 | the run | 144.0 MiB | 384.0 MiB | +240.0 MiB (+166.7%) | {heavy} new (+256.0 MiB)<br>keep\\_site (phase\\_steps.c:{}) shrunk (-16.0 MiB) |",
                jobs.keep
            ),
            &format!(
                "| rank 1 | step #4 | 128.0 MiB | 384.0 MiB | +256.0 MiB (+200.0%) | {heavy} new (+256.0 MiB) |"
            ),
            "",
            "2 ranks with the same peaks: rank 0, rank 2",
        ],
        "{md}"
    );

    // A job against itself: every rank the same.
    let same = stdout(&jobs.dir, &["diff", "new.json", "new.json"], 0);
    assert_eq!(
        peak_lines(&same),
        [
            "peaks rank by rank (3 processes in BASE, 3 in NEW)",
            "3 ranks with the same peaks: rank 0, rank 1, rank 2"
        ],
        "{same}"
    );
}

#[test]
fn cli_diff_ranks_sarif_and_github_name_the_rank() {
    let test = "cli_diff_ranks_sarif_and_github_name_the_rank";
    let jobs = two_jobs("cli-diff-ranks-formats");
    let root = Jobs::source_root();
    let message = format!(
        "rank 1: new at the run's peak (144.0 MiB → 384.0 MiB, +240.0 MiB): 256.0 MiB, none in the base run; also at step #4's peak; site: heavy_site (phase_steps.c:{})",
        jobs.heavy
    );
    let args = |format: &'static str| {
        [
            "diff",
            "--format",
            format,
            "--source-root",
            &root,
            "base.json",
            "new.json",
        ]
        .map(str::to_string)
    };
    let github = args("github");
    let github: Vec<&str> = github.iter().map(String::as_str).collect();
    assert_eq!(
        stdout(&jobs.dir, &github, 0),
        format!(
            "::warning file=phase_steps.c,line={},title=cuguard peak_increase::{message}\n",
            jobs.heavy
        )
    );
    let sarif = args("sarif");
    let sarif: Vec<&str> = sarif.iter().map(String::as_str).collect();
    let text = stdout(&jobs.dir, &sarif, 0);
    let log: Value = serde_json::from_str(&text).unwrap();
    let results = log["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{text}");
    let r = &results[0];
    assert_eq!(r["ruleId"], "cuguard/peak_increase");
    assert_eq!(r["ruleIndex"], 1);
    assert_eq!(r["level"], "warning");
    assert_eq!(r["message"]["text"], message.as_str());
    let physical = &r["locations"][0]["physicalLocation"];
    assert_eq!(physical["artifactLocation"]["uri"], "phase_steps.c");
    assert_eq!(physical["artifactLocation"]["uriBaseId"], "%SRCROOT%");
    assert_eq!(physical["region"]["startLine"], jobs.heavy);
    assert!(r["partialFingerprints"]["cuguard/v1"].is_string(), "{r}");
    assert_eq!(log["runs"][0]["properties"]["cuguard"]["new"]["reports"], 3);

    let Some(tool) = sarif_multitool() else {
        support::missing(
            test,
            "the SARIF Multitool is not installed (npm install -g @microsoft/sarif-multitool)",
        );
        return;
    };
    let file = jobs.dir.join("ranks.sarif");
    std::fs::write(&file, &text).unwrap();
    validate_sarif(&tool, &file);
}

#[test]
fn cli_diff_ranks_check_fails_the_rank_whose_peak_grew() {
    let test = "cli_diff_ranks_check_fails_the_rank_whose_peak_grew";
    let jobs = two_jobs("cli-diff-ranks-check");
    let root = Jobs::source_root();
    let gate = |extra: &[&str], new: &str, code: i32| {
        let mut args = vec![
            "check",
            "--baseline",
            "base.json",
            "--max-peak-growth",
            "5%",
            "--by",
            "phase",
        ];
        args.extend_from_slice(extra);
        args.push(new);
        stdout(&jobs.dir, &args, code)
    };
    let run_fail = "rank 1: the run's peak grew by 240.0 MiB (+166.7%): 144.0 MiB → 384.0 MiB, over --max-peak-growth 5%";
    let step_fail = "rank 1: the peak of phase step #4 grew by 256.0 MiB (+200.0%): 128.0 MiB → 384.0 MiB, over --max-peak-growth 5%";
    let text = gate(&[], "new.json", 1);
    let heavy = format!("heavy_site (phase_steps.c:{})", jobs.heavy);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..3],
        [
            "cuguard check: FAIL: 3 reports, 336.0 MiB leaked in 21 leaks, 0 B in 0 leaks new or grown since the baseline",
            &format!("  ✗ {run_fail}"),
            &format!("  ✗ {step_fail}"),
        ],
        "{text}"
    );
    assert_eq!(
        peak_lines(&text),
        [
            "peaks against the baseline's, rank by rank (3 processes in BASE, 3 in NEW; --max-peak-growth 5%)".to_string(),
            format!("  rank 1 ({} → {})", jobs.process("base", 1), jobs.process("new", 1)),
            "    the run's peak grew by 240.0 MiB (+166.7%): 144.0 MiB → 384.0 MiB  fails".into(),
            format!("      +256.0 MiB  new     {heavy}  0 B → 256.0 MiB"),
            format!(
            "       -16.0 MiB  shrunk  keep_site (phase_steps.c:{})   48.0 MiB → 32.0 MiB",
            jobs.keep
        ),
            "    the peak of phase step #4 grew by 256.0 MiB (+200.0%): 128.0 MiB → 384.0 MiB  fails".into(),
            format!("      +256.0 MiB  new  {heavy}  0 B → 256.0 MiB"),
            "    6 phase occurrences within the limit".into(),
            "  2 ranks within the limit: rank 0, rank 2".into(),
        ],
        "{text}"
    );
    // The job against itself passes; so does a limit over rank 1's growth.
    gate(&[], "base.json", 0);
    stdout(
        &jobs.dir,
        &[
            "check",
            "--baseline",
            "base.json",
            "--max-peak-growth",
            "300MiB",
            "new.json",
        ],
        0,
    );

    let json: Value = serde_json::from_str(&gate(&["--format", "json"], "new.json", 1)).unwrap();
    assert_eq!(json["passed"], false);
    assert_eq!(json["failures"], json!([run_fail, step_fail]));
    let p = &json["peaks"];
    assert_eq!(
        (&p["limit"], &p["by_phase"], &p["by"]),
        (&json!("5%"), &json!(true), &json!("rank"))
    );
    let failing: Vec<(String, String, bool)> = p["processes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["peaks"].as_array().unwrap().iter().map(|c| {
                (
                    r["name"].as_str().unwrap().to_string(),
                    c["what"].as_str().unwrap().to_string(),
                    c["failing"].as_bool().unwrap(),
                )
            })
        })
        .filter(|f| f.2)
        .collect();
    assert_eq!(
        failing,
        [
            ("rank 1".to_string(), "the run".to_string(), true),
            ("rank 1".to_string(), "step #4".to_string(), true)
        ]
    );

    let against = format!(
        " ({} against {}); at its peak {heavy} new (+256.0 MiB)",
        jobs.process("new", 1),
        jobs.process("base", 1)
    );
    let annotations = gate(
        &["--format", "github", "--source-root", &root],
        "new.json",
        1,
    );
    assert_eq!(
        annotations,
        [run_fail, step_fail]
            .map(|f| format!(
                "::error file=phase_steps.c,line={},title=cuguard peak_growth::{}{against}\n",
                jobs.heavy,
                f.replace('%', "%25")
            ))
            .concat()
    );

    let sarif = gate(
        &["--format", "sarif", "--source-root", &root],
        "new.json",
        1,
    );
    let log: Value = serde_json::from_str(&sarif).unwrap();
    let results: Vec<(String, u64)> = log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["ruleId"], "cuguard/peak_growth", "{r}");
            assert_eq!(r["level"], "error", "{r}");
            let at = &r["locations"][0]["physicalLocation"];
            assert_eq!(at["artifactLocation"]["uri"], "phase_steps.c", "{r}");
            (
                r["message"]["text"].as_str().unwrap().to_string(),
                at["region"]["startLine"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [run_fail, step_fail].map(|f| (format!("{f}{against}"), u64::from(jobs.heavy)))
    );
    let Some(tool) = sarif_multitool() else {
        support::missing(
            test,
            "the SARIF Multitool is not installed (npm install -g @microsoft/sarif-multitool)",
        );
        return;
    };
    let file = jobs.dir.join("check-ranks.sarif");
    std::fs::write(&file, &sarif).unwrap();
    validate_sarif(&tool, &file);
}

#[test]
fn cli_diff_ranks_sides_of_other_shapes_compare_what_pairs() {
    let mut jobs = two_jobs("cli-diff-ranks-shapes");
    // One process's report (rank 1's) against the job: rank 1 compared, the others said.
    let text = stdout(&jobs.dir, &["diff", "base.1.json", "new.json"], 0);
    let mut want = vec!["peaks rank by rank (1 process in BASE, 3 in NEW)".to_string()];
    want.extend(rank_1_block(&jobs));
    want.push("only NEW has rank 0, rank 2: not compared".into());
    assert_eq!(peak_lines(&text), want, "{text}");
    let text = stdout(
        &jobs.dir,
        &[
            "check",
            "--baseline",
            "base.1.json",
            "--max-peak-growth",
            "5%",
            "new.json",
        ],
        1,
    );
    assert!(
        text.contains("\n  ✗ rank 1: the run's peak grew by 240.0 MiB (+166.7%): 144.0 MiB → 384.0 MiB, over --max-peak-growth 5%\n"),
        "{text}"
    );
    assert!(
        text.ends_with("\n  only NEW has rank 0, rank 2: not compared\n"),
        "{text}"
    );

    // A baseline without rank 1: the ranks both have pass, rank 1 is said (the check fails on
    // rank 1's leaks alone, new against this baseline).
    jobs.merge("base-02.json", "base", &[0, 2]);
    let text = stdout(
        &jobs.dir,
        &[
            "check",
            "--baseline",
            "base-02.json",
            "--max-peak-growth",
            "5%",
            "new.json",
        ],
        1,
    );
    let failures: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("  ✗ "))
        .collect();
    assert_eq!(
        failures,
        [
            "112.0 MiB in new or grown leaks exceeds --max-leaked-bytes 0 B",
            "7 new or grown leaks exceed --max-leaks 0"
        ],
        "{text}"
    );
    assert_eq!(
        peak_lines(&text),
        [
            "peaks against the baseline's, rank by rank (2 processes in BASE, 3 in NEW; --max-peak-growth 5%)",
            "  2 ranks within the limit: rank 0, rank 2",
            "  only NEW has rank 1: not compared",
        ],
        "{text}"
    );

    // Rank 2 run without a history: said, with why; rank 1 still fails.
    jobs.heavy = jobs.side("late", &[0, 1], &[1], &[]);
    jobs.side("late", &[2], &[], &[("CUGUARD_HISTORY", "0")]);
    jobs.merge("late.json", "late", &[0, 1, 2]);
    let d: Value = serde_json::from_str(&stdout(
        &jobs.dir,
        &["diff", "--format", "json", "base.json", "late.json"],
        0,
    ))
    .unwrap();
    let compared: Vec<&str> = d["peaks"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(compared, ["rank 0", "rank 1"]);
    assert_eq!(
        d["peaks"]["not_compared"],
        json!([{"name": "rank 2", "why": "only BASE's report names a history"}])
    );
    let text = stdout(
        &jobs.dir,
        &[
            "check",
            "--baseline",
            "base.json",
            "--max-peak-growth",
            "5%",
            "late.json",
        ],
        1,
    );
    assert!(
        text.ends_with("\n  1 rank within the limit: rank 0\n  rank 2: peaks not compared: only BASE's report names a history\n"),
        "{text}"
    );

    // No pair with both histories: check refuses in one line (exit 2); diff says why.
    let out = cuguard(
        &jobs.dir,
        &[
            "check",
            "--baseline",
            "base-02.json",
            "--max-peak-growth",
            "5%",
            "late.2.json",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "cuguard: error: --max-peak-growth compared no process: only BASE has rank 0: not compared; rank 2: peaks not compared: only BASE's report names a history\n"
    );
}
