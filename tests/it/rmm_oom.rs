//! RMM's refusals as cards (issue 53): a stand-in for RMM 26.10's pool
//! (`harness/workloads/c/rmm_stand_in.cc`: its exception types, its growth and its messages
//! word for word) under the shim on a simulated device of 1 GiB. The shim sees
//! `rmm::out_of_memory` thrown (its `__cxa_throw`), makes RMM's card from the pool's message,
//! and hands the throw on: the program catches it as before.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::{
    artifacts, cxx_library, cxx_program, read_report, run, scratch_dir, shim_command,
};

const MIB: u64 = 1 << 20;

/// The line of the stand-in that ends with `marker`.
fn line_of(marker: &str) -> usize {
    std::fs::read_to_string(artifacts().root.join("harness/workloads/c/rmm_stand_in.cc"))
        .unwrap()
        .lines()
        .position(|l| l.ends_with(marker))
        .expect(marker)
        + 1
}

/// The stand-in run with `case` under the shim on a 1 GiB device, with `env`: its output,
/// which must be a success, the report and the directory.
fn rmm(name: &str, case: &str, env: &[(&str, &str)]) -> (Output, Value, PathBuf) {
    let dir = scratch_dir(name);
    let exe = cxx_program("rmm_stand_in");
    let report = dir.join("r.json");
    let mut cmd = shim_command(&exe, &report);
    cmd.arg(case)
        .current_dir(&dir)
        .env("CUGUARD_SIM_MEMORY", "1GiB");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd, true);
    (out, read_report(&report), dir)
}

