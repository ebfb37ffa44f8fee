//! The docs' commands, run (issue 50): every code block of `README.md` and `docs/*.md` marked
//! runnable runs here, on the simulated driver, so that what the docs tell a user to type and
//! what the program does cannot drift apart.
//!
//! # The marker
//!
//! An HTML comment on the line right before the block's opening fence (GitHub shows neither the
//! comment nor anything in its place, and still highlights the block by its info string):
//!
//! ```text
//! <!-- runnable -->
//! <!-- runnable; continues; with profile_leak; needs go; exit 1 -->
//! <!-- file: spike.py -->
//! ```
//!
//! - `runnable`: a `sh` block runs as it is written; a `console` block runs its `$ ` lines (the
//!   lines between them are what the commands printed, for the reader: pids, times and paths
//!   differ from run to run, so they are not compared).
//! - `continues`: the block runs after the document's previous runnable block, in its directory,
//!   and reads what that one made (the README's `--at` block reads the five jobs' `r.json`).
//!   Without it, a block runs in a fresh, empty directory.
//! - `with NAME…`: example programs the block runs as `./NAME`, put into its directory first:
//!   `NAME` is `harness/workloads/c/NAME.c` compiled as the tests compile their C programs (`-g`,
//!   linked with `-lcuda` against the simulated driver), `NAME.py` is
//!   `harness/workloads/python/NAME.py`, and either is the document's own block marked
//!   `file: NAME` when it has one.
//! - `needs TOOL…`: programs the block runs besides cuguard's (`go`, `python3`). Where one is not
//!   on `PATH` the block is skipped with a line saying so, and in CI the test fails instead
//!   ([`support::missing`]).
//! - `exit N`: the block's last command exits N (a `cuguard check` that fails, as it should on a
//!   program that leaks), and every command before it 0. Without it, every command exits 0.
//! - `file: NAME`: not run; the block is the file NAME for the document's runnable blocks that
//!   take it `with`.
//!
//! Blocks that need a GPU, the network, the Python wheel or minutes are not marked, nor are the
//! templates whose program is the user's own (`./train`, `./run-tests.sh`).
//!
//! # How a block runs
//!
//! With `bash`, `set -e -o pipefail`, in its directory under the tests' scratch directory, with
//! the directory of the build under test first on `PATH` (`cuguard`, and the Rust examples such
//! as `cudarc_leaks`) and `LD_PRELOAD` and every `CUGUARD_*` variable removed, as on a machine
//! where nothing was set, but for `CUGUARD_RUNTIME_DIR`: the tests' own, so that no stats page
//! lands in the user's runtime directory. Two rewrites let the README's first block (the build
//! and the demo, which a user types in a checkout) run as it is written:
//!
//! - `./target/release/` names the directory of the build under test (`target/debug` under a
//!   plain `cargo test`): the docs name the release build a user makes, and the test runs the
//!   programs cargo built for it, from any directory;
//! - cargo is not run: a line that starts `cargo … && ` runs what follows its first `&&`, and a
//!   cargo command alone (`cargo test --workspace`) is left out. The test runs inside
//!   `cargo test`, which built the workspace; a release build takes minutes on 2 cores, and
//!   `cargo test` there would run this test again.
//!
//! So the demo line runs as `cuguard run --driver sim --report demo.json -- cudarc_leaks &&
//! cuguard summary demo.json` on this build.
//!
//! A block that fails — a command exits otherwise than said, or it runs past
//! [`BLOCK_TIME_LIMIT`] — fails the test, which names the document and the line of the block and
//! of the failing command, and shows the block and everything it printed. (A command that fails
//! on the left of `&&` does not stop `bash -e`; the block's exit status still tells, unless a
//! later command succeeds. The docs' blocks keep `&&` to the demo line, which ends its block.)

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support;

/// How long one block may run; the slowest (a Python program under the shim, then pprof) take a
/// few seconds.
const BLOCK_TIME_LIMIT: Duration = Duration::from_secs(120);

/// Lines the script has before the block's first line (`set`, `trap`).
const PROLOGUE_LINES: usize = 2;

