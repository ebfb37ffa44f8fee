//! `cuguard summary --at` and `--between` on real histories: a program with a 512 MiB spike
//! between two calm phases and a loop that keeps one buffer per iteration
//! (`harness/workloads/c/history_spike.c`), run under the shim; a program killed with SIGKILL;
//! damaged, cut and foreign files.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::support::*;

fn cuguard(dir: &Path, args: &[&str]) -> Output {
    Command::new(&artifacts().cuguard)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = cuguard(dir, args);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    stdout
}

/// `args` fail with exit 2 and one line on stderr, which is returned.
fn refused(dir: &Path, args: &[&str]) -> String {
    let out = cuguard(dir, args);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    stderr
}

/// Runs history_spike into `dir/r.json`; what it said, and its report.
pub(crate) fn spike_run(dir: &Path) -> (Value, Value) {
    let out = run(
        &mut shim_command(&c_program("history_spike"), &dir.join("r.json")),
        true,
    );
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        read_report(&dir.join("r.json")),
    )
}

/// A wall-clock moment the program printed, as `N ms` since the report's start (+ `delta`).
pub(crate) fn at(said: &Value, report: &Value, delta: i64) -> String {
    let start = report["process"]["start_unix_ms"].as_i64().unwrap();
    format!("{}ms", said.as_i64().unwrap() - start + delta)
}

#[test]
fn summary_at_finds_the_spike_at_its_line_and_only_while_it_lasts() {
    let dir = scratch_dir("history-at");
    let (said, r) = spike_run(&dir);
    let line = said["lines"]["spike"].as_u64().unwrap();
    let site = format!("spike_site (history_spike.c:{line})");
    // Inside the spike (150 ms into its 300 ms), from the report and from the history file.
    let inside = at(&said["spike"][0], &r, 150);
    for source in ["r.json", "r.history"] {
        let out = ok(&dir, &["summary", source, "--at", &inside]);
        assert!(out.contains("live at "), "{out}");
        let row = out
            .lines()
            .find(|l| l.contains(&site))
            .unwrap_or_else(|| panic!("{source}: the spike's site: {out}"));
        assert!(
            row.contains("512.0 MiB") && row.contains("1 allocation"),
            "{row}"
        );
        // Its callers, on the next line: the site, then main.
        let chain = out
            .lines()
            .skip_while(|l| !l.contains(&site))
            .nth(1)
            .unwrap();
        assert!(
            chain.contains(&format!("{site} ← main (history_spike.c:")),
            "{chain}"
        );
    }
    // Before and after it: not there.
    for moment in [
        at(&said["spike"][0], &r, -150),
        at(&said["spike"][1], &r, 150),
    ] {
        let out = ok(&dir, &["summary", "r.json", "--at", &moment]);
        assert!(!out.contains("spike_site"), "{moment}: {out}");
        assert!(!out.contains("512.0 MiB"), "{moment}: {out}");
    }
    // `peak` is the spike too, in JSON.
    let json: Value = serde_json::from_str(&ok(
        &dir,
        &["summary", "r.json", "--at", "peak", "--format", "json"],
    ))
    .unwrap();
    let sites = json["devices"][0]["sites"].as_array().unwrap();
    assert_eq!(sites[0]["label"], site.as_str(), "{json}");
    assert_eq!(sites[0]["bytes"], 512u64 << 20);
    assert!(json["span"]["whole"].as_bool().unwrap());
    // And in Markdown.
    let md = ok(
        &dir,
        &["summary", "r.json", "--at", "peak", "--format", "markdown"],
    );
    assert!(md.contains("| 512.0 MiB | 1 |"), "{md}");
}

