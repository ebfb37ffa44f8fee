//! The stream of each allocation and free in the history, and in the memory-viz export:
//! `harness/workloads/c/history_streams.c` allocates on two created streams, the legacy and the
//! per-thread default stream, and with cuMemAlloc (no stream), and frees with cuMemFreeAsync;
//! run under the shim with its pool on (cuMemAlloc's blocks then are the pool's) and off.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use cuguard_format::MemoryKind;

use cuguard_history::replay::Replay;
use cuguard_history::{Action, Chunk, Reader};
use serde_json::Value;

use super::support::*;

/// `CU_STREAM_PER_THREAD`: the history's key of a thread's per-thread default stream.
const PER_THREAD: u64 = 2;

fn hex(v: &Value) -> u64 {
    let s = v.as_str().unwrap();
    u64::from_str_radix(s.strip_prefix("0x").unwrap(), 16).unwrap()
}

/// The history's key of stream handle `handle` given to `api`: the legacy default stream is 0
/// (handle 0 in a plain entry, `CU_STREAM_LEGACY` in any), a per-thread default stream
/// `CU_STREAM_PER_THREAD` (handle 0 in a `_ptsz` entry).
fn key(api: &str, handle: u64) -> u64 {
    match handle {
        0 if api.ends_with("_ptsz") => PER_THREAD,
        1 => 0,
        h => h,
    }
}

/// One allocation the program made, as it said.
struct Made {
    addr: u64,
    size: u64,
    /// The history's key of the stream it was made on.
    stream: u64,
    /// That of the stream it was freed on, if it was.
    freed_on: Option<u64>,
}

fn allocations(said: &Value) -> Vec<Made> {
    said["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| Made {
            addr: hex(&a["address"]),
            size: a["size"].as_u64().unwrap(),
            stream: key(a["api"].as_str().unwrap(), hex(&a["stream"])),
            freed_on: (!a["freed_on"].is_null())
                .then(|| key("cuMemFreeAsync", hex(&a["freed_on"]))),
        })
        .collect()
}

/// The run's history files' bytes, as the report names them.
fn history(report: &Value) -> Vec<Vec<u8>> {
    report["history"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| std::fs::read(f.as_str().unwrap()).unwrap())
        .collect()
}

/// The memory-viz export of `dir/r.json`, checked by `scripts/memory_viz_check.py`, as JSON:
/// `segments` as [address, total_size, stream], device 0's trace as [action, addr, size, stream].
fn memory_viz(dir: &Path) -> Value {
    run(
        Command::new(&artifacts().cuguard).current_dir(dir).args([
            "export",
            "--format",
            "memory-viz",
            "r.json",
            "-o",
            "r.pickle",
        ]),
        true,
    );
    let pickle = dir.join("r.pickle");
    memory_viz_checked(&pickle);
    let probe = r#"
import json, pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
print(json.dumps({
    "segments": [[s["address"], s["total_size"], s["stream"]] for s in d["segments"]],
    "trace": [[e["action"], e["addr"], e["size"], e["stream"]] for e in d["device_traces"][0]],
}))
"#;
    let probed = run(
        Command::new("python3").args(["-c", probe]).arg(&pickle),
        true,
    );
    serde_json::from_slice(&probed.stdout).unwrap()
}