/// What the marker of a runnable block asks (see the module's documentation).
#[derive(Debug, Default, PartialEq)]
struct Options {
    continues: bool,
    with: Vec<String>,
    needs: Vec<String>,
    exit: i32,
}

#[derive(Debug, PartialEq)]
enum Marker {
    Runnable(Options),
    File(String),
}

/// A marked code block of a document.
#[derive(Debug)]
struct Block {
    /// The document, as its path from the repository root (`docs/cli.md`).
    doc: String,
    /// The line of the opening fence, from 1; the block's own lines follow it.
    fence: usize,
    /// The info string's first word (`sh`, `console`, `python`).
    lang: String,
    /// The block's lines, without the fences (and without the fence's indentation).
    lines: Vec<String>,
    marker: Marker,
}

impl Block {
    /// `doc:line`, the line of the block's `n`th line (from 1).
    fn at(&self, n: usize) -> String {
        format!("{}:{}", self.doc, self.fence + n)
    }

    /// The block with its lines numbered as in the document.
    fn numbered(&self) -> String {
        self.lines
            .iter()
            .enumerate()
            .map(|(i, l)| format!("{:>5} | {l}\n", self.fence + 1 + i))
            .collect()
    }
}

/// The marker an HTML comment line is: `None` when it is a comment of another kind; an error when
/// it is a marker that cannot be read (a typo must not turn a block silently unrun).
fn marker(line: &str) -> Option<Result<Marker, String>> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim();
    if let Some(name) = inner.strip_prefix("file:") {
        let name = name.trim();
        return Some(if name.is_empty() || name.contains(['/', ' ']) {
            Err(format!("`file:` needs one file name, not {name:?}"))
        } else {
            Ok(Marker::File(name.to_string()))
        });
    }
    let mut parts = inner.split(';').map(str::trim);
    let first = parts.next()?;
    if !first.starts_with("runnable") {
        return None;
    }
    if first != "runnable" {
        return Some(Err(format!(
            "{first:?}: options follow `runnable` after semicolons (`<!-- runnable; with NAME -->`)"
        )));
    }
    let mut options = Options::default();
    for part in parts {
        let (word, rest) = part.split_once(' ').unwrap_or((part, ""));
        let words: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
        match (word, words.len()) {
            ("continues", 0) => options.continues = true,
            ("with", 1..) => options.with.extend(words),
            ("needs", 1..) => options.needs.extend(words),
            ("exit", 1) => match words[0].parse() {
                Ok(n) if n != 0 => options.exit = n,
                _ => return Some(Err(format!("`exit {}`: a status other than 0", words[0]))),
            },
            _ => {
                return Some(Err(format!(
                    "unknown option {part:?} (continues, with NAME…, needs TOOL…, exit N)"
                )));
            }
        }
    }
    Some(Ok(Marker::Runnable(options)))
}

/// The marked blocks of a document, or what is wrong with its markers: one that is not on the
/// line right before a block's opening fence, one that cannot be read, a block left open.
fn parse(doc: &str, text: &str) -> Result<Vec<Block>, Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut errors = Vec::new();
    // The marker on the line before (its line, from 1).
    let mut pending: Option<(usize, Result<Marker, String>)> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(found) = marker(line) {
            if let Some((at, _)) = pending.replace((i + 1, found)) {
                errors.push(format!("{doc}:{at}: a marker not followed by a code block"));
            }
            i += 1;
            continue;
        }
        let Some(info) = trimmed.strip_prefix("```") else {
            if let Some((at, _)) = pending.take() {
                errors.push(format!(
                    "{doc}:{at}: a marker must be on the line right before a code block's opening fence"
                ));
            }
            i += 1;
            continue;
        };
        let indent = line.len() - trimmed.len();
        let fence = i + 1;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && lines[i].trim() != "```" {
            let l = lines[i];
            let cut = l.len() - l.trim_start().len();
            body.push(l[cut.min(indent)..].to_string());
            i += 1;
        }
        if i == lines.len() {
            errors.push(format!("{doc}:{fence}: a code block that is never closed"));
        }
        i += 1;
        match pending.take() {
            Some((_, Ok(marker))) => blocks.push(Block {
                doc: doc.to_string(),
                fence,
                lang: info.split_whitespace().next().unwrap_or("").to_string(),
                lines: body,
                marker,
            }),
            Some((at, Err(why))) => errors.push(format!("{doc}:{at}: {why}")),
            None => {}
        }
    }
    if let Some((at, _)) = pending {
        errors.push(format!("{doc}:{at}: a marker not followed by a code block"));
    }
    if errors.is_empty() {
        Ok(blocks)
    } else {
        Err(errors)
    }
}

