//! PyTorch's out-of-memory errors as cards (issue 53): a stand-in for PyTorch's caching
//! allocator (`harness/workloads/python/standin_torch/`: it splits cached segments, refuses under
//! its memory fraction or after the driver refused, calls its out-of-memory observers and raises
//! as PyTorch does) under `cuguard run`, whose Python bootstrap registers cuguard's observer
//! (`cuguard/_oom.py`). The card holds the cache's idle bytes, pieces, largest piece and the
//! lines of the tensors that pin them, and the verdict says what would have fitted.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{artifacts, run, scratch_dir};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The line of `torch_oom.py` that ends with `marker`.
fn line_of(marker: &str) -> u64 {
    let py = std::fs::read_to_string(
        artifacts()
            .root
            .join("harness/workloads/python/torch_oom.py"),
    )
    .unwrap();
    py.lines().position(|l| l.ends_with(marker)).expect(marker) as u64 + 1
}

/// `cuguard run --driver sim -- python3 torch_oom.py ARGS` with `env`, in a directory of its
/// own: the directory, what the program printed (JSON) and the report.
fn torch_oom(name: &str, args: &[&str], env: &[(&str, &str)]) -> (PathBuf, Value, Value) {
    let (dir, said, report, _) = torch_oom_said(name, args, env);
    (dir, said, report)
}

