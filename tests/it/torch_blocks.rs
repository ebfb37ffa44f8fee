//! PyTorch's tensors in the history (issue 54): a stand-in for PyTorch's libc10.so and
//! libc10_cuda.so (`harness/workloads/c/c10_stand_in.cc`, `c10_cuda_stand_in.cc`: a caching
//! allocator with PyTorch's names that reports each block to `c10::reportMemoryUsageToProfiler`
//! as PyTorch's does), driven from Python through ctypes (`torch_blocks.py`). The shim's hook
//! records every block with its Python line and forwards every call; `summary --at` lists the
//! tensors inside the cache's segments by line and the cache's idle memory apart; `--between`
//! says what a step kept, by tensor; the memory-viz export holds the tensors inside their
//! segments.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{artifacts, run, scratch_dir, shim_command};

const MIB: u64 = 1 << 20;

/// Builds the two stand-ins into `dir` (libc10.so, then libc10_cuda.so linked with it), with
/// the compiler's `flags`.
pub(crate) fn stand_ins(dir: &Path, flags: &[&str]) -> (PathBuf, PathBuf) {
    let a = artifacts();
    let src = a.root.join("harness/workloads/c");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let c10 = dir.join("libc10.so");
    let cuda = dir.join("libc10_cuda.so");
    let status = Command::new(&cxx)
        .args([
            "-O0",
            "-g",
            "-shared",
            "-fPIC",
            "-Wall",
            "-Wl,-soname,libc10.so",
        ])
        .args(flags)
        .arg("-o")
        .arg(&c10)
        .arg(src.join("c10_stand_in.cc"))
        .status()
        .expect("running c++");
    assert!(status.success(), "compiling c10_stand_in.cc failed");
    let status = Command::new(&cxx)
        .args(["-O0", "-g", "-shared", "-fPIC", "-Wall"])
        .args(flags)
        .arg("-o")
        .arg(&cuda)
        .arg(src.join("c10_cuda_stand_in.cc"))
        .arg("-I")
        .arg(&src)
        .arg("-L")
        .arg(dir)
        .args(["-lc10", "-Wl,-rpath,$ORIGIN", "-L"])
        .arg(&a.sim_dir)
        .arg("-lcuda")
        .status()
        .expect("running c++");
    assert!(status.success(), "compiling c10_cuda_stand_in.cc failed");
    (cuda, c10)
}

/// The line of `torch_blocks.py` that ends with `marker`.
pub(crate) fn line_of(marker: &str) -> u64 {
    let py = std::fs::read_to_string(
        artifacts()
            .root
            .join("harness/workloads/python/torch_blocks.py"),
    )
    .unwrap();
    py.lines().position(|l| l.ends_with(marker)).expect(marker) as u64 + 1
}

/// One run of `torch_blocks.py` under the shim with `env`, in a directory of its own: the
/// directory and what the script printed (`weights` → `0x…`).
pub(crate) fn torch_run(name: &str, env: &[(&str, &str)]) -> (PathBuf, HashMap<String, String>) {
    torch_run_built(name, env, &[])
}

