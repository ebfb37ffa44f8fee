//! The pool's blocks told to an NVTX tool, as compute-sanitizer is told them: `pool_nvtx` runs
//! under the shim with `NVTX_INJECTION64_PATH` naming the `nvtx_recorder` injection, which logs
//! every call of NVTX's memory API and refuses, with an `error` line, what compute-sanitizer
//! refuses (a heap unregistered after its memory went, an unknown handle, a domain it did not
//! make, wrong sizes or compatibility ids, a region outside its heap or over another). The log is
//! replayed against a model of the tool's books (heaps, regions, each region's red zone inside its
//! heap and clear of every other block) and compared with what the program says it did, phase by
//! phase; any `error` line fails the test.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::*;

/// The pool's default red zone while a tool is attached (`CUGUARD_POOL_REDZONE`).
const REDZONE: u64 = 256;

fn hex(s: &str) -> u64 {
    let s = s.trim_start_matches("addr=").trim_start_matches("base=");
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("hex {s}"))
}

fn field<'a>(words: &'a [&str], key: &str) -> &'a str {
    words
        .iter()
        .find_map(|w| w.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {words:?}"))
}

/// One process's view of the tool's books, as the log builds it.
#[derive(Default)]
struct Books {
    /// Heap handle → (base, end).
    heaps: HashMap<String, (u64, u64)>,
    /// Live region address → (size, heap).
    regions: BTreeMap<u64, (u64, String)>,
}

/// What the log says happened in one phase, per kind.
#[derive(Default, Debug)]
struct Phase {
    /// (pid, addr, size) of each region registered, in order.
    registered: Vec<(u32, u64, u64)>,
    /// (pid, addr) of each region unregistered, in order.
    unregistered: Vec<(u32, u64)>,
    heaps_registered: usize,
    heaps_refused: usize,
    heaps_unregistered: usize,
    /// Regions that went with their heap (never unregistered one by one).
    dropped: Vec<(u32, u64)>,
    /// Heaps forgotten with their memory (a heap registered over the same addresses later).
    forgotten: usize,
}

/// The replayed log: per-phase facts, and the books of each process at the end.
struct Replay {
    header: Vec<String>,
    phases: BTreeMap<String, Phase>,
    books: HashMap<u32, Books>,
}

