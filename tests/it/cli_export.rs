//! `cuguard export --format pprof` judged by pprof itself (`go tool pprof`, Debian's
//! `golang-go`): a C program and a Python program that leak, run under the shim on the simulated
//! driver; `-top` and `-traces` name the leaking functions with their bytes, `-diff_base` of a run
//! against a leakier one puts the difference at the leaking line; reports without a history or
//! without stacks still make a profile pprof reads.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support;

/// `go` on `PATH`, or `None` after [`support::missing`].
fn go(test: &str) -> Option<()> {
    match Command::new("go").arg("version").output() {
        Ok(o) if o.status.success() => Some(()),
        _ => {
            support::missing(test, "go is not installed (apt-get install golang-go)");
            None
        }
    }
}

/// `go tool pprof ARGS`, bytes shown as bytes (`-unit=B`, but for a count, which it would show
/// as bytes too); its standard output.
fn pprof(dir: &Path, args: &[&str]) -> String {
    let count = args.iter().any(|a| a.ends_with("_objects"));
    let out = Command::new("go")
        .current_dir(dir)
        .args(["tool", "pprof"])
        .args(if count { None } else { Some("-unit=B") })
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "go tool pprof {args:?}: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// `cuguard export --format pprof ARGS` in `dir`; its standard error.
fn export(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(&support::artifacts().cuguard)
        .current_dir(dir)
        .args(["export", "--format", "pprof"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    stderr
}

/// `-top`'s rows: (flat, cum, name and place).
fn top_rows(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0].to_string(), w[3].to_string(), w[5..].join(" "))
        })
        .collect()
}

/// The flat value of the row named `name` in `-top`.
fn flat(text: &str, name: &str) -> String {
    top_rows(text)
        .into_iter()
        .find(|r| r.2 == name)
        .unwrap_or_else(|| panic!("no row {name:?} in:\n{text}"))
        .0
}

/// `-traces`' traces: each its lines, trimmed, between the separators.
fn traces(text: &str) -> Vec<Vec<String>> {
    text.split("-----------+-------------------------------------------------------")
        .skip(1)
        .map(|t| {
            t.lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .filter(|t: &Vec<String>| !t.is_empty())
        .collect()
}

/// The trace whose first frame is `leaf`.
fn trace_of<'t>(all: &'t [Vec<String>], leaf: &str) -> &'t [String] {
    all.iter()
        .find(|t| t.iter().any(|l| l.split_whitespace().nth(1) == Some(leaf)))
        .unwrap_or_else(|| panic!("no trace of {leaf}: {all:#?}"))
}

