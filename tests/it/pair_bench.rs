//! `scripts/pair-bench.sh --short` (issue 56) on the simulated driver, this build's shim beside
//! itself as the baseline: the pair benchmark that tells a change from noise reports every
//! configuration, the A/A control, and every A/B difference either as a ratio or as none within
//! the control's difference, as the rule says from the figures it prints; its JSON holds the
//! same. Timings are not asserted (this machine is shared and noisy), only what the report must
//! say of whatever it measured.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::support::{artifacts, run, scratch_dir, sim_command};

/// The configurations the script runs, each also `@baseline`, and the control's copy.
const VARIANTS: [&str; 5] = [
    "pool-untracked",
    "pool",
    "pool+stacks",
    "pool-nohistory",
    "pool+stacks-nohistory",
];

/// The figures compared: the pairs the `pair` test times.
const FIGURES: [&str; 5] = [
    "async_pair_4KiB_ns",
    "pair_1MiB_ns",
    "pair_256B_ns",
    "pair_4KiB_ns",
    "pair_64MiB_ns",
];

/// The A/B rows of each figure, "B / A": the settings against each other, then each against its
/// baseline.
fn expected_comparisons() -> BTreeSet<String> {
    let mut rows: BTreeSet<String> = [
        "pool / pool-untracked",
        "pool+stacks / pool-untracked",
        "pool-nohistory / pool-untracked",
        "pool+stacks-nohistory / pool-untracked",
        "pool+stacks / pool",
        "pool / pool-nohistory",
        "pool+stacks / pool+stacks-nohistory",
    ]
    .map(String::from)
    .into();
    for v in VARIANTS {
        rows.insert(format!("{v} / {v}@baseline"));
    }
    rows
}

fn runs() -> BTreeSet<String> {
    let mut runs: BTreeSet<String> = VARIANTS
        .iter()
        .flat_map(|v| [v.to_string(), format!("{v}@baseline")])
        .collect();
    runs.insert("pool@control".into());
    runs
}

/// A table row's cells, without the outer bars.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// `±1.23%` or `+1.23%` / `-1.23%` as a number of percent.
fn percent(cell: &str) -> f64 {
    cell.trim_start_matches(['±', '+'])
        .trim_end_matches('%')
        .parse()
        .unwrap_or_else(|_| panic!("not a percentage: {cell:?}"))
}

/// Checks one A/B row of the comparisons table: its verdict is the rule's, from its own cells.
fn check_ab_row(line: &str, c: &[&str]) {
    let (ratio, difference, control, so) = (c[4], percent(c[5]), percent(c[6]), c[7]);
    let ratio: f64 = ratio.parse().unwrap_or_else(|_| panic!("{line}"));
    assert!(
        (ratio - 1.0 - difference / 100.0).abs() < 1e-3,
        "B / A and the difference disagree: {line}"
    );
    if let Some(within) = so
        .strip_prefix("none (within the control's ")
        .and_then(|r| r.strip_suffix(')'))
    {
        assert_eq!(within, c[6], "{line}");
        assert!(difference.abs() <= control, "none, but larger: {line}");
    } else {
        let shown = so
            .strip_suffix('×')
            .unwrap_or_else(|| panic!("neither a ratio nor none: {line}"));
        assert_eq!(shown, c[4], "{line}");
        // Rounded to two decimals, a difference just over the control's may print as equal.
        assert!(
            difference.abs() >= control,
            "a ratio, but no larger: {line}"
        );
    }
}

/// The comparisons table: every figure has the control's row and every A/B row, each once.
/// Returns the count of rows reported as none.
fn check_comparisons(stdout: &str) -> usize {
    let header = "| figure | comparison (B / A) | A: median [IQR] | B: median [IQR] | B / A | difference | the control's | so |";
    let start = stdout
        .lines()
        .position(|l| l == header)
        .unwrap_or_else(|| panic!("no comparisons table:\n{stdout}"));
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let mut none = 0;
    for line in stdout
        .lines()
        .skip(start + 2)
        .take_while(|l| l.starts_with('|'))
    {
        let c = cells(line);
        assert_eq!(c.len(), 8, "{line}");
        assert!(FIGURES.contains(&c[0]), "{line}");
        assert!(seen.insert((c[0].into(), c[1].into())), "twice: {line}");
        if c[1] == "control: pool@control / pool" {
            assert_eq!(c[7], "the control", "{line}");
            assert_eq!(percent(c[5]).abs(), percent(c[6]), "{line}");
        } else {
            assert!(expected_comparisons().contains(c[1]), "{line}");
            check_ab_row(line, &c);
            none += usize::from(c[7].starts_with("none"));
        }
    }
    for figure in FIGURES {
        let rows: BTreeSet<&str> = seen
            .iter()
            .filter(|(f, _)| f == figure)
            .map(|(_, r)| r.as_str())
            .collect();
        let mut want: BTreeSet<String> = expected_comparisons();
        want.insert("control: pool@control / pool".into());
        let want: BTreeSet<&str> = want.iter().map(String::as_str).collect();
        assert_eq!(rows, want, "{figure}'s rows");
    }
    none
}