#[test]
fn summary_between_around_one_iteration_lists_the_buffer_it_kept_alone() {
    let dir = scratch_dir("history-between");
    let (said, r) = spike_run(&dir);
    let keep = format!(
        "keep_site (history_spike.c:{})",
        said["lines"]["keep"].as_u64().unwrap()
    );
    let it = &said["iterations"][2];
    // From just before the iteration to just before its end: its 2 MiB temporary was freed
    // 20 ms before.
    let (from, to) = (at(&it[0], &r, -2), at(&it[1], &r, -2));
    let json: Value = serde_json::from_str(&ok(
        &dir,
        &[
            "summary",
            "r.json",
            "--between",
            &from,
            &to,
            "--format",
            "json",
        ],
    ))
    .unwrap();
    let devices = json["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1, "{json}");
    let sites = devices[0]["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "one site: {json}");
    assert_eq!(sites[0]["label"], keep.as_str());
    assert_eq!(
        (sites[0]["allocations"].as_u64(), sites[0]["bytes"].as_u64()),
        (Some(1), Some(4 << 20))
    );
    let out = ok(&dir, &["summary", "r.json", "--between", &from, &to]);
    assert!(out.contains("kept from"), "{out}");
    assert!(out.contains(&keep), "{out}");
    assert!(!out.contains("scratch_site"), "{out}");
}

#[test]
fn a_history_of_a_program_killed_with_sigkill_answers_up_to_200_ms_before_the_kill() {
    let dir = scratch_dir("history-at-kill");
    let mut child = shim_command(&c_program("history_spike"), &dir.join("r.json"))
        .arg("hang")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let said: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(lines.next().unwrap().unwrap().starts_with("ready "));
    std::thread::sleep(Duration::from_millis(300));
    let killed_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    child.kill().unwrap();
    child.wait().unwrap();
    let bytes = std::fs::read(dir.join("r.history")).unwrap();
    let start_ms = cuguard_history::Header::decode(&bytes)
        .unwrap()
        .start_unix_ns
        / 1_000_000;
    let moment = format!("{}ms", killed_unix_ms - start_ms - 200);
    let out = ok(&dir, &["summary", "r.history", "--at", &moment]);
    let keep = format!(
        "keep_site (history_spike.c:{})",
        said["lines"]["keep"].as_u64().unwrap()
    );
    let row = out.lines().find(|l| l.contains(&keep)).expect(&out);
    assert!(
        row.contains("20.0 MiB") && row.contains("5 allocations"),
        "{row}"
    );
    assert!(out.contains("without its end"), "{out}");
    // Where a report is read, the history says what it is and what reads it.
    for command in ["summary", "check"] {
        let said = refused(&dir, &[command, "r.history"]);
        assert_eq!(
            said.trim_end(),
            "cuguard: error: r.history: not a cuguard report: it is a process's history: read it \
             with `cuguard summary r.history --at end` or `cuguard view r.history -o page.html`",
            "{command}"
        );
    }
}

#[test]
fn damaged_cut_newer_and_foreign_files_are_refused_in_one_line() {
    let dir = scratch_dir("history-bad");
    let (_, _) = spike_run(&dir);
    let good = std::fs::read(dir.join("r.history")).unwrap();
    // A byte changed inside a chunk.
    let mut damaged = good.clone();
    let mid = good.len() / 2;
    damaged[mid] ^= 0x55;
    std::fs::write(dir.join("damaged.history"), &damaged).unwrap();
    let said = refused(&dir, &["summary", "damaged.history", "--at", "end"]);
    // Where the byte lands is the run's: inside a chunk's body its checksum fails ("damaged");
    // in a chunk's length, the chunk then runs past the file ("cut short"). Both refuse it.
    assert!(
        said.contains("damaged.history")
            && (said.contains("damaged at byte") || said.contains("cut short at byte")),
        "{said}"
    );
    // Cut inside a chunk.
    std::fs::write(dir.join("cut.history"), &good[..good.len() - 3]).unwrap();
    let said = refused(&dir, &["summary", "cut.history", "--at", "end"]);
    assert!(
        said.contains("cut.history") && said.contains("cut short"),
        "{said}"
    );
    // Written by a newer cuguard.
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(dir.join("newer.history"), &newer).unwrap();
    let said = refused(&dir, &["summary", "newer.history", "--at", "end"]);
    assert!(said.contains("newer cuguard"), "{said}");
    // A report whose history is off.
    run(
        shim_command(&c_program("history_churn"), &dir.join("off.json"))
            .env("CUGUARD_HISTORY", "0")
            .args(["1", "1", "4"]),
        true,
    );
    let said = refused(&dir, &["summary", "off.json", "--at", "end"]);
    assert!(said.contains("names no history"), "{said}");
    // A moment outside the run, and one that is not a moment.
    let said = refused(&dir, &["summary", "r.json", "--at", "99s"]);
    assert!(
        said.contains("outside the history: it spans 0 ms to"),
        "{said}"
    );
    let said = refused(&dir, &["summary", "r.json", "--at", "soon"]);
    assert!(said.contains("is not a time"), "{said}");
    // A negative moment is a value, not an option, and the answer says why it has none.
    let said = refused(&dir, &["summary", "r.json", "--at", "-1s"]);
    assert!(
        said.starts_with(
            "cuguard: error: --at \"-1s\" is before the process started: times count from its \
             start, and the history spans 0 ms to "
        ),
        "{said}"
    );
    let said = refused(&dir, &["summary", "r.json", "--between", "0.5s", "0.1s"]);
    assert!(said.contains("after the second"), "{said}");
    let said = refused(&dir, &["summary", "r.json", "r.json", "--at", "end"]);
    assert!(said.contains("one process"), "{said}");
    // A FIFO is not read (it would block).
    let fifo = dir.join("fifo.history");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: c is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let said = refused(&dir, &["summary", "fifo.history", "--at", "end"]);
    assert!(said.contains("not a regular file"), "{said}");
}

#[test]
fn the_memory_viz_export_of_the_spike_run_is_a_snapshot_pytorchs_readers_accept() {
    let dir = scratch_dir("history-export");
    let (said, r) = spike_run(&dir);
    let out = cuguard(
        &dir,
        &[
            "export",
            "--format",
            "memory-viz",
            "r.json",
            "-o",
            "r.pickle",
        ],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.starts_with("cuguard: wrote r.pickle ("), "{stderr}");
    assert_eq!(mode_of(&dir.join("r.pickle")), 0o600);
    // The format's invariants, as the viewer reads them (protocol 4 and its opcodes, blocks
    // tiling segments, actions, frame keys, the replay backwards): scripts/memory_viz_check.py.
    let python = "python3";
    memory_viz_checked(&dir.join("r.pickle"));
    // The spike, with its frames as PyTorch writes them.
    let probe = r#"
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
assert sorted(d) == ["device_traces", "segments"], sorted(d)
t = d["device_traces"][0]
a = [e for e in t if e["action"] == "alloc" and e["size"] == 512 << 20]
assert len(a) == 1, a
f = a[0]["frames"][0]
assert sorted(f) == ["filename", "line", "name"], f
print(f["name"], f["line"], [e["action"] for e in t if e["addr"] == a[0]["addr"]])
"#;
    let probed = Command::new(python)
        .args(["-c", probe])
        .arg(dir.join("r.pickle"))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&probed);
    assert!(probed.status.success(), "{stderr}");
    let line = said["lines"]["spike"].as_u64().unwrap();
    assert!(
        stdout.starts_with(&format!("spike_site {line} ")),
        "{stdout}"
    );
    assert!(
        stdout.contains("'alloc', 'free_requested', 'free_completed'"),
        "{stdout}"
    );
    // A window: only its events, and the size said.
    let from = at(&said["spike"][0], &r, -50);
    let to = at(&said["spike"][1], &r, 50);
    let out = cuguard(
        &dir,
        &[
            "export",
            "r.history",
            "--between",
            &from,
            &to,
            "-o",
            "w.pickle",
        ],
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(", events from "), "{stderr}");
    let checked = memory_viz_checked(&dir.join("w.pickle"));
    let summary: Value = serde_json::from_slice(&checked.stdout).unwrap();
    let actions: Vec<&str> = summary["traces"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[0].as_str().unwrap())
        .collect();
    assert!(
        actions.contains(&"alloc") && actions.len() < 40,
        "{actions:?}"
    );
}

/// One clock: the moment the summary prints for the peak (and the report records) is one that
/// `--at` finds the peak's bytes at. The record's time came from the coarse clock, up to a tick
/// (4 ms) behind the history's: `--at` there came before the spike's own allocation.
#[test]
fn the_summarys_peak_moment_is_one_at_finds_with_the_peaks_bytes() {
    let dir = scratch_dir("history-one-clock");
    let (_, r) = spike_run(&dir);
    let text = ok(&dir, &["summary", "r.json"]);
    let line = text
        .lines()
        .find(|l| l.contains("at the peak of "))
        .unwrap_or_else(|| panic!("{text}"));
    // `device 0: at the peak of 512.0 MiB (at 305 ms): the program 512.0 MiB`
    let rest = line.split("at the peak of ").nth(1).unwrap();
    let (bytes, rest) = rest.split_once(" (at ").unwrap();
    let (moment, _) = rest.split_once("): ").unwrap();
    assert_eq!(bytes, "512.0 MiB", "{line}");
    let at = ok(&dir, &["summary", "r.json", "--at", moment]);
    let headline = at.lines().nth(1).unwrap();
    assert!(
        headline.contains(": 512.0 MiB in 1 allocation ("),
        "--at {moment}: {headline}"
    );
    // The report's own record, in milliseconds, likewise.
    let ms = r["peaks"][0]["time_ms"].as_u64().unwrap();
    let json: Value = serde_json::from_str(&ok(
        &dir,
        &[
            "summary",
            "r.json",
            "--at",
            &format!("{ms}ms"),
            "--format",
            "json",
        ],
    ))
    .unwrap();
    let live: u64 = json["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        live,
        r["peaks"][0]["live_bytes"].as_u64().unwrap(),
        "{json}"
    );
}

/// Writes `dir/h.history`: a history (as the shim writes one) in which 7 events were lost
/// between 400 and 450 ms, between three 1 MiB allocations made at 100, 300 and 600 ms; it ends
/// at 1 s.
pub(crate) fn lost_history(dir: &Path) -> std::path::PathBuf {
    use cuguard_format::MemoryKind;
    use cuguard_history::{Action, Chunk, Header, Raw, VERSION, kind, write_chunk};
    const MS: u64 = 1_000_000;
    let mut file = Header {
        version: VERSION,
        pid: 4244,
        start_unix_ns: 1,
        segment: 0,
        run: 0,
    }
    .encode()
    .to_vec();
    // One tick of the counter is one nanosecond.
    let clock = |t: u64| Chunk::Clock {
        tsc: t,
        since_start_ns: t,
        unix_ns: 1 + t,
    };
    let alloc = |t: u64, addr: u64| Raw {
        tsc: t,
        addr,
        size: 1 << 20,
        stack: u32::MAX,
        context: 0,
        kind: kind(Action::Alloc, MemoryKind::Device),
        device: 0,
        stream: 0,
    };
    for c in [
        clock(0),
        Chunk::Events {
            thread: 7,
            events: vec![alloc(100 * MS, 0x10_0000), alloc(300 * MS, 0x20_0000)],
        },
        Chunk::Dropped {
            count: 7,
            first_tsc: 400 * MS,
            last_tsc: 450 * MS,
        },
        Chunk::Events {
            thread: 7,
            events: vec![alloc(600 * MS, 0x30_0000)],
        },
        clock(1000 * MS),
        Chunk::End { tsc: 1000 * MS },
    ] {
        write_chunk(&mut file, &c);
    }
    let path = dir.join("h.history");
    std::fs::write(&path, &file).unwrap();
    path
}

/// Events lost before the moment asked (issue 51) are said in its answer, never "whole", and
/// the rows that may be wrong are marked.
#[test]
fn summary_at_says_the_events_lost_before_the_moment_and_is_whole_only_without_them() {
    let dir = scratch_dir("history-lost");
    lost_history(&dir);

    // Before the loss: whole.
    let early = ok(&dir, &["summary", "h.history", "--at", "200ms"]);
    assert!(
        early.lines().nth(1).unwrap().starts_with(
            "live at 200 ms: 1.0 MiB in 1 allocation (the history spans 0 ms to 1 s, whole)"
        ),
        "{early}"
    );
    // After it: said, and the two allocations made before it ended marked.
    let end = ok(&dir, &["summary", "h.history", "--at", "end"]);
    let lines: Vec<&str> = end.lines().collect();
    assert_eq!(
        lines[1],
        "live at 1 s: 3.0 MiB in 3 allocations (the history spans 0 ms to 1 s; NOT WHOLE: 7 events \
         lost before this moment (the threads made them faster than they were written), at 400 ms–450 ms: \
         an allocation listed may have been freed in a lost window, one made in it may be missing)",
        "{end}"
    );
    assert!(
        lines[3].ends_with("2 of them made before a lost window: live, or freed in it"),
        "{end}"
    );
    let json: Value = serde_json::from_str(&ok(
        &dir,
        &["summary", "h.history", "--at", "end", "--format", "json"],
    ))
    .unwrap();
    assert_eq!(json["span"]["complete"], false);
    assert_eq!(json["span"]["lost_events"], 7);
    assert_eq!(
        json["span"]["lost_windows"],
        serde_json::json!([{"from_ms": 400.0, "to_ms": 450.0, "events": 7}])
    );
    assert_eq!(json["devices"][0]["sites"][0]["unsure_allocations"], 2);
    assert_eq!(json["devices"][0]["sites"][0]["unsure_bytes"], 2 << 20);
}

/// A history of the previous layout (1: no streams, no checkpoints), written by cuguard at
/// 94323a1 with its report, is read and answers as that cuguard answered (its answers recorded
/// then: the moments, bytes and allocations below).
#[test]
fn a_history_of_the_previous_layout_answers_as_before() {
    let dir = scratch_dir("history-v1");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/history-v1");
    for f in ["spike.json", "spike.history", "leak.json", "leak.history"] {
        std::fs::copy(fixtures.join(f), dir.join(f)).unwrap();
    }
    let ask = |args: &[&str]| -> Value {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        serde_json::from_str(&ok(&dir, &all)).unwrap()
    };
    // (question, moment ms, allocations in the history, its end ms, [(bytes, allocations) by device]).
    type Case<'a> = (&'a [&'a str], f64, u64, f64, &'a [(u64, u64)]);
    let cases: [Case; 5] = [
        (
            &["summary", "spike.json", "--at", "peak"],
            304.52,
            71,
            1112.49,
            &[(512 << 20, 1)],
        ),
        (
            &["summary", "spike.json", "--at", "500ms"],
            500.0,
            71,
            1112.49,
            &[(512 << 20, 1)],
        ),
        (
            &["summary", "spike.json", "--at", "end"],
            1112.49,
            71,
            1112.49,
            &[],
        ),
        (
            &["summary", "leak.json", "--at", "end"],
            2.9,
            3,
            2.9,
            &[(20 << 20, 2)],
        ),
        (
            &["summary", "leak.json", "--at", "peak"],
            2.84,
            3,
            2.9,
            &[(20 << 20, 2)],
        ),
    ];
    for (args, at, allocations, ends, devices) in cases {
        let v = ask(args);
        assert_eq!(v["at_ms"].as_f64(), Some(at), "{args:?}");
        assert_eq!(
            v["span"]["allocations"].as_u64(),
            Some(allocations),
            "{args:?}"
        );
        assert_eq!(v["span"]["ends_ms"].as_f64(), Some(ends), "{args:?}");
        assert_eq!(v["span"]["whole"], true, "{args:?}");
        let got: Vec<(u64, u64)> = v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["bytes"].as_u64().unwrap(),
                    d["allocations"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(got, devices, "{args:?}");
    }
    let v = ask(&["summary", "spike.json", "--between", "1s", "end"]);
    assert_eq!(
        (v["from_ms"].as_f64(), v["to_ms"].as_f64()),
        (Some(1000.0), Some(1112.49))
    );
    assert_eq!(v["devices"], serde_json::json!([]));
}

/// A history whose last checkpoint is damaged (a byte of what it restates flipped) is still
/// read, from the checkpoint before it, with one line that says so; the answer is the one the
/// undamaged history gave.
#[test]
fn a_damaged_checkpoint_is_read_past_with_one_line() {
    let dir = scratch_dir("history-damaged-checkpoint");
    // 2 threads of 300,000 pairs: 1.2 million events, a checkpoint every 262,144 or more.
    run(
        shim_command(&c_program("history_churn"), &dir.join("r.json"))
            .args(["2", "1", "300000", "2"]),
        true,
    );
    let args = ["summary", "r.json", "--at", "end", "--format", "json"];
    let before: Value = serde_json::from_str(&ok(&dir, &args)).unwrap();
    let file = dir.join("r.history");
    let mut bytes = std::fs::read(&file).unwrap();
    // The last checkpoint (kind 9): a byte of its live set, past its 48-byte head and count.
    let (mut at, mut last) = (cuguard_history::HEADER_LEN, None);
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        if bytes[at] == 9 {
            last = Some((at, len));
        }
        at += 9 + len;
    }
    let (at, len) = last.expect("a checkpoint in 1.2 million events");
    assert!(len > cuguard_history::CHECKPOINT_HEAD + 4, "{len}");
    bytes[at + 9 + cuguard_history::CHECKPOINT_HEAD + 3] ^= 0x20;
    std::fs::write(&file, &bytes).unwrap();
    let out = cuguard(&dir, &args);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "cuguard: {}: a checkpoint at byte {at} is damaged (a chunk's checksum does not match): read from the one before it, more slowly\n",
            file.display()
        )
    );
    let after: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(after["devices"], before["devices"]);
    assert_eq!(after["span"], before["span"]);
}
