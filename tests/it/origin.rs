//! Origins end to end: `cuguard._origin.install_torch` on a stand-in for PyTorch (a fake `torch`
//! module whose `autograd._engine_run_backward` runs a node that allocates on a native thread of
//! a C++ library, named as PyTorch's engine names its functions), under the shim on the simulated
//! driver. The allocation made inside the wrapped run names the Python line that started it; one
//! made by the same node outside a run does not.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{
    artifacts, leak_stack, read_report, run, scratch_dir, shim_command, sim_command,
};

/// Builds `harness/workloads/c/autograd_stand_in.cc` as a shared library.
fn stand_in(dir: &Path) -> PathBuf {
    let a = artifacts();
    let lib = dir.join("libautograd_stand_in.so");
    let status = Command::new(std::env::var("CXX").unwrap_or_else(|_| "c++".into()))
        .args(["-O0", "-g", "-shared", "-fPIC", "-Wall", "-o"])
        .arg(&lib)
        .arg(a.root.join("harness/workloads/c/autograd_stand_in.cc"))
        .arg("-I")
        .arg(a.root.join("harness/workloads/c"))
        .arg("-L")
        .arg(&a.sim_dir)
        .args(["-lcuda", "-lpthread"])
        .status()
        .expect("running c++");
    assert!(status.success(), "compiling autograd_stand_in.cc failed");
    lib
}

fn line_ending(text: &str, marker: &str) -> usize {
    text.lines()
        .position(|l| l.ends_with(marker))
        .unwrap_or_else(|| panic!("no {marker:?}"))
        + 1
}

fn python(cmd: &mut Command, script: &Path, lib: &Path) -> Vec<String> {
    let a = artifacts();
    cmd.arg(script)
        .arg(lib)
        .env("PYTHONPATH", a.root.join("src/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = run(cmd, true);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn autograd_thread_allocations_name_the_line_that_started_the_backward_pass() {
    let a = artifacts();
    let dir = scratch_dir("origin");
    let lib = stand_in(&dir);
    let script = a.root.join("harness/workloads/python/origin.py");
    let py = std::fs::read_to_string(&script).unwrap();
    let cc =
        std::fs::read_to_string(a.root.join("harness/workloads/c/autograd_stand_in.cc")).unwrap();
    let report_path = dir.join("report.json");
    let lines = python(
        &mut shim_command(Path::new("python3"), &report_path),
        &script,
        &lib,
    );
    assert_eq!(
        lines[..5],
        [
            "missing False",
            "installed True",
            "again True",
            "wrapped _engine_run_backward __main__",
            "raised ValueError",
        ]
    );
    let address = |what: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{what} ")))
            .unwrap_or_else(|| panic!("no {what}: {lines:?}"))
            .to_string()
    };
    assert_eq!(lines.last().unwrap(), "refused -1 -1", "CUGUARD_E_INVALID");
    let report = read_report(&report_path);
    crate::cli_schema::validate(&report).unwrap();

    // Inside the run: the node's stack names the origin, the stack of the thread that ran
    // backward(), whose site is that line (cuguard's own wrapper is not a site).
    let inside = leak_stack(&report, &address("backward"));
    assert!(
        inside.get("python").is_none(),
        "the engine's thread has no Python frames"
    );
    let origin_id = inside["origin"].as_u64().expect("an origin");
    let origin = report["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"].as_u64() == Some(origin_id))
        .expect("the origin's stack is in stacks[]");
    let origin_line = line_ending(&py, "# origin: backward");
    let pyframes = origin["python"].as_array().unwrap();
    assert!(
        pyframes[0]["file"]
            .as_str()
            .unwrap()
            .ends_with("cuguard/_origin.py"),
        "{origin}"
    );
    assert_eq!(pyframes[1]["function"], "backward");
    assert_eq!(pyframes[1]["line"], origin_line);
    assert_eq!(origin["site"]["in"], "python");
    assert_eq!(origin["site"]["index"], 1);
    assert!(
        origin.get("origin").is_none(),
        "an origin has no origin of its own"
    );
    // Outside a run: the same node, no origin.
    let outside = leak_stack(&report, &address("outside"));
    assert!(outside.get("origin").is_none(), "{outside}");

    // The command's labels.
    let node_line = line_ending(&cc, "return cuMemAlloc(t->out, t->bytes);");
    let node =
        format!("on the autograd thread: AddmmBackward0::apply (autograd_stand_in.cc:{node_line})");
    let summary = run(
        Command::new(&a.cuguard)
            .args(["summary", "--format", "json"])
            .arg(&report_path),
        true,
    );
    let summary: Value = serde_json::from_slice(&summary.stdout).unwrap();
    let mut labels: Vec<(String, u64)> = summary["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "operation")
        .map(|s| {
            (
                s["label"].as_str().unwrap().to_string(),
                s["leaked_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    labels.sort();
    assert_eq!(
        labels,
        [
            (node.clone(), 2 << 20),
            (
                format!("{node}, backward from origin.py:{origin_line}"),
                1 << 20
            ),
        ]
    );
    let text = run(
        Command::new(&a.cuguard).arg("summary").arg(&report_path),
        true,
    );
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains(&format!("{node}, backward from origin.py:{origin_line}")),
        "{text}"
    );

    // With Python frames read only under the GIL, the origin still has its Python line.
    let gil_report = dir.join("gil.json");
    let mut cmd = shim_command(Path::new("python3"), &gil_report);
    cmd.env("CUGUARD_PYTHON", "gil");
    python(&mut cmd, &script, &lib);
    let gil = run(
        Command::new(&a.cuguard)
            .args(["summary", "--format", "json"])
            .arg(&gil_report),
        true,
    );
    let gil: Value = serde_json::from_slice(&gil.stdout).unwrap();
    assert!(
        gil["sites"].as_array().unwrap().iter().any(
            |s| s["label"] == format!("{node}, backward from origin.py:{origin_line}").as_str()
        ),
        "{gil}"
    );

    // Without the shim nothing is installed and the program runs as before.
    let bare = python(&mut sim_command(Path::new("python3")), &script, &lib);
    assert_eq!(
        bare[..3],
        ["missing False", "installed False", "again False"]
    );
    assert_eq!(bare[3], "wrapped _engine_run_backward __main__");
    assert_eq!(bare.last().unwrap(), "refused - -");
}
