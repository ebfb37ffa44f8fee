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

/// Compiles `harness/workloads/c/late_lib.c` as a shared library built without frame pointers
/// (`-O1 -fomit-frame-pointer`, linked with `-lcuda` against the simulated driver).
fn late_library(dir: &Path) -> std::path::PathBuf {
    let a = crate::support::artifacts();
    let lib = dir.join("liblate.so");
    let status = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-O1",
            "-fomit-frame-pointer",
            "-g",
            "-shared",
            "-fPIC",
            "-Wall",
            "-o",
        ])
        .arg(&lib)
        .arg(a.root.join("harness/workloads/c/late_lib.c"))
        .arg("-I")
        .arg(a.root.join("harness/workloads/c"))
        .arg("-L")
        .arg(&a.sim_dir)
        .arg("-lcuda")
        .status()
        .expect("running cc");
    assert!(status.success(), "compiling late_lib.c failed");
    lib
}

/// The line of `text` (1-based) that ends with `marker`.
fn line_of(text: &str, marker: &str) -> u64 {
    text.lines()
        .position(|l| l.ends_with(marker))
        .unwrap_or_else(|| panic!("no {marker:?}")) as u64
        + 1
}

#[test]
fn a_library_loaded_after_cuda_started_unwinds_through_all_its_frames() {
    let a = crate::support::artifacts();
    let dir = scratch_dir("late_lib");
    let lib = late_library(&dir);
    let script = a.root.join("harness/workloads/python/late_lib.py");
    let py = std::fs::read_to_string(&script).unwrap();
    let c = std::fs::read_to_string(a.root.join("harness/workloads/c/late_lib.c")).unwrap();
    let report_path = dir.join("report.json");
    let mut cmd = shim_command(Path::new("python3"), &report_path);
    cmd.arg(&script).arg(&lib);
    let out = run(&mut cmd, true);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let late = stdout
        .lines()
        .find_map(|l| l.strip_prefix("late "))
        .expect("the late block's address");
    let report = read_report(&report_path);
    crate::cli_schema::validate(&report).unwrap();
    let stack = leak_stack(&report, late);

    // Every frame of the library, innermost first, named with its line: the call each makes.
    let calls = [
        ("late_0", "int r = cuMemAlloc(out, bytes);"),
        ("late_1", "int r = late_0(out, bytes + 0);"),
        ("late_2", "int r = late_1(out, bytes);"),
        ("late_3", "int r = late_2(out, bytes);"),
        ("late_entry", "int r = late_3(out, bytes);"),
    ];
    let frames = stack["frames"].as_array().unwrap();
    let in_lib: Vec<(String, String, u64)> = frames
        .iter()
        .filter(|f| same_file(f["module"].as_str().unwrap_or(""), &lib))
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("?").to_string(),
                f["file"]
                    .as_str()
                    .unwrap_or("?")
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_string(),
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let want: Vec<(String, String, u64)> = calls
        .iter()
        .map(|(f, call)| (f.to_string(), "late_lib.c".to_string(), line_of(&c, call)))
        .collect();
    assert_eq!(in_lib, want, "{stack}");
    assert_eq!(
        frames[0]["function"], "late_0",
        "the shim's own frames are skipped"
    );
    // The library's frames come one after another, and the stack goes on past them.
    let first = frames
        .iter()
        .position(|f| f["function"] == "late_0")
        .unwrap();
    assert_eq!(frames[first + 4]["function"], "late_entry");
    assert!(
        frames.len() > first + 5,
        "the stack goes on past the library: {stack}"
    );
    // No frame in no module: nothing was guessed.
    assert!(
        frames
            .iter()
            .all(|f| !f["module"].as_str().unwrap_or("").is_empty()),
        "{stack}"
    );

    // The library is the user's own code: its innermost frame is the site, and the one-line
    // stack runs from there through the library to the Python caller.
    let file = script.to_str().unwrap();
    let site_line = line_of(&py, "# site: load_weights");
    assert_eq!(stack["python"][0]["line"], site_line);
    assert_eq!(stack["python"][0]["function"], "load_weights");
    assert_eq!(stack["python"][0]["file"], file);
    assert_eq!(
        (&stack["site"]["in"], &stack["site"]["index"]),
        (&Value::from("frames"), &Value::from(0))
    );
    let summary = run(
        std::process::Command::new(&a.cuguard)
            .args(["summary", "--format", "json"])
            .arg(&report_path),
        true,
    );
    let summary: Value = serde_json::from_slice(&summary.stdout).unwrap();
    let site = summary["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| {
            s["site"]
                .as_str()
                .unwrap()
                .starts_with("late_0 (late_lib.c:")
        })
        .unwrap_or_else(|| panic!("no late_0 site: {summary}"));
    let chain: Vec<&str> = site["stack"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let mut expected: Vec<String> = want
        .iter()
        .map(|(f, file, line)| format!("{f} ({file}:{line})"))
        .collect();
    expected.push(format!("load_weights (late_lib.py:{site_line})"));
    expected.push(format!(
        "main (late_lib.py:{})",
        line_of(&py, "# call: load_weights")
    ));
    expected.push(format!(
        "<module> (late_lib.py:{})",
        py.lines().position(|l| l == "main()").unwrap() + 1
    ));
    assert_eq!(chain, expected);
    // And so it reads in the text summary, on the line under the site.
    let text = run(
        std::process::Command::new(&a.cuguard)
            .arg("summary")
            .arg(&report_path),
        true,
    );
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains(&expected.join(" ← ")), "{text}");
}