/// Where a block runs: `PATH` (the build's directory first), the build's directory as the
/// rewrite of `./target/release/` gives it, and the stats pages' directory.
struct Setting {
    path: OsString,
    build: String,
    runtime_dir: PathBuf,
}

impl Setting {
    fn of_this_build() -> Setting {
        let a = support::artifacts();
        let mut dirs = vec![a.bin_dir.clone()];
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        Setting {
            path: std::env::join_paths(dirs).expect("PATH"),
            build: format!("{}/", a.bin_dir.display()),
            runtime_dir: a.scratch.join("runtime"),
        }
    }

    /// Whether `tool` is a file on this `PATH`.
    fn has(&self, tool: &str) -> bool {
        std::env::split_paths(&self.path).any(|d| d.join(tool).is_file())
    }
}

/// A command line of the block as the script runs it (the rewrites of the module's
/// documentation); a line that is not run becomes empty, so that lines keep their numbers.
fn rewrite(line: &str, build: &str) -> String {
    let line = line.replace("./target/release/", build);
    let command = line.trim_start();
    if command.starts_with("cargo ") {
        return match command.split_once(" && ") {
            Some((_, rest)) => rest.to_string(),
            None => String::new(),
        };
    }
    line
}

/// The script's lines for the block, one per line of the block; or why it cannot run.
fn commands(block: &Block, build: &str) -> Result<Vec<String>, String> {
    let lines: Vec<String> = match block.lang.as_str() {
        "sh" | "bash" | "shell" => block.lines.clone(),
        "console" => block
            .lines
            .iter()
            .map(|l| l.strip_prefix("$ ").unwrap_or("").to_string())
            .collect(),
        other => {
            return Err(format!(
                "a runnable block must be `sh` or `console`, not {other:?}"
            ));
        }
    };
    Ok(lines.iter().map(|l| rewrite(l, build)).collect())
}

/// The line (from 1) of the block's last command: its last line that is neither empty nor a
/// comment.
fn last_command(lines: &[String]) -> Option<usize> {
    lines
        .iter()
        .rposition(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|i| i + 1)
}

/// How a script ended.
struct Ran {
    /// Its exit status; `None` when a signal ended it or it ran out of time.
    code: Option<i32>,
    /// The line of the block (from 1) whose command failed, as bash's `ERR` trap saw it.
    failed_at: Option<usize>,
    timed_out: bool,
    /// Its standard output and error, interleaved.
    output: String,
}

/// Runs `lines` with bash in `dir`; the script and what it printed go beside `dir` as
/// `NAME.sh`, `NAME.out` and `NAME.failed`.
fn run_script(lines: &[String], dir: &Path, name: &str, setting: &Setting) -> Ran {
    use std::os::unix::process::CommandExt;
    let parent = dir.parent().expect("a block's directory has a parent");
    let script = parent.join(format!("{name}.sh"));
    let out = parent.join(format!("{name}.out"));
    let failed = parent.join(format!("{name}.failed"));
    let failed_str = failed.display().to_string();
    assert!(!failed_str.contains('\''), "{failed_str}");
    let mut text = format!(
        "set -e -o pipefail\ntrap \"echo \\$((LINENO - {PROLOGUE_LINES})) > '{failed_str}'\" ERR\n"
    );
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    std::fs::write(&script, text).unwrap();
    let _ = std::fs::remove_file(&failed);
    let log = std::fs::File::create(&out).unwrap();
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .env("PATH", &setting.path)
        .env("CUGUARD_RUNTIME_DIR", &setting.runtime_dir)
        .env_remove("LD_PRELOAD")
        .process_group(0);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CUGUARD_") && k != "CUGUARD_RUNTIME_DIR" {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd.spawn().expect("running bash");
    let deadline = Instant::now() + BLOCK_TIME_LIMIT;
    let (status, timed_out) = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break (Some(status), false);
        }
        if Instant::now() > deadline {
            // SAFETY: kill has no memory-safety preconditions; the group is the one bash leads
            // (process_group(0) above), so this ends the block's commands and nothing else.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ran {
        code: status.and_then(|s| s.code()),
        failed_at: std::fs::read_to_string(&failed)
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        timed_out,
        output: String::from_utf8_lossy(&std::fs::read(&out).unwrap()).into_owned(),
    }
}

