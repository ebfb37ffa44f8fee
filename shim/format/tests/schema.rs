//! The report crate against `docs/report.schema.json`: a report with every optional field
//! present and every enumeration value used validates, so do one with every nullable field null,
//! the signal-time report and a merged report; every key the crate writes is a property of the
//! schema at that place, and every property of the schema is a key the crate writes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use cuguard_format::merged::{Merged, MergedWriter};
use cuguard_format::signal::SignalTemplate;
use cuguard_format::wire::{UNKNOWN_DEVICE, UNKNOWN_VERSION};
use cuguard_format::{
    Addr, Config, Context, Cost, CostGrowth, CostReports, CostTiming, CostUnwind, Device,
    DeviceStats, Doors, Driver, Event, EventKind, Frame, Leak, LeakState, Memory, Module,
    PoolStats, Process, PyFrame, Reason, Report, Sample, Signal, Stack, StackSite, Timeline,
    site_list,
};
use cuguard_format::{
    Explained, IdleHolder, MixedRef, OomLimit, OomPool, OomRecord, OtherProcess, OwnerBytes,
    OwnerInfo, PeakRecord, Reconciliation, StackBytes, StackSamples, StackSeries, Verdict,
};
use cuguard_format::{
    HeldClass, PyAllocation, PyBlock, PyCache, PyCacheLine, PyEnd, PyHolder, PyView, Python,
};
use serde_json::Value;

fn schema() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/report.schema.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("schema is JSON")
}