/// Replays the recorder's log, checking every call against the model; `redzone` is the bytes each
/// region must have clear after it, inside its heap.
fn replay(log: &str, redzone: u64) -> Replay {
    let mut phases: BTreeMap<String, Phase> = BTreeMap::new();
    let mut books: HashMap<u32, Books> = HashMap::new();
    let mut header = Vec::new();
    let mut current = String::from("(start)");
    for line in log.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let pid: u32 = w[1].parse().unwrap();
        let b = books.entry(pid).or_default();
        let p = phases.entry(current.clone()).or_default();
        match w[0] {
            "phase" => {
                current = w[2].to_string();
                phases.entry(current.clone()).or_default();
            }
            "loaded" | "core" | "initialize" | "mem" | "domain" => {
                header.push(w[0].to_string() + &line[w[0].len() + w[1].len() + 1..])
            }
            "error" => panic!("the tool refused a call: {line}\n{log}"),
            "heap_register" => {
                if line.ends_with("refused") {
                    p.heaps_refused += 1;
                    continue;
                }
                let (base, size) = (
                    hex(field(&w, "base=")),
                    field(&w, "size=").parse::<u64>().unwrap(),
                );
                assert_eq!(field(&w, "usage="), "1", "a sub-allocator's heap: {line}");
                assert_eq!(field(&w, "type="), "1", "virtual addresses: {line}");
                assert_eq!(field(&w, "name="), "cuguard", "{line}");
                // A heap over the same memory: the old one went with its memory (the recorder
                // checked with the driver), and its regions with it.
                let old: Vec<String> = b
                    .heaps
                    .iter()
                    .filter(|&(_, &(hb, he))| base < he && hb < base + size)
                    .map(|(h, _)| h.clone())
                    .collect();
                for h in old {
                    b.heaps.remove(&h);
                    b.regions.retain(|_, (_, rh)| *rh != h);
                    p.forgotten += 1;
                }
                assert!(
                    b.heaps
                        .insert(w[2].to_string(), (base, base + size))
                        .is_none(),
                    "{line}: handle reused"
                );
                p.heaps_registered += 1;
            }
            "heap_unregister" => {
                let (hb, he) = b
                    .heaps
                    .remove(w[2])
                    .unwrap_or_else(|| panic!("{line}: unknown heap"));
                let inside: Vec<u64> = b.regions.range(hb..he).map(|(&a, _)| a).collect();
                for a in inside {
                    b.regions.remove(&a);
                    p.dropped.push((pid, a));
                }
                p.heaps_unregistered += 1;
            }
            "heap_reset" => panic!("the pool never resets a heap: {line}"),
            "region_register" => {
                let (addr, size) = (
                    hex(field(&w, "addr=")),
                    field(&w, "size=").parse::<u64>().unwrap(),
                );
                let &(hb, he) = b
                    .heaps
                    .get(w[2])
                    .unwrap_or_else(|| panic!("{line}: unknown heap"));
                assert!(
                    addr >= hb && addr + size + redzone <= he,
                    "{line}: not inside its heap with its red zone"
                );
                if let Some((&a, &(s, _))) = b.regions.range(..addr + size + redzone).next_back() {
                    assert!(
                        a + s + redzone <= addr,
                        "{line}: overlaps the region at {a:#x} ({s} bytes) or its red zone"
                    );
                }
                b.regions.insert(addr, (size, w[2].to_string()));
                p.registered.push((pid, addr, size));
            }
            "region_unregister" => {
                let addr = hex(field(&w, "addr="));
                assert!(
                    b.regions.remove(&addr).is_some(),
                    "{line}: not a live region"
                );
                p.unregistered.push((pid, addr));
            }
            other => panic!("unknown line {other}: {line}"),
        }
    }
    Replay {
        header,
        phases,
        books,
    }
}

/// What the program says it did, per phase.
#[derive(Default, Debug)]
struct Said {
    allocs: Vec<(u32, u64, u64)>,
    frees: Vec<(u32, u64)>,
    lost: Vec<(u32, u64)>,
    live: Vec<(u32, u64, u64)>,
    bad: Vec<i32>,
}

fn said(stdout: &str) -> BTreeMap<String, Said> {
    let mut out: BTreeMap<String, Said> = BTreeMap::new();
    let mut current = String::from("(start)");
    for line in stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w[0] == "phase" {
            current = w[1].to_string();
            out.entry(current.clone()).or_default();
            continue;
        }
        let s = out.entry(current.clone()).or_default();
        let pid = || w[1].parse::<u32>().unwrap();
        match w[0] {
            "alloc" => s.allocs.push((pid(), hex(w[2]), w[3].parse().unwrap())),
            "free" => s.frees.push((pid(), hex(w[2]))),
            "lost" => s.lost.push((pid(), hex(w[2]))),
            "live" => s.live.push((pid(), hex(w[2]), w[3].parse().unwrap())),
            "bad" => s.bad.push(w[3].parse().unwrap()),
            "child" => assert_eq!(w[2], "0", "the forked child: {line}"),
            other => panic!("{other}: {line}"),
        }
    }
    out
}

impl Replay {
    /// The kinds of the protocol's lines before the first call (`loaded`, `core`, `mem`, ...).
    fn header_kinds(&self) -> Vec<&str> {
        self.header
            .iter()
            .map(|h| h.split(' ').next().unwrap())
            .collect()
    }
}

fn sorted<T: Ord + Clone>(v: &[T]) -> Vec<T> {
    let mut v = v.to_vec();
    v.sort();
    v
}

struct Run {
    out: Output,
    log: String,
    report: serde_json::Value,
}