/// Whether the block ran as its marker says; else the failure, with the block and its output.
fn judge(block: &Block, options: &Options, lines: &[String], ran: &Ran) -> Result<(), String> {
    let last = last_command(lines);
    let what = if ran.timed_out {
        Some(format!(
            "ran past {} s and was killed",
            BLOCK_TIME_LIMIT.as_secs()
        ))
    } else {
        match (ran.code, options.exit) {
            (None, _) => Some("was killed by a signal".to_string()),
            (Some(0), 0) => None,
            (Some(0), want) => Some(format!(
                "exited 0, where its last command should exit {want}"
            )),
            (Some(code), want) if code == want && ran.failed_at == last => None,
            (Some(code), want) => Some(match ran.failed_at {
                Some(n) => format!(
                    "failed: the command at {} exited {code}{}",
                    block.at(n),
                    if want == 0 {
                        String::new()
                    } else {
                        format!(
                            " (only the last command, at {}, may fail, with {want})",
                            block.at(last.unwrap_or(0))
                        )
                    }
                ),
                None => format!("exited {code} (expected {want})"),
            }),
        }
    };
    match what {
        None => Ok(()),
        Some(what) => Err(format!(
            "{}: the runnable block {what}\n--- the block ---\n{}--- what it printed ---\n{}",
            block.at(0),
            block.numbered(),
            ran.output
        )),
    }
}

/// Puts the example program `name` into `dir` (see `with` in the module's documentation).
fn provide(name: &str, files: &HashMap<String, String>, dir: &Path) -> Result<(), String> {
    let target = dir.join(name);
    if let Some(text) = files.get(name) {
        std::fs::write(&target, text).unwrap();
        return Ok(());
    }
    let root = &support::artifacts().root;
    if name.ends_with(".py") {
        let source = root.join("harness/workloads/python").join(name);
        if !source.is_file() {
            return Err(format!(
                "`with {name}`: neither a `file: {name}` block of the document nor {}",
                source.display()
            ));
        }
        std::fs::copy(&source, &target).unwrap();
    } else {
        let source = root.join("harness/workloads/c").join(format!("{name}.c"));
        if !source.is_file() {
            return Err(format!(
                "`with {name}`: neither a `file: {name}` block of the document nor {}",
                source.display()
            ));
        }
        std::fs::copy(support::c_program(name), &target).unwrap();
    }
    Ok(())
}

