//! Text from a report never becomes syntax in what the command writes (issue 49): a report is
//! written by the program it watched, or by whoever wrote the file, so its names (frames'
//! functions and files, `leaks[].api`) may hold line breaks, terminal escapes and characters that
//! reorder text. `cuguard suppressions` must not turn them into rules, and `cuguard check`'s
//! formats must not pass them on raw (`cuguard_format::needs_escape` is the one rule for what is
//! escaped; escaped characters read `\n`, `\u{1b}`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::support;

/// A site's function with a rule on a line of its own, a terminal escape, NEL, LINE SEPARATOR
/// and RIGHT-TO-LEFT OVERRIDE.
const NAME: &str = "make\nleak:*\nbuf\u{1b}[2J\u{85}\u{2028}\u{202e}fdp";
/// [`NAME`] as the command writes it for people.
const NAME_SHOWN: &str = r"make\nleak:*\nbuf\u{1b}[2J\u{85}\u{2028}\u{202e}fdp";
/// The site's file, under `/src/app`, with a line break and an override.
const FILE: &str = "/src/app/ev\u{202e}il\n.c";
/// A driver entry that carries a rule.
const API: &str = "cuMemAlloc_v2\nleak:*\n";
/// The driver entry of the leak without a stack: a rule, and an isolate.
const API_NO_STACK: &str = "cuMemAlloc\nleak:*\n\u{2066}";
/// The characters that must never come out raw.
const RAW: [char; 6] = [
    '\u{1b}', '\u{85}', '\u{2028}', '\u{2029}', '\u{202e}', '\u{2066}',
];

/// A C++ name longer than a line of text is cut at (300 characters).
fn long_name() -> String {
    format!("tmpl<{}>::alloc", "x".repeat(400))
}

fn fixture(name: &str) -> PathBuf {
    support::artifacts().root.join("tests/fixtures").join(name)
}

/// `leaks-two-contexts.json` with `leaks` and extra `stacks`, no events, written to `path`.
fn report(path: &Path, leaks: Vec<Value>, stacks: Vec<Value>) {
    let mut r: Value =
        serde_json::from_slice(&std::fs::read(fixture("leaks-two-contexts.json")).unwrap())
            .unwrap();
    r["leaks"] = Value::Array(leaks);
    r["events"] = json!([]);
    r["stacks"].as_array_mut().unwrap().extend(stacks);
    std::fs::write(path, serde_json::to_vec(&r).unwrap()).unwrap();
}

fn leak(address: u64, size: u64, api: &str, stack: Option<u64>) -> Value {
    json!({
        "address": format!("{address:#x}"), "size": size, "requested": size, "api": api,
        "memory": "device", "device": 0, "context": 1, "thread": 4242, "seq": address & 0xff,
        "time_ms": 100, "stack": stack, "state": "live_at_exit",
    })
}

/// A stack: the shim's frame, then the program's frame `function` in `file`.
fn stack(id: u64, function: &str, file: Option<&str>) -> Value {
    json!({"id": id, "frames": [
        {"ip": "0x7f3c11204a10", "module": "/opt/cuguard/lib/libcuguard.so", "offset": "0x4a10",
         "function": "cuMemAlloc_v2", "file": null, "line": null},
        {"ip": format!("{:#x}", 0x55d0bf201000 + id), "module": "/opt/app/bin/train",
         "offset": format!("{:#x}", 0x1000 + id), "function": function, "file": file,
         "line": file.map(|_| 7)},
    ]})
}

/// The hostile report: a 1 MiB leak at [`NAME`] by [`API`], a 2 MiB leak at [`long_name`], and a
/// 4 KiB leak without a stack by [`API_NO_STACK`].
fn hostile_report(dir: &Path) -> PathBuf {
    let path = dir.join("hostile.json");
    report(
        &path,
        vec![
            leak(0x7f2a40000000, 1 << 20, API, Some(10)),
            leak(0x7f2a40200000, 2 << 20, "cuMemAlloc_v2", Some(11)),
            leak(0x7f2a40400000, 4096, API_NO_STACK, None),
        ],
        vec![stack(10, NAME, Some(FILE)), stack(11, &long_name(), None)],
    );
    path
}