/// Runs `pool_nvtx PHASE` under the shim with the recorder as the process's NVTX tool.
fn run_recorded(test: &str, phase: &str, env: &[(&str, &str)], injection: Option<&Path>) -> Run {
    let dir = scratch_dir(&format!("{test}{}", env_tag(env)));
    let (report, log) = (dir.join("report.json"), dir.join("nvtx.log"));
    let mut cmd = shim_command(&c_program("pool_nvtx"), &report);
    cmd.arg(phase).env("NVTX_RECORDER_OUT", &log);
    if let Some(lib) = injection {
        // Registration is on by default wherever a tool is named.
        cmd.env("NVTX_INJECTION64_PATH", lib)
            .env_remove("CUGUARD_NVTX");
    } else {
        cmd.env_remove("NVTX_INJECTION64_PATH");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    // A forked child (the `fork` phase) writes a report of its own: the program's is read.
    let report = program_report(&report);
    Run {
        log: std::fs::read_to_string(&log).unwrap_or_default(),
        report,
        out,
    }
}

fn recorder() -> PathBuf {
    c_library("nvtx_recorder")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every phase: each block registered at its address with its size when handed out and
/// unregistered when freed, in the program's own order on one thread and as the same multiset
/// on many; refused frees unregister nothing; before a context's destroy, the block it held is
/// unregistered and then its heaps, while their memory is still allocated; a forked child
/// registers its own; at exit the live regions are the live blocks.
fn every_block_registered(cache: &str, numbering: &str) {
    let env = [
        ("CUGUARD_POOL_THREAD_CACHE", cache),
        ("CUGUARD_POOL_KEEP", "0"),
        ("NVTX_RECORDER_NUMBERING", numbering),
    ];
    let r = run_recorded("nvtx_all", "all", &env, Some(&recorder()));
    let text = stdout(&r.out);
    assert!(!text.contains("mismatch"), "{text}");
    assert!(!stderr(&r.out).contains("NVTX"), "{}", stderr(&r.out));
    let rep = replay(&r.log, REDZONE);
    // The protocol, in the headers' order: the core (domain, nvtxInitialize), then the memory
    // extension with its module id, compatibility id and one segment of 63 slots.
    let header = rep.header_kinds();
    assert_eq!(
        header,
        ["loaded", "core", "domain", "initialize", "mem"],
        "{:?}",
        rep.header
    );
    assert!(rep.header[1].ends_with("version=3"), "{:?}", rep.header);
    assert!(rep.header[2].contains(" cuguard "), "{:?}", rep.header);
    assert!(
        rep.header[4].ends_with("module=1 compat=258 segments=1 segment=1 slots=63"),
        "{:?}",
        rep.header
    );
    let program = said(&text);
    for (name, s) in &program {
        let p = rep
            .phases
            .get(name)
            .unwrap_or_else(|| panic!("no phase {name} in the log"));
        if name == "sequence" {
            // One thread: the very order.
            assert_eq!(p.registered, s.allocs, "sequence: registrations");
            assert_eq!(p.unregistered, s.frees, "sequence: unregistrations");
            assert_eq!(
                s.bad,
                [1, 1],
                "the interior pointer and the double free are refused"
            );
        } else {
            assert_eq!(
                sorted(&p.registered),
                sorted(&s.allocs),
                "{name}: registrations"
            );
            // A block lost with its context is unregistered before the destroy.
            let gone: Vec<(u32, u64)> = s.frees.iter().chain(&s.lost).copied().collect();
            assert_eq!(
                sorted(&p.unregistered),
                sorted(&gone),
                "{name}: unregistrations"
            );
        }
        assert_eq!(p.dropped, [], "{name}: no heap goes with regions in it");
        assert_eq!(p.heaps_refused, 0);
    }
    assert_eq!(program["threads"].allocs.len(), 8 * 101 + 20);
    assert_eq!(program["contexts"].lost.len(), 1);
    // The forked child registered its own blocks, in heaps of its own.
    let child: Vec<u32> = program["fork"]
        .allocs
        .iter()
        .map(|a| a.0)
        .filter(|&p| p != program["fork"].allocs[0].0)
        .collect();
    assert_eq!(child.len(), 6, "{:?}", program["fork"]);
    assert!(
        rep.phases["fork"]
            .registered
            .iter()
            .filter(|r| r.0 == child[0])
            .count()
            == 6
    );
    // At exit: the live regions are the blocks the program holds; the heaps are the pool's chunks.
    let parent = program["end"].live[0].0;
    let live: Vec<(u32, u64, u64)> = rep.books[&parent]
        .regions
        .iter()
        .map(|(&a, (s, _))| (parent, a, *s))
        .collect();
    assert_eq!(live, program["end"].live);
    let pool = &r.report["stats"]["devices"][0]["pool"];
    assert_eq!(
        rep.books[&parent].heaps.len() as u64,
        pool["chunks"].as_u64().unwrap(),
        "{pool}"
    );
}

#[test]
fn nvtx_every_block_registered_thread_cache_on() {
    every_block_registered("1", "1");
}

#[test]
fn nvtx_every_block_registered_thread_cache_off() {
    every_block_registered("0", "1");
}

/// A tool built with the headers CUDA 13.0 ships, as compute-sanitizer 13.0 is, numbers the
/// memory extension's callbacks from 0 (NVTX 3.2's from 1): on the H200 the shim called its slot
/// 1 as the heap registration, which is that tool's unregistration ("Call to
/// nvtxMemHeapUnregister failed: One or more of the parameters is invalid"), then crashed. The
/// recorder numbered from 0, with a trap at every other slot, gets every call at its place.
#[test]
fn nvtx_a_tool_numbering_its_callbacks_from_zero() {
    every_block_registered("1", "0");
    let r = run_recorded(
        "nvtx_zero",
        "sequence",
        &[
            ("NVTX_RECORDER_NUMBERING", "0"),
            ("CUGUARD_NVTX_TRACE", "1"),
        ],
        Some(&recorder()),
    );
    assert!(
        stderr(&r.out).contains("callbacks numbered from 0;"),
        "{}",
        stderr(&r.out)
    );
    let r = run_recorded(
        "nvtx_one",
        "sequence",
        &[("CUGUARD_NVTX_TRACE", "1")],
        Some(&recorder()),
    );
    assert!(
        stderr(&r.out).contains("callbacks numbered from 1;"),
        "{}",
        stderr(&r.out)
    );
}

/// Issue 24, the refusal compute-sanitizer 13.0 printed on the H200 ("Call to
/// nvtxMemHeapUnregister failed: One or more of the parameters is invalid"): a heap must not be
/// unregistered once its memory is gone, as compute-sanitizer drops a pool whose allocation is
/// freed. A reset primary context's heaps go before the reset (its block first); the heaps of one
/// gone with its last release are forgotten without a call, and a new chunk over the same memory
/// gets a heap of its own. `contexts`: the same before a `cuCtxDestroy`.
#[test]
fn nvtx_no_heap_unregistered_after_its_memory_went() {
    let env = [("CUGUARD_POOL_KEEP", "0")];
    let r = run_recorded("nvtx_primary", "primary", &env, Some(&recorder()));
    assert!(!r.log.contains("error "), "{}", r.log);
    let rep = replay(&r.log, REDZONE);
    let s = said(&stdout(&r.out));
    let (p, prog) = (&rep.phases["primary"], &s["primary"]);
    assert_eq!(p.registered, prog.allocs, "{}", r.log);
    // The reset's block is unregistered (before its heap); the released one's is not (the freed
    // blocks and the reset's are all that are).
    let mut want: Vec<(u32, u64)> = prog.frees.clone();
    want.push(prog.lost[0]);
    assert_eq!(prog.lost.len(), 2, "{}", r.log);
    assert_eq!(sorted(&p.unregistered), sorted(&want), "{}", r.log);
    // Three pools, one heap each: the reset's unregistered, the release's forgotten.
    assert_eq!(p.heaps_registered, 3, "{}", r.log);
    assert_eq!(p.heaps_unregistered, 1, "{}", r.log);
    assert_eq!(p.dropped, []);

    let r = run_recorded("nvtx_destroy", "contexts", &env, Some(&recorder()));
    assert!(!r.log.contains("error "), "{}", r.log);
    let rep = replay(&r.log, REDZONE);
    let s = said(&stdout(&r.out));
    let lost = s["contexts"].lost[0];
    assert!(
        rep.phases["contexts"].unregistered.contains(&lost),
        "{}",
        r.log
    );
}

/// Every chunk the pool gives back takes its heap with it: as many heaps unregistered as the
/// report counts trims, as many left as it counts chunks.
#[test]
fn nvtx_trimmed_chunks_unregister_their_heaps() {
    for cache in ["1", "0"] {
        let env = [
            ("CUGUARD_POOL_THREAD_CACHE", cache),
            ("CUGUARD_POOL_KEEP", "0"),
        ];
        let r = run_recorded("nvtx_trim", "sequence", &env, Some(&recorder()));
        let rep = replay(&r.log, REDZONE);
        let pool = &r.report["stats"]["devices"][0]["pool"];
        let (registered, unregistered): (usize, usize) =
            rep.phases.values().fold((0, 0), |(a, b), p| {
                (a + p.heaps_registered, b + p.heaps_unregistered)
            });
        let trims = pool["trims"].as_u64().unwrap();
        assert!(trims >= 2, "the dedicated chunks at least: {pool}");
        assert_eq!(unregistered as u64, trims, "{pool}");
        assert_eq!(
            registered as u64,
            pool["chunks_added"].as_u64().unwrap(),
            "{pool}"
        );
        assert_eq!(
            (registered - unregistered) as u64,
            pool["chunks"].as_u64().unwrap(),
            "{pool}"
        );
    }
}

/// No injection: nothing is loaded and no NVTX call is made, even with the recorder in the
/// process (NVTX's headers look only at the variable); with the variable set but the pool off,
/// nothing either.
#[test]
fn nvtx_no_injection_no_calls() {
    let dir = scratch_dir("nvtx_none");
    let (report, log) = (dir.join("report.json"), dir.join("nvtx.log"));
    let a = artifacts();
    let mut cmd = shim_command(&c_program("pool_nvtx"), &report);
    cmd.arg("sequence")
        .env("NVTX_RECORDER_OUT", &log)
        .env_remove("NVTX_INJECTION64_PATH")
        .env(
            "LD_PRELOAD",
            format!("{}:{}", a.shim.display(), recorder().display()),
        );
    let out = run(&mut cmd, true);
    let text = std::fs::read_to_string(&log).unwrap();
    let kinds: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(kinds, ["loaded", "phase", "phase"], "{text}");
    assert_eq!(stderr(&out).matches("NVTX").count(), 0);
    // Without registration the pool pads nothing: the first two blocks (1000 and 256 bytes) sit
    // one after the other, 1024 bytes apart.
    let s = said(&stdout(&out));
    assert_eq!(s["sequence"].allocs[1].1 - s["sequence"].allocs[0].1, 1024);

    let r = run_recorded(
        "nvtx_pool_off",
        "sequence",
        &[("CUGUARD_POOL", "0")],
        Some(&recorder()),
    );
    let kinds: Vec<&str> = r
        .log
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(kinds, ["phase", "phase"], "{}", r.log);

    // A tool in the process with CUGUARD_NVTX=0: not attached, no calls, no line.
    let dir = scratch_dir("nvtx_turned_off");
    let (report, log) = (dir.join("report.json"), dir.join("nvtx.log"));
    let mut cmd = shim_command(&c_program("pool_nvtx"), &report);
    cmd.arg("sequence")
        .env("NVTX_RECORDER_OUT", &log)
        .env("NVTX_INJECTION64_PATH", recorder())
        .env("CUGUARD_NVTX", "0");
    let out = run(&mut cmd, true);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!text.contains("heap_register"), "{text}");
    assert_eq!(stderr(&out).matches("NVTX").count(), 0);
    let s = said(&stdout(&out));
    assert_eq!(s["sequence"].allocs[1].1 - s["sequence"].allocs[0].1, 1024);
}

/// A failing tool: (name, library, extra environment, what the line says).
type FailCase = (
    &'static str,
    PathBuf,
    &'static [(&'static str, &'static str)],
    &'static str,
);

/// A tool that cannot be loaded or refuses the memory extension: one line on stderr (and a
/// fault in the report); one that lacks the memory extension (a profiler's) is no failure: no
/// line. Either way the program runs as under the pool without registration.
#[test]
fn nvtx_failing_injection_one_line() {
    let cases: [FailCase; 3] = [
        (
            "missing",
            PathBuf::from("/nonexistent/libnvtx-tool.so"),
            &[],
            "could not be loaded",
        ),
        (
            "no_extension",
            artifacts().sim_lib.clone(),
            &[],
            "has no InitializeInjectionNvtxExtension",
        ),
        (
            "refused",
            recorder(),
            &[("NVTX_RECORDER_FAIL", "ext")],
            "InitializeInjectionNvtxExtension returned 0",
        ),
    ];
    for (name, lib, env, why) in cases {
        let r = run_recorded(&format!("nvtx_fail_{name}"), "all", env, Some(&lib));
        let err = stderr(&r.out);
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("NVTX")).collect();
        let faults = r.report["faults"].to_string();
        if name == "no_extension" {
            assert_eq!(lines, Vec::<&str>::new(), "{name}: {err}");
            assert!(
                !faults.contains("NVTX_INJECTION64_PATH"),
                "{name}: {faults}"
            );
        } else {
            assert_eq!(lines.len(), 1, "{name}: {err}");
            assert!(
                lines[0].starts_with("cuguard: NVTX_INJECTION64_PATH="),
                "{name}: {}",
                lines[0]
            );
            assert!(lines[0].contains(why), "{name}: {}", lines[0]);
            assert!(faults.contains("NVTX_INJECTION64_PATH"), "{name}: {faults}");
        }
        let text = stdout(&r.out);
        assert!(!text.contains("mismatch"), "{name}: {text}");
        let program = said(&text);
        assert_eq!(program["threads"].allocs.len(), 8 * 101 + 20, "{name}");
        // No registration, no red zone.
        assert!(
            !r.log.contains("heap_register") && !r.log.contains("region_"),
            "{name}: {}",
            r.log
        );
        let s = &program["sequence"];
        assert_eq!(s.allocs[1].1 - s.allocs[0].1, 1024, "{name}");
    }
}

