//! The exports read back by the machine's Python: `scripts/memory_viz_check.py` checks what
//! PyTorch's viewer needs and gives a summary, which the tests compare with what the history
//! says.

use cuguard_format::MemoryKind;
use cuguard_history::replay::{Block, Oom, Replay};
use serde_json::{Value, json};

use super::{VizFrame, memory_viz};

const MIB: u64 = 1 << 20;
/// The process's start: 2023-11-14, in nanoseconds since the Unix epoch.
const START: u64 = 1_700_000_000_000_000_000;
const S: u64 = 0x7f00_0000_0000;
const P: u64 = 0x7f10_0000_0000;
const Q: u64 = 0x7f20_0000_0000;
const R: u64 = 0x7f30_0000_0000;
const T: u64 = 0x7f40_0000_0000;

fn block(
    start_ns: u64,
    end_ns: Option<u64>,
    addr: u64,
    size: u64,
    memory: MemoryKind,
    device_plus_one: u8,
) -> Block {
    // The file's encoding (ordinal + 1, 0 for unknown), as the events below are written.
    let device = u32::from(device_plus_one)
        .checked_sub(1)
        .unwrap_or(cuguard_format::wire::UNKNOWN_DEVICE);
    Block {
        start_ns,
        end_ns,
        addr,
        size,
        stack: 2,
        thread: 1,
        memory,
        device,
        context: 0,
        released: false,
        stream: 0,
        tag: cuguard_history::NONE,
        carved: false,
    }
}

fn frames(stack: u32) -> Vec<VizFrame> {
    assert_ne!(stack, cuguard_history::NONE, "frames asked for no stack");
    let f = |name: &str, filename: &str, line| VizFrame {
        name: name.into(),
        filename: filename.into(),
        line,
    };
    match stack {
        1 => vec![f("Pool::grow", "src/pool.rs", 10)],
        _ => vec![f("forward", "model.py", 42), f("main", "train.py", 7)],
    }
}

/// Device 0: a pool segment S (three blocks live at the end, one freed, gaps between), a
/// driver allocation P made and freed, one Q still live, an OOM. Device 1: a driver allocation
/// R, a pool segment T made and freed with its one block. Pinned host memory on device 1.
fn replay() -> Replay {
    let pool = |start, end, off, size, device| {
        block(start, end, S + off, size, MemoryKind::PoolBlock, device)
    };
    let mut seg_s = block(1_000, None, S, 8 * MIB, MemoryKind::Device, 1);
    seg_s.stack = 1;
    Replay {
        pid: 7,
        start_unix_ns: START,
        segments: vec![
            seg_s,
            block(1_500, Some(9_000), T, 2 * MIB, MemoryKind::Device, 2),
        ],
        blocks: vec![
            block(1_600, Some(8_500), T, MIB, MemoryKind::PoolBlock, 2),
            pool(2_000, None, 0, MIB, 1),
            block(2_500, Some(7_000), P, 4 * MIB, MemoryKind::Device, 1),
            block(2_600, None, Q, 256, MemoryKind::Managed, 1),
            {
                let mut b = pool(3_000, Some(6_000), MIB, MIB, 1);
                b.stack = cuguard_history::NONE;
                b
            },
            block(3_200, None, 0x1000, 4096, MemoryKind::HostPinned, 2),
            block(3_500, None, R, MIB, MemoryKind::Device, 2),
            pool(4_000, None, 3 * MIB, 2 * MIB, 1),
            pool(5_000, None, 5 * MIB, MIB / 2, 1),
        ],
        ooms: vec![Oom {
            time_ns: 8_000,
            size: 1 << 30,
            stack: 2,
            thread: 1,
            device: 0,
        }],
        ends_ns: 10_000,
        ..Replay::default()
    }
}

/// Checks `bytes` with the checker script; its summary.
fn check(bytes: &[u8]) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/memory_viz_check.py");
    let out = super::testing::python(
        bytes,
        &format!(
            "ns = {{'__name__': 'memory_viz_check'}}\nexec(open({script:?}).read(), ns)\n\
             print(json.dumps(ns['check'](data)))"
        ),
    );
    serde_json::from_str(&out).unwrap()
}