fn cuguard(args: &[&str], paths: &[&Path]) -> Output {
    Command::new(&support::artifacts().cuguard)
        .env("NO_COLOR", "1")
        .args(args)
        .args(paths)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn assert_no_raw(what: &str, text: &str) {
    for c in RAW {
        assert!(!text.contains(c), "{what} has {c:?} raw:\n{text}");
    }
}

#[derive(Deserialize)]
struct Verdict {
    passed: bool,
    counted_bytes: u64,
    counted_leaks: u64,
    suppressed_leaks: u64,
    suppressions: Vec<RuleUse>,
}

#[derive(Deserialize)]
struct RuleUse {
    rule: String,
    matched: u64,
}

fn verdict(supp: &Path, report: &Path) -> (i32, Verdict) {
    let out = cuguard(
        &[
            "check",
            "--format",
            "json",
            "--suppressions",
            supp.to_str().unwrap(),
        ],
        &[report],
    );
    let code = out.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (code, serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn cli_suppressions_of_a_hostile_report_add_no_rule() {
    let dir = support::scratch_dir("cli-hostile-supp");
    let hostile = hostile_report(&dir);
    // An unrelated report: 11 MiB leaked at make_buffers.
    let unrelated = dir.join("unrelated.json");
    report(
        &unrelated,
        vec![leak(0x7f2a40000000, 11 << 20, "cuMemAlloc_v2", Some(1))],
        vec![],
    );
    let supp = dir.join("generated.supp");
    let out = cuguard(&["suppressions", "-o", supp.to_str().unwrap()], &[&hostile]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file = std::fs::read_to_string(&supp).unwrap();
    assert_no_raw("the suppressions file", &file);
    // Exactly the two rules made from the two stacks, each written whole: a name's line breaks,
    // escape and reordering characters are `?` (spaces separate terms; no pattern can hold
    // them), wildcards are literal; no line the report wrote.
    let rules: Vec<&str> = file
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    assert_eq!(
        rules,
        [
            format!("site:^{}$", long_name()).as_str(),
            "site:^make?leak:[*]?buf?[[]2J???fdp$",
        ],
        "{file}"
    );
    // The comments say the report's texts escaped.
    assert!(
        file.contains(
            r"# no stack, so no precise rule; this would suppress every cuMemAlloc\nleak:*\n\u{2066} leak: api:^cuMemAlloc?leak:[*]??$"
        ),
        "{file}"
    );
    assert!(
        file.contains(r"1 leak (cuMemAlloc_v2\nleak:*\n); in train[4242]"),
        "{file}"
    );

    // The unrelated leak is not suppressed: the check fails.
    let (code, v) = verdict(&supp, &unrelated);
    assert_eq!(
        (code, v.passed, v.counted_bytes, v.suppressed_leaks),
        (1, false, 11 << 20, 0)
    );
    // On the report they came from, each rule suppresses its own leak; the leak without a stack
    // is left (its rule is commented out).
    let (code, v) = verdict(&supp, &hostile);
    assert_eq!(
        (code, v.counted_leaks, v.counted_bytes, v.suppressed_leaks),
        (1, 1, 4096, 2)
    );
    assert_eq!(
        v.suppressions
            .iter()
            .map(|r| (r.rule.as_str(), r.matched))
            .collect::<Vec<_>>(),
        rules.iter().map(|r| (*r, 1)).collect::<Vec<_>>()
    );
}

#[test]
fn cli_check_github_escapes_names_from_the_report() {
    let dir = support::scratch_dir("cli-hostile-github");
    let hostile = hostile_report(&dir);
    let out = cuguard(
        &["check", "--format", "github", "--source-root", "/src/app"],
        &[&hostile],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert_no_raw("--format github", &text);
    // One command per failing site, each one line; in the properties `,` and `:` are escaped
    // as the runner unescapes them, `%` everywhere.
    let lines: Vec<&str> = text.lines().collect();
    let long = long_name();
    assert_eq!(
        lines,
        [
            format!(
                "::error title=cuguard leak::2.0 MiB leaked in 1 allocation (cuMemAlloc_v2) by 1 \
                 process (train[4242]); owner: the program; site: {long}"
            )
            .as_str(),
            r"::error file=ev\u{202e}il\n.c,line=7,title=cuguard leak::1.0 MiB leaked in 1 allocation (cuMemAlloc_v2\nleak:*\n) by 1 process (train[4242]); owner: the program; site: make\nleak:*\nbuf\u{1b}[2J\u{85}\u{2028}\u{202e}fdp (ev\u{202e}il\n.c:7)",
            r"::error title=cuguard leak::4.0 KiB leaked in 1 allocation (cuMemAlloc\nleak:*\n\u{2066}) by 1 process (train[4242]); owner: the program; site: <no stack>",
        ],
        "{text}"
    );
}

#[test]
fn cli_check_text_sarif_and_junit_escape_names_from_the_report() {
    let dir = support::scratch_dir("cli-hostile-formats");
    let hostile = hostile_report(&dir);

    let out = cuguard(&["check", "--format", "text"], &[&hostile]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert_no_raw("--format text", &text);
    assert!(text.contains(NAME_SHOWN), "{text}");

    // SARIF: no string of the log, as a viewer decodes it, holds one of the characters.
    let out = cuguard(
        &["check", "--format", "sarif", "--source-root", "/src/app"],
        &[&hostile],
    );
    assert_eq!(out.status.code(), Some(1));
    let log: Value = serde_json::from_slice(&out.stdout).unwrap();
    fn strings<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            Value::Object(o) => o.iter().for_each(|(k, v)| {
                out.push(k);
                strings(v, out)
            }),
            _ => {}
        }
    }
    let mut all = Vec::new();
    strings(&log, &mut all);
    for s in &all {
        assert_no_raw("a SARIF string", s);
        assert!(!s.contains('\n'), "a SARIF string has a line break: {s:?}");
    }
    let messages: Vec<&str> = log["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["message"]["text"].as_str().unwrap())
        .collect();
    assert!(
        messages.contains(
            &format!(
                r"1.0 MiB leaked in 1 allocation (cuMemAlloc_v2\nleak:*\n) by 1 process (train[4242]); owner: the program; site: {NAME_SHOWN} (ev\u{{202e}}il\n.c:7)"
            )
            .as_str()
        ),
        "{messages:#?}"
    );

    // JUnit: the failure's text names the site escaped, on its own line of the text.
    let out = cuguard(&["check", "--format", "junit"], &[&hostile]);
    assert_eq!(out.status.code(), Some(1));
    let xml = stdout(&out);
    assert_no_raw("--format junit", &xml);
    assert!(
        xml.contains(&format!("&#10;1.0 MiB in 1 leak at {NAME_SHOWN}&#10;")),
        "{xml}"
    );
}