fn each_block_event_and_export_carries_its_stream(env: &[(&str, &str)]) {
    let dir = scratch_dir(&format!("history-streams{}", env_tag(env)));
    let out = run(
        shim_command(&c_program("history_streams"), &dir.join("r.json")).envs(env.iter().copied()),
        true,
    );
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (a, b) = (hex(&said["streams"][0]), hex(&said["streams"][1]));
    assert!(a > PER_THREAD && b > PER_THREAD && a != b, "{said}");
    let made = allocations(&said);
    let streams: Vec<u64> = made.iter().map(|m| m.stream).collect();
    assert_eq!(streams, [a, a, b, b, 0, PER_THREAD, 0, 0]);
    let freed_on: Vec<Option<u64>> = made.iter().map(|m| m.freed_on).collect();
    assert_eq!(
        freed_on,
        [Some(a), None, None, None, None, None, None, Some(b)]
    );
    let report = read_report(&dir.join("r.json"));
    // cuMemAlloc's blocks (the last two) are the pool's when it is on.
    let pooled = !env.contains(&("CUGUARD_POOL", "0"));

    // Each block has the stream it was made on, and nothing else was allocated.
    let files = history(&report);
    let refs: Vec<&[u8]> = files.iter().map(|f| &f[..]).collect();
    let h = Replay::read(&refs).unwrap();
    assert!(h.whole, "{:?}", h.cut);
    assert_eq!(h.blocks.len(), made.len(), "{:?}", h.blocks);
    for (i, m) in made.iter().enumerate() {
        let found: Vec<_> = h.blocks.iter().filter(|b| b.addr == m.addr).collect();
        assert_eq!(found.len(), 1, "{:#x}: {found:?}", m.addr);
        let blk = found[0];
        let memory = match i {
            6 | 7 if pooled => MemoryKind::PoolBlock,
            6 | 7 => MemoryKind::Device,
            _ => MemoryKind::Async,
        };
        assert_eq!(
            (blk.size, blk.memory, blk.stream, blk.end_ns.is_some()),
            (m.size, memory, m.stream, m.freed_on.is_some()),
            "{blk:?}"
        );
    }
    // Each free has the stream it was made on; the history's frees are exactly the program's two.
    let mut frees: Vec<(u64, u64)> = Vec::new();
    for f in &files {
        for chunk in Reader::new(f).unwrap() {
            if let Chunk::Events { events, .. } = chunk.unwrap() {
                frees.extend(
                    events
                        .iter()
                        .filter(|e| Action::of(e.kind) == Some(Action::Free))
                        .map(|e| (e.addr, e.stream)),
                );
            }
        }
    }
    frees.sort();
    let mut expected: Vec<(u64, u64)> = made
        .iter()
        .filter_map(|m| m.freed_on.map(|s| (m.addr, s)))
        .collect();
    expected.sort();
    assert_eq!(frees, expected);

    // The memory-viz export: each allocation still held lies in one segment of its stream (its
    // own, at its address, when it is no pool block); each trace entry of an allocation has its
    // stream, its free's included.
    let viz = memory_viz(&dir);
    let segments = viz["segments"].as_array().unwrap();
    let num = |v: &Value| v.as_u64().unwrap();
    for m in made.iter().filter(|m| m.freed_on.is_none()) {
        let holding: Vec<&Value> = segments
            .iter()
            .filter(|s| num(&s[0]) <= m.addr && m.addr < num(&s[0]) + num(&s[1]))
            .collect();
        assert_eq!(holding.len(), 1, "{:#x}: {segments:?}", m.addr);
        assert_eq!(num(&holding[0][2]), m.stream, "{:?}", holding[0]);
        if m.stream != 0 {
            assert_eq!(num(&holding[0][0]), m.addr);
        }
    }
    let trace = viz["trace"].as_array().unwrap();
    for m in &made {
        let entries: Vec<&Value> = trace
            .iter()
            .filter(|e| num(&e[1]) == m.addr && num(&e[2]) == m.size)
            .collect();
        let actions: Vec<&str> = entries.iter().map(|e| e[0].as_str().unwrap()).collect();
        let wanted: &[&str] = if m.freed_on.is_some() {
            &["alloc", "free_requested", "free_completed"]
        } else {
            &["alloc"]
        };
        assert!(
            wanted.iter().all(|w| actions.contains(w)),
            "{:#x}: {actions:?}",
            m.addr
        );
        assert!(
            entries.iter().all(|e| num(&e[3]) == m.stream),
            "{:#x}: {entries:?}",
            m.addr
        );
    }
    // The streams the program made are on the export's entries.
    for s in [a, b] {
        assert!(trace.iter().any(|e| num(&e[3]) == s), "{s:#x}");
    }

    // The pprof export at the history's end: what is in use, by its `stream` label (none for
    // the default stream).
    run(
        Command::new(&artifacts().cuguard).current_dir(&dir).args([
            "export", "--format", "pprof", "r.json", "--at", "end", "-o", "p.pb.gz",
        ]),
        true,
    );
    let traces = run(
        Command::new("go").current_dir(&dir).args([
            "tool",
            "pprof",
            "-unit=B",
            "-sample_index=inuse_space",
            "-traces",
            "p.pb.gz",
        ]),
        true,
    );
    let mut by_stream: BTreeMap<u64, u64> = BTreeMap::new();
    for sample in String::from_utf8_lossy(&traces.stdout).split("-----------+") {
        let stream = sample
            .lines()
            .find_map(|l| l.trim().strip_prefix("stream:"))
            .map_or(0, |v| {
                u64::from_str_radix(v.trim().trim_start_matches("0x"), 16).unwrap()
            });
        let bytes = sample.lines().find_map(|l| {
            let first = l.split_whitespace().next()?;
            first.strip_suffix('B')?.parse::<u64>().ok()
        });
        if let Some(bytes) = bytes.filter(|&b| b > 0) {
            *by_stream.entry(stream).or_default() += bytes;
        }
    }
    let mut expected: BTreeMap<u64, u64> = BTreeMap::new();
    for m in made.iter().filter(|m| m.freed_on.is_none()) {
        *expected.entry(m.stream).or_default() += m.size;
    }
    assert_eq!(by_stream, expected);
}

#[test]
fn history_streams_with_the_pool() {
    each_block_event_and_export_carries_its_stream(&[]);
}

#[test]
fn history_streams_without_the_pool() {
    each_block_event_and_export_carries_its_stream(&[("CUGUARD_POOL", "0")]);
}