fn validate(schema: &Value, doc: &Value) -> Result<(), String> {
    let validator = jsonschema::draft202012::new(schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

fn process() -> Process {
    Process {
        pid: 4242,
        ppid: 4241,
        exe: "/opt/app/train".into(),
        argv: vec!["train".into(), "--epochs".into(), "3".into()],
        hostname: "node7".into(),
        rank: Some(3),
        start_unix_ms: 1_764_461_000_000,
        end_unix_ms: 1_764_461_003_000,
        labels: Some(BTreeMap::from([(
            "test".into(),
            "tests/test_a.py::test_one".into(),
        )])),
    }
}

fn frame(ip: u64, function: &str, inlined: bool) -> Frame {
    Frame {
        ip: Addr(ip),
        module: Arc::from("/opt/app/train"),
        offset: Addr(ip - 0x5500_0000_0000),
        function: Some(function.into()),
        file: Some("/src/train.cc".into()),
        line: Some(42),
        inlined: Some(inlined),
    }
}

fn memory_of(i: usize) -> Memory {
    Memory::KNOWN[i % Memory::KNOWN.len()].clone()
}

/// A report with every optional field present and every enumeration value used (the reason
/// excepted: see [`every_reason`]).
fn full_report(reason: Reason) -> Report {
    let mut r = Report::new(true, reason, process());
    r.cut_short = Some("checkpoint: the process was still running".into());
    r.signal = Some(Signal {
        number: 11,
        name: "SIGSEGV".into(),
    });
    r.report_number = Some(2);
    r.run_id = Some("4d2-18c5e0b7a1f3".into());
    r.driver = Driver {
        version: 13000,
        path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1".into(),
    };
    r.devices = vec![Device {
        ordinal: 0,
        name: "NVIDIA H200".into(),
        total_bytes: 150_754_820_096,
        limit_bytes: Some(8 << 30),
    }];
    r.config = Some(Config {
        report: Some("./cuguard.%e.%p.json".into()),
        stack_depth: Some(32),
        pool: Some(true),
        pool_initial: Some("0".into()),
        pool_limit: Some("25%".into()),
        pool_keep: Some("1073741824".into()),
        timeline_ms: Some(100),
        disabled: Some(false),
        checkpoint_secs: Some(60),
        warn_at: Some("90%".into()),
        snapshot_signal: Some(41),
        signals: Some(true),
        limit: Some("0:8589934592".into()),
        limit_virtual: Some(true),
    });
    r.contexts = vec![Context {
        id: 1,
        handle: Addr(0x55d0_c0a1_b2c0),
        device: 0,
        primary: false,
        destroyed: true,
        destroyed_by: Some("cuCtxDestroy_v2".into()),
        created_ms: Some(3),
        destroyed_ms: Some(90),
        stack: Some(1),
        overhead_bytes: Some(500 << 20),
    }];
    let states = LeakState::KNOWN;
    r.leaks = (0..Memory::KNOWN.len().max(states.len()))
        .map(|i| Leak {
            allocation: cuguard_format::Allocation {
                address: Addr(0x7f2a_4000_0000 + (i as u64) * 0x10_0000),
                size: 1 << 20,
                requested: 1000,
                api: Arc::from("cuMemAlloc_v2"),
                memory: memory_of(i),
                device: 0,
                context: Some(1),
                thread: 4242,
                seq: i as u64 + 1,
                time_ms: 12,
                stack: Some(1),
                tag: Some(Arc::from("kv_cache")),
            },
            state: states[i % states.len()].clone(),
            handle: Some(Addr(0x10 + i as u64)),
            owner: Some("program".into()),
        })
        .collect();
    r.events = EventKind::KNOWN
        .iter()
        .cloned()
        .chain([EventKind::Other("kind_from_the_future".into())])
        .enumerate()
        .map(|(i, kind)| Event {
            kind,
            address: Some(Addr(0x7f2a_4000_0000)),
            api: Some("cuMemFree_v2".into()),
            seq: 100 + i as u64,
            thread: 4243,
            stack: Some(2),
            result: Some(1),
            size: Some(4096),
            context: Some(1),
            time_ms: Some(50),
            message: Some("cuMemFree_v2 refused to free it".into()),
            device: Some(0),
        })
        .collect();
    r.events_dropped = Some(7);
    r.stacks = vec![
        Stack {
            id: 1,
            frames: vec![
                frame(0x5500_0000_1000, "inlined_helper", true),
                frame(0x5500_0000_1000, "make_buffers", false),
            ],
            python: vec![],
            site: Some(StackSite {
                in_: site_list::FRAMES.into(),
                index: 1,
                fingerprint: "9c3e0a".into(),
                kind: Some("user".into()),
            }),
            owner: Some("program".into()),
            mixed: vec![],
            origin: None,
        },
        Stack {
            id: 2,
            frames: vec![frame(0x5500_0000_2000, "PyObject_Call", false)],
            python: vec![PyFrame {
                file: "/work/train.py".into(),
                line: Some(75),
                function: "load_batch".into(),
                entry: Some(true),
                display: Some("Cell In[2]".into()),
            }],
            site: Some(StackSite {
                in_: site_list::PYTHON.into(),
                index: 0,
                fingerprint: "77ab01".into(),
                kind: Some("operation".into()),
            }),
            owner: Some("pytorch_caching_allocator".into()),
            mixed: vec![
                MixedRef {
                    native: None,
                    python: Some(0),
                },
                MixedRef {
                    native: Some(0),
                    python: None,
                },
            ],
            origin: Some(1),
        },
    ];
    r.modules = vec![Module {
        path: "/opt/app/train".into(),
        build_id: Some("0123abcd".into()),
        base: Addr(0x5500_0000_0000),
        start: Some(Addr(0x5500_0000_0000)),
        size: 0x10_0000,
    }];
    r.stats.devices = vec![DeviceStats {
        device: 0,
        live_bytes: 6 << 20,
        peak_live_bytes: 8 << 20,
        total_allocated_bytes: 9 << 20,
        allocations: 9,
        frees: 3,
        released_bytes: Some(1 << 20),
        host_pinned_live_bytes: Some(4096),
        pool: Some(PoolStats {
            reserved_bytes: 64 << 20,
            peak_reserved_bytes: 64 << 20,
            chunks: Some(2),
            chunks_added: Some(3),
            trims: Some(1),
            trimmed_bytes: Some(32 << 20),
            free_bytes: Some(58 << 20),
            largest_free_block: Some(50 << 20),
            fragmentation: Some(0.137),
            pending_bytes: Some(1 << 20),
            fences: Some(12),
            syncs: Some(1),
            fence_waits: Some(2),
            peer_waits: Some(0),
            stream_reuses: Some(0),
            stream_waits: Some(0),
            limit_refusals: Some(0),
        }),
    }];
    r.stats.vmm_reserved_ranges = Some(1);
    r.stats.vmm_reserved_bytes = Some(2 << 20);
    r.timeline = Some(Timeline {
        interval_ms: 100,
        samples: vec![Sample {
            time_ms: 0,
            device: 0,
            live_bytes: 0,
            reserved_bytes: 64 << 20,
        }],
    });
    r.doors = Some(Doors {
        dlsym: 3,
        get_proc_address: 41,
        exported: Some(0),
    });
    r.owners = vec![OwnerInfo {
        id: "pytorch_caching_allocator".into(),
        kind: "framework_cache".into(),
        label: "PyTorch's caching allocator".into(),
        hint: Some("its cache, not necessarily your tensors".into()),
    }];
    let stack_bytes = StackBytes {
        stack: Some(1),
        bytes: 6 << 20,
        allocations: 2,
    };
    r.peaks = vec![PeakRecord {
        device: 0,
        time_ms: 40,
        time_us: Some(39_612),
        live_bytes: 8 << 20,
        stacks: vec![stack_bytes.clone()],
    }];
    r.stack_samples = Some(StackSamples {
        interval_ms: 100,
        times_ms: vec![0, 100],
        series: vec![StackSeries {
            stack: Some(1),
            device: 0,
            bytes: vec![0, 6 << 20],
            cache_blocks: true,
        }],
    });
    r.ooms = vec![OomRecord {
        seq: 200,
        time_ms: 60,
        thread: 4242,
        api: "cuMemAlloc_v2".into(),
        size: 2 << 30,
        device: 0,
        stack: Some(1),
        refused_by: "pool_limit".into(),
        message: Some("CUGUARD_POOL_LIMIT of 1073741824 bytes reached".into()),
        device_free_bytes: Some(1 << 30),
        device_total_bytes: Some(150_754_820_096),
        live_bytes: 6 << 20,
        by_owner: vec![OwnerBytes {
            owner: "program".into(),
            bytes: 6 << 20,
        }],
        stacks: vec![stack_bytes],
        pool: Some(OomPool {
            reserved_bytes: 64 << 20,
            free_bytes: 58 << 20,
            largest_free_block: 50 << 20,
        }),
        labels: Some(BTreeMap::from([(
            "test".into(),
            "tests/test_a.py::test_one".into(),
        )])),
        limit: Some(OomLimit {
            limit_bytes: 1 << 30,
            held_bytes: 1 << 30,
        }),
        idle: vec![
            IdleHolder {
                holder: "driver_pool".into(),
                name: "the default memory pool of device 0".into(),
                handle: Some(0x5000),
                reserved_bytes: 576 << 20,
                idle_bytes: 576 << 20,
                release_threshold: Some(u64::MAX),
                largest_free_bytes: None,
                ..Default::default()
            },
            IdleHolder {
                holder: "cuguard_pool".into(),
                name: "cuguard's pool".into(),
                handle: None,
                reserved_bytes: 64 << 20,
                idle_bytes: 58 << 20,
                release_threshold: None,
                largest_free_bytes: Some(50 << 20),
                ..Default::default()
            },
            IdleHolder {
                holder: "pytorch_cache".into(),
                name: "PyTorch's caching allocator".into(),
                reserved_bytes: 7 << 30,
                idle_bytes: 3668 << 20,
                largest_free_bytes: Some(100 << 20),
                pieces: Some(42),
                expandable_bytes: Some(3640 << 20),
                pinning: vec![cuguard_format::Pinning {
                    site: "<module> (train.py:88)".into(),
                    location: Some("train.py:88".into()),
                    bytes: 3500 << 20,
                    blocks: 35,
                }],
                ..Default::default()
            },
            IdleHolder {
                holder: "cupy_pool".into(),
                name: "CuPy's memory pool".into(),
                reserved_bytes: 3 << 30,
                idle_bytes: 2 << 30,
                largest_free_bytes: Some(1 << 30),
                pieces: Some(2),
                freeable_bytes: Some(2 << 30),
                ..Default::default()
            },
        ],
        verdict: Some(Verdict {
            action: "sync_driver_pool".into(),
            fits: true,
            text: "synchronizing before the request fits".into(),
        }),
        within: Some("pytorch".into()),
        other_processes: Some(vec![OtherProcess {
            pid: 4343,
            bytes: 3 << 30,
        }]),
        other_processes_bytes: Some(3 << 30),
        // Absent beside a list in a report the shim writes; here for the schema's keys.
        other_processes_note: Some("NVML is not available".into()),
        card_ns: Some(210_000),
        framework_ns: Some(3_400_000),
        card_parts: Some(cuguard_format::CardParts {
            device_ns: 12_000,
            nvml_ns: 18_000,
            live_ns: 40_000,
            holders_ns: 9_000,
            verdict_ns: 2_000,
        }),
    }];
    r.ooms_dropped = Some(3);
    r.reconciliation = vec![Reconciliation {
        device: 0,
        device_used_bytes: Some(600 << 20),
        process_used_bytes: Some(520 << 20),
        process_used_note: Some("NVML lists this process".into()),
        explained: Explained {
            program_bytes: 6 << 20,
            framework_cache_bytes: 0,
            library_bytes: 0,
            driver_bytes: 0,
            pool_idle_bytes: 58 << 20,
            context_overhead_bytes: 450 << 20,
            given_back_bytes: 4 << 20,
            driver_pool_idle_bytes: 0,
        },
        context_overhead_estimate_bytes: Some(460 << 20),
        excess_bytes: Some(10 << 20),
        given_back_pending_bytes: Some(4 << 20),
        unexplained_note: Some("memory the driver takes".into()),
        unexplained_bytes: Some(0),
    }];
    r.cost = Some(Cost {
        sample_every: 32,
        first_timed: 8,
        hooks: CostTiming {
            calls: 9,
            timed: 9,
            dropped: 1,
            ns: 12_000,
            first_calls: 8,
            first_ns: 11_000,
        },
        stacks: CostTiming {
            calls: 10,
            timed: 9,
            dropped: 1,
            ns: 7_000,
            first_calls: 8,
            first_ns: 6_000,
        },
        python: CostTiming {
            calls: 2,
            timed: 2,
            dropped: 1,
            ns: 900,
            first_calls: 2,
            first_ns: 900,
        },
        captures: Some(CostTiming {
            calls: 1,
            timed: 1,
            dropped: 0,
            ns: 2_000,
            first_calls: 1,
            first_ns: 2_000,
        }),
        cache_blocks: Some(CostTiming {
            calls: 40,
            timed: 9,
            dropped: 0,
            ns: 36_000,
            first_calls: 8,
            first_ns: 8_000,
        }),
        one_time: Some(CostTiming {
            calls: 3,
            timed: 3,
            dropped: 0,
            ns: 900_000,
            first_calls: 0,
            first_ns: 0,
        }),
        unwind: Some(CostUnwind {
            frames: 400,
            by_position: 300,
            cached: 80,
            shared: 5,
            evaluated: 5,
            evaluated_ns: 9_000,
        }),
        pool_growth: Some(CostGrowth {
            chunks: 2,
            bytes: 40 << 20,
            ns: 800_000,
        }),
        reports: CostReports {
            written: 2,
            ns: 4_500_000,
        },
        heap_bytes: 3 << 20,
    });
    let holder = PyHolder {
        path: Some(vec![
            "CACHE".into(),
            "['w']".into(),
            "torch.Tensor (1.0 MiB)".into(),
        ]),
        holder: "torch.Tensor".into(),
        kind: "torch".into(),
        weak: true,
        address: Addr(0x7f2a_4000_0000),
        bytes: 1 << 20,
    };
    r.history = Some(cuguard_format::HistoryInfo {
        files: vec!["r.history.1".into(), "r.history".into()],
        events: 1_000_000,
        bytes: 9_400_000,
        bound_bytes: 16 << 20,
        segments_let_go: 2,
        begins_ms: 1200,
        lost: vec![cuguard_format::HistoryLost {
            count: 12,
            from_ms: 1300,
            to_ms: 1310,
        }],
        stopped: Some("writing r.history failed: No space left on device".into()),
        cache_blocks_unrecorded: Some("CUGUARD_CACHE_BLOCKS=0".into()),
    });
    r.python = Some(Python {
        end: PyEnd {
            recorded: true,
            how: Some("raised".into()),
            exception: Some("ValueError".into()),
            time_ms: Some(90),
            why: Some("(a full report writes every field)".into()),
        },
        view: Some(PyView {
            at: "end".into(),
            time_ms: 90,
            complete: true,
            elapsed_ms: Some(3),
            notes: vec!["PyTorch's memory history was not on".into()],
            caches: vec![PyCache {
                owner: Some("pytorch_caching_allocator".into()),
                framework: "pytorch".into(),
                source: "history".into(),
                segment_bytes: 2 << 20,
                live_bytes: 1 << 20,
                idle_bytes: 1 << 20,
                note: Some("a note".into()),
                lines: vec![PyCacheLine {
                    device: 0,
                    frames: vec![PyFrame {
                        file: "train.py".into(),
                        line: Some(12),
                        function: "step".into(),
                        entry: Some(true),
                        display: Some("Cell In[3]".into()),
                    }],
                    samples: vec![(10, 0), (20, 1 << 20)],
                }],
            }],
            allocations: vec![PyAllocation {
                allocation: cuguard_format::Allocation {
                    address: Addr(0x7f2a_4000_0000),
                    size: 2 << 20,
                    requested: 2 << 20,
                    api: Arc::from("cuMemAlloc_v2"),
                    memory: Memory::Device,
                    device: 0,
                    context: Some(1),
                    thread: 4242,
                    seq: 1,
                    time_ms: 12,
                    stack: Some(1),
                    tag: Some(Arc::from("weights")),
                },
                owner: Some("pytorch_caching_allocator".into()),
                freed_after: true,
                class: HeldClass::Cache,
                holders: vec![holder.clone()],
                blocks: vec![PyBlock {
                    address: Addr(0x7f2a_4000_0000),
                    size: 1 << 20,
                    state: "live".into(),
                    holders: vec![holder],
                    frames: vec![PyFrame {
                        file: "train.py".into(),
                        line: Some(7),
                        function: "step".into(),
                        entry: Some(true),
                        display: Some("Cell In[4]".into()),
                    }],
                }],
            }],
        }),
    });
    r.versions = Some(cuguard_format::Versions {
        driver: Some("580.159.04".into()),
        runtimes: vec![cuguard_format::Runtime {
            version: Some("12.4.127".into()),
            path: "/venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"
                .into(),
        }],
        frameworks: vec![cuguard_format::Framework {
            name: "torch".into(),
            version: "2.5.1+cu124".into(),
            package: "torch".into(),
            cuda: Some("12.4".into()),
            site: "/venv/lib/python3.11/site-packages".into(),
        }],
    });
    r.faults = vec!["CUGUARD_STACK_DEPTH=\"x\" is not a number; using 32".into()];
    r
}

/// The same report with every nullable field null and every unknown spelled as such.
fn null_report() -> Report {
    let mut r = full_report(Reason::Exit);
    r.cut_short = None;
    r.signal = None;
    r.process.rank = None;
    r.driver.version = UNKNOWN_VERSION;
    let c = r.config.as_mut().unwrap();
    (c.pool_initial, c.pool_limit, c.pool_keep, c.warn_at) = (None, None, None, None);
    c.snapshot_signal = None;
    r.contexts[0].destroyed_by = None;
    r.contexts[0].destroyed_ms = None;
    r.contexts[0].stack = None;
    for l in &mut r.leaks {
        (l.context, l.stack, l.device) = (None, None, UNKNOWN_DEVICE);
    }
    for e in &mut r.events {
        (e.address, e.api, e.stack, e.result) = (None, None, None, None);
        (e.size, e.context, e.message) = (None, None, None);
        e.device = Some(UNKNOWN_DEVICE);
    }
    for s in &mut r.stacks {
        s.site = None;
        for f in &mut s.frames {
            (f.function, f.file, f.line) = (None, None, None);
        }
        for p in &mut s.python {
            p.line = None;
        }
    }
    r.modules[0].build_id = None;
    r.stats.devices[0].pool.as_mut().unwrap().fragmentation = None;
    let mut no_pool = r.stats.devices[0].clone();
    no_pool.device = 1;
    no_pool.pool = None;
    r.stats.devices.push(no_pool);
    r
}

fn to_value(r: &Report) -> Value {
    serde_json::from_slice(&cuguard_format::to_vec(r)).unwrap()
}

/// Follows `$ref`s from `node`.
fn resolve<'a>(root: &'a Value, mut node: &'a Value) -> &'a Value {
    while let Some(r) = node.get("$ref").and_then(Value::as_str) {
        node = root
            .pointer(r.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("dangling $ref {r}"));
    }
    node
}

/// `node` and the alternatives it allows (`anyOf`, `oneOf`, `allOf`, `then`, `else`), resolved.
fn alternatives<'a>(root: &'a Value, node: &'a Value, out: &mut Vec<&'a Value>) {
    let node = resolve(root, node);
    out.push(node);
    for key in ["anyOf", "oneOf", "allOf"] {
        for alt in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            alternatives(root, alt, out);
        }
    }
    for key in ["then", "else"] {
        if let Some(alt) = node.get(key) {
            alternatives(root, alt, out);
        }
    }
}

