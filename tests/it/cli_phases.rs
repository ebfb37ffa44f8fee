//! Phases across two runs (issue 55): `harness/workloads/c/phase_steps.c` marks its steps with the
//! C ABI's phases (what Python's `cuguard.phase` calls), and run again with `heavy` takes 256 MiB
//! more in step #4 alone. `cuguard diff` names that step and the line; `cuguard check
//! --max-peak-growth` fails it (exit 1), in text, SARIF (validated by the SARIF Multitool) and
//! workflow annotations, and passes the run against itself.

use std::path::Path;
use std::process::{Command, Output};

use crate::cli_check::{sarif_multitool, validate_sarif};
use crate::support::{self, artifacts, c_program, run, scratch_dir, shim_command};

const MIB: u64 = 1 << 20;

fn cuguard(dir: &Path, args: &[&str]) -> Output {
    Command::new(&artifacts().cuguard)
        .current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// The two runs, `base.json` and `new.json` (step #4 heavier) in `dir`; the HEAVY line.
fn two_runs(dir: &Path) -> u32 {
    let program = c_program("phase_steps");
    run(&mut shim_command(&program, &dir.join("base.json")), true);
    let heavy = run(
        shim_command(&program, &dir.join("new.json")).arg("heavy"),
        true,
    );
    String::from_utf8_lossy(&heavy.stdout)
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn phases_of_the_c_abi_read_by_phase_with_exact_peaks() {
    let dir = scratch_dir("cli-phases-by-phase");
    two_runs(&dir);
    let out = cuguard(
        &dir,
        &["summary", "--by", "phase", "--format", "json", "base.json"],
    );
    assert_eq!(out.status.code(), Some(0));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let step = s["names"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "step")
        .unwrap();
    let figures: Vec<(String, u64, u64, u64)> = step["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["label"].as_str().unwrap().to_string(),
                o["peak_bytes"].as_u64().unwrap() / MIB,
                o["allocated_bytes"].as_u64().unwrap() / MIB,
                o["stayed_bytes"].as_u64().unwrap() / MIB,
            )
        })
        .collect();
    // Step #i begins with 64 + 8(i-1) MiB live, adds 32 and 8, frees the 32.
    let expected: Vec<(String, u64, u64, u64)> = (1..=6u64)
        .map(|i| (format!("step #{i}"), 64 + 8 * (i - 1) + 40, 40, 8))
        .collect();
    assert_eq!(figures, expected);
    assert_eq!(step["occurrences"], 6);
}

