//! The history as the shim records it: real programs under the shim, their history files read
//! back with the history crate's own reader. (What the command answers from them is in
//! `cli_history`.)

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use cuguard_history::replay::Replay;
use serde_json::Value;

use super::support::*;

const MIB: u64 = 1 << 20;

fn replay(files: &[&Path]) -> Replay {
    let bytes: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let refs: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
    Replay::read(&refs).unwrap()
}

fn start_ms(report: &Value) -> i64 {
    report["process"]["start_unix_ms"].as_i64().unwrap()
}

#[test]
fn a_run_leaves_its_history_beside_the_report_with_every_allocation_in_time() {
    let dir = scratch_dir("history-spike");
    let report = dir.join("r.json");
    let out = run(
        &mut shim_command(&c_program("history_spike"), &report),
        true,
    );
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = read_report(&report);
    // Named by absolute path: no file elsewhere of the same name is taken for it.
    assert_eq!(
        r["history"]["files"],
        serde_json::json!([dir.join("r.history")])
    );
    let file = dir.join("r.history");
    assert_eq!(mode_of(&file), 0o600);
    assert_eq!(
        r["history"]["bytes"].as_u64().unwrap(),
        std::fs::metadata(&file).unwrap().len()
    );
    let h = replay(&[&file]);
    assert!(h.whole && h.cut.is_none(), "{:?}", h.cut);
    assert_eq!((h.lost_events(), h.unmatched_frees), (0, 0));
    assert_eq!(h.pid as u64, r["process"]["pid"].as_u64().unwrap());
    // Every allocation: 1 MiB calm ones, the spike, 5 scratch and 5 kept buffers.
    let sizes = |size: u64| h.blocks.iter().filter(|b| b.size == size).count();
    assert!(sizes(MIB) >= 30, "{}", sizes(MIB));
    assert_eq!(
        (sizes(512 * MIB), sizes(2 * MIB), sizes(4 * MIB)),
        (1, 5, 5)
    );
    assert_eq!(
        h.blocks.len(),
        sizes(MIB) + 11,
        "nothing else was allocated"
    );
    // The spike, when the program says it was (its clock against the report's start).
    let spike = h.blocks.iter().find(|b| b.size == 512 * MIB).unwrap();
    let rel = |unix_ms: i64| unix_ms - start_ms(&r);
    let (from, to) = (
        rel(said["spike"][0].as_i64().unwrap()),
        rel(said["spike"][1].as_i64().unwrap()),
    );
    let start = (spike.start_ns / 1_000_000) as i64;
    let end = (spike.end_ns.unwrap() / 1_000_000) as i64;
    assert!(
        (from - 50..=from + 2).contains(&start),
        "made at {start} ms, the program says {from}"
    );
    assert!(
        (to - 2..=to + 50).contains(&end),
        "freed at {end} ms, the program says {to}"
    );
    assert_eq!(
        h.peak(None).0,
        spike.start_ns,
        "the peak is the spike's beginning"
    );
    // Each block's stack is one the history names.
    assert!(h.blocks.iter().all(|b| h.stacks.contains_key(&b.stack)));
    assert!(!h.modules.is_empty());
}