/// Checks that every key of `value` is a property of `schema` at its place (or a key of a map
/// whose `additionalProperties` is a schema); records the schema properties seen, as
/// `path/key`.
fn keys_in_schema(
    root: &Value,
    schema: &Value,
    value: &Value,
    path: &str,
    missing: &mut Vec<String>,
    written: &mut BTreeSet<String>,
) {
    let mut alts = Vec::new();
    alternatives(root, schema, &mut alts);
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let here = format!("{path}/{key}");
                written.insert(here.clone());
                // A map with free keys (`process.labels`) declares each through
                // `additionalProperties`.
                let prop = alts
                    .iter()
                    .find_map(|a| a.get("properties").and_then(|p| p.get(key)))
                    .or_else(|| {
                        alts.iter()
                            .find_map(|a| a.get("additionalProperties").filter(|s| s.is_object()))
                    });
                match prop {
                    Some(p) => keys_in_schema(root, p, v, &here, missing, written),
                    None => missing.push(here),
                }
            }
        }
        Value::Array(items) => {
            let item_schema = alts.iter().find_map(|a| a.get("items"));
            for v in items {
                match item_schema {
                    Some(s) => keys_in_schema(root, s, v, &format!("{path}[]"), missing, written),
                    None => missing.push(format!("{path}[] (no items schema)")),
                }
            }
        }
        _ => {}
    }
}