fn us(t_ns: u64) -> u64 {
    (START + t_ns) / 1000
}

#[test]
fn a_whole_history_is_every_segment_and_event() {
    let bytes = memory_viz(&replay(), &frames, None);
    assert_eq!(&bytes[..2], b"\x80\x04");
    let got = check(&bytes);
    let mib = MIB;
    assert_eq!(
        got["segments"],
        json!([
            [
                0,
                S,
                8 * mib,
                [
                    ["active_allocated", S, mib],
                    ["inactive", S + mib, 2 * mib],
                    ["active_allocated", S + 3 * mib, 2 * mib],
                    ["active_allocated", S + 5 * mib, mib / 2],
                    ["inactive", S + 5 * mib + mib / 2, 5 * mib / 2],
                ]
            ],
            [0, Q, 256, [["active_allocated", Q, 256]]],
            [1, R, mib, [["active_allocated", R, mib]]],
        ])
    );
    let ev = |action: &str, addr: u64, size: u64, t: u64| json!([action, addr, size, us(t)]);
    assert_eq!(
        got["traces"],
        json!([
            [
                ev("segment_alloc", S, 8 * mib, 1_000),
                ev("alloc", S, mib, 2_000),
                ev("segment_alloc", P, 4 * mib, 2_500),
                ev("alloc", P, 4 * mib, 2_500),
                ev("segment_alloc", Q, 256, 2_600),
                ev("alloc", Q, 256, 2_600),
                ev("alloc", S + mib, mib, 3_000),
                ev("alloc", S + 3 * mib, 2 * mib, 4_000),
                ev("alloc", S + 5 * mib, mib / 2, 5_000),
                ev("free_requested", S + mib, mib, 6_000),
                ev("free_completed", S + mib, mib, 6_000),
                ev("free_requested", P, 4 * mib, 7_000),
                ev("free_completed", P, 4 * mib, 7_000),
                ev("segment_free", P, 4 * mib, 7_000),
                ev("oom", 0, 1 << 30, 8_000),
            ],
            [
                ev("segment_alloc", T, 2 * mib, 1_500),
                ev("alloc", T, mib, 1_600),
                ev("segment_alloc", R, mib, 3_500),
                ev("alloc", R, mib, 3_500),
                ev("free_requested", T, mib, 8_500),
                ev("free_completed", T, mib, 8_500),
                ev("segment_free", T, 2 * mib, 9_000),
            ],
        ])
    );
}

#[test]
fn frames_are_named_once_per_stack_and_keep_their_keys() {
    let bytes = memory_viz(&replay(), &frames, None);
    let out = super::testing::python(
        &bytes,
        "d = pickle.loads(data)\n\
         s = d['segments'][0]\n\
         print(json.dumps([s['frames'], s['blocks'][0]['frames'], s['blocks'][1]['frames'],\n\
             d['device_traces'][0][6]['frames'], d['device_traces'][0][14]['frames'],\n\
             s['segment_pool_id'], s['segment_type'], s['is_expandable'], s['stream']]))\n\
         # One list per stack: the same object wherever it is.\n\
         assert s['blocks'][0]['frames'] is d['device_traces'][0][1]['frames']",
    );
    let got: Value = serde_json::from_str(&out).unwrap();
    let model = json!([
        {"name": "forward", "filename": "model.py", "line": 42},
        {"name": "main", "filename": "train.py", "line": 7},
    ]);
    assert_eq!(
        got,
        json!([
            [{"name": "Pool::grow", "filename": "src/pool.rs", "line": 10}],
            model,
            [],
            [],
            model,
            [0, 0],
            "large",
            false,
            0
        ])
    );
    let asked = std::cell::RefCell::new(Vec::new());
    memory_viz(
        &replay(),
        &|s| {
            asked.borrow_mut().push(s);
            frames(s)
        },
        None,
    );
    let mut asked = asked.into_inner();
    asked.sort();
    assert_eq!(asked, [1, 2]);
}