#[test]
fn diff_names_the_step_that_grew_and_its_line() {
    let dir = scratch_dir("cli-phases-diff");
    let heavy = two_runs(&dir);
    let out = cuguard(&dir, &["diff", "base.json", "new.json"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let peaks: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("peaks "))
        .collect();
    let site = format!("heavy_site (phase_steps.c:{heavy})");
    assert!(
        peaks[1].starts_with("  the run  144.0 MiB  → 384.0 MiB  +240.0 MiB"),
        "{text}"
    );
    let step = peaks
        .iter()
        .position(|l| l.starts_with("  step #4  128.0 MiB  → 384.0 MiB  +256.0 MiB  (+200.0%)"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(
        peaks[step + 1].split_whitespace().collect::<Vec<_>>(),
        ["+256.0", "MiB", "new"]
            .into_iter()
            .chain(site.split_whitespace())
            .chain(["0", "B", "→", "256.0", "MiB"])
            .collect::<Vec<_>>(),
        "{text}"
    );
    assert_eq!(
        peaks[step + 2],
        "  6 phase occurrences with the same peak",
        "{text}"
    );

    let out = cuguard(&dir, &["diff", "--format", "json", "base.json", "new.json"]);
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &d["peaks"]["peaks"];
    assert_eq!(p[0]["what"], "the run");
    assert_eq!(p[1]["what"], "step #4");
    assert_eq!(p[1]["delta_bytes"], 256 * MIB);
    assert_eq!(p[1]["sites"][0]["label"], site.as_str());
    assert_eq!(p[1]["sites"][0]["change"], "new");
    assert_eq!(p.as_array().unwrap().len(), 8, "the run and 7 occurrences");

    let out = cuguard(
        &dir,
        &["diff", "--format", "markdown", "base.json", "new.json"],
    );
    let md = String::from_utf8_lossy(&out.stdout);
    let row = format!(
        "| step #4 | 128.0 MiB | 384.0 MiB | +256.0 MiB (+200.0%) | heavy\\_site (phase\\_steps.c:{heavy}) new (+256.0 MiB) |"
    );
    assert!(md.lines().any(|l| l == row), "{md}");
}

#[test]
fn check_fails_a_step_whose_peak_grew_past_the_limit() {
    let test = "check_fails_a_step_whose_peak_grew_past_the_limit";
    let dir = scratch_dir("cli-phases-check");
    let heavy = two_runs(&dir);
    let gate = |extra: &[&str], new: &str| {
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
        cuguard(&dir, &args)
    };
    let out = gate(&[], "new.json");
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "  ✗ the peak of phase step #4 grew by 256.0 MiB (+200.0%): 128.0 MiB → 384.0 MiB, over --max-peak-growth 5%\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("  6 phase occurrences within the limit\n"),
        "{text}"
    );
    // The run against itself passes; a size limit reads as one.
    assert_eq!(gate(&[], "base.json").status.code(), Some(0));
    let sized = cuguard(
        &dir,
        &[
            "check",
            "--baseline",
            "base.json",
            "--max-peak-growth",
            "300MiB",
            "new.json",
        ],
    );
    assert_eq!(sized.status.code(), Some(0), "240 MiB is within 300 MiB");

    let root = artifacts().root.join("harness/workloads/c");
    let annotations = gate(
        &[
            "--format",
            "github",
            "--source-root",
            root.to_str().unwrap(),
        ],
        "new.json",
    );
    assert_eq!(annotations.status.code(), Some(1));
    let line = format!(
        "::error file=phase_steps.c,line={heavy},title=cuguard peak_growth::the peak of phase step #4 grew by 256.0 MiB (+200.0%25)"
    );
    assert!(
        String::from_utf8_lossy(&annotations.stdout).contains(&line),
        "{}",
        String::from_utf8_lossy(&annotations.stdout)
    );

    let sarif = gate(
        &["--format", "sarif", "--source-root", root.to_str().unwrap()],
        "new.json",
    );
    assert_eq!(sarif.status.code(), Some(1));
    let log: serde_json::Value = serde_json::from_slice(&sarif.stdout).unwrap();
    let results: Vec<&serde_json::Value> = log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["ruleId"] == "cuguard/peak_growth")
        .collect();
    assert_eq!(results.len(), 2, "the run's peak and step #4's");
    let region = &results[1]["locations"][0]["physicalLocation"];
    assert_eq!(region["artifactLocation"]["uri"], "phase_steps.c");
    assert_eq!(region["region"]["startLine"], heavy);
    let Some(tool) = sarif_multitool() else {
        support::missing(
            test,
            "the SARIF Multitool is not installed (npm install -g @microsoft/sarif-multitool)",
        );
        return;
    };
    let file = dir.join("peaks.sarif");
    std::fs::write(&file, &sarif.stdout).unwrap();
    validate_sarif(&tool, &file);
}

#[test]
fn a_peak_check_without_histories_is_refused_in_one_line() {
    let dir = scratch_dir("cli-phases-refused");
    two_runs(&dir);
    let out = cuguard(
        &dir,
        &[
            "check",
            "--baseline",
            ".",
            "--max-peak-growth",
            "5%",
            "new.json",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "cuguard: error: --max-peak-growth compares one process's history with another's: give one report (or history file) as --baseline, not a directory or glob"
    );
    let out = cuguard(&dir, &["check", "--max-peak-growth", "5%", "new.json"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn phases_that_do_not_pair_and_too_many_names_are_bounded_and_said() {
    let dir = scratch_dir("cli-phases-odd");
    run(
        &mut shim_command(&c_program("phase_odd"), &dir.join("r.json")),
        true,
    );
    let history = dir.join("r.history");
    let size = std::fs::metadata(&history).unwrap().len();
    assert!(size < 1 << 20, "20,000 phases take {size} bytes of history");
    let out = cuguard(
        &dir,
        &["summary", "--by", "phase", "--format", "json", "r.json"],
    );
    assert_eq!(out.status.code(), Some(0));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        s["odd"],
        serde_json::json!({
            "pops_without_push": 1,
            "ends_without_start": 0,
            "never_ended": 2,
            "ended_on_another_thread": 0,
            "not_read": 0
        })
    );
    let names = s["names"].as_array().unwrap();
    // open, cross, and 4,094 of the n names: 4,096 in all; the rest are one.
    assert_eq!(names.len(), 4096 + 1);
    let other = names
        .iter()
        .find(|n| n["name"] == "(other names: past 4096 distinct names)")
        .unwrap();
    assert_eq!(other["occurrences"], 20_000 - 4094);
    let text = cuguard(&dir, &["summary", "--by", "phase", "--top", "1", "r.json"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("  note: 2 ranges never ended (their figures run to the history's end)\n"),
        "{text}"
    );
    assert!(
        text.contains("  note: 1 pop with no range pushed on its thread (not counted)\n"),
        "{text}"
    );
}
