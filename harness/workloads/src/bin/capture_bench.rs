//! capture_bench: what call-stack capture costs per allocation in deep stacks, before and after
//! the capture caches, side by side in one run, measured by the shim's own bill (the report's
//! `cost`).
//!
//! The parent runs children under the shim, interleaved over rounds, each workload twice:
//! `before` (`CUGUARD_TEST_CAPTURE_CACHE=0`: the capture path without the per-thread memo of
//! Python frame words and without the last capture's rules by position) and `after` (the
//! default). Workloads:
//!
//! - `native-60`: this program, recursing 60 native frames deep (Rust, no frame pointers
//!   needed), then making cuMemAlloc_v2+cuMemFree_v2 pairs of 256 bytes (32 frames recorded);
//! - `native-8`: the same from 8 frames deep, for reference;
//! - `python-80`: `harness/workloads/python/alloc_bench.py`, pairs through ctypes from 80
//!   nested Python calls (32 Python frames and the interpreter's native frames recorded);
//!   skipped without `python3`.
//!
//! From each child's report it takes, per tracked allocation, the estimated time in the hooks,
//! in native stack capture and in reading Python frames (`cost.hooks`, `cost.stacks`,
//! `cost.python`, divided by their calls), and prints the median over rounds of each, before
//! and after, as a markdown table.
//!
//! Usage: `capture_bench [--shim PATH] [--rounds N] [--pairs N] [--python-script PATH]`
//! (the driver is whatever `libcuda.so.1` the loader finds: the real one, or the simulated one
//! through `LD_LIBRARY_PATH`). Child mode: `capture_bench --child DEPTH PAIRS`.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::process::Command;

type CuResult = u32;

/// The driver entries the child calls, looked up through `dlsym` (the shim answers with its
/// hooks, as it does for cudarc or numba).
struct Driver {
    alloc: unsafe extern "C" fn(*mut u64, usize) -> CuResult,
    free: unsafe extern "C" fn(u64) -> CuResult,
}

fn check(r: CuResult, what: &str) {
    if r != 0 {
        eprintln!("{what} failed: CUresult {r}");
        std::process::exit(3);
    }
}

/// Loads the driver and makes the primary context of device 0 current.
fn driver() -> Driver {
    // SAFETY: dlopen/dlsym with NUL-terminated names; each symbol is cast to the signature the
    // CUDA driver API documents for it, and called with valid out-parameters.
    unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "libcuda.so.1 not found");
        let sym = |name: &std::ffi::CStr| {
            let p = libc::dlsym(h, name.as_ptr());
            assert!(!p.is_null(), "{name:?} missing");
            p
        };
        let init: unsafe extern "C" fn(u32) -> CuResult = std::mem::transmute(sym(c"cuInit"));
        let device_get: unsafe extern "C" fn(*mut i32, i32) -> CuResult =
            std::mem::transmute(sym(c"cuDeviceGet"));
        let retain: unsafe extern "C" fn(*mut *mut c_void, i32) -> CuResult =
            std::mem::transmute(sym(c"cuDevicePrimaryCtxRetain"));
        let set_current: unsafe extern "C" fn(*mut c_void) -> CuResult =
            std::mem::transmute(sym(c"cuCtxSetCurrent"));
        check(init(0), "cuInit");
        let mut dev = 0;
        check(device_get(&mut dev, 0), "cuDeviceGet");
        let mut ctx = std::ptr::null_mut();
        check(retain(&mut ctx, dev), "cuDevicePrimaryCtxRetain");
        check(set_current(ctx), "cuCtxSetCurrent");
        Driver {
            alloc: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C" fn(*mut u64, usize) -> CuResult,
            >(sym(c"cuMemAlloc_v2")),
            free: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(u64) -> CuResult>(sym(
                c"cuMemFree_v2",
            )),
        }
    }
}