#[test]
fn a_window_is_the_state_at_its_end_and_the_events_in_it() {
    let bytes = memory_viz(&replay(), &frames, Some((2_700, 6_500)));
    let got = check(&bytes);
    let mib = MIB;
    let segments: Vec<(u64, u64)> = got["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s[0].as_u64().unwrap(), s[1].as_u64().unwrap()))
        .collect();
    // P is live at 6 500 (freed at 7 000), T too (9 000); S without B (freed at 6 000).
    assert_eq!(segments, [(0, S), (0, P), (0, Q), (1, R), (1, T)]);
    assert_eq!(
        got["segments"][0][3],
        json!([
            ["active_allocated", S, mib],
            ["inactive", S + mib, 2 * mib],
            ["active_allocated", S + 3 * mib, 2 * mib],
            ["active_allocated", S + 5 * mib, mib / 2],
            ["inactive", S + 5 * mib + mib / 2, 5 * mib / 2],
        ])
    );
    assert_eq!(
        got["segments"][4][3],
        json!([["active_allocated", T, mib], ["inactive", T + mib, mib]])
    );
    let actions = |d: usize| -> Vec<String> {
        got["traces"][d]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| format!("{} {:x}", e[0].as_str().unwrap(), e[1].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(
        actions(0),
        [
            format!("alloc {:x}", S + mib),
            format!("alloc {:x}", S + 3 * mib),
            format!("alloc {:x}", S + 5 * mib),
            format!("free_requested {:x}", S + mib),
            format!("free_completed {:x}", S + mib),
        ]
    );
    assert_eq!(
        actions(1),
        [format!("segment_alloc {R:x}"), format!("alloc {R:x}")]
    );
    // The window's ends are in it.
    let edges = check(&memory_viz(&replay(), &frames, Some((3_000, 6_000))));
    assert_eq!(edges["traces"][0].as_array().unwrap().len(), 5);
}

#[test]
fn events_of_one_nanosecond_are_in_an_order_the_viewer_can_replay() {
    let pool = |start, end, addr| block(start, end, addr, 4096, MemoryKind::PoolBlock, 1);
    let replay = Replay {
        start_unix_ns: START,
        segments: vec![
            block(100, Some(500), S, MIB, MemoryKind::Device, 1),
            // Given back and made again at once, at the same address.
            block(500, None, S, MIB, MemoryKind::Device, 1),
        ],
        blocks: vec![
            pool(100, Some(500), S),
            // Made again at once where one was freed; one made and freed in one nanosecond.
            pool(200, Some(300), S + 4096),
            pool(300, Some(500), S + 4096),
            pool(300, Some(300), S + 8192),
            pool(500, None, S),
            // A driver allocation of no time at all.
            block(500, Some(500), P, 64, MemoryKind::Device, 1),
        ],
        ..Replay::default()
    };
    let got = check(&memory_viz(&replay, &frames, None));
    let actions: Vec<String> = got["traces"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {:x}",
                e[0].as_str().unwrap(),
                e[1].as_u64().unwrap() - S
            )
        })
        .collect();
    assert_eq!(
        actions,
        [
            "segment_alloc 0",
            "alloc 0",
            "alloc 1000",
            "free_requested 1000",
            "free_completed 1000",
            "alloc 1000",
            "alloc 2000",
            "free_requested 2000",
            "free_completed 2000",
            "free_requested 0",
            "free_completed 0",
            "free_requested 1000",
            "free_completed 1000",
            "segment_free 0",
            "segment_alloc 0",
            "segment_alloc 1000000000",
            "alloc 0",
            "alloc 1000000000",
            "free_requested 1000000000",
            "free_completed 1000000000",
            "segment_free 1000000000",
        ]
    );
}

#[test]
fn memory_of_an_unknown_device_comes_after_the_known_ones() {
    let replay = Replay {
        start_unix_ns: START,
        blocks: vec![
            block(100, None, P, 64, MemoryKind::Device, 0),
            block(200, None, Q, 64, MemoryKind::Device, 2),
        ],
        ..Replay::default()
    };
    let got = check(&memory_viz(&replay, &frames, None));
    let devices: Vec<u64> = got["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[0].as_u64().unwrap())
        .collect();
    assert_eq!(devices, [1, 2]);
    let lengths: Vec<usize> = got["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_array().unwrap().len())
        .collect();
    assert_eq!(lengths, [0, 2, 2]);
    // Nothing at all: no device, no segment.
    let empty = check(&memory_viz(&Replay::default(), &frames, None));
    assert_eq!(empty, json!({"segments": [], "traces": []}));
}

#[test]
fn an_allocation_that_outlives_its_segment_is_a_segment_of_its_own() {
    // Events were lost: the block's free was never seen, its segment went.
    let replay = Replay {
        start_unix_ns: START,
        segments: vec![block(100, Some(900), S, MIB, MemoryKind::Device, 1)],
        blocks: vec![block(200, None, S + 4096, 4096, MemoryKind::PoolBlock, 1)],
        ..Replay::default()
    };
    let got = check(&memory_viz(&replay, &frames, None));
    assert_eq!(
        got["segments"],
        json!([[0, S + 4096, 4096, [["active_allocated", S + 4096, 4096]]]])
    );
}

#[test]
fn the_pickle_grows_linearly_with_the_events() {
    let size = |n: u64| {
        let replay = Replay {
            start_unix_ns: START,
            segments: vec![block(0, None, S, n * 4096, MemoryKind::Device, 1)],
            blocks: (0..n)
                .map(|i| {
                    let mut b = block(
                        10 + i,
                        Some(10 + n + i),
                        S + i * 4096,
                        4096,
                        MemoryKind::PoolBlock,
                        1,
                    );
                    b.stack = (i % 16) as u32;
                    b
                })
                .collect(),
            ..Replay::default()
        };
        memory_viz(&replay, &frames, None).len()
    };
    let (a, b) = (size(5_000), size(10_000));
    let per_block = (b - a) / 5_000;
    // An allocation and a free are three trace entries of six keys each.
    assert!(per_block < 150, "{per_block} bytes a block");
    assert!(b < 2 * a + 1000, "{a} then {b}");
    let checked = check(&memory_viz(
        &Replay {
            start_unix_ns: START,
            segments: vec![block(0, None, S, 3000 * 4096, MemoryKind::Device, 1)],
            blocks: (0..3000)
                .map(|i| block(10 + i, None, S + i * 4096, 4096, MemoryKind::PoolBlock, 1))
                .collect(),
            ..Replay::default()
        },
        &frames,
        None,
    ));
    assert_eq!(checked["segments"][0][3].as_array().unwrap().len(), 3000);
}

/// PyTorch's own readers (`segsum`, `trace`, the flame graphs, the HTML pages of
/// `torch/cuda/_memory_viz.py`) on the snapshot, when `CUGUARD_TORCH_MEMORY_VIZ` names that
/// file: torch is not needed, only that file (see `scripts/memory_viz_torch.py`).
#[test]
fn pytorchs_memory_viz_reads_it_when_at_hand() {
    let Some(viz) = std::env::var_os("CUGUARD_TORCH_MEMORY_VIZ") else {
        eprintln!("CUGUARD_TORCH_MEMORY_VIZ is not set: PyTorch's _memory_viz.py not run");
        return;
    };
    let path =
        std::env::temp_dir().join(format!("cuguard-memory-viz-{}.pickle", std::process::id()));
    std::fs::write(&path, memory_viz(&replay(), &frames, None)).unwrap();
    let out = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/memory_viz_torch.py"
        ))
        .arg(viz)
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // segsum: three segments, 8 MiB + 256 B + 1 MiB reserved, 3.5 MiB + 256 B + 1 MiB allocated.
    assert!(text.contains("segments: 3\n"), "{text}");
    assert!(text.contains("total_reserved: 9.0MiB"), "{text}");
    assert!(text.contains("total_allocated: 4.5MiB"), "{text}");
    assert!(
        text.contains("raise OutOfMemoryError() # 1.0GiB requested"),
        "{text}"
    );
}

/// Runs `scripts/memory_viz_node.mjs` on `bytes` with the viewer's files in `dir`.
fn node(dir: &std::ffi::OsStr, bytes: &[u8]) -> Value {
    let path = std::env::temp_dir().join(format!(
        "cuguard-memory-viz-js-{}-{}.pickle",
        std::process::id(),
        bytes.len()
    ));
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/memory_viz_node.mjs"
        ))
        .arg(dir)
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap()
}