/// `cuguard run --driver sim --quiet --report r.json -- python3 SCRIPT ARGS` in `dir`, with
/// `env`: SCRIPT is one of `harness/workloads/python/`, which must succeed.
pub(crate) fn run_workload(
    dir: &Path,
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let a = artifacts();
    run(
        Command::new(&a.cuguard)
            .current_dir(dir)
            .env("CUGUARD_RUNTIME_DIR", a.scratch.join("runtime"))
            .env("PYTHONPATH", a.root.join("src/python"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .envs(env.iter().copied())
            .args([
                "run", "--driver", "sim", "--quiet", "--report", "r.json", "--",
            ])
            .arg("python3")
            .arg(a.root.join("harness/workloads/python").join(script))
            .args(args),
        true,
    )
}

/// `summary --at oom` in `dir` opens on PyTorch's card of its 3 GiB request (not on a
/// refusal inside PyTorch's allocator, which that card explains).
fn at_oom_is_pytorch_s_card(dir: &PathBuf) {
    let at = summary(dir, &["--at", "oom", "r.json"]);
    assert!(
        at.lines()
            .nth(2)
            .unwrap()
            .starts_with("  CUDACachingAllocator::malloc asking 3.0 GiB"),
        "{at}"
    );
}

/// Each record's refuser and what it refused within (`refused_by`, `within`), in order.
fn refusers(ooms: &[Value]) -> Vec<(&str, Option<&str>)> {
    ooms.iter()
        .map(|o| (o["refused_by"].as_str().unwrap(), o["within"].as_str()))
        .collect()
}

/// [`torch_oom`], with what was said on stderr.
fn torch_oom_said(
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (PathBuf, Value, Value, String) {
    let dir = scratch_dir(name);
    let out = run_workload(&dir, "torch_oom.py", args, env);
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).unwrap()).unwrap();
    (dir, said, report, String::from_utf8(out.stderr).unwrap())
}

/// `cuguard summary ARGS` in `dir`: its standard output.
fn summary(dir: &PathBuf, args: &[&str]) -> String {
    let out = run(
        Command::new(&artifacts().cuguard)
            .current_dir(dir)
            .arg("summary")
            .args(args),
        true,
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The cache of the fraction's run: seven 1 GiB segments, each cut into ten 100 MiB tensors
/// and a 24 MiB tail, every other tensor freed: 35 pieces of 100 MiB and 7 tails idle.
fn seven_segments_idle() -> Value {
    json!({
        "holder": "pytorch_cache",
        "name": "PyTorch's caching allocator",
        "reserved_bytes": 7 * GIB,
        "idle_bytes": 35 * 100 * MIB + 7 * 24 * MIB,
        "largest_free_bytes": 100 * MIB,
        "pieces": 42,
        // Five whole 20 MiB pages in each piece, one in each tail.
        "expandable_bytes": 35 * 100 * MIB + 7 * 20 * MIB,
        "pinning": [{
            "site": format!("<listcomp> (torch_oom.py:{})", line_of("# pinning")),
            "location": format!("torch_oom.py:{}", line_of("# pinning")),
            "bytes": 35 * 100 * MIB,
            "blocks": 35,
        }],
    })
}

#[test]
fn pytorch_s_refusal_under_its_fraction_is_a_card_with_its_idle_pieces_and_their_pinning_line() {
    let (dir, said, report) = torch_oom("torch-oom-fraction", &["fraction"], &[]);
    assert_eq!(said["result"], "refused", "{said}");
    let ooms = report["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 1, "{ooms:?}");
    let card = &ooms[0];
    assert_eq!(card["api"], "CUDACachingAllocator::malloc");
    assert_eq!(card["refused_by"], "pytorch");
    assert_eq!(card["size"], 2560 * MIB);
    // The simulated device's 16 GiB, less PyTorch's seven segments.
    assert_eq!(card["device_free_bytes"], 9 * GIB);
    assert_eq!(card["device_total_bytes"], 16 * GIB);
    assert_eq!(
        card["limit"],
        json!({"limit_bytes": 8 * GIB, "held_bytes": 7 * GIB})
    );
    assert_eq!(
        card["message"],
        "PyTorch had reserved 7.0 GiB, 3.4 GiB of it allocated; its memory fraction allows 8.0 GiB"
    );
    assert_eq!(card["idle"], json!([seven_segments_idle()]));
    assert_eq!(card["verdict"]["action"], "expandable_segments");
    assert_eq!(card["verdict"]["fits"], true);
    assert!(card.get("within").is_none());

    let ask = line_of("# asks");
    let pin = line_of("# pinning");
    let text = summary(&dir, &["--at", "oom", "r.json"]);
    let lines: Vec<&str> = text.lines().skip(2).take(8).collect();
    assert_eq!(
        lines,
        [
            format!("  CUDACachingAllocator::malloc asking 2.5 GiB on device 0 at {}: <module> (torch_oom.py:{ask})", moment(card)).as_str(),
            "    verdict: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True fits: PyTorch's cache held 3.6 GiB idle in 42 pieces between live tensors, the largest 100.0 MiB, each too small; 3.6 GiB of it in whole 20 MiB pages, which expandable segments give back and map to the request",
            "    refused by PyTorch's caching allocator: device 0 had 9.0 GiB free of 16.0 GiB; 3.4 GiB live",
            "    PyTorch had reserved 7.0 GiB, 3.4 GiB of it allocated; its memory fraction allows 8.0 GiB",
            "    every byte then: 16.0 GiB = 3.4 GiB live + 3.6 GiB idle + 9.0 GiB free + 0 B else (CUDA's own memory, other processes)",
            "    idle: PyTorch's caching allocator holds 3.6 GiB idle of 7.0 GiB reserved in 42 pieces, largest free piece 100.0 MiB (fragmentation 98%)",
            format!("      pinned by 35 blocks (3.4 GiB) live between its pieces: 35 blocks (3.4 GiB) at <listcomp> (torch_oom.py:{pin})").as_str(),
            "    live by owner: the program 7.0 GiB",
        ],
        "{text}"
    );
}

/// A card's moment as the summary prints it.
fn moment(card: &Value) -> String {
    format!("{} ms", card["time_ms"].as_u64().unwrap())
}

#[test]
fn against_the_whole_device_the_driver_s_refusals_inside_pytorch_point_at_its_card() {
    // 12 GiB: ten 1 GiB segments (the driver keeps 2 GiB), then 3 GiB asked.
    let (dir, said, report, stderr) = torch_oom_said(
        "torch-oom-device",
        &["device"],
        &[("CUGUARD_SIM_MEMORY", "12GiB")],
    );
    // The one line at the first refusal waits for PyTorch's card (its observer registered),
    // rather than saying the driver's refusal inside PyTorch's allocator.
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cuguard: out of memory"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("asking 3.0 GiB (CUDACachingAllocator::malloc)")
            && lines[0].contains("; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True fits"),
        "{stderr}"
    );
    assert_eq!(said["result"], "refused", "{said}");
    let ooms = report["ooms"].as_array().unwrap();
    let by = refusers(ooms);
    // PyTorch asked the driver, gave back its unused segments (none), asked again, then refused.
    assert_eq!(
        by,
        [
            ("driver", Some("pytorch")),
            ("driver", Some("pytorch")),
            ("pytorch", None)
        ]
    );
    let card = &ooms[2];
    assert_eq!(card["device_free_bytes"], 2 * GIB);
    assert!(card.get("limit").is_none(), "{card}");
    assert_eq!(
        card["idle"][0]["idle_bytes"],
        50 * 100 * MIB + 10 * 24 * MIB
    );
    assert_eq!(card["idle"][0]["pieces"], 60);
    assert_eq!(card["verdict"]["action"], "expandable_segments");
    // The summary says so where the driver's records are, and `--at oom` is PyTorch's card.
    let text = summary(&dir, &["r.json"]);
    assert_eq!(
        text.matches("    refused by the driver inside PyTorch's caching allocator, which then refused the request itself: its card follows").count(),
        2,
        "{text}"
    );
    // The view likewise, and the markdown.
    run(
        Command::new(&artifacts().cuguard)
            .current_dir(&dir)
            .args(["view", "r.json", "-o", "v.html"]),
        true,
    );
    let page = std::fs::read_to_string(dir.join("v.html")).unwrap();
    assert_eq!(
        page.matches("Refused by the driver inside PyTorch&#39;s caching allocator, which then refused the request itself: its card follows.").count(),
        2
    );
    let markdown = summary(&dir, &["--format", "markdown", "r.json"]);
    assert_eq!(
        markdown.matches(" — refused by the driver inside PyTorch's caching allocator, which then refused the request itself: its card follows").count(),
        2,
        "{markdown}"
    );
    at_oom_is_pytorch_s_card(&dir);
}

#[test]
fn pytorch_s_pieces_too_small_for_the_request_call_for_a_larger_fraction_where_the_device_has_room()
{
    // 6 GiB asked under the 8 GiB fraction: the cache's whole pages (3.6 GiB) and the fraction's
    // 1 GiB left are too little; the device's 9 GiB free are enough.
    let (_dir, said, report) = torch_oom("torch-oom-larger", &["fraction", "6GiB"], &[]);
    assert_eq!(said["result"], "refused", "{said}");
    let card = &report["ooms"][0];
    assert_eq!(card["size"], 6 * GIB);
    assert_eq!(
        card["verdict"],
        json!({
            "action": "raise_limit",
            "fits": true,
            "text": "raising PyTorch's memory fraction (torch.cuda.set_per_process_memory_fraction) to 13.0 GiB fits: the device had 9.0 GiB free",
        })
    );
}

#[test]
fn where_cuguard_records_pytorch_s_blocks_the_pinning_and_end_lines_come_from_its_record_and_pytorch_s_history_stays_off()
 {
    // The stand-in reports each block through the C stand-in of libc10_cuda.so, as PyTorch's
    // allocator does: the shim's hook records them, the package asks it (cuguard_cache_blocks)
    // and leaves PyTorch's memory history off (the stand-in's snapshot then has no frames).
    let built = scratch_dir("torch-oom-recorded-build");
    let (cuda, _c10) = crate::torch_blocks::stand_ins(&built, &[]);
    let cuda = cuda.to_str().unwrap().to_string();
    let (dir, said, report) = torch_oom(
        "torch-oom-recorded",
        &["fraction"],
        &[("STANDIN_C10_CUDA", cuda.as_str())],
    );
    assert_eq!(said["result"], "refused", "{said}");
    let ooms = report["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 1, "{ooms:?}");
    // The same card, its pinning line from cuguard's record.
    assert_eq!(ooms[0]["idle"], json!([seven_segments_idle()]));
    let pin = line_of("# pinning");
    let text = summary(&dir, &["--at", "oom", "r.json"]);
    assert!(
        text.contains(&format!(
            "      pinned by 35 blocks (3.4 GiB) live between its pieces: 35 blocks (3.4 GiB) at <listcomp> (torch_oom.py:{pin})"
        )),
        "{text}"
    );
    // At the end: the cache's live blocks (the 35 kept tensors) by their line, told by cuguard.
    let caches = report["python"]["view"]["caches"].as_array().unwrap();
    assert_eq!(caches.len(), 1, "{caches:?}");
    assert_eq!(caches[0]["framework"], "pytorch");
    assert_eq!(caches[0]["source"], "cuguard", "{:?}", caches[0]);
    assert_eq!(caches[0]["live_bytes"], 35 * 100 * MIB);
    assert!(caches[0].get("note").is_none(), "{:?}", caches[0]);
    let blocks: Vec<&Value> = report["python"]["view"]["allocations"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["blocks"].as_array().into_iter().flatten())
        .filter(|b| b["state"] == "live")
        .collect();
    assert_eq!(blocks.len(), 35);
    for b in blocks {
        // The stack's Python frames, innermost first, as PyTorch's own history gives them: the
        // allocator's (the stand-in's) first, then the program's line.
        let program = b["frames"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| !f["file"].as_str().unwrap().contains("standin_torch"))
            .unwrap();
        assert!(
            program["file"].as_str().unwrap().ends_with("torch_oom.py"),
            "{b}"
        );
        assert_eq!(program["line"], pin, "{b}");
    }
    let end = summary(&dir, &["r.json"]);
    assert!(
        end.contains("by its block states, lines from cuguard's record of its blocks"),
        "{end}"
    );
}

#[test]
fn pinning_tensors_made_through_the_program_s_helper_are_charged_to_its_callers() {
    // As the command charges a site (src/call_path.rs): the blocks of the helper's line came
    // from two callers, so each is charged to its caller, "via" the helper.
    let built = scratch_dir("torch-oom-helper-build");
    let (cuda, _c10) = crate::torch_blocks::stand_ins(&built, &[]);
    let cuda = cuda.to_str().unwrap().to_string();
    let (dir, said, report) = torch_oom(
        "torch-oom-helper",
        &["fraction"],
        &[
            ("STANDIN_C10_CUDA", cuda.as_str()),
            ("TORCH_OOM_HELPER", "1"),
        ],
    );
    assert_eq!(said["result"], "refused", "{said}");
    let (first, second, helper) = (
        line_of("# first caller"),
        line_of("# second caller"),
        line_of("# the helper"),
    );
    let card = &report["ooms"][0];
    assert_eq!(
        card["idle"][0]["pinning"],
        json!([
            {
                "site": format!("<module> (torch_oom.py:{first}) via make (torch_oom.py:{helper})"),
                "location": format!("torch_oom.py:{first}"),
                "bytes": 18 * 100 * MIB,
                "blocks": 18,
            },
            {
                "site": format!("<module> (torch_oom.py:{second}) via make (torch_oom.py:{helper})"),
                "location": format!("torch_oom.py:{second}"),
                "bytes": 17 * 100 * MIB,
                "blocks": 17,
            },
        ])
    );
    let text = summary(&dir, &["--at", "oom", "r.json"]);
    assert!(
        text.contains(&format!(
            "pinned by 35 blocks (3.4 GiB) live between its pieces: 18 blocks (1.8 GiB) at <module> (torch_oom.py:{first}) via make (torch_oom.py:{helper})"
        )),
        "{text}"
    );
    // At the end, the cache's live blocks by the same rule.
    let end = summary(&dir, &["r.json"]);
    let rows: Vec<&str> = end
        .lines()
        .skip_while(|l| !l.starts_with("inside the caches"))
        .skip(2)
        .take(4)
        .collect();
    assert_eq!(
        rows,
        [
            format!(
                "    1.8 GiB  18 blocks  <module> (torch_oom.py:{first}) via make (torch_oom.py:{helper})  no Python holder found"
            ),
            format!("      make (torch_oom.py:{helper}) ← <module> (torch_oom.py:{first})"),
            format!(
                "    1.7 GiB  17 blocks  <module> (torch_oom.py:{second}) via make (torch_oom.py:{helper})  no Python holder found"
            ),
            format!("      make (torch_oom.py:{helper}) ← <module> (torch_oom.py:{second})"),
        ],
        "{end}"
    );
}

#[test]
fn under_cuguard_limit_the_limit_s_refusals_inside_pytorch_point_at_its_card() {
    // The device has room; CUGUARD_LIMIT (12 GiB) refuses PyTorch's segment instead.
    let (dir, said, report, stderr) = torch_oom_said(
        "torch-oom-limit",
        &["device"],
        &[("CUGUARD_LIMIT", "12GiB")],
    );
    assert_eq!(said["result"], "refused", "{said}");
    let ooms = report["ooms"].as_array().unwrap();
    let by = refusers(ooms);
    assert_eq!(
        by,
        [
            ("limit", Some("pytorch")),
            ("limit", Some("pytorch")),
            ("pytorch", None)
        ],
        "{stderr}"
    );
    // Each card says where its time went, the parts within the whole.
    for o in ooms {
        let parts = &o["card_parts"];
        let sum: u64 = [
            "device_ns",
            "nvml_ns",
            "live_ns",
            "holders_ns",
            "verdict_ns",
        ]
        .iter()
        .map(|k| parts[k].as_u64().unwrap())
        .sum();
        assert!(sum <= o["card_ns"].as_u64().unwrap(), "{o}");
    }
    let text = summary(&dir, &["r.json"]);
    assert_eq!(
        text.matches("    refused by CUGUARD_LIMIT inside PyTorch's caching allocator, which then refused the request itself: its card follows").count(),
        2,
        "{text}"
    );
    at_oom_is_pytorch_s_card(&dir);
}