/// The medians table: a column for every run, a `median [q1–q3]` cell for every pair figure.
fn check_medians(stdout: &str) {
    let header = stdout
        .lines()
        .find(|l| l.starts_with("| metric | "))
        .unwrap_or_else(|| panic!("no medians table:\n{stdout}"));
    let columns: Vec<&str> = cells(header)[1..].to_vec();
    assert_eq!(
        columns
            .iter()
            .map(|c| c.to_string())
            .collect::<BTreeSet<_>>(),
        runs()
    );
    assert_eq!(columns.len(), runs().len(), "{header}");
    for figure in FIGURES {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {figure} | ")))
            .unwrap_or_else(|| panic!("no {figure} row:\n{stdout}"));
        for cell in &cells(row)[1..] {
            let (median, range) = cell
                .split_once(" [")
                .unwrap_or_else(|| panic!("not median [q1–q3]: {row}"));
            let (q1, q3) = range
                .trim_end_matches(']')
                .split_once('–')
                .unwrap_or_else(|| panic!("{row}"));
            let [m, q1, q3] = [median, q1, q3].map(|x| x.parse::<f64>().unwrap());
            assert!(q1 <= m && m <= q3 && q1 > 0.0, "{row}");
        }
    }
}

/// The JSON: the method, every run's figures with their spread, the comparisons; the same
/// verdicts as the table.
fn check_json(path: &Path, nones: usize) {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let json: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let method = &json["method"];
    assert_eq!(method["rounds"], 5);
    assert_eq!(method["warmup_rounds"], 1);
    assert!(method["core"].is_u64(), "{method}");
    assert_eq!(method["control"], "pool");
    assert_eq!(method["control_copy"], "pool@control");
    let run_names: BTreeSet<String> = json["runs"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(run_names, runs());
    for run in runs() {
        for figure in FIGURES {
            let s = &json["runs"][&run][figure];
            assert_eq!(s["rounds"], 5, "{run} {figure}: {s}");
            let [min, q1, median, q3, max] =
                ["min", "q1", "median", "q3", "max"].map(|k| s[k].as_f64().unwrap());
            assert!(
                min <= q1 && q1 <= median && median <= q3 && q3 <= max,
                "{s}"
            );
        }
    }
    let rows = json["comparisons"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        FIGURES.len() * (expected_comparisons().len() + 1)
    );
    let verdict = |v: &str| rows.iter().filter(|r| r["verdict"] == v).count();
    assert_eq!(verdict("control"), FIGURES.len());
    assert_eq!(verdict("none"), nones);
    assert_eq!(verdict("ratio") + nones, rows.len() - FIGURES.len());
    for r in rows {
        for k in ["figure", "a", "b", "verdict"] {
            assert!(r[k].is_string(), "{r}");
        }
        for k in [
            "a_median",
            "b_median",
            "ratio",
            "difference",
            "control_difference",
        ] {
            assert!(r[k].as_f64().is_some_and(f64::is_finite), "{r}");
        }
    }
}

#[test]
fn the_short_pair_bench_reports_every_difference_beside_the_controls() {
    let a = artifacts();
    let json = scratch_dir("pair_bench").join("pair.json");
    let out = run(
        sim_command(Path::new("bash"))
            .arg(a.root.join("scripts/pair-bench.sh"))
            .args(["--short", "--bin"])
            .arg(&a.bin_dir)
            .arg("--baseline")
            .arg(&a.shim)
            .arg("--json")
            .arg(&json),
        true,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "no child failed: {stderr}");
    let method = stdout
        .lines()
        .find(|l| l.starts_with("alloc_bench: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        method.starts_with("alloc_bench: 5 rounds counted (1 warm-up round discarded), each configuration its own process pinned to core "),
        "{method}"
    );
    assert!(
        stdout.contains("A/A control: pool and pool@control"),
        "{stdout}"
    );
    check_medians(&stdout);
    let nones = check_comparisons(&stdout);
    check_json(&json, nones);
}

#[test]
fn a_control_or_core_it_cannot_use_stops_the_benchmark_saying_why() {
    let bench = artifacts().bin_dir.join("alloc_bench");
    for (args, said) in [
        (
            &["--control", "pool-bogus"][..],
            "alloc_bench: no configuration is named pool-bogus (known: bare, ",
        ),
        (
            &["--variants", "pool", "--control", "pool+stacks"][..],
            "alloc_bench: --control pool+stacks: not among --variants",
        ),
        (
            &["--core", "100000"][..],
            "alloc_bench: --core 100000: not one of the cores this process may run on",
        ),
        (
            &["--rounds", "many"][..],
            "alloc_bench: --rounds many: not a count",
        ),
    ] {
        let out = run(sim_command(&bench).args(args), false);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with(said), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing ran");
    }
    let script = artifacts().root.join("scripts/pair-bench.sh");
    let out = run(
        sim_command(Path::new("bash")).arg(&script).arg("--bogus"),
        false,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option --bogus"));
}