/// The JavaScript of PyTorch's viewer (its unpickler, `annotate_snapshot`,
/// `process_alloc_data`) on the snapshot, in Node, when `CUGUARD_TORCH_VIZ_DIR` names a
/// `torch/utils/viz` folder (see `scripts/memory_viz_node.mjs`).
#[test]
fn pytorchs_viewer_script_reads_it_when_at_hand() {
    let Some(dir) = std::env::var_os("CUGUARD_TORCH_VIZ_DIR") else {
        eprintln!("CUGUARD_TORCH_VIZ_DIR is not set: PyTorch's MemoryViz.js not run");
        return;
    };
    // Device 0: six allocations, at most A + P + Q + B + C + D live; three driver allocations.
    // Device 1: two allocations, two driver allocations.
    assert_eq!(
        node(&dir, &memory_viz(&replay(), &frames, None)),
        json!([
            {"device": 0, "events": 13, "allocations": 6, "peak": 8 * MIB + MIB / 2 + 256,
             "segments": 3, "reserved_peak": 12 * MIB + 256},
            {"device": 1, "events": 6, "allocations": 2, "peak": 2 * MIB,
             "segments": 2, "reserved_peak": 3 * MIB},
        ])
    );
    // The window: B is freed in it, made before it; P and T are live at its end.
    assert_eq!(
        node(&dir, &memory_viz(&replay(), &frames, Some((2_700, 6_500)))),
        json!([
            {"device": 0, "events": 4, "allocations": 6, "peak": 8 * MIB + MIB / 2 + 256,
             "segments": 3, "reserved_peak": 12 * MIB + 256},
            {"device": 1, "events": 2, "allocations": 2, "peak": 2 * MIB,
             "segments": 2, "reserved_peak": 3 * MIB},
        ])
    );
    // Five thousand allocations, all live then all freed, the last first (the viewer's timeline
    // shifts every allocation above a freed one: freeing the first first is quadratic there):
    // lists longer than one batch.
    let n = 5_000u64;
    let big = Replay {
        start_unix_ns: START,
        segments: vec![block(0, None, S, n * 4096, MemoryKind::Device, 1)],
        blocks: (0..n)
            .map(|i| {
                block(
                    10 + i,
                    Some(10 + 2 * n - i),
                    S + i * 4096,
                    4096,
                    MemoryKind::PoolBlock,
                    1,
                )
            })
            .collect(),
        ..Replay::default()
    };
    assert_eq!(
        node(&dir, &memory_viz(&big, &frames, None)),
        json!([{"device": 0, "events": 1 + 2 * n, "allocations": n, "peak": n * 4096,
                "segments": 1, "reserved_peak": n * 4096}])
    );
}