#[test]
fn a_program_killed_with_sigkill_leaves_a_history_read_up_to_its_last_drain() {
    let dir = scratch_dir("history-kill");
    let report = dir.join("r.json");
    let mut child = shim_command(&c_program("history_spike"), &report)
        .arg("hang")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let _said = lines.next().unwrap().unwrap();
    let ready = lines.next().unwrap().unwrap();
    assert!(ready.starts_with("ready "), "{ready}");
    std::thread::sleep(Duration::from_millis(300));
    let killed_ms = unix_ms();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!report.exists(), "a kill -9 writes no report");
    let h = replay(&[&dir.join("r.history")]);
    assert!(!h.whole && h.cut.is_none(), "{:?}", h.cut);
    let ends_unix_ms = (h.start_unix_ns + h.ends_ns) / 1_000_000;
    assert!(
        ends_unix_ms + 200 >= killed_ms,
        "the history ends {} ms before the kill",
        killed_ms - ends_unix_ms
    );
    // The five kept buffers were live when it was killed.
    let live: Vec<u64> = h
        .blocks
        .iter()
        .filter(|b| b.end_ns.is_none())
        .map(|b| b.size)
        .collect();
    assert_eq!(live, vec![4 * MIB; 5]);
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn a_forked_childs_history_is_its_own() {
    let dir = scratch_dir("history-fork");
    let out = run(
        &mut shim_command(&c_program("history_fork"), &dir.join("r.%p.json")),
        true,
    );
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    let child = said["child"].as_u64().unwrap();
    let parent = out_pid(&dir, child);
    let sizes = |pid: u64| {
        let h = replay(&[&dir.join(format!("r.{pid}.history"))]);
        assert_eq!(h.pid as u64, pid);
        assert!(h.whole);
        let mut s: Vec<u64> = h.blocks.iter().map(|b| b.size).collect();
        s.sort();
        s
    };
    assert_eq!(sizes(parent), vec![MIB, 3 * MIB]);
    assert_eq!(sizes(child), vec![2 * MIB]);
}

/// The pid of the other process that wrote a history in `dir` than `child`.
fn out_pid(dir: &Path, child: u64) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_prefix("r.")?
                .strip_suffix(".history")?
                .parse::<u64>()
                .ok()
        })
        .find(|&p| p != child)
        .expect("the parent's history")
}

#[test]
fn thousands_of_short_lived_threads_lose_no_event() {
    let dir = scratch_dir("history-threads");
    let report = dir.join("r.json");
    run(
        shim_command(&c_program("history_churn"), &report).args(["50", "40", "20", "10"]),
        true,
    );
    let h = replay(&[&dir.join("r.history")]);
    assert!(h.whole);
    assert_eq!((h.lost_events(), h.unmatched_frees), (0, 0));
    // 2,000 threads × 20 pairs, and the 10 kept.
    assert_eq!(h.blocks.len(), 40_010);
    assert_eq!(h.blocks.iter().filter(|b| b.end_ns.is_none()).count(), 10);
    let threads: std::collections::HashSet<u32> = h.blocks.iter().map(|b| b.thread).collect();
    assert!(threads.len() >= 1000, "{} threads", threads.len());
    let ended = |list: &[cuguard_history::replay::Block]| {
        list.iter().filter(|b| b.end_ns.is_some()).count() as u64
    };
    let events = (h.blocks.len() + h.segments.len()) as u64 + ended(&h.blocks) + ended(&h.segments);
    assert_eq!(
        read_report(&report)["history"]["events"].as_u64(),
        Some(events)
    );
}

#[test]
fn a_bounded_history_keeps_the_latest_part_and_says_what_it_let_go() {
    let dir = scratch_dir("history-bound");
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("history_churn"), &report);
    cmd.env("CUGUARD_HISTORY", "1MiB")
        .args(["50", "40", "200", "10"]);
    run(&mut cmd, true);
    let r = read_report(&report);
    let info = &r["history"];
    assert_eq!(
        info["files"],
        serde_json::json!([dir.join("r.history.1"), dir.join("r.history")])
    );
    assert!(info["segments_let_go"].as_u64().unwrap() >= 1, "{info}");
    assert!(info["begins_ms"].as_u64().unwrap() > 0, "{info}");
    assert_eq!(info["bound_bytes"].as_u64(), Some(MIB));
    let (older, newer) = (dir.join("r.history.1"), dir.join("r.history"));
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    assert_eq!(info["bytes"].as_u64(), Some(size(&older) + size(&newer)));
    for files in [vec![&*older, &*newer], vec![&*newer]] {
        let h = replay(&files);
        assert!(h.whole && h.first_segment >= 1, "{files:?}");
        assert_eq!(h.unmatched_frees, 0, "{files:?}");
        // What was live at the end is all there, though it was made before the kept part.
        let live: Vec<u64> = h
            .blocks
            .iter()
            .filter(|b| b.end_ns.is_none())
            .map(|b| b.size)
            .collect();
        assert_eq!(live, vec![MIB; 10], "{files:?}");
    }
    assert!(
        replay(&[&older, &newer]).begins_ns <= replay(&[&newer]).begins_ns,
        "the older segment reaches further back"
    );
}

