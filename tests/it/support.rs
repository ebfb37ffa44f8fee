//! What every integration test needs: the built artifacts (shim, simulated driver, workloads, the
//! `cuguard` command), C workloads compiled on demand, and a way to run a program under the shim
//! and read its report.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// Paths of everything the tests run.
pub struct Artifacts {
    /// The workspace root.
    pub root: PathBuf,
    /// `target/<profile>`, where cargo put the artifacts.
    pub bin_dir: PathBuf,
    /// `libcuguard.so`.
    pub shim: PathBuf,
    /// `libcuguard_simcuda.so`.
    pub sim_lib: PathBuf,
    /// A directory holding `libcuda.so.1` and `libcuda.so`, both links to the simulated driver.
    pub sim_dir: PathBuf,
    /// The `cuguard` command.
    pub cuguard: PathBuf,
    /// Where compiled C workloads and test scratch files go.
    pub scratch: PathBuf,
}

/// Builds the workspace's libraries and programs once per test process and returns their paths.
///
/// `cargo test` builds only the test targets, so the shim, the simulated driver and the workloads
/// are built here with the same cargo and profile. `--tests` too: with it the build resolves the
/// dependencies' features as `cargo test --workspace` did (dev-dependencies included), so it
/// reuses what that built instead of building serde, clap and the rest a second time.
pub fn artifacts() -> &'static Artifacts {
    static ARTIFACTS: OnceLock<Artifacts> = OnceLock::new();
    ARTIFACTS.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let test_exe = std::env::current_exe().expect("current_exe");
        // target/<profile>/deps/it-<hash>
        let bin_dir = test_exe
            .parent()
            .and_then(Path::parent)
            .expect("target dir")
            .to_path_buf();
        let release = bin_dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(&root)
            .args(["build", "--workspace", "--bins", "--lib", "--tests"]);
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("running cargo build");
        assert!(status.success(), "cargo build of the workspace failed");
        let sim_lib = bin_dir.join("libcuguard_simcuda.so");
        let sim_dir = bin_dir.join("cuguard-sim");
        std::fs::create_dir_all(&sim_dir).unwrap();
        for name in ["libcuda.so.1", "libcuda.so"] {
            let link = sim_dir.join(name);
            if std::fs::read_link(&link).is_err() {
                let _ = std::os::unix::fs::symlink("../libcuguard_simcuda.so", &link);
            }
        }
        let scratch = bin_dir.join("it-scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        Artifacts {
            shim: bin_dir.join("libcuguard.so"),
            cuguard: bin_dir.join("cuguard"),
            sim_lib,
            sim_dir,
            scratch,
            bin_dir,
            root,
        }
    })
}

/// Compiles `harness/workloads/c/<name>.c` (with `-g -O0`, linked with `-lcuda` against the
/// simulated driver) and returns the program's path. Compiles once per test process.
pub fn c_program(name: &str) -> PathBuf {
    program(&format!("{name}.c"), format!("c-{name}"))
}

/// Compiles `harness/workloads/c/<name>.cc` with the C++ compiler, as [`c_program`] a `.c`.
pub fn cxx_program(name: &str) -> PathBuf {
    program(&format!("{name}.cc"), format!("cxx-{name}"))
}

/// A program of `harness/workloads/c/`, linked with `-lcuda` against the simulated driver.
fn program(file: &str, stem: String) -> PathBuf {
    let a = artifacts();
    compiled(file, stem, |cc| {
        cc.args(["-fno-omit-frame-pointer", "-I"])
            .arg(a.root.join("harness/workloads/c"))
            .arg("-L")
            .arg(&a.sim_dir)
            .args(["-lcuda", "-lpthread", "-ldl"]);
    })
}

/// Compiles `harness/workloads/c/<name>.c` as a shared library (`-shared -fPIC`, linked with
/// nothing but libc) and returns its path. Compiles once per test process.
pub fn c_library(name: &str) -> PathBuf {
    compiled(&format!("{name}.c"), format!("lib{name}"), |cc| {
        cc.args(["-shared", "-fPIC"]);
    })
}