/// A history written as the shim writes it and read back by [`Replay::read`]: a pool's segment
/// and its blocks, a plain allocation, an OOM.
#[test]
fn a_history_file_read_back_exports() {
    use cuguard_history::{Action, Chunk, Header, Raw, kind, write_chunk};
    let mut file = Header {
        version: cuguard_history::VERSION,
        pid: 7,
        start_unix_ns: START,
        segment: 0,
        run: 0,
    }
    .encode()
    .to_vec();
    // 1 tsc tick = 1 ns.
    write_chunk(
        &mut file,
        &Chunk::Clock {
            tsc: 0,
            since_start_ns: 0,
            unix_ns: START,
        },
    );
    write_chunk(
        &mut file,
        &Chunk::Clock {
            tsc: 1_000_000,
            since_start_ns: 1_000_000,
            unix_ns: START + 1_000_000,
        },
    );
    let ev = |tsc, action, memory, addr, size, device| Raw {
        tsc,
        addr,
        size,
        stack: 2,
        context: 0,
        kind: kind(action, memory),
        device,
        stream: 0,
    };
    write_chunk(
        &mut file,
        &Chunk::Events {
            thread: 5,
            events: vec![
                ev(
                    1_000,
                    Action::SegmentAlloc,
                    MemoryKind::Device,
                    S,
                    2 * MIB,
                    1,
                ),
                ev(2_000, Action::Alloc, MemoryKind::PoolBlock, S, 4096, 1),
                ev(
                    3_000,
                    Action::Alloc,
                    MemoryKind::PoolBlock,
                    S + MIB,
                    4096,
                    1,
                ),
                ev(4_000, Action::Free, MemoryKind::PoolBlock, S, 0, 1),
                ev(5_000, Action::Alloc, MemoryKind::Device, P, 512, 2),
                ev(6_000, Action::Oom, MemoryKind::Device, 0, 1 << 40, 2),
            ],
        },
    );
    write_chunk(&mut file, &Chunk::End { tsc: 7_000 });
    let replay = Replay::read(&[&file]).unwrap();
    let got = check(&memory_viz(&replay, &frames, None));
    assert_eq!(
        got["segments"],
        json!([
            [
                0,
                S,
                2 * MIB,
                [
                    ["inactive", S, MIB],
                    ["active_allocated", S + MIB, 4096],
                    ["inactive", S + MIB + 4096, MIB - 4096],
                ]
            ],
            [1, P, 512, [["active_allocated", P, 512]]],
        ])
    );
    let actions = |d: usize| -> Vec<String> {
        got["traces"][d]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[0].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        actions(0),
        [
            "segment_alloc",
            "alloc",
            "alloc",
            "free_requested",
            "free_completed"
        ]
    );
    assert_eq!(actions(1), ["segment_alloc", "alloc", "oom"]);
    assert_eq!(
        got["traces"][1][2],
        json!(["oom", 0, 1u64 << 40, us(6_000)])
    );
}