/// The documents: README.md and docs/*.md, as paths from the repository root.
fn documents(root: &Path) -> Vec<String> {
    let mut docs = vec!["README.md".to_string()];
    let mut more: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

/// Runs the runnable blocks of one document's `blocks` in directories under `scratch`; the
/// failures, and how many blocks ran and were skipped.
fn run_document(
    blocks: &[Block],
    scratch: &Path,
    setting: &Setting,
    failures: &mut Vec<String>,
) -> (usize, usize) {
    let files: HashMap<String, String> = blocks
        .iter()
        .filter_map(|b| match &b.marker {
            Marker::File(name) => Some((name.clone(), b.lines.join("\n") + "\n")),
            Marker::Runnable(_) => None,
        })
        .collect();
    let (mut ran, mut skipped) = (0, 0);
    // The previous runnable block's directory, and whether it was skipped.
    let mut previous: Option<(PathBuf, bool)> = None;
    for block in blocks {
        let Marker::Runnable(options) = &block.marker else {
            continue;
        };
        let name = format!("{}-{}", block.doc.replace(['/', '.'], "-"), block.fence);
        let test = format!("docs_blocks ({})", block.at(0));
        let dir = if options.continues {
            match &previous {
                Some((dir, false)) => dir.clone(),
                Some((dir, true)) => {
                    eprintln!("skipped {test}: the block it continues was skipped");
                    skipped += 1;
                    previous = Some((dir.clone(), true));
                    continue;
                }
                None => {
                    failures.push(format!(
                        "{}: `continues`, but no runnable block comes before it in {}",
                        block.at(0),
                        block.doc
                    ));
                    continue;
                }
            }
        } else {
            let dir = scratch.join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            dir
        };
        if let Some(tool) = options.needs.iter().find(|t| !setting.has(t)) {
            support::missing(&test, &format!("{tool} is not on PATH"));
            skipped += 1;
            previous = Some((dir, true));
            continue;
        }
        previous = Some((dir.clone(), false));
        let lines = match commands(block, &setting.build) {
            Ok(lines) => lines,
            Err(why) => {
                failures.push(format!("{}: {why}", block.at(0)));
                continue;
            }
        };
        if let Err(why) = options
            .with
            .iter()
            .try_for_each(|program| provide(program, &files, &dir))
        {
            failures.push(format!("{}: {why}", block.at(0)));
            continue;
        }
        let result = run_script(&lines, &dir, &name, setting);
        if let Err(failure) = judge(block, options, &lines, &result) {
            failures.push(failure);
        }
        ran += 1;
    }
    (ran, skipped)
}

#[test]
fn every_runnable_block_of_the_docs_runs() {
    let a = support::artifacts();
    let mut blocks = Vec::new();
    let mut errors = Vec::new();
    for doc in documents(&a.root) {
        let text = std::fs::read_to_string(a.root.join(&doc)).unwrap();
        match parse(&doc, &text) {
            Ok(found) => blocks.push(found),
            Err(e) => errors.extend(e),
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    // The README's demo is the first thing a user runs: its block must be among those run.
    let readme = &blocks[0];
    assert!(
        readme
            .first()
            .is_some_and(|b| b.fence == first_fence(&a.root.join("README.md"))
                && matches!(b.marker, Marker::Runnable(_))),
        "README.md's first code block (the demo) is not marked runnable"
    );
    let setting = Setting::of_this_build();
    let scratch = support::scratch_dir("docs-blocks");
    let mut failures = Vec::new();
    let (mut ran, mut skipped) = (0, 0);
    for doc_blocks in &blocks {
        let (r, s) = run_document(doc_blocks, &scratch, &setting, &mut failures);
        ran += r;
        skipped += s;
    }
    eprintln!("docs_blocks: {ran} runnable blocks ran, {skipped} skipped");
    assert!(
        failures.is_empty(),
        "{} of the docs' runnable blocks failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran > 0, "no runnable block ran");
}

/// The line of a document's first code block's opening fence.
fn first_fence(doc: &Path) -> usize {
    let text = std::fs::read_to_string(doc).unwrap();
    text.lines()
        .position(|l| l.trim_start().starts_with("```"))
        .expect("a code block")
        + 1
}

// ---- the runner itself ---------------------------------------------------------------------

/// A document of one runnable block, parsed, and the outcome of running it in a fresh directory.
fn run_one(test: &str, doc: &str) -> Result<(), String> {
    let blocks = parse("synthetic.md", doc).unwrap();
    let setting = Setting::of_this_build();
    let scratch = support::scratch_dir(test);
    let mut failures = Vec::new();
    let (ran, _) = run_document(&blocks, &scratch, &setting, &mut failures);
    assert_eq!(
        ran,
        blocks
            .iter()
            .filter(|b| matches!(b.marker, Marker::Runnable(_)))
            .count()
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n\n"))
    }
}

#[test]
fn a_failing_block_fails_naming_its_document_lines_and_output() {
    let doc = "Text.\n\n<!-- runnable -->\n```sh\necho made it here\ncuguard summary missing.json\necho not here\n```\n";
    let failure = run_one("docs-blocks-failing", doc).unwrap_err();
    assert!(
        failure.starts_with(
            "synthetic.md:4: the runnable block failed: the command at synthetic.md:6 exited 2"
        ),
        "{failure}"
    );
    assert!(
        failure.contains("    6 | cuguard summary missing.json\n"),
        "{failure}"
    );
    assert!(failure.contains("made it here"), "{failure}");
    let printed = failure.split("--- what it printed ---").nth(1).unwrap();
    assert!(
        printed.contains("cuguard: error: missing.json"),
        "{failure}"
    );
    assert!(!printed.contains("not here"), "{failure}");
}

#[test]
fn exit_n_is_the_last_commands_status_and_continues_keeps_the_directory() {
    // The last command fails as said: the block passes; the next block reads what it wrote.
    let doc = "<!-- runnable; exit 3 -->\n```sh\necho kept > f.txt\nsh -c 'exit 3'   # as said\n```\n\
               <!-- runnable; continues -->\n```console\n$ grep -q kept f.txt\nkept\n```\n";
    run_one("docs-blocks-exit", doc).unwrap();
    // An earlier command failing, or none: the block fails.
    let early = "<!-- runnable; exit 1 -->\n```sh\nfalse\ntrue\n```\n";
    let failure = run_one("docs-blocks-exit-early", early).unwrap_err();
    assert!(
        failure.contains("the command at synthetic.md:3 exited 1"),
        "{failure}"
    );
    let none = "<!-- runnable; exit 1 -->\n```sh\ntrue\n```\n";
    let failure = run_one("docs-blocks-exit-none", none).unwrap_err();
    assert!(
        failure.contains("exited 0, where its last command should exit 1"),
        "{failure}"
    );
}

#[test]
fn the_demo_line_runs_on_this_build_without_cargo() {
    let build = "/t/debug/";
    assert_eq!(
        rewrite(
            "cargo build --release --workspace && ./target/release/cuguard run -- ./target/release/cudarc_leaks && ./target/release/cuguard summary demo.json",
            build
        ),
        "/t/debug/cuguard run -- /t/debug/cudarc_leaks && /t/debug/cuguard summary demo.json"
    );
    assert_eq!(rewrite("cargo test --workspace", build), "");
    assert_eq!(
        rewrite("cuguard summary r.json", build),
        "cuguard summary r.json"
    );
}

#[test]
fn markers_that_cannot_be_read_or_are_not_on_a_block_are_errors() {
    let cases = [
        (
            "<!-- runnable -->\nA paragraph.\n```sh\ntrue\n```\n",
            "synthetic.md:1: a marker must be on the line right before",
        ),
        (
            "<!-- runnable; wiht x -->\n```sh\ntrue\n```\n",
            "synthetic.md:1: unknown option \"wiht x\"",
        ),
        (
            "<!-- runnable with x -->\n```sh\ntrue\n```\n",
            "options follow `runnable` after semicolons",
        ),
        (
            "<!-- runnable; exit 0 -->\n```sh\ntrue\n```\n",
            "a status other than 0",
        ),
        (
            "<!-- runnable -->\n",
            "synthetic.md:1: a marker not followed by a code block",
        ),
        (
            "<!-- runnable -->\n```sh\ntrue\n",
            "synthetic.md:2: a code block that is never closed",
        ),
    ];
    for (doc, want) in cases {
        let errors = parse("synthetic.md", doc).unwrap_err();
        assert!(
            errors.iter().any(|e| e.contains(want)),
            "{doc:?}: {errors:?}"
        );
    }
    // Other comments are left alone, and options are read.
    let blocks = parse(
        "synthetic.md",
        "<!-- a note -->\n```sh\nx\n```\n  <!-- runnable; continues; with a b.py; needs go; exit 1 -->\n  ```console\n  $ y\n  ```\n",
    )
    .unwrap();
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].fence, 6);
    assert_eq!(blocks[0].lines, ["$ y"]);
    assert_eq!(
        blocks[0].marker,
        Marker::Runnable(Options {
            continues: true,
            with: vec!["a".into(), "b.py".into()],
            needs: vec!["go".into()],
            exit: 1,
        })
    );
}