/// Compiles `harness/workloads/c/<name>.cc` with the C++ compiler as a shared library (linked
/// with the C++ runtime), as [`c_library`] a `.c`.
pub fn cxx_library(name: &str) -> PathBuf {
    compiled(&format!("{name}.cc"), format!("lib{name}"), |cc| {
        cc.args(["-shared", "-fPIC"]);
    })
}

/// `harness/workloads/c/<file>` compiled (a `.cc` by the C++ compiler) with `-g -O0 -Wall` and
/// the options `options` adds, into the scratch directory as `<stem>-<pid>` (`.so` for a
/// library); once per test process and output.
fn compiled(file: &str, stem: String, options: impl FnOnce(&mut Command)) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap();
    if let Some(p) = built.get(&stem) {
        return p.clone();
    }
    let a = artifacts();
    let src = a.root.join("harness/workloads/c").join(file);
    let suffix = if stem.starts_with("lib") { ".so" } else { "" };
    let out = a
        .scratch
        .join(format!("{stem}-{}{suffix}", std::process::id()));
    let (var, default) = if file.ends_with(".cc") {
        ("CXX", "c++")
    } else {
        ("CC", "cc")
    };
    let mut cc = Command::new(std::env::var(var).unwrap_or_else(|_| default.into()));
    cc.args(["-g", "-O0", "-Wall", "-o"]).arg(&out).arg(&src);
    options(&mut cc);
    let status = cc.status().expect("running cc");
    assert!(status.success(), "compiling {} failed", src.display());
    built.insert(stem, out.clone());
    out
}

/// A Rust workload program from `harness/workloads`.
pub fn rust_program(name: &str) -> PathBuf {
    artifacts().bin_dir.join(name)
}

/// A suffix that tells runs of one test with different settings apart (in scratch directory
/// names): `-` then each name's length and value, per setting.
pub fn env_tag(env: &[(&str, &str)]) -> String {
    env.iter()
        .map(|(k, v)| format!("-{}{v}", k.len()))
        .collect()
}