/// Runs `profile_leak N` under the shim into `dir/rN/`; its report and its lines (leak, churn).
fn c_run(dir: &Path, n: u32) -> (PathBuf, u32, u32) {
    let run = dir.join(format!("r{n}"));
    std::fs::create_dir_all(&run).unwrap();
    let report = run.join("r.json");
    let program = support::c_program("profile_leak");
    let mut cmd = support::shim_command(&program, &report);
    cmd.arg(n.to_string());
    let out = support::run(&mut cmd, true);
    let text = String::from_utf8(out.stdout).unwrap();
    let line = |what: &str| -> u32 {
        text.lines()
            .find_map(|l| l.strip_prefix(what)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{what} in {text}"))
    };
    (report, line("leak "), line("churn "))
}

#[test]
fn cli_export_pprof_of_a_c_program_that_leaks() {
    let test = "cli_export_pprof_of_a_c_program_that_leaks";
    let Some(()) = go(test) else { return };
    let dir = support::scratch_dir("cli-export-pprof-c");
    let (r2, leak_line, _) = c_run(&dir, 2);
    let said = export(&dir, &[r2.to_str().unwrap(), "-o", "two.pb.gz"]);
    assert!(said.starts_with("cuguard: wrote two.pb.gz ("), "{said}");
    assert!(
        said.ends_with("; alloc_objects, alloc_space, inuse_objects, inuse_space)\n"),
        "{said}"
    );
    assert_eq!(support::mode_of(&dir.join("two.pb.gz")), 0o600);

    // In use at the end: the two leaked MiB, at leak_blocks, called from main.
    let top = pprof(&dir, &["-top", "two.pb.gz"]);
    assert!(top.starts_with("File: c-profile_leak-"), "{top}");
    assert!(top.contains("\nType: inuse_space\n"), "{top}");
    let rows = top_rows(&top);
    assert_eq!(rows[0].0, "2097152B", "{top}");
    assert_eq!(rows[0].2, "leak_blocks", "{top}");
    assert_eq!(flat(&top, "main"), "0");
    assert!(!top.contains("churn"), "churn keeps nothing: {top}");
    assert!(
        !top.contains("cuMemAlloc"),
        "the driver's frames are left out: {top}"
    );
    // Allocated over the run: churn's three 2 MiB blocks too.
    let alloc = pprof(&dir, &["-top", "-sample_index=alloc_space", "two.pb.gz"]);
    assert_eq!(flat(&alloc, "churn"), "6291456B", "{alloc}");
    assert_eq!(flat(&alloc, "leak_blocks"), "2097152B", "{alloc}");
    let objects = pprof(&dir, &["-top", "-sample_index=alloc_objects", "two.pb.gz"]);
    assert_eq!(flat(&objects, "churn"), "3", "{objects}");
    // The trace, with its labels.
    let all = traces(&pprof(&dir, &["-traces", "two.pb.gz"]));
    let t = trace_of(&all, "leak_blocks");
    assert!(t.contains(&"device:  0".to_string()), "{t:?}");
    assert!(t.contains(&"owner:  program".to_string()), "{t:?}");
    assert!(
        t.iter().any(|l| l.starts_with("process:  c-profile_leak-")),
        "{t:?}"
    );
    let frames: Vec<&str> = t
        .iter()
        .skip_while(|l| !l.ends_with("leak_blocks"))
        .map(String::as_str)
        .collect();
    assert_eq!(frames[0], "2097152B   leak_blocks", "{t:?}");
    assert_eq!(frames[1], "main", "{t:?}");

    // A leakier run: the difference, at the leaking line.
    let (r5, leak_line5, _) = c_run(&dir, 5);
    assert_eq!(leak_line5, leak_line);
    export(&dir, &[r5.to_str().unwrap(), "-o", "five.pb.gz"]);
    let diff = pprof(
        &dir,
        &["-top", "-lines", "-diff_base=two.pb.gz", "five.pb.gz"],
    );
    let rows = top_rows(&diff);
    assert_eq!(rows[0].0, "3145728B", "{diff}");
    let at = support::artifacts()
        .root
        .join("harness/workloads/c/profile_leak.c");
    assert_eq!(
        rows[0].2,
        format!("leak_blocks {}:{leak_line}", at.display()),
        "{diff}"
    );
    assert!(rows[1..].iter().all(|r| r.0 == "0"), "{diff}");

    // --at a moment of the history: nothing was live at its start; the end is the report's.
    export(
        &dir,
        &["--at", "0", r2.to_str().unwrap(), "-o", "start.pb.gz"],
    );
    let start = pprof(&dir, &["-top", "start.pb.gz"]);
    assert!(start.contains("Total samples = 0 \n"), "{start}");
    export(
        &dir,
        &["--at", "end", r2.to_str().unwrap(), "-o", "end.pb.gz"],
    );
    let end = pprof(&dir, &["-top", "end.pb.gz"]);
    assert_eq!(flat(&end, "leak_blocks"), "2097152B", "{end}");
    // The history file alone.
    let history = dir.join("r2/r.history");
    export(&dir, &[history.to_str().unwrap(), "-o", "history.pb.gz"]);
    let h = pprof(
        &dir,
        &["-top", "-sample_index=alloc_space", "history.pb.gz"],
    );
    assert_eq!(flat(&h, "churn"), "6291456B", "{h}");
}

#[test]
fn cli_export_pprof_of_a_python_program_that_leaks() {
    let test = "cli_export_pprof_of_a_python_program_that_leaks";
    let Some(()) = go(test) else { return };
    // Both runs in one directory: the same script, the same lines.
    let dir = support::scratch_dir("cli-export-pprof-py");
    let mut leak_lines = Vec::new();
    for n in [2u32, 5] {
        let report = format!("r{n}.json");
        let Some(said) =
            support::python_program(test, &dir, "profile_leak", &report, &[&n.to_string()])
        else {
            return;
        };
        leak_lines.push(
            said.lines()
                .find_map(|l| l.strip_prefix("leak ")?.trim().parse::<u32>().ok())
                .unwrap_or_else(|| panic!("leak in {said}")),
        );
        export(&dir, &[&report, "-o", &format!("p{n}.pb.gz")]);
    }
    let leak_line = leak_lines[0];
    assert_eq!(leak_lines[1], leak_line);
    let top = pprof(&dir, &["-top", "p2.pb.gz"]);
    assert!(top.starts_with("File: python3"), "{top}");
    let rows = top_rows(&top);
    assert_eq!(
        rows[..2],
        [
            ("3145728B".into(), "3145728B".into(), "load_weights".into()),
            ("2097152B".into(), "2097152B".into(), "leak_blocks".into()),
        ],
        "ctypes' and the driver's frames are left out: {top}"
    );
    assert_eq!(flat(&top, "<module>"), "0", "{top}");
    let alloc = pprof(&dir, &["-top", "-sample_index=alloc_space", "p2.pb.gz"]);
    assert_eq!(flat(&alloc, "churn"), "6291456B", "{alloc}");
    let all = traces(&pprof(&dir, &["-traces", "p2.pb.gz"]));
    let t = trace_of(&all, "leak_blocks");
    let frames: Vec<&str> = t
        .iter()
        .skip_while(|l| !l.ends_with("leak_blocks"))
        .map(String::as_str)
        .collect();
    assert_eq!(
        frames[..3],
        ["2097152B   leak_blocks", "main", "<module>"],
        "{t:?}"
    );
    assert!(t.contains(&"owner:  program".to_string()), "{t:?}");
    assert!(
        t.iter().any(|l| l.starts_with("process:  python3")),
        "{t:?}"
    );

    // Against the leakier run: three more MiB, at the leaking line, and nothing else.
    let diff = pprof(&dir, &["-top", "-lines", "-diff_base=p2.pb.gz", "p5.pb.gz"]);
    let rows = top_rows(&diff);
    let script = dir.join("profile_leak.py");
    assert_eq!(
        rows[0],
        (
            "3145728B".into(),
            "3145728B".into(),
            format!("leak_blocks {}:{leak_line}", script.display())
        ),
        "{diff}"
    );
    assert!(rows[1..].iter().all(|r| r.0 == "0"), "{diff}");
}

#[test]
fn cli_export_pprof_of_a_python_program_is_its_end_of_code_not_its_exit() {
    let test = "cli_export_pprof_of_a_python_program_is_its_end_of_code_not_its_exit";
    let Some(()) = go(test) else { return };
    let dir = support::scratch_dir("cli-export-pprof-py-end");
    let Some(said) = support::python_program(test, &dir, "profile_leak", "r.json", &["2", "keep"])
    else {
        return;
    };
    assert!(said.lines().any(|l| l.starts_with("kept ")), "{said}");
    export(&dir, &["r.json", "-o", "p.pb.gz"]);
    // CACHE's buffer is freed by its finalizer at the interpreter's exit: gone from the report's
    // leaks, but live when the program's code ended, which is the profile's end, as summary's.
    let top = pprof(&dir, &["-top", "p.pb.gz"]);
    assert_eq!(flat(&top, "Buffer.__init__"), "4194304B", "{top}");
    assert_eq!(flat(&top, "load_weights"), "3145728B", "{top}");
    assert_eq!(flat(&top, "leak_blocks"), "2097152B", "{top}");
}

#[test]
fn cli_export_pprof_of_reports_without_history_or_stacks() {
    let test = "cli_export_pprof_of_reports_without_history_or_stacks";
    let Some(()) = go(test) else { return };
    let dir = support::scratch_dir("cli-export-pprof-bare");
    let fixtures = support::artifacts().root.join("tests/fixtures");
    // Two processes of a merged report, from before histories, one leak without a stack.
    let merged = fixtures.join("merged.json");
    let said = export(&dir, &[merged.to_str().unwrap(), "-o", "m.pb.gz"]);
    assert_eq!(
        said.lines().next().unwrap(),
        "cuguard: train[4242] (and 1 more process) has no history (CUGUARD_HISTORY=0, or a cuguard without one): the profile holds inuse_space and inuse_objects only, no alloc_*",
        "{said}"
    );
    assert_eq!(said.lines().count(), 2, "{said}");
    let top = pprof(&dir, &["-top", "m.pb.gz"]);
    assert_eq!(flat(&top, "<no stack>"), "2147483648B", "{top}");
    let raw = pprof(&dir, &["-raw", "m.pb.gz"]);
    assert!(
        raw.contains("inuse_objects/count inuse_space/bytes[dflt]\n"),
        "{raw}"
    );
    assert!(!raw.contains("alloc_space"), "{raw}");
    // A run with its history off.
    let program = support::c_program("profile_leak");
    let report = dir.join("off.json");
    let mut cmd = support::shim_command(&program, &report);
    cmd.env("CUGUARD_HISTORY", "0").arg("1");
    support::run(&mut cmd, true);
    let said = export(&dir, &["off.json", "-o", "off.pb.gz"]);
    assert!(said.contains("has no history"), "{said}");
    let top = pprof(&dir, &["-top", "off.pb.gz"]);
    assert_eq!(flat(&top, "leak_blocks"), "1048576B", "{top}");
    // --at needs the history.
    let out = Command::new(&support::artifacts().cuguard)
        .current_dir(&dir)
        .args([
            "export", "--format", "pprof", "--at", "end", "off.json", "-o", "x.pb.gz",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!dir.join("x.pb.gz").exists());
}