/// [`torch_run`] with the stand-ins built with the compiler's `flags`.
fn torch_run_built(
    name: &str,
    env: &[(&str, &str)],
    flags: &[&str],
) -> (PathBuf, HashMap<String, String>) {
    let a = artifacts();
    let dir = scratch_dir(name);
    let (cuda, c10) = stand_ins(&dir, flags);
    let mut cmd = shim_command(Path::new("python3"), &dir.join("r.json"));
    cmd.arg(a.root.join("harness/workloads/python/torch_blocks.py"))
        .arg(&cuda)
        .arg(&c10)
        .env("PYTHONPATH", a.root.join("src/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .envs(env.iter().copied());
    let out = run(&mut cmd, true);
    let said = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (dir, said)
}

/// `cuguard ARGS` in `dir`, which must succeed: its standard output as JSON.
fn json_of(dir: &Path, args: &[&str]) -> Value {
    let out = run(
        Command::new(&artifacts().cuguard)
            .current_dir(dir)
            .args(args)
            .args(["--format", "json"]),
        true,
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// An answer's rows on device 0: (site's location or "idle", bytes, count, owner).
fn rows(answer: &Value) -> Vec<(String, u64, u64, String)> {
    let d = &answer["devices"][0];
    d["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let what = if s["idle"] == json!(true) {
                "idle".to_string()
            } else {
                s["location"].as_str().unwrap().to_string()
            };
            (
                what,
                s["bytes"].as_u64().unwrap(),
                s["allocations"].as_u64().unwrap(),
                s["owner"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn row(what: &str, bytes: u64, count: u64) -> (String, u64, u64, String) {
    (
        what.to_string(),
        bytes,
        count,
        "pytorch_caching_allocator".to_string(),
    )
}

#[test]
fn at_a_moment_the_cache_s_tensors_are_named_by_line_and_its_idle_memory_apart() {
    for (name, pool) in [("torch-blocks-pool", "1"), ("torch-blocks-no-pool", "0")] {
        let (dir, said) = torch_run(name, &[("CUGUARD_POOL", pool)]);
        // Every call reached c10's own function (3 blocks handed out, 1 freed).
        assert_eq!(said["calls"], "4", "pool {pool}");
        assert_eq!(said["reserved"], (10 * MIB).to_string());
        let weights = format!("torch_blocks.py:{}", line_of("# weights"));
        let activations = format!("torch_blocks.py:{}", line_of("# activations"));
        // At the end, and after the step (the temporary freed: its 4 MiB read idle): the
        // weights and the activations by line, and the three segments' 6 MiB idle.
        let after = vec![
            row("idle", 6 * MIB, 3),
            row(&activations, 3 * MIB, 1),
            row(&weights, MIB, 1),
        ];
        for at in ["end", "phase:pause"] {
            let a = json_of(&dir, &["summary", "r.json", "--at", at]);
            assert_eq!(rows(&a), after, "pool {pool}, --at {at}");
            assert_eq!(a["devices"][0]["bytes"], 10 * MIB);
            assert_eq!(a["devices"][0]["allocations"], 2, "tensors, not segments");
            // The idle row is named by its largest segment: the one the temporary grew.
            let temporary = format!("torch_blocks.py:{}", line_of("# temporary"));
            assert_eq!(a["devices"][0]["sites"][0]["location"], json!(temporary));
        }
        // The step's peak: the moment the temporary was carved from the segment it grew the
        // cache by (not the moment before, with that segment still idle).
        let temporary = format!("torch_blocks.py:{}", line_of("# temporary"));
        let peak = json_of(&dir, &["summary", "r.json", "--at", "phase:step"]);
        assert_eq!(
            rows(&peak),
            [
                row(&temporary, 4 * MIB, 1),
                row(&activations, 3 * MIB, 1),
                row("idle", 2 * MIB, 2),
                row(&weights, MIB, 1),
            ],
            "pool {pool}"
        );
        // What the step kept: the activations, and the cache's growth in it (two segments,
        // 1 MiB of the first and all 4 MiB of the second idle).
        let kept = json_of(&dir, &["summary", "r.json", "--between", "phase:step"]);
        assert_eq!(
            rows(&kept),
            [row("idle", 5 * MIB, 2), row(&activations, 3 * MIB, 1)],
            "pool {pool}"
        );
    }
}

#[test]
fn the_memory_viz_export_holds_the_tensors_inside_their_segments() {
    let (dir, said) = torch_run("torch-blocks-viz", &[]);
    run(
        Command::new(&artifacts().cuguard)
            .current_dir(&dir)
            .args(["export", "-o", "m.pickle", "r.json"]),
        true,
    );
    let out = run(
        Command::new("python3").current_dir(&dir).args([
            "-c",
            "import pickle, json\n\
             s = pickle.load(open('m.pickle', 'rb'))\n\
             print(json.dumps({'segments': [[g['address'], g['total_size'], \
             [[b['state'], b['address'], b['size']] for b in g['blocks']]] \
             for g in s['segments']], 'trace': [[e['action'], e['addr'], e['size']] \
             for e in s['device_traces'][0]]}))",
        ]),
        true,
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let addr = |k: &str| u64::from_str_radix(said[k].trim_start_matches("0x"), 16).unwrap();
    let (w, a, t) = (addr("weights"), addr("activations"), addr("temporary"));
    // Each segment's blocks tile it: the tensors live at the end, the rest free.
    let mut segments = vec![
        json!([
            w,
            2 * MIB,
            [["active_allocated", w, MIB], ["inactive", w + MIB, MIB]]
        ]),
        json!([
            a,
            4 * MIB,
            [
                ["active_allocated", a, 3 * MIB],
                ["inactive", a + 3 * MIB, MIB]
            ]
        ]),
        json!([t, 4 * MIB, [["inactive", t, 4 * MIB]]]),
    ];
    segments.sort_by_key(|s| s[0].as_u64());
    assert_eq!(got["segments"], json!(segments));
    assert_eq!(
        got["trace"],
        json!([
            ["segment_alloc", w, 2 * MIB],
            ["alloc", w, MIB],
            ["segment_alloc", a, 4 * MIB],
            ["alloc", a, 3 * MIB],
            ["segment_alloc", t, 4 * MIB],
            ["alloc", t, 4 * MIB],
            ["free_requested", t, 4 * MIB],
            ["free_completed", t, 4 * MIB],
        ])
    );
    run(
        Command::new("python3")
            .current_dir(&dir)
            .arg(artifacts().root.join("scripts/memory_viz_check.py"))
            .arg("m.pickle"),
        true,
    );
}

#[test]
fn pprof_s_inuse_counts_the_tensors_and_the_cache_s_idle_bytes_apart() {
    let test = "pprof_s_inuse_counts_the_tensors_and_the_cache_s_idle_bytes_apart";
    if Command::new("go").arg("version").output().is_err() {
        crate::support::missing(test, "go is not installed (apt-get install golang-go)");
        return;
    }
    let (dir, _) = torch_run("torch-blocks-pprof", &[]);
    run(
        Command::new(&artifacts().cuguard).current_dir(&dir).args([
            "export",
            "--format",
            "pprof",
            "--at",
            "phase:pause",
            "-o",
            "p.pb.gz",
            "r.json",
        ]),
        true,
    );
    // `-traces`' samples: (value, idle or not, the program's line: `<module>`'s), summed;
    // bytes as bytes.
    let traces = |index: &str| -> Vec<(u64, bool, String)> {
        let out = run(
            Command::new("go").current_dir(&dir).args([
                "tool",
                "pprof",
                "-lines",
                "-traces",
                "-unit=B",
                &format!("-sample_index={index}"),
                "p.pb.gz",
            ]),
            true,
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let mut sum: HashMap<(bool, String), u64> = HashMap::new();
        for t in text.split("-----------+").skip(1) {
            let lines: Vec<&str> = t.lines().map(str::trim).collect();
            let Some(first) = lines
                .iter()
                .find(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            else {
                continue;
            };
            let value: u64 = first
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches('B')
                .parse()
                .unwrap();
            let idle = first.contains("(idle in the cache: freed, kept for reuse)");
            let line = lines
                .iter()
                .find_map(|l| l.strip_prefix("<module> "))
                .and_then(|p| p.rsplit('/').next())
                .unwrap_or_default()
                .to_string();
            if value > 0 {
                *sum.entry((idle, line)).or_default() += value;
            }
        }
        let mut rows: Vec<(u64, bool, String)> =
            sum.into_iter().map(|((i, l), v)| (v, i, l)).collect();
        rows.sort();
        rows
    };
    let at = |marker: &str| format!("torch_blocks.py:{}", line_of(marker));
    // After the step (the temporary freed): the weights and the activations at their lines,
    // and the three segments' 6 MiB idle, each under its segment's stack, as its own entry.
    let space = traces("inuse_space");
    let idle: u64 = space.iter().filter(|r| r.1).map(|r| r.0).sum();
    let tensors: Vec<_> = space.iter().filter(|r| !r.1).cloned().collect();
    assert_eq!(idle, 6 * MIB, "{space:?}");
    assert_eq!(
        tensors,
        [
            (MIB, false, at("# weights")),
            (3 * MIB, false, at("# activations"))
        ],
        "{space:?}"
    );
    // As objects, the two tensors; the idle bytes are none.
    let objects = traces("inuse_objects");
    assert_eq!(
        objects,
        [(1, false, at("# weights")), (1, false, at("# activations"))],
        "{objects:?}"
    );
}

#[test]
fn cache_blocks_off_records_the_segments_only_and_still_forwards_every_call() {
    let (dir, said) = torch_run("torch-blocks-off", &[("CUGUARD_CACHE_BLOCKS", "0")]);
    assert_eq!(said["calls"], "4");
    let a = json_of(&dir, &["summary", "r.json", "--at", "end"]);
    let d = &a["devices"][0];
    assert_eq!(
        (d["bytes"].as_u64(), d["allocations"].as_u64()),
        (Some(10 * MIB), Some(3))
    );
    assert!(rows(&a).iter().all(|r| r.0 != "idle"), "{a}");
    // The summary's hint for the cache: without its tensors recorded, turn the cache off.
    assert!(
        summary_text(&dir).contains(
            "10.0 MiB held by PyTorch's caching allocator at exit: its cache, not necessarily \
             your tensors; PYTORCH_NO_CUDA_MEMORY_CACHING=1 shows each tensor"
        ),
        "{}",
        summary_text(&dir)
    );
}

/// `cuguard summary r.json` in `dir`: its standard output.
fn summary_text(dir: &Path) -> String {
    let out = run(
        Command::new(&artifacts().cuguard)
            .current_dir(dir)
            .args(["summary", "r.json"]),
        true,
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Where the history recorded the cache's tensors, the summary's hint for the cache points at
/// them (`--at end`), not at turning the cache off.
#[test]
fn the_summary_s_hint_for_the_cache_points_at_the_tensors_the_history_recorded() {
    let (dir, _) = torch_run("torch-blocks-hint", &[]);
    let text = summary_text(&dir);
    assert!(
        text.contains(
            "10.0 MiB held by PyTorch's caching allocator at exit: its cache, not necessarily \
             your tensors; the history recorded its tensors: cuguard summary REPORT --at end \
             lists them by line"
        ),
        "{text}"
    );
}

/// A PyTorch whose caching allocator calls a changed `reportMemoryUsageToProfiler` (one more
/// argument: another mangled name): the hook never hears of its blocks. The program runs on
/// (every call reaches PyTorch's own function), the history holds the segments, and the report
/// says why the tensors are missing, which every reading of the history says once.
#[test]
fn a_pytorch_that_changed_the_hook_is_said_once_and_runs_on() {
    let (dir, said) = torch_run_built("torch-blocks-changed", &[], &["-DC10_REPORT_CHANGED"]);
    assert_eq!(said["calls"], "4");
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("r.json")).unwrap()).unwrap();
    let why = report["history"]["cache_blocks_unrecorded"]
        .as_str()
        .unwrap_or_else(|| panic!("no reason in {}", report["history"]));
    assert!(
        why.starts_with(
            "this PyTorch's libc10.so does not define c10::reportMemoryUsageToProfiler("
        ),
        "{why}"
    );
    let out = run(
        Command::new(&artifacts().cuguard)
            .current_dir(&dir)
            .args(["summary", "r.json", "--at", "end", "--format", "json"]),
        true,
    );
    let said_err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(said_err.matches(why).count(), 1, "{said_err}");
    let a: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["span"]["cache_blocks_unrecorded"], json!(why));
    // The segments, whole: three allocations, no idle row.
    let d = &a["devices"][0];
    assert_eq!(
        (d["bytes"].as_u64(), d["allocations"].as_u64()),
        (Some(10 * MIB), Some(3))
    );
    assert!(rows(&a).iter().all(|r| r.0 != "idle"), "{:?}", rows(&a));
    // With the recording turned off, the report says that instead.
    let (dir, _) = torch_run("torch-blocks-off-said", &[("CUGUARD_CACHE_BLOCKS", "0")]);
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("r.json")).unwrap()).unwrap();
    assert_eq!(
        report["history"]["cache_blocks_unrecorded"],
        json!(
            "CUGUARD_CACHE_BLOCKS=0: PyTorch's caching allocator's blocks (tensors) were not \
             recorded; the history holds its segments"
        )
    );
}

#[test]
fn growth_inside_pytorch_s_cache_follows_the_line_that_keeps_its_tensors() {
    // The driver sees one segment, taken at the start: flat. The shim samples PyTorch's blocks
    // by the stacks that made them (stack_samples' cache_blocks series), so the list that keeps
    // a tensor a step grows at its line, and the temporary does not.
    let a = artifacts();
    let dir = scratch_dir("torch-growth");
    let (cuda, _c10) = stand_ins(&dir, &[]);
    let cuda = cuda.to_str().unwrap().to_string();
    let out = crate::torch_oom::run_workload(
        &dir,
        "torch_growth.py",
        &[],
        &[("STANDIN_C10_CUDA", cuda.as_str())],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
    let blocks = report["stack_samples"]["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["cache_blocks"] == true)
        .count();
    assert!(blocks >= 1, "{}", report["stack_samples"]);
    // The hook's work is billed apart: every block made and freed before the end (the held
    // tensor, 14 kept, 14 temporaries made and freed).
    let billed = report["cost"]["cache_blocks"]["calls"].as_u64().unwrap();
    assert!(billed >= 1 + 1 + 14 + 14 + 14, "{}", report["cost"]);
    let py =
        std::fs::read_to_string(a.root.join("harness/workloads/python/torch_growth.py")).unwrap();
    let grows = py.lines().position(|l| l.ends_with("# grows")).unwrap() + 1;
    let growing = crate::attribution::growing(&dir.join("r.json"));
    assert_eq!(growing.len(), 1, "{growing:?}");
    assert_eq!(
        (&growing[0].0[..], &growing[0].1[..], growing[0].3),
        (
            &format!("torch_growth.py:{grows}")[..],
            "program",
            14 * 8 * MIB
        ),
        "{growing:?}"
    );
}

/// `cuguard replay` of a run whose history holds PyTorch's tensors asks every allocator for the
/// tensors, as the program did (weights 1 MiB, activations 3 MiB, a temporary 4 MiB), in place
/// of the stand-in cache's three segments; with the tensors not recorded, for the segments.
/// PyTorch's model then makes its own segments: a small one (2 MiB) for the weights and a large
/// one (20 MiB) that holds the activations and the temporary.
#[test]
fn replay_asks_for_the_tensors_where_the_history_holds_them_and_for_the_segments_where_not() {
    let replay = |dir: &Path| {
        json_of(
            dir,
            &[
                "replay",
                "r.json",
                "--capacity",
                "1GiB",
                "--allocator",
                "torch,driver",
            ],
        )
    };
    let peaks = |r: &Value| -> Vec<(String, bool, u64)> {
        r["allocators"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["name"].as_str().unwrap().to_string(),
                    o["fits"].as_bool().unwrap(),
                    o["peak_reserved_bytes"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    // (requests, of them tensors, the cache's segments left out, live at most)
    let counts = |r: &Value| {
        (
            r["requests"].as_u64(),
            r["cache_blocks"].as_u64(),
            r["cache_segments"].as_u64(),
            r["peak_live_bytes"].as_u64(),
        )
    };
    let (dir, _) = torch_run("torch-blocks-replay", &[]);
    let r = replay(&dir);
    assert_eq!(
        counts(&r),
        (Some(3), Some(3), Some(3), Some(8 * MIB)),
        "{r}"
    );
    assert_eq!(
        peaks(&r),
        vec![
            ("driver".into(), true, 10 * MIB),
            ("torch".into(), true, 22 * MIB)
        ]
    );
    assert!(
        r["notes"].as_array().unwrap().iter().any(|n| n
            == "3 requests are tensors of PyTorch's cache, replayed in place of the 3 segments \
                it held them in: each allocator serves the tensors as the program asked for them"),
        "{r}"
    );

    let (dir, _) = torch_run("torch-blocks-replay-off", &[("CUGUARD_CACHE_BLOCKS", "0")]);
    let r = replay(&dir);
    assert_eq!(
        counts(&r),
        (Some(3), Some(0), Some(0), Some(10 * MIB)),
        "{r}"
    );
    assert_eq!(
        peaks(&r),
        vec![
            ("driver".into(), true, 10 * MIB),
            ("torch".into(), true, 20 * MIB)
        ]
    );
}

#[test]
fn in_expandable_segments_the_tensors_are_carved_from_the_pages_mapped_under_them() {
    // PyTorch's expandable segments: one reserved range, 2 MiB pages mapped as the cache grows
    // (cuMemCreate, cuMemMap); the activations span two pages, the temporary two more.
    let (dir, said) = torch_run(
        "torch-blocks-expandable",
        &[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")],
    );
    assert_eq!(said["calls"], "4");
    assert_eq!(said["reserved"], (8 * MIB).to_string());
    let addr = |k: &str| u64::from_str_radix(said[k].trim_start_matches("0x"), 16).unwrap();
    assert_eq!(addr("activations"), addr("weights") + MIB, "one range");
    let weights = format!("torch_blocks.py:{}", line_of("# weights"));
    let activations = format!("torch_blocks.py:{}", line_of("# activations"));
    let temporary = format!("torch_blocks.py:{}", line_of("# temporary"));
    // After the step: 8 MiB mapped, the tensors' 4 MiB and the two free pages' 4 MiB idle:
    // not the pages and the tensors on top of them.
    for at in ["end", "phase:pause"] {
        let a = json_of(&dir, &["summary", "r.json", "--at", at]);
        assert_eq!(
            rows(&a),
            [
                row("idle", 4 * MIB, 2),
                row(&activations, 3 * MIB, 1),
                row(&weights, MIB, 1),
            ],
            "--at {at}"
        );
        assert_eq!(a["devices"][0]["bytes"], 8 * MIB, "--at {at}");
        assert_eq!(a["devices"][0]["allocations"], 2, "tensors, not pages");
    }
    let peak = json_of(&dir, &["summary", "r.json", "--at", "phase:step"]);
    assert_eq!(
        rows(&peak),
        [
            row(&temporary, 4 * MIB, 1),
            row(&activations, 3 * MIB, 1),
            row(&weights, MIB, 1),
        ]
    );
    assert_eq!(peak["devices"][0]["bytes"], 8 * MIB);
    // The summary's history peak is the mapped memory, not more.
    let text = run(
        Command::new(&artifacts().cuguard)
            .current_dir(&dir)
            .args(["summary", "r.json"]),
        true,
    );
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(!text.contains("12.0 MiB"), "{text}");
}

#[test]
fn in_expandable_segments_pages_made_and_not_yet_mapped_are_live_at_a_refusal() {
    // Under a 7 MiB limit the temporary's growth is refused at its second page, the first made
    // and not yet mapped (PyTorch makes every page of a growth before it maps them): the
    // limit counted it, and so does the history at the refusal.
    let (dir, said) = torch_run(
        "torch-blocks-expandable-limit",
        &[
            ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
            ("CUGUARD_LIMIT", "7MiB"),
        ],
    );
    assert_eq!(said["temporary"], "0x0", "{said:?}");
    assert_eq!(said["reserved"], (4 * MIB).to_string());
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
    let card = &report["ooms"][0];
    assert_eq!(card["refused_by"], "limit");
    assert_eq!(card["api"], "cuMemCreate");
    assert_eq!(card["live_bytes"], 6 * MIB);
    let at = json_of(&dir, &["summary", "r.json", "--at", "oom"]);
    assert_eq!(at["devices"][0]["bytes"], 6 * MIB, "{at}");
    let temporary = format!("torch_blocks.py:{}", line_of("# temporary"));
    let weights = format!("torch_blocks.py:{}", line_of("# weights"));
    let activations = format!("torch_blocks.py:{}", line_of("# activations"));
    assert_eq!(
        rows(&at),
        [
            row(&activations, 3 * MIB, 1),
            row(&temporary, 2 * MIB, 1),
            row(&weights, MIB, 1),
        ]
    );
}