/// A fresh scratch directory for one test.
pub fn scratch_dir(test: &str) -> PathBuf {
    let d = artifacts()
        .scratch
        .join(format!("{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A command that runs `program` against the simulated driver, without the shim.
pub fn sim_command(program: &Path) -> Command {
    let a = artifacts();
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", &a.sim_dir);
    cmd.env_remove("LD_PRELOAD");
    for (k, _) in std::env::vars() {
        if k.starts_with("CUGUARD_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// A command that runs `program` under the shim against the simulated driver, writing its report
/// to `report`. Its stats page goes to a runtime directory of the tests' own
/// (`it-scratch/runtime`), not the user's; a test that looks at pages sets its own.
pub fn shim_command(program: &Path, report: &Path) -> Command {
    let a = artifacts();
    let mut cmd = sim_command(program);
    cmd.env("LD_PRELOAD", &a.shim);
    cmd.env("CUGUARD_REPORT", report);
    cmd.env("CUGUARD_RUNTIME_DIR", a.scratch.join("runtime"));
    cmd
}

/// Runs a command to completion and returns its output, failing the test with both streams if
/// `expect_success` and it did not succeed.
pub fn run(cmd: &mut Command, expect_success: bool) -> Output {
    let out = cmd.output().expect("spawning program");
    if expect_success && !out.status.success() {
        panic!(
            "{:?} failed: {}\n--- stdout\n{}\n--- stderr\n{}",
            cmd,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Checks a memory-viz pickle as PyTorch's readers take it (`scripts/memory_viz_check.py`):
/// the test fails with what the check said otherwise. Its output: a JSON summary of the
/// snapshot (`traces`: each device's actions).
pub fn memory_viz_checked(pickle: &Path) -> Output {
    let check = artifacts().root.join("scripts/memory_viz_check.py");
    run(Command::new("python3").arg(&check).arg(pickle), true)
}

/// Reads a report written by the shim.
pub fn read_report(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading report {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing report {}: {e}", path.display()))
}

/// The report of the program itself among the reports written at `path` (`r.json`, `r.1.json`,
/// …): its forked children (which leave through `_exit` and write their own) are left out, as the
/// reports whose parent wrote one there too.
pub fn program_report(path: &Path) -> serde_json::Value {
    let dir = path.parent().expect("a report path in a directory");
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("r");
    let reports: Vec<serde_json::Value> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let name = p.file_name()?.to_str()?.to_string();
            (name.starts_with(stem) && name.ends_with(".json")).then(|| read_report(&p))
        })
        .collect();
    let pids: Vec<u64> = reports
        .iter()
        .filter_map(|r| r["process"]["pid"].as_u64())
        .collect();
    reports
        .into_iter()
        .find(|r| {
            r["process"]["ppid"]
                .as_u64()
                .is_none_or(|ppid| !pids.contains(&ppid))
        })
        .unwrap_or_else(|| read_report(path))
}

/// Runs `program` bare on the simulated driver, then under the shim with the pool off and on;
/// asserts that the program printed the same answers all three times, and returns the bare run's
/// output and the two reports (pool off, pool on), each checked against the schema.
pub fn reports_with_bare_answers(program: &Path, label: &str) -> (Output, [serde_json::Value; 2]) {
    let bare = run(&mut sim_command(program), true);
    let reports = ["0", "1"].map(|pool| {
        let report = scratch_dir(&format!("{label}-{pool}")).join("r.json");
        let out = run(
            shim_command(program, &report).env("CUGUARD_POOL", pool),
            true,
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&bare.stdout),
            "answers differ with the shim (pool {pool})"
        );
        let r = read_report(&report);
        crate::cli_schema::validate(&r).unwrap();
        r
    });
    (bare, reports)
}

/// The stack (an element of the report's `stacks`) of the leak at `address`.
pub fn leak_stack<'a>(report: &'a serde_json::Value, address: &str) -> &'a serde_json::Value {
    let leak = report["leaks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["address"].as_str() == Some(address))
        .unwrap_or_else(|| panic!("no leak at {address}: {report}"));
    let id = leak["stack"].as_u64().expect("leak has a stack");
    report["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"].as_u64() == Some(id))
        .expect("stack in stacks")
}

/// The report's allocation count, all devices together.
pub fn report_allocations(report: &serde_json::Value) -> u64 {
    report["stats"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["allocations"].as_u64().unwrap())
        .sum()
}

/// The user a shared-machine test protects (`docs/reliability.md`, "On a shared machine").
pub const VICTIM: u32 = 1000;
/// The other local user, who plants links and files where the victim writes.
pub const ATTACKER: u32 = 1001;

/// Whether this process may act as other users (it runs as root). Outside CI a test that needs
/// it says so and does nothing; in CI (`CI` set) it fails, naming what is missing: CI runs as
/// root (`.ci/run`).
pub fn can_switch_users(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs root (to act as uids {VICTIM} and {ATTACKER}); CI runs as root"
    );
    eprintln!("{test}: not root; skipped (it acts as uids {VICTIM} and {ATTACKER})");
    false
}

/// A fresh world-writable sticky directory (mode 1777, like /tmp) for one test, with a home
/// directory in it for the victim (`home/`, theirs, 0700). Its parents can be traversed by
/// every user.
pub fn shared_dir(test: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = scratch_dir(test);
    let mut p = d.clone();
    while let Some(up) = p.parent() {
        // The scratch directory's parents (the checkout's target/) must be traversable.
        if let Ok(m) = std::fs::metadata(up)
            && m.permissions().mode() & 0o001 == 0
        {
            let _ = std::fs::set_permissions(
                up,
                std::fs::Permissions::from_mode(m.permissions().mode() | 0o011),
            );
        }
        p = up.to_path_buf();
        if p == artifacts().root {
            break;
        }
    }
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let home = d.join("home");
    std::fs::create_dir(&home).unwrap();
    chown(&home, VICTIM);
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// Gives `path` (not following a link) to `uid` (and the group of the same number).
pub fn chown(path: &Path, uid: u32) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: c is NUL-terminated; lchown changes only the owner of that name.
    let r = unsafe { libc::lchown(c.as_ptr(), uid, uid) };
    assert_eq!(
        r,
        0,
        "lchown {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// Plants, as the attacker, a symbolic link at `at` pointing to `to`.
pub fn plant_link(at: &Path, to: &Path) {
    std::os::unix::fs::symlink(to, at).unwrap();
    chown(at, ATTACKER);
}

/// A file only the victim may read or write (mode 0600, theirs), holding `precious`.
pub fn victims_file(dir: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("home").join(name);
    std::fs::write(&p, b"precious").unwrap();
    chown(&p, VICTIM);
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// Asserts the victim's file still holds what [`victims_file`] put there.
pub fn assert_untouched(victim: &Path, what: &str) {
    let got = std::fs::read(victim).unwrap();
    assert!(
        got == b"precious",
        "{what} wrote through the attacker's link into {}: it now begins {:?}",
        victim.display(),
        String::from_utf8_lossy(&got[..got.len().min(80)])
    );
}

/// `cmd` to be run as `uid`, with pid 1 in a new pid namespace (so that the names it derives
/// from its pid are the ones an attacker who watches `ps` would plant), `HOME` the victim's.
/// The program and its arguments are those of `cmd`; its environment is kept.
pub fn as_user_pid1(cmd: &Command, uid: u32, home: &Path) -> Command {
    switched(
        &["unshare", "--pid", "--fork", "--kill-child"],
        cmd,
        uid,
        home,
    )
}

/// `cmd` run as `uid` (real and effective, its group, no others), `HOME` the victim's; its
/// environment and directory kept.
pub fn as_user(cmd: &Command, uid: u32, home: &Path) -> Command {
    switched(&[], cmd, uid, home)
}

/// `cmd` run through `setpriv` as `uid`, behind the command line `prefix`.
fn switched(prefix: &[&str], cmd: &Command, uid: u32, home: &Path) -> Command {
    let (program, rest) = prefix.split_first().unwrap_or((&"setpriv", &[]));
    let mut out = Command::new(program);
    out.args(rest);
    if !prefix.is_empty() {
        out.arg("setpriv");
    }
    out.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .args(["--clear-groups", "--"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => out.env(k, v),
            None => out.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        out.current_dir(d);
    }
    out.env("HOME", home);
    out
}

/// Whether the file at `path` has permission bits `mode` (0600 for everything cuguard writes).
pub fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Says that `test` cannot run here because `what` is missing, so that the caller returns. In CI
/// (`CI` set, as `.ci/run` sets it) it fails instead, naming what is missing: `.ci/run` installs
/// everything the tests need, and no test may pass there by not running.
pub fn missing(test: &str, what: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} cannot run: {what} (CI must run every test; .ci/run installs what they need)"
    );
    eprintln!("skipped {test}: {what}");
}

/// Runs `harness/workloads/python/<name>.py ARGS` with `cuguard run --driver sim`, copied into
/// `dir` (so that its frames name `dir/<name>.py`), writing the report `dir/<report>`; the
/// program's standard output. `None` (after [`missing`]) where there is no `python3`.
pub fn python_program(
    test: &str,
    dir: &Path,
    name: &str,
    report: &str,
    args: &[&str],
) -> Option<String> {
    if Command::new("python3").arg("-c").arg("").output().is_err() {
        missing(test, "no python3");
        return None;
    }
    let a = artifacts();
    let script = format!("{name}.py");
    std::fs::copy(
        a.root.join("harness/workloads/python").join(&script),
        dir.join(&script),
    )
    .unwrap();
    let mut cmd = Command::new(&a.cuguard);
    cmd.current_dir(dir)
        .env_remove("CUGUARD_RUN_ID")
        .env_remove("LD_PRELOAD")
        .env("CUGUARD_RUNTIME_DIR", a.scratch.join("runtime"))
        .args([
            "run", "--driver", "sim", "--report", report, "--", "python3", &script,
        ])
        .args(args);
    let out = run(&mut cmd, true);
    Some(String::from_utf8(out.stdout).unwrap())
}