/// Recurses `depth` frames deep, then runs `f`. Not a tail call: the result is used after the
/// recursive call returns.
#[inline(never)]
fn recurse(depth: usize, f: &dyn Fn()) -> usize {
    if depth <= 1 {
        f();
        1
    } else {
        std::hint::black_box(recurse(depth - 1, f)) + 1
    }
}

fn child(depth: usize, pairs: usize) {
    let d = driver();
    recurse(depth, &|| {
        for _ in 0..pairs {
            let mut p = 0u64;
            // SAFETY: the driver's entries with a valid out-parameter and the pointer it gave.
            unsafe {
                check((d.alloc)(&mut p, 256), "cuMemAlloc_v2");
                check((d.free)(p), "cuMemFree_v2");
            }
        }
    });
}

/// The `calls` and `ns` of `cost.<key>` in a report, found without a JSON dependency (the shim
/// writes compact JSON; the fields are plain integers).
fn cost_of(text: &str, key: &str) -> Option<(f64, f64)> {
    let cost = &text[text.find("\"cost\":{")?..];
    let part = &cost[cost.find(&format!("\"{key}\":{{"))?..];
    let num = |field: &str| -> Option<f64> {
        let i = part.find(&format!("\"{field}\":"))? + field.len() + 3;
        let rest = &part[i..];
        let end = rest.find(|c: char| !c.is_ascii_digit())?;
        rest[..end].parse().ok()
    };
    Some((num("calls")?, num("ns")?))
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[path = "../bench_args.rs"]
mod bench_args;

const USAGE: &str = "\
capture_bench: what call-stack capture costs per allocation in deep stacks, before and after
the capture caches, side by side in one run (the shim's own bill)

Usage: capture_bench [--shim PATH] [--rounds N] [--pairs N] [--python-script PATH]

  --shim PATH            the shim (default: libcuguard.so beside this program)
  --rounds N             rounds over every workload (default 5)
  --pairs N              allocation pairs per child (default 50000)
  --python-script PATH   the Python workload (default harness/workloads/python/alloc_bench.py)

The driver is whatever libcuda.so.1 the loader finds: the real one, or the simulated one.

Example (on the GPU machine, after scripts/gpu/stage.sh):
  .gpu/capture_bench --shim .gpu/libcuguard.so --rounds 3";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--child") {
        bench_args::Options {
            valued: &["--shim", "--rounds", "--pairs", "--python-script"],
            flags: &[],
            usage: USAGE,
        }
        .check(&args);
    }
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let depth = args[i + 1].parse().expect("depth");
        let pairs = args[i + 2].parse().expect("pairs");
        child(depth, pairs);
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    let shim = arg("--shim")
        .map(PathBuf::from)
        .unwrap_or_else(|| exe.parent().expect("exe dir").join("libcuguard.so"));
    assert!(shim.exists(), "no shim at {}", shim.display());
    let rounds: usize = arg("--rounds").map_or(5, |r| r.parse().expect("--rounds"));
    let pairs: usize = arg("--pairs").map_or(50_000, |r| r.parse().expect("--pairs"));
    let script = arg("--python-script")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("python/alloc_bench.py"));
    let python = Command::new("python3")
        .arg("-c")
        .arg("import ctypes")
        .status()
        .is_ok_and(|s| s.success())
        && script.exists();
    let dir = std::env::temp_dir().join(format!("capture_bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");

    let mut workloads = workloads(&exe, pairs, &script, python);
    let (figures, calls) = measure(&mut workloads, rounds, &shim, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    print_table(&workloads, figures, &calls, rounds);
}

/// Each workload run per round: its name and the command that runs it.
type Workloads = Vec<(&'static str, Command)>;

/// figures[(workload, variant, metric)] = ns per call, one per round.
type Figures = BTreeMap<(String, &'static str, &'static str), Vec<f64>>;

/// The workloads: this program's own native children at depths 60 and 8, and the Python
/// `script` when `python` can run it.
fn workloads(exe: &Path, pairs: usize, script: &Path, python: bool) -> Workloads {
    let mut workloads: Workloads = Vec::new();
    for depth in [60usize, 8] {
        let mut c = Command::new(exe);
        c.args(["--child", &depth.to_string(), &pairs.to_string()]);
        workloads.push((if depth == 60 { "native-60" } else { "native-8" }, c));
    }
    if python {
        let mut c = Command::new("python3");
        c.arg(script)
            .arg((pairs / 5 / 5).max(1).to_string()) // the script makes 5 rounds of N pairs
            .arg("80");
        workloads.push(("python-80", c));
    } else {
        eprintln!(
            "python-80 skipped: no python3 with ctypes, or no {}",
            script.display()
        );
    }
    workloads
}

/// Runs every workload under the shim, without and with the capture cache, `rounds` times; the
/// figures, and each workload's count of tracked allocations.
fn measure(
    workloads: &mut Workloads,
    rounds: usize,
    shim: &Path,
    dir: &Path,
) -> (Figures, BTreeMap<String, f64>) {
    let mut figures: Figures = BTreeMap::new();
    let mut calls: BTreeMap<String, f64> = BTreeMap::new();
    for round in 0..rounds {
        for (name, cmd) in workloads.iter_mut() {
            for (variant, cache) in [("before", "0"), ("after", "1")] {
                let report = dir.join(format!("{name}-{variant}-{round}.json"));
                cmd.env("LD_PRELOAD", shim)
                    .env("CUGUARD_REPORT", &report)
                    .env("CUGUARD_QUIET", "1")
                    .env("CUGUARD_TEST_CAPTURE_CACHE", cache);
                let out = cmd.output().expect("running child");
                if !out.status.success() {
                    eprintln!(
                        "{name} {variant}: {}\n{}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    );
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&report) else {
                    eprintln!("{name} {variant}: no report at {}", report.display());
                    continue;
                };
                for metric in ["hooks", "stacks", "python"] {
                    if let Some((n, ns)) = cost_of(&text, metric) {
                        if metric == "hooks" {
                            calls.insert(name.to_string(), n);
                        }
                        let per = if n > 0.0 { ns / n } else { 0.0 };
                        figures
                            .entry((name.to_string(), variant, metric))
                            .or_default()
                            .push(per);
                    }
                }
                let _ = std::fs::remove_file(&report);
            }
        }
    }
    (figures, calls)
}

/// The table: per workload, the capture's cost per tracked allocation before and after.
fn print_table(
    workloads: &Workloads,
    mut figures: Figures,
    calls: &BTreeMap<String, f64>,
    rounds: usize,
) {
    println!(
        "Capture per tracked allocation, ns (the shim's own bill: estimates from samples; \
         median of {rounds} rounds; before = CUGUARD_TEST_CAPTURE_CACHE=0)\n"
    );
    println!(
        "| workload | allocations | capture before | capture after | after / before | \
         native before | native after | Python before | Python after | hooks before | hooks after |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, _) in workloads {
        let mut get = |variant: &'static str, metric: &'static str| {
            figures
                .get_mut(&(name.to_string(), variant, metric))
                .map_or(f64::NAN, |v| median(v))
        };
        let (sb, sa) = (get("before", "stacks"), get("after", "stacks"));
        let (pb, pa) = (get("before", "python"), get("after", "python"));
        let (hb, ha) = (get("before", "hooks"), get("after", "hooks"));
        let (cb, ca) = (sb + pb, sa + pa);
        println!(
            "| {name} | {:.0} | {cb:.0} | {ca:.0} | {:.2} | {sb:.0} | {sa:.0} | {pb:.0} | {pa:.0} | {hb:.0} | {ha:.0} |",
            calls.get(*name).copied().unwrap_or(f64::NAN),
            ca / cb
        );
    }
}