/// Every property the schema declares under `schema`, as `path/key`.
fn schema_properties(
    root: &Value,
    schema: &Value,
    path: &str,
    depth: usize,
    out: &mut BTreeSet<String>,
) {
    if depth > 12 {
        return;
    }
    let mut alts = Vec::new();
    alternatives(root, schema, &mut alts);
    for a in alts {
        if let Some(props) = a.get("properties").and_then(Value::as_object) {
            for (key, p) in props {
                let here = format!("{path}/{key}");
                out.insert(here.clone());
                schema_properties(root, p, &here, depth + 1, out);
            }
        }
        if let Some(items) = a.get("items") {
            schema_properties(root, items, &format!("{path}[]"), depth + 1, out);
        }
    }
}

#[test]
fn a_full_report_validates_and_its_keys_match_the_schema() {
    let root = schema();
    let doc = to_value(&full_report(Reason::Exit));
    validate(&root, &doc).unwrap_or_else(|e| panic!("full report:\n{e}"));
    let report_schema = &root["$defs"]["process_report"];
    let mut missing = Vec::new();
    let mut written = BTreeSet::new();
    keys_in_schema(&root, report_schema, &doc, "", &mut missing, &mut written);
    assert!(
        missing.is_empty(),
        "keys the schema does not declare: {missing:#?}"
    );
    assert!(
        !doc.to_string().contains("null"),
        "the full report has a null: an optional field is missing from it"
    );
    let mut declared = BTreeSet::new();
    schema_properties(&root, report_schema, "", 0, &mut declared);
    // `processes` is only for merged reports (a single report must not have it).
    declared.remove("/processes");
    let unwritten: Vec<&String> = declared.difference(&written).collect();
    assert!(
        unwritten.is_empty(),
        "schema properties the full report does not write: {unwritten:#?}"
    );
}