#[test]
fn a_tagged_allocation_s_events_carry_its_tag_as_user_metadata() {
    let mut replay = Replay {
        start_unix_ns: START,
        segments: vec![block(100, None, S, MIB, MemoryKind::Device, 1)],
        blocks: vec![
            block(200, Some(300), S, 4096, MemoryKind::PoolBlock, 1),
            block(400, None, S + 4096, 4096, MemoryKind::PoolBlock, 1),
            block(500, None, P, 2 * MIB, MemoryKind::Device, 1),
        ],
        ends_ns: 1_000,
        ..Replay::default()
    };
    replay.phases.names.insert(7, "kv_cache".into());
    replay.phases.names.insert(8, "weights".into());
    replay.blocks[0].tag = 7;
    replay.blocks[2].tag = 8;
    let bytes = memory_viz(&replay, &frames, None);
    let got = super::testing::python(
        &bytes,
        "snap = pickle.loads(data)\n\
         print(json.dumps([[e['action'], e['size'], e.get('user_metadata')] \
         for e in snap['device_traces'][0]]))\n\
         print(json.dumps(sorted({k for s in snap['segments'] for b in s['blocks'] for k in b})))",
    );
    let mut lines = got.lines();
    let events: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        events,
        json!([
            ["segment_alloc", MIB, null],
            ["alloc", 4096, "kv_cache"],
            ["free_requested", 4096, "kv_cache"],
            ["free_completed", 4096, "kv_cache"],
            ["alloc", 4096, null],
            // A plain driver allocation is a segment of its own: every event is its own.
            ["segment_alloc", 2 * MIB, "weights"],
            ["alloc", 2 * MIB, "weights"],
        ])
    );
    // Blocks carry no tag, as PyTorch's writer gives them none.
    let keys: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        keys,
        json!(["address", "frames", "requested_size", "size", "state"])
    );
}