/// A tool whose core initialization fails still gets the memory extension, as NVTX's headers do
/// (with the default domain: no domain was made); a tool that refuses heaps from the second on
/// gets the first chunk's blocks only, and the program is served as before.
#[test]
fn nvtx_tool_refusals() {
    let r = run_recorded(
        "nvtx_core_fail",
        "sequence",
        &[("NVTX_RECORDER_FAIL", "core")],
        Some(&recorder()),
    );
    let rep = replay(&r.log, REDZONE);
    let header = rep.header_kinds();
    // The refused core closes the library (as the headers do); the extension loads it again.
    assert_eq!(
        header,
        ["loaded", "core", "loaded", "mem"],
        "{:?}",
        rep.header
    );
    assert!(
        r.log
            .lines()
            .filter(|l| l.starts_with("heap_register"))
            .all(|l| l.contains(" (nil) base=")),
        "{}",
        r.log
    );
    let s = said(&stdout(&r.out));
    assert_eq!(rep.phases["sequence"].registered, s["sequence"].allocs);

    let r = run_recorded(
        "nvtx_heap_refused",
        "sequence",
        &[("NVTX_RECORDER_FAIL", "heap:2")],
        Some(&recorder()),
    );
    let rep = replay(&r.log, REDZONE);
    let p = &rep.phases["sequence"];
    let s = said(&stdout(&r.out));
    assert!(p.heaps_refused >= 1, "{}", r.log);
    assert_eq!(p.heaps_registered, 1, "{}", r.log);
    assert!(!stdout(&r.out).contains("mismatch"));
    // Registered: exactly the blocks of the first chunk; every one of them also unregistered.
    assert!(
        !p.registered.is_empty() && p.registered.len() < s["sequence"].allocs.len(),
        "{p:?}"
    );
    for reg in &p.registered {
        assert!(s["sequence"].allocs.contains(reg));
    }
    assert_eq!(
        sorted(&p.unregistered),
        sorted(&p.registered.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>())
    );
    assert_eq!(stderr(&r.out).matches("NVTX").count(), 0);
}