#[test]
fn a_full_disk_stops_the_history_and_the_program_runs_on() {
    let dir = scratch_dir("history-full");
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("history_churn"), &report);
    cmd.args(["10", "10", "4000", "0"]);
    // A file-size limit stands in for a full disk: writes past 4 MiB fail (EFBIG), with
    // SIGXFSZ ignored as a program that handles it would.
    // SAFETY: setrlimit and signal are async-signal-safe; nothing else runs in the child here.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 20,
                rlim_max: 4 << 20,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = run(&mut cmd, true);
    let r = read_report(&report);
    let stopped = r["history"]["stopped"].as_str().unwrap();
    assert!(stopped.contains("File too large"), "{stopped}");
    assert!(
        r["faults"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().starts_with("history: ")),
        "{}",
        r["faults"]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "one summary line: {stderr}");
    // What was written is readable: whole chunks, up to where it stopped.
    let h = replay(&[&dir.join("r.history")]);
    assert!(!h.whole && h.cut.is_none(), "{:?}", h.cut);
    assert!(!h.blocks.is_empty());
}

#[test]
fn history_off_writes_no_file_and_a_bad_setting_is_said() {
    let dir = scratch_dir("history-off");
    let report = dir.join("r.json");
    let mut cmd = shim_command(&c_program("history_churn"), &report);
    cmd.env("CUGUARD_HISTORY", "0").args(["1", "1", "10"]);
    run(&mut cmd, true);
    assert!(read_report(&report).get("history").is_none());
    assert!(!dir.join("r.history").exists());

    let mut cmd = shim_command(&c_program("history_churn"), &report);
    cmd.env("CUGUARD_HISTORY", "lots").args(["1", "1", "10"]);
    run(&mut cmd, true);
    let r = read_report(&report);
    assert!(
        r["faults"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().contains("CUGUARD_HISTORY=\"lots\"")),
        "{}",
        r["faults"]
    );
    assert_eq!(r["history"]["bound_bytes"].as_u64(), Some(256 * MIB));
}

/// Nothing lost under churn (issue 51): four threads make 5 million allocate-and-free pairs
/// (10 million events) as fast as they can on this 2-core machine, faster than the history's
/// thread drains; a thread whose ring fills drains the rings itself before its next event, so
/// the history holds every event, and what it says was live at the end is the report's leaks.
/// (Before, most were dropped: 7 of 10 million.)
#[test]
fn ten_million_events_from_four_threads_are_all_kept() {
    let dir = scratch_dir("history-churn-whole");
    let report = dir.join("r.json");
    let out = run(
        shim_command(&c_program("history_churn"), &report).args(["4", "1", "1250000", "4"]),
        true,
    );
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["pairs"], 5_000_000);
    let r = read_report(&report);
    let h = replay(&[&dir.join("r.history")]);
    assert!(h.whole && h.cut.is_none(), "{:?}", h.cut);
    assert_eq!(h.lost_events(), 0);
    assert_eq!(r["history"]["events"].as_u64().unwrap(), 10_000_008);
    // Every pair is in it: 5 million allocations freed, and the 4 kept ones live at the end,
    // at the addresses the report lists.
    assert_eq!(h.blocks.len(), 5_000_004);
    // And the pool's chunks the blocks came from: one a thread (10,000,000 + 4 + 4 events).
    assert_eq!(h.segments.len(), 4);
    let mut live: Vec<u64> = h.live_at(h.ends_ns).map(|b| b.addr).collect();
    let mut leaks: Vec<u64> = r["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            u64::from_str_radix(l["address"].as_str().unwrap().trim_start_matches("0x"), 16)
                .unwrap()
        })
        .collect();
    live.sort_unstable();
    leaks.sort_unstable();
    assert_eq!(live, leaks);
}

