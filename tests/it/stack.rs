//! Call stacks end to end: a C program that keeps one block allocated from a static function
//! and one from a thread's start routine, run under the shim on the simulated driver. Each
//! leak's stack must start at the call in the function that made it (the shim's own frames
//! skipped), then reach its caller. The program prints the code ranges to expect.

use std::path::Path;

use serde_json::Value;

use crate::support::{c_program, leak_stack, read_report, run, scratch_dir, shim_command};

fn hex(v: &str) -> u64 {
    u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()
}

/// The frames of the stack of the leak at `address`.
fn leak_frames<'a>(report: &'a Value, address: &str) -> &'a Vec<Value> {
    leak_stack(report, address)["frames"].as_array().unwrap()
}

fn same_file(a: &str, b: &Path) -> bool {
    std::fs::canonicalize(a).ok() == std::fs::canonicalize(b).ok()
}

fn assert_in(frame: &Value, program: &Path, range: (u64, u64), what: &str) {
    let module = frame["module"].as_str().unwrap_or("");
    assert!(
        same_file(module, program),
        "{what}: module {module}, frame {frame}"
    );
    let offset = hex(frame["offset"].as_str().unwrap());
    assert!(
        range.0 <= offset && offset < range.1,
        "{what}: offset {offset:#x} not in [{:#x}, {:#x}): {frame}",
        range.0,
        range.1
    );
}

#[test]
fn leaks_point_at_the_static_function_and_the_thread_start_routine() {
    let program = c_program("stack_sites");
    let dir = scratch_dir("stack_sites");
    let report_path = dir.join("report.json");
    let out = run(&mut shim_command(&program, &report_path), true);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let report = read_report(&report_path);
    let mut seen = 0;
    for line in stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let frames = leak_frames(&report, w[1]);
        match w[0] {
            "static" => {
                assert_in(&frames[0], &program, (hex(w[2]), hex(w[3])), "static_site");
                assert_in(&frames[1], &program, (hex(w[4]), hex(w[5])), "main");
            }
            "thread" => {
                assert_in(&frames[0], &program, (hex(w[2]), hex(w[3])), "thread_start");
                let caller = frames[1]["module"].as_str().unwrap_or("");
                assert!(
                    caller.contains("libc.so"),
                    "thread_start's caller: {}",
                    frames[1]
                );
            }
            other => panic!("unexpected line {other}"),
        }
        seen += 1;
    }
    assert_eq!(seen, 2, "{stdout}");
    // The report lists the program among its modules, with its build-id.
    let modules = report["modules"].as_array().unwrap();
    assert!(
        modules
            .iter()
            .any(|m| same_file(m["path"].as_str().unwrap(), &program) && m["build_id"].is_string()),
        "{modules:?}"
    );
}