/// `CUGUARD_POOL_REDZONE` sets the padding: with 0 the blocks are registered as before but sit
/// one after another.
#[test]
fn nvtx_redzone_setting() {
    let r = run_recorded(
        "nvtx_redzone0",
        "sequence",
        &[("CUGUARD_POOL_REDZONE", "0")],
        Some(&recorder()),
    );
    let rep = replay(&r.log, 0);
    let s = said(&stdout(&r.out));
    assert_eq!(rep.phases["sequence"].registered, s["sequence"].allocs);
    assert_eq!(s["sequence"].allocs[1].1 - s["sequence"].allocs[0].1, 1024);
    let r = run_recorded(
        "nvtx_redzone4k",
        "sequence",
        &[("CUGUARD_POOL_REDZONE", "4096")],
        Some(&recorder()),
    );
    let rep = replay(&r.log, 4096);
    let s = said(&stdout(&r.out));
    assert_eq!(rep.phases["sequence"].registered, s["sequence"].allocs);
}

/// `cuguard run --sanitizer memcheck -- PROG` runs `compute-sanitizer --tool memcheck
/// --leak-check no … PROG` with the shim and the pool in the program only: a stand-in
/// compute-sanitizer (a script that records its arguments, names the recorder as the NVTX tool
/// and runs the program as the real one does) sees the options, and the program's blocks reach the
/// tool.
#[test]
fn nvtx_cuguard_run_sanitizer() {
    let a = artifacts();
    let dir = scratch_dir("nvtx_run_sanitizer");
    let (log, argv, report) = (
        dir.join("nvtx.log"),
        dir.join("argv"),
        dir.join("report.json"),
    );
    let fake = dir.join("compute-sanitizer");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\necho \"preload=$LD_PRELOAD\" >> '{}'\n\
             while [ \"${{1#-}}\" != \"$1\" ]; do case \"$1\" in --tool|--leak-check|--nvtx) shift 2;; *) shift;; esac; done\n\
             NVTX_INJECTION64_PATH='{}' exec \"$@\"\n",
            argv.display(),
            argv.display(),
            recorder().display()
        ),
    )
    .unwrap();
    let mut perms = std::fs::metadata(&fake).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&fake, perms).unwrap();
    let out = run(
        Command::new(&a.cuguard)
            .args([
                "run",
                "--driver",
                "sim",
                "--sanitizer",
                "memcheck",
                "--sanitizer-path",
            ])
            .arg(&fake)
            .arg("--")
            .arg(c_program("pool_nvtx"))
            .arg("sequence")
            .env("CUGUARD_SHIM", &a.shim)
            .env("CUGUARD_SIM_DRIVER", &a.sim_lib)
            .env("CUGUARD_REPORT", &report)
            .env("CUGUARD_POOL", "0")
            .env_remove("CUGUARD_NVTX")
            .env("NVTX_RECORDER_OUT", &log)
            .env_remove("LD_PRELOAD"),
        true,
    );
    let args = std::fs::read_to_string(&argv).unwrap();
    let lines: Vec<&str> = args.lines().collect();
    assert_eq!(
        &lines[..6],
        ["--tool", "memcheck", "--leak-check", "no", "--nvtx", "yes"],
        "{args}"
    );
    // The sanitizer itself runs without the shim; the program gets it (through cuguard's exec).
    assert_eq!(lines.last().unwrap(), &"preload=", "{args}");
    let rep = replay(&std::fs::read_to_string(&log).unwrap(), REDZONE);
    let s = said(&stdout(&out));
    assert_eq!(
        rep.phases["sequence"].registered, s["sequence"].allocs,
        "the pool is on under --sanitizer"
    );
    assert_eq!(read_report(&report)["config"]["pool"], true);
}