/// The bound is hard (issue 51): eight threads churn 4.8 million allocate-and-free pairs under a
/// 1 MiB `CUGUARD_HISTORY`; the history's files together never pass it (sampled while they run
/// and at the end), nothing is lost, and the newest segment reads on its own up to the end.
#[test]
fn the_bound_holds_to_the_byte_under_eight_churning_threads() {
    let dir = scratch_dir("history-bound-hard");
    let report = dir.join("r.json");
    let mut child = shim_command(&c_program("history_churn"), &report)
        .env("CUGUARD_HISTORY", "1MiB")
        .args(["8", "2", "300000", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let files = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".history"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum::<u64>()
    };
    let mut most = 0;
    while child.try_wait().unwrap().is_none() {
        most = most.max(files());
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(child.wait().unwrap().success());
    most = most.max(files());
    assert!(most <= MIB, "{most} bytes, over the 1 MiB bound");
    let r = read_report(&report);
    let history = &r["history"];
    // The pairs' 9.6 million events, the 2 kept blocks, and the pool's chunk of each of the 16
    // threads (as the 4-thread run above has 4).
    assert_eq!(history["events"].as_u64().unwrap(), 9_600_018);
    assert!(
        history["segments_let_go"].as_u64().unwrap() > 0,
        "{history}"
    );
    assert!(
        history
            .get("lost")
            .is_none_or(|l| l.as_array().is_some_and(|a| a.is_empty())),
        "{history}"
    );
    let names: Vec<std::path::PathBuf> = history["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().into())
        .collect();
    let newest = replay(&[names.last().unwrap()]);
    assert!(newest.whole && newest.cut.is_none(), "{:?}", newest.cut);
    assert_eq!(newest.lost_events(), 0);
    // The two kept blocks are live at the end, restated by every segment since they were made.
    assert_eq!(newest.live_at(newest.ends_ns).count(), 2);
}

/// Endings under load (issue 51): a program killed with SIGKILL while four threads churn leaves
/// a history whose last moment is within 100 ms of the kill, and whose live set 100 ms before
/// the kill is what the program said it held then (its 1 MiB blocks, each printed with the
/// moments around its call).
#[test]
fn a_program_killed_while_it_churns_leaves_its_history_to_within_100_ms() {
    let dir = scratch_dir("history-kill-churn");
    let mut child = shim_command(&c_program("history_kill"), &dir.join("r.json"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut kept: Vec<(u64, u64)> = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while kept.len() < 60 {
        let line = lines.next().expect("the program's lines").unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[0], "kept", "{line}");
        kept.push((f[2].parse().unwrap(), f[3].parse().unwrap()));
    }
    let killed_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    child.kill().unwrap();
    child.wait().unwrap();
    // What it printed up to the kill (a line may have been on its way).
    for line in lines.map_while(Result::ok) {
        let f: Vec<&str> = line.split_whitespace().collect();
        kept.push((f[2].parse().unwrap(), f[3].parse().unwrap()));
    }
    let h = replay(&[&dir.join("r.history")]);
    assert!(!h.whole, "killed: no end");
    assert_eq!(h.lost_events(), 0);
    let since = |unix: u64| unix.saturating_sub(h.start_unix_ns);
    let kill = since(killed_unix_ns);
    assert!(
        h.ends_ns + 100_000_000 >= kill,
        "the history ends {} ms before the kill",
        (kill - h.ends_ns) / 1_000_000
    );
    // 100 ms before the kill, moved into the pause between two calls (10 ms apart), so that
    // every block the program had was made before it, and none after before it.
    let t = kill - 100_000_000;
    let i = kept
        .iter()
        .rposition(|&(_, after)| since(after) < t)
        .expect("a block kept 100 ms before the kill");
    let next_before = kept.get(i + 1).map_or(u64::MAX, |k| since(k.0));
    let moment = (since(kept[i].1) + next_before.min(since(kept[i].1) + 5_000_000)) / 2;
    let live = h.live_at(moment).filter(|b| b.size == 1 << 20).count();
    assert_eq!(live, i + 1, "the program held {} blocks then", i + 1);
}