#[test]
fn every_reason_validates() {
    let root = schema();
    for reason in Reason::KNOWN {
        let doc = to_value(&full_report(reason.clone()));
        validate(&root, &doc).unwrap_or_else(|e| panic!("{reason}:\n{e}"));
    }
}

#[test]
fn nulls_and_unknowns_validate_and_read_back() {
    let root = schema();
    let r = null_report();
    let doc = to_value(&r);
    validate(&root, &doc).unwrap_or_else(|e| panic!("null report:\n{e}"));
    assert_eq!(doc["driver"]["version"], Value::Null);
    assert_eq!(doc["leaks"][0]["device"], -1);
    let back: Report = serde_json::from_value(doc).unwrap();
    assert_eq!(back, r);
}

#[test]
fn the_signal_report_validates() {
    let root = schema();
    let driver = Driver {
        version: UNKNOWN_VERSION,
        path: String::new(),
    };
    let faults = vec!["only the process and the signal".to_string()];
    let t = SignalTemplate::new(&process(), Some("4d2-1"), &driver, &faults).unwrap();
    let mut out = Vec::new();
    assert!(t.write(
        &mut |b: &[u8]| {
            out.extend_from_slice(b);
            true
        },
        "signal: no cuguard thread was running to collect the full report",
        6,
        "SIGABRT",
        1_764_461_003_000,
    ));
    let doc: Value = serde_json::from_slice(&out).unwrap();
    validate(&root, &doc).unwrap_or_else(|e| panic!("signal report:\n{e}"));
    let mut missing = Vec::new();
    keys_in_schema(
        &root,
        &root["$defs"]["process_report"],
        &doc,
        "",
        &mut missing,
        &mut BTreeSet::new(),
    );
    assert!(missing.is_empty(), "{missing:#?}");
}

#[test]
fn a_merged_report_validates_and_its_keys_match_the_schema() {
    let root = schema();
    let merged = Merged {
        created_unix_ms: 1_764_461_010_000,
        inputs: vec!["a.json".into(), "b.json".into()],
        by: Some("rank".into()),
    };
    let mut out = Vec::new();
    let mut w = MergedWriter::begin(&mut out, &merged).unwrap();
    w.process(&cuguard_format::to_vec(&full_report(Reason::Exit)))
        .unwrap();
    w.process(&cuguard_format::to_vec(&null_report())).unwrap();
    assert_eq!(w.finish().unwrap(), 2);
    let doc: Value = serde_json::from_slice(&out).unwrap();
    validate(&root, &doc).unwrap_or_else(|e| panic!("merged report:\n{e}"));
    let mut missing = Vec::new();
    keys_in_schema(
        &root,
        &root["$defs"]["merged"],
        &doc,
        "",
        &mut missing,
        &mut BTreeSet::new(),
    );
    assert!(missing.is_empty(), "{missing:#?}");
}