/// Compiles `harness/workloads/c/deep_lib.c` into `dir/libdeep.so` as users build their own
/// libraries (`-O1 -fomit-frame-pointer -g`, linked with `-lcuda` against the simulated driver).
fn deep_library(dir: &Path) {
    let a = crate::support::artifacts();
    let status = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args([
            "-O1",
            "-fomit-frame-pointer",
            "-g",
            "-shared",
            "-fPIC",
            "-Wall",
            "-o",
        ])
        .arg(dir.join("libdeep.so"))
        .arg(a.root.join("harness/workloads/c/deep_lib.c"))
        .arg("-I")
        .arg(a.root.join("harness/workloads/c"))
        .arg("-L")
        .arg(&a.sim_dir)
        .arg("-lcuda")
        .status()
        .expect("running cc");
    assert!(status.success(), "compiling deep_lib.c failed");
}

/// A Python program calls its own native library (loaded with `ctypes.CDLL("./libdeep.so")`
/// after CUDA started, no frame pointers), which allocates 11 calls deep. The site's one-line
/// stack keeps the library's innermost frame and the Python lines that called it, folding the
/// ten frames between, and so does the "held at the end" line's callers. The library's
/// relative name becomes its absolute path in the report, so its frames are named.
#[test]
fn a_deep_library_called_from_python_keeps_its_python_caller_on_one_line() {
    let a = crate::support::artifacts();
    let dir = scratch_dir("deep_lib");
    deep_library(&dir);
    let script = a.root.join("harness/workloads/python/deep_lib.py");
    std::fs::copy(&script, dir.join("deep_lib.py")).unwrap();
    let py = std::fs::read_to_string(&script).unwrap();
    let c = std::fs::read_to_string(a.root.join("harness/workloads/c/deep_lib.c")).unwrap();
    let mut cmd = std::process::Command::new(&a.cuguard);
    cmd.current_dir(&dir)
        .args([
            "run", "--driver", "sim", "--quiet", "--report", "r.json", "--",
        ])
        .args(["python3", "deep_lib.py"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("CUGUARD_RUNTIME_DIR", a.scratch.join("runtime"))
        .env_remove("PYTHONPATH")
        .env_remove("LD_PRELOAD");
    for (k, _) in std::env::vars() {
        if k.starts_with("CUGUARD_") && k != "CUGUARD_RUNTIME_DIR" {
            cmd.env_remove(k);
        }
    }
    run(&mut cmd, true);
    let report_path = dir.join("r.json");
    let report = read_report(&report_path);
    crate::cli_schema::validate(&report).unwrap();
    let lib = dir.join("libdeep.so");
    let lib = lib.to_str().unwrap();
    assert!(
        report["modules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["path"] == lib),
        "the library's path is absolute: {}",
        report["modules"]
    );

    let deep_0 = format!(
        "deep_0 (deep_lib.c:{})",
        line_of(&c, "int r = cuMemAlloc(out, bytes);")
    );
    let caller = format!(
        "load_weights (deep_lib.py:{})",
        line_of(&py, "# site: load_weights")
    );
    let module = format!(
        "<module> (deep_lib.py:{})",
        line_of(&py, "# call: load_weights")
    );
    let text = run(
        std::process::Command::new(&a.cuguard)
            .arg("summary")
            .arg(&report_path),
        true,
    );
    let text = String::from_utf8(text.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let after = |head: &str, n: usize| -> Vec<&str> {
        let at = lines
            .iter()
            .position(|l| l.starts_with(head))
            .unwrap_or_else(|| panic!("no {head:?} in {text}"));
        lines[at + 1..at + 1 + n].to_vec()
    };
    assert_eq!(
        after("sites (largest first)", 2),
        [
            format!("  1.0 MiB  1 leak  {deep_0}  cuMemAlloc_v2"),
            format!("    {deep_0} ← … 10 frames in libdeep.so ← {caller} ← {module}"),
        ],
        "{text}"
    );
    assert_eq!(
        after("held at the end", 2),
        [
            format!(
                "  1.0 MiB  1 allocation  weights (a number inside it: a weak match)  made at {deep_0}"
            ),
            format!("    {deep_0} ← … 10 frames in libdeep.so ← {caller}"),
        ],
        "{text}"
    );
    // The places that point at code: the library's source is outside the project's root here,
    // so the Python line that called it; with the root above both, the library's own line.
    let github = |root: &Path| {
        let out = run(
            std::process::Command::new(&a.cuguard)
                .args(["check", "--held", "--format", "github", "--source-root"])
                .arg(root)
                .arg(&report_path),
            false,
        );
        let out = String::from_utf8(out.stdout).unwrap();
        let line = out.lines().next().unwrap_or_default().to_string();
        line.split(",title=").next().unwrap().to_string()
    };
    assert_eq!(
        github(&dir),
        format!(
            "::error file=deep_lib.py,line={}",
            line_of(&py, "# site: load_weights")
        )
    );
    assert_eq!(
        github(&a.root),
        format!(
            "::error file=harness/workloads/c/deep_lib.c,line={}",
            line_of(&c, "int r = cuMemAlloc(out, bytes);")
        )
    );
}

/// The unwinder evaluates a return address's rule once in the process: a library loaded later
/// keeps the rules known before it (the caches are emptied only when a module may have been
/// unloaded), and a thread finds the rules another thread evaluated in the process-wide table.
/// Counted by each phase's snapshot (`cost.unwind`, exact); see `stack_rules.c`.
#[test]
fn rules_are_evaluated_once_across_a_late_library_and_threads() {
    let program = c_program("stack_rules");
    let dir = scratch_dir("stack_rules");
    let lib = late_library(&dir);
    let mut cmd = shim_command(&program, &dir.join("report.json"));
    cmd.arg(&lib).arg(&dir);
    let out = run(&mut cmd, true);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let unwind: Vec<Value> = (1..=5)
        .map(|phase| {
            let r = read_report(&dir.join(format!("{phase}.json")));
            r["cost"]["unwind"].clone()
        })
        .collect();
    let at = |phase: usize, k: &str| unwind[phase - 1][k].as_u64().unwrap();
    assert!(at(1, "evaluated") > 0, "{unwind:?}");
    assert!(
        at(2, "evaluated") > at(1, "evaluated"),
        "the late library's frames are new: {unwind:?}"
    );
    assert_eq!(
        at(3, "evaluated"),
        at(2, "evaluated"),
        "the module list read again for the late library keeps the rules known before: {unwind:?}"
    );
    assert!(at(3, "by_position") > at(2, "by_position"), "{unwind:?}");
    assert!(
        at(4, "evaluated") > at(3, "evaluated"),
        "thread A's start routine is new: {unwind:?}"
    );
    assert!(
        at(4, "shared") > at(3, "shared"),
        "thread A finds the main thread's rules of site()'s chain: {unwind:?}"
    );
    assert_eq!(
        at(5, "evaluated"),
        at(4, "evaluated"),
        "thread B evaluates nothing thread A did not: {unwind:?}"
    );
    assert!(at(5, "shared") > at(4, "shared"), "{unwind:?}");
    for phase in 1..=5 {
        let u = &unwind[phase - 1];
        let sum: u64 = ["by_position", "cached", "shared", "evaluated"]
            .iter()
            .map(|k| u[*k].as_u64().unwrap())
            .sum();
        assert!(sum <= at(phase, "frames"), "{u}");
    }
}