fn stdout(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// What the stand-in says the pool said, after the path of its source: RMM's words.
fn said_after_the_file(line: &str) -> &str {
    line.split_once(".cc:")
        .and_then(|(_, rest)| rest.split_once(": "))
        .map_or(line, |(_, words)| words)
}

/// The program's stderr, and its lines that are the shim's line at a refusal.
fn refusal_lines(out: &Output) -> (String, Vec<String>) {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines = stderr
        .lines()
        .filter(|l| l.starts_with("cuguard: out of memory"))
        .map(str::to_string)
        .collect();
    (stderr, lines)
}

fn summary(dir: &Path) -> String {
    let out = run(
        Command::new(&artifacts().cuguard)
            .current_dir(dir)
            .args(["summary", "r.json"]),
        true,
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn rmm_s_pool_past_its_maximum_is_a_card_whose_verdict_raises_the_maximum() {
    let (out, report, dir) = rmm("rmm-oom-limit", "limit", &[]);
    let said = stdout(&out);
    // The throw went on to the program, which caught it: as without the shim.
    assert_eq!(said[0], format!("pool {}", 208 * MIB));
    assert_eq!(
        said_after_the_file(&said[1]),
        "Maximum pool size exceeded (failed to allocate 160.000000 MiB): Not enough room to grow, current/max/try size = 208.000000 MiB, 256.000000 MiB, 160.000000 MiB"
    );
    assert!(said[1].starts_with("refused: std::bad_alloc: out_of_memory: RMM failure at:"));
    let ooms = report["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 1, "{ooms:?}");
    let card = &ooms[0];
    assert_eq!(card["api"], "rmm::mr::pool_memory_resource::allocate");
    assert_eq!(card["refused_by"], "rmm");
    assert_eq!(card["size"], 160 * MIB);
    assert_eq!(card["device"], 0);
    assert_eq!(card["message"], said[1].strip_prefix("refused: ").unwrap());
    // The pool's figures, from its message.
    assert_eq!(
        card["limit"],
        json!({"limit_bytes": 256 * MIB, "held_bytes": 208 * MIB})
    );
    // The device: 1 GiB less the pool's 208 MiB.
    assert_eq!(card["device_free_bytes"], 816 * MIB);
    assert_eq!(card["live_bytes"], 208 * MIB);
    assert!(card.get("within").is_none(), "{card}");
    assert!(card.get("idle").is_none(), "{card}");
    // RMM grows by what is asked when it is more than half its room: with a maximum of 208 +
    // 160 MiB it would have taken the 160 MiB from the device, which had them.
    assert_eq!(
        card["verdict"],
        json!({
            "action": "raise_limit",
            "fits": true,
            "text": "raising RMM's maximum pool size (maximum_pool_size) to 368.0 MiB fits: the device had 816.0 MiB free",
        })
    );
    // Asked at the program's line, not inside the pool.
    let asks = line_of("// asks");
    let (stderr, lines) = refusal_lines(&out);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with(&format!(
            "cuguard: out of memory at ask(rmm::pool_memory_resource&, unsigned long) (rmm_stand_in.cc:{asks}) ← main (rmm_stand_in.cc:"
        )) && lines[0].contains(" asking 160.0 MiB (rmm::mr::pool_memory_resource::allocate); 208.0 MiB live, ")
            && lines[0].ends_with("; raising RMM's maximum pool size (maximum_pool_size) to 368.0 MiB fits: the device had 816.0 MiB free"),
        "{stderr}"
    );
    // The summary says that RMM does not tell what of its pool is free.
    let text = summary(&dir);
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("    verdict: "))
        .take(7)
        .collect();
    assert_eq!(
        lines,
        [
            "    verdict: raising RMM's maximum pool size (maximum_pool_size) to 368.0 MiB fits: the device had 816.0 MiB free",
            "    refused by RMM's pool: device 0 had 816.0 MiB free of 1.0 GiB; 208.0 MiB live",
            &format!("    {}", card["message"].as_str().unwrap()),
            "    every byte then: 1.0 GiB = 208.0 MiB live + 0 B idle + 816.0 MiB free + 0 B else (CUDA's own memory, other processes)",
            "    idle: RMM's pool held 208.0 MiB of its 256.0 MiB maximum; what of it was free, RMM does not tell",
            "    live by owner: RMM's pool memory resource 208.0 MiB",
            "    pool: 208.0 MiB reserved, 0 B free, largest free block 0 B",
        ],
        "{text}"
    );
}

#[test]
fn the_device_refusing_rmm_s_growth_is_a_driver_refusal_inside_rmm_s_card() {
    let (out, report, _) = rmm("rmm-oom-device", "device", &[]);
    let said = stdout(&out);
    assert_eq!(said[0], format!("pool {}", 512 * MIB));
    assert_eq!(
        said_after_the_file(&said[1]),
        "Maximum pool size exceeded (failed to allocate 768.000000 MiB): std::bad_alloc: out_of_memory: CUDA error (failed to allocate 805306368 bytes) at: rmm_stand_in.cc: cudaErrorMemoryAllocation out of memory"
    );
    let ooms = report["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 2, "{ooms:?}");
    // The pool's one try at the device (768 MiB, its request being more than its size), refused,
    // then the pool's own refusal.
    assert_eq!(ooms[0]["api"], "cuMemAlloc_v2");
    assert_eq!(ooms[0]["refused_by"], "driver");
    assert_eq!(ooms[0]["within"], "rmm");
    assert_eq!(ooms[0]["size"], 768 * MIB);
    let card = &ooms[1];
    assert_eq!(card["refused_by"], "rmm");
    assert_eq!(card["size"], 768 * MIB);
    assert!(card.get("limit").is_none(), "{card}");
    assert_eq!(card["device_free_bytes"], 512 * MIB);
    assert_eq!(
        card["seq"].as_u64(),
        ooms[0]["seq"].as_u64().map(|s| s + 1),
        "{ooms:?}"
    );
    assert_eq!(
        card["verdict"],
        json!({
            "action": "nothing",
            "fits": false,
            "text": "nothing cuguard can see would: 768.0 MiB asked, 512.0 MiB left and 0 B idle, 256.0 MiB short; 512.0 MiB is live; RMM's pool does not tell its free blocks: part of what is live may be free inside it",
        })
    );
}

#[test]
fn rmm_s_arena_and_limiting_adaptor_refusals_are_cards_of_their_own() {
    // The limiting adaptor tells the request only: with the device's room, raising its limit
    // by the request fits (it refuses where what it handed out and the request pass it).
    let (out, report, dir) = rmm("rmm-oom-limiting", "limiting", &[]);
    assert_eq!(
        said_after_the_file(&stdout(&out)[0]),
        "Exceeded memory limit (failed to allocate 64.000000 MiB)"
    );
    let ooms = report["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 1, "{ooms:?}");
    let card = &ooms[0];
    assert_eq!(card["refused_by"], "rmm_limiting");
    assert_eq!(card["api"], "rmm::mr::limiting_resource_adaptor::allocate");
    assert_eq!(card["size"], 64 * MIB);
    assert_eq!(card["device_free_bytes"], 928 * MIB);
    assert_eq!(
        card["verdict"],
        json!({
            "action": "raise_limit",
            "fits": true,
            "text": "raising the limiting adaptor's allocation_limit by the 64.0 MiB asked fits: the device had 928.0 MiB free",
        })
    );
    // Asked at the program's line, and the line at the refusal says the adaptor's verdict.
    let asks = line_of("// other asks");
    let (stderr, lines) = refusal_lines(&out);
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains(&format!("(rmm_stand_in.cc:{asks}) ← main (rmm_stand_in.cc:"))
            && lines[0].contains(" asking 64.0 MiB (rmm::mr::limiting_resource_adaptor::allocate); ")
            && lines[0].ends_with("; raising the limiting adaptor's allocation_limit by the 64.0 MiB asked fits: the device had 928.0 MiB free"),
        "{stderr}"
    );
    // The adaptor holds nothing of its own: no idle line.
    let text = summary(&dir);
    assert!(
        text.contains("    refused by RMM's limiting adaptor: device 0 had 928.0 MiB free of 1.0 GiB; 96.0 MiB live\n")
            && !text.contains("    idle: "),
        "{text}"
    );

    // The arena tells neither its size nor its free blocks: the verdict is unknown.
    let (out, report, dir) = rmm("rmm-oom-arena", "arena", &[]);
    assert_eq!(
        said_after_the_file(&stdout(&out)[1]),
        "Maximum pool size exceeded (failed to allocate 64.000000 MiB): No room in arena."
    );
    let ooms = report["ooms"].as_array().unwrap();
    assert_eq!(ooms.len(), 1, "{ooms:?}");
    let card = &ooms[0];
    assert_eq!(card["refused_by"], "rmm_arena");
    assert_eq!(card["api"], "rmm::mr::arena_memory_resource::allocate");
    assert_eq!(card["device_free_bytes"], 896 * MIB);
    assert_eq!(
        card["verdict"],
        json!({
            "action": "unknown",
            "fits": false,
            "text": "unknown: the device had 896.0 MiB free, enough for the 64.0 MiB asked; RMM's arena refused within the arena's size (arena_size), which it does not tell, nor its free blocks",
        })
    );
    let text = summary(&dir);
    assert!(
        text.contains("\n    idle: what of RMM's arena was free, RMM does not tell\n"),
        "{text}"
    );
}

#[test]
fn with_cuguard_rmm_oom_off_the_throw_goes_on_and_no_card_is_made() {
    let (out, report, _) = rmm("rmm-oom-off", "limit", &[("CUGUARD_RMM_OOM", "0")]);
    let said = stdout(&out);
    assert!(said[1].starts_with("refused: std::bad_alloc: out_of_memory: "));
    assert!(report.get("ooms").is_none(), "{}", report["ooms"]);
}

#[test]
fn other_throws_go_on_to_the_runtime_of_a_library_loaded_in_a_scope_of_its_own() {
    // Python loads a library with ctypes in a scope of its own, its C++ runtime with it; the
    // shim's __cxa_throw, found first, hands each throw on to that runtime, whatever the type.
    let dir = scratch_dir("rmm-oom-other-throws");
    let lib = cxx_library("throws");
    let mut cmd = shim_command(Path::new("python3"), &dir.join("r.json"));
    cmd.arg("-c")
        .arg("import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); print(l.throws_caught(), l.throws_caught())")
        .arg(&lib);
    let out = run(&mut cmd, true);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "3 3\n");
}
