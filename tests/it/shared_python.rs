//! The Python package on a shared machine (`docs/reliability.md`, "On a shared machine"):
//! - its writers (`cuguard.snapshot(path, held=True)`, `cuguard jupyter install-kernel`) write
//!   through no other user's link, replace no other user's file, and leave files of mode 0600,
//!   whatever the attacker planted at the names the writers used to derive from their pid (the
//!   victim runs as pid 1 here, as an attacker who watches `ps` would predict it). These need
//!   root, to act as the victim and the attacker;
//! - the bootstrap of `cuguard run` loads cuguard's own package and nothing else: a user's script
//!   named `cuguard.py` runs once, a `cuguard/` planted in the current directory is never run,
//!   and a `cuguard` module of the program's stays the program's. These run as any user.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{
    ATTACKER, VICTIM, artifacts, as_user_pid1, assert_untouched, can_switch_users, chown, mode_of,
    plant_link, read_report, run, scratch_dir, shared_dir, shim_command, victims_file,
};

const MIB: u64 = 1 << 20;

/// `cuguard run --driver sim --quiet --report DIR/r.json -- ARGS` in `dir`, with the variables of
/// the test process that would change it removed. The package's path is the one `cuguard run`
/// gives a program when it is built in a checkout (`src/python/cuguard`).
fn cuguard_run(dir: &Path, args: &[&str]) -> Command {
    let a = artifacts();
    let mut cmd = Command::new(&a.cuguard);
    cmd.current_dir(dir)
        .args(["run", "--driver", "sim", "--quiet", "--report"])
        .arg(dir.join("r.json"))
        .arg("--")
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("CUGUARD_RUNTIME_DIR", a.scratch.join("runtime"))
        .env_remove("PYTHONPATH")
        .env_remove("LD_PRELOAD");
    for (k, _) in std::env::vars() {
        if k.starts_with("CUGUARD_") && k != "CUGUARD_RUNTIME_DIR" {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// A fresh directory with the test suite's `gpu.py` (device memory through ctypes) in it.
fn project(test: &str) -> PathBuf {
    let d = scratch_dir(test);
    std::fs::copy(
        artifacts().root.join("tests/python/inner/gpu.py"),
        d.join("gpu.py"),
    )
    .unwrap();
    d
}

/// The report's view at the end: whether it is complete, and each allocation's class and size
/// in MiB, sorted.
fn end_classes(report: &serde_json::Value) -> (bool, Vec<(String, u64)>) {
    let view = &report["python"]["view"];
    assert_eq!(view["at"], "end", "{}", report["python"]);
    let mut classes: Vec<(String, u64)> = view["allocations"]
        .as_array()
        .unwrap_or_else(|| panic!("no allocations in {view}"))
        .iter()
        .map(|a| {
            (
                a["class"].as_str().unwrap().to_string(),
                a["size"].as_u64().unwrap() / MIB,
            )
        })
        .collect();
    classes.sort();
    (view["complete"] == true, classes)
}

fn owned(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    pairs.iter().map(|(c, m)| (c.to_string(), *m)).collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn both(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

#[test]
fn a_script_named_cuguard_py_runs_once_and_its_end_is_classified() {
    let d = project("shared-python-script");
    std::fs::write(
        d.join("cuguard.py"),
        "import gpu\n\
         print(\"the user's cuguard.py ran\")\n\
         KEEP = gpu.Buffer(1 << 20)\n\
         gpu.alloc(2 << 20)\n",
    )
    .unwrap();
    let out = run(&mut cuguard_run(&d, &["python3", "cuguard.py"]), true);
    assert_eq!(
        text(&out.stdout),
        "the user's cuguard.py ran\n",
        "{}",
        both(&out)
    );
    assert_eq!(text(&out.stderr), "", "{}", both(&out));
    let (complete, classes) = end_classes(&read_report(&d.join("r.json")));
    assert!(complete);
    assert_eq!(classes, owned(&[("held", 1), ("lost", 2)]));
}

#[test]
fn a_cuguard_package_planted_in_the_current_directory_is_never_run() {
    let d = project("shared-python-planted");
    let marker = d.join("the-planted-package-ran");
    std::fs::create_dir(d.join("cuguard")).unwrap();
    std::fs::write(
        d.join("cuguard/__init__.py"),
        format!(
            "open({:?}, 'a').write('ran\\n')\nfrom . import _end  # what the bootstrap asks for\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("cuguard/_end.py"),
        "def at_end(how=None):\n    pass\n",
    )
    .unwrap();
    std::fs::write(
        d.join("prog.py"),
        "import gpu\nKEEP = gpu.Buffer(1 << 20)\nprint('done')\n",
    )
    .unwrap();
    // A program that imports nothing of cuguard's, run with `-c` and with `-m`: both put the
    // current directory first on the program's path.
    let runs: [&[&str]; 2] = [
        &[
            "python3",
            "-c",
            "import gpu; KEEP = gpu.Buffer(1 << 20); print('done')",
        ],
        &["python3", "-m", "prog"],
    ];
    for args in runs {
        let _ = std::fs::remove_file(d.join("r.json"));
        let out = run(&mut cuguard_run(&d, args), true);
        assert_eq!(text(&out.stdout), "done\n", "{args:?}: {}", both(&out));
        assert_eq!(text(&out.stderr), "", "{args:?}: {}", both(&out));
        assert!(
            !marker.exists(),
            "{args:?}: the bootstrap ran the cuguard package of the current directory"
        );
        let (complete, classes) = end_classes(&read_report(&d.join("r.json")));
        assert!(complete, "{args:?}");
        assert_eq!(classes, owned(&[("held", 1)]), "{args:?}");
    }
}

#[test]
fn without_a_package_path_cuguard_is_looked_for_on_the_interpreters_own_path_only() {
    let a = artifacts();
    let d = project("shared-python-start-path");
    let marker = d.join("the-planted-package-ran");
    std::fs::create_dir(d.join("cuguard")).unwrap();
    std::fs::write(
        d.join("cuguard/__init__.py"),
        format!(
            "open({:?}, 'a').write('ran\\n')\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(d.join("cuguard/_end.py"), "").unwrap();
    // The bootstrap as `cuguard run` lays it out, without CUGUARD_PYTHON_PACKAGE (a `cuguard`
    // command that is neither the package's nor built in a checkout).
    let boot = scratch_dir("shared-python-start-path-boot");
    std::fs::copy(
        a.root
            .join("src/python/cuguard/_bootstrap/sitecustomize.py"),
        boot.join("sitecustomize.py"),
    )
    .unwrap();
    let python_run = |pythonpath: String| {
        let report = d.join("r.json");
        let _ = std::fs::remove_file(&report);
        let mut cmd = shim_command(Path::new("python3"), &report);
        cmd.current_dir(&d)
            .args([
                "-c",
                "import gpu; KEEP = gpu.Buffer(1 << 20); print('done')",
            ])
            .env("PYTHONPATH", pythonpath)
            .env("CUGUARD_PYTHON_BOOTSTRAP", &boot)
            .env("CUGUARD_QUIET", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1");
        let out = run(&mut cmd, true);
        assert_eq!(text(&out.stdout), "done\n", "{}", both(&out));
        assert_eq!(text(&out.stderr), "", "{}", both(&out));
        assert!(
            !marker.exists(),
            "the bootstrap ran the current directory's cuguard"
        );
        read_report(&report)
    };
    // The package on PYTHONPATH (the interpreter's path at start-up): found there, not in the
    // current directory, which `-c` puts first on the program's path.
    let package = a.root.join("src/python");
    let report = python_run(format!("{}:{}", boot.display(), package.display()));
    assert_eq!(end_classes(&report), (true, owned(&[("held", 1)])));
    // Nowhere on it: the end is marked, unclassified, and the current directory's is not run.
    let importable = Command::new("python3")
        .args(["-c", "import cuguard"])
        .env_remove("PYTHONPATH")
        .current_dir(&a.scratch)
        .output()
        .is_ok_and(|o| o.status.success());
    if importable {
        return println!("python3 imports an installed cuguard: its absence is not tried");
    }
    let report = python_run(boot.display().to_string());
    assert_eq!(end_classes(&report), (false, owned(&[("unclassified", 1)])));
}

/// A stand-in for CuPy in `dir`: importing it makes the bootstrap load cuguard's package in the
/// middle of the program (cuguard adds its memory hook, `cupy.cuda.memory_hook.MemoryHook`).
fn fake_cupy(dir: &Path) {
    std::fs::create_dir_all(dir.join("cupy/cuda")).unwrap();
    std::fs::write(dir.join("cupy/__init__.py"), "").unwrap();
    std::fs::write(dir.join("cupy/cuda/__init__.py"), "").unwrap();
    std::fs::write(
        dir.join("cupy/cuda/memory_hook.py"),
        "class MemoryHook:\n    def __enter__(self):\n        return self\n",
    )
    .unwrap();
}

#[test]
fn a_cuguard_module_of_the_programs_own_stays_its_own() {
    let d = project("shared-python-own-module");
    fake_cupy(&d);
    std::fs::write(
        d.join("cuguard.py"),
        "import gpu\nMINE = True\nKEPT = gpu.Buffer(1 << 20)\n",
    )
    .unwrap();
    // CuPy first: cuguard's package is loaded then, before the program imports its own cuguard.
    std::fs::write(
        d.join("main.py"),
        "import sys\n\
         import cupy\n\
         import cuguard\n\
         print('mine:', getattr(cuguard, 'MINE', False), sys.modules['cuguard'] is cuguard)\n",
    )
    .unwrap();
    let out = run(&mut cuguard_run(&d, &["python3", "main.py"]), true);
    assert_eq!(text(&out.stdout), "mine: True True\n", "{}", both(&out));
    assert_eq!(text(&out.stderr), "", "{}", both(&out));
    let report = read_report(&d.join("r.json"));
    let (complete, classes) = end_classes(&report);
    assert!(complete);
    // The program's cuguard module is the program's: what it keeps is held, by its name.
    assert_eq!(classes, owned(&[("held", 1)]));
    let holder = &report["python"]["view"]["allocations"][0]["holders"][0];
    assert_eq!(holder["path"][0], "cuguard.KEPT", "{holder}");
}

#[test]
fn the_installed_cuguard_imported_after_the_bootstrap_loaded_it_is_one_package() {
    let d = project("shared-python-one-copy");
    fake_cupy(&d);
    // The program imports the installed cuguard after CuPy: the package the bootstrap loaded at
    // CuPy's import (which added its memory hook) is the one the program gets.
    std::fs::write(
        d.join("main.py"),
        "import sys\n\
         import cupy\n\
         import cuguard\n\
         print('one package:', cuguard._caches._cupy_lines is not None, \
         [m for m in sys.modules if m.startswith('_cuguard')])\n",
    )
    .unwrap();
    let package = artifacts().root.join("src/python");
    let out = run(
        cuguard_run(&d, &["python3", "main.py"]).env("PYTHONPATH", &package),
        true,
    );
    assert_eq!(
        text(&out.stdout),
        "one package: True []\n",
        "{}",
        both(&out)
    );
    assert_eq!(text(&out.stderr), "", "{}", both(&out));
}

#[test]
fn a_package_path_that_holds_no_package_is_said_in_one_line_and_the_program_runs_on() {
    let d = project("shared-python-no-package");
    let nowhere = d.join("nowhere");
    let out = run(
        cuguard_run(
            &d,
            &[
                "python3",
                "-c",
                "import gpu; gpu.alloc(1 << 20); print('ran on')",
            ],
        )
        .env("CUGUARD_PYTHON_PACKAGE", &nowhere),
        true,
    );
    assert_eq!(text(&out.stdout), "ran on\n", "{}", both(&out));
    assert_eq!(
        text(&out.stderr),
        format!(
            "cuguard: CUGUARD_PYTHON_PACKAGE='{}' holds no cuguard package; the end of this \
             program's code is marked but what held each allocation is not told\n",
            nowhere.display()
        )
    );
    let report = read_report(&d.join("r.json"));
    assert_eq!(report["python"]["end"]["recorded"], true);
    let (complete, classes) = end_classes(&report);
    assert!(!complete);
    assert_eq!(classes, owned(&[("unclassified", 1)]));
}

// --- the writers, as the victim, against the attacker ------------------------------------------

/// A Python the victim can run (the pyenv of root's home is not one): the system's.
fn victims_python(home: &Path) -> PathBuf {
    for p in ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"] {
        let p = PathBuf::from(p);
        if !p.is_file() {
            continue;
        }
        let mut probe = Command::new(&p);
        probe.args(["-c", "pass"]);
        if as_user_pid1(&probe, VICTIM, home)
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return p;
        }
    }
    panic!("no python3 that uid {VICTIM} can run (/usr/bin/python3 and the like)");
}

/// `PYTHONPATH` for the victim's Python: the checkout's package and the suite's `gpu.py`.
fn victims_pythonpath() -> String {
    let root = &artifacts().root;
    format!(
        "{}:{}",
        root.join("src/python").display(),
        root.join("tests/python/inner").display()
    )
}

/// A regular file of the attacker's at `at`.
fn plant_file(at: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(at, b"the attacker's").unwrap();
    chown(at, ATTACKER);
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// The names in `dir` that belong to `uid`.
fn owned_by(dir: &Path, uid: u32) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn snapshot_held_writes_through_no_link_and_replaces_no_other_users_file() {
    if !can_switch_users("snapshot_held_writes_through_no_link_and_replaces_no_other_users_file") {
        return;
    }
    let d = shared_dir("shared-python-snapshot");
    let home = d.join("home");
    let precious = victims_file(&d, "precious");
    // Every name the old writer used (`PATH.cuguard-tmp.PID`, pid 1), and the destinations
    // themselves: a link, and a file of the attacker's.
    for name in ["snap.json", "link.json", "theirs.json"] {
        plant_link(&d.join(format!("{name}.cuguard-tmp.1")), &precious);
    }
    plant_link(&d.join("link.json"), &precious);
    plant_file(&d.join("theirs.json"));
    let script = "import os, sys, cuguard, gpu\n\
                  KEEP = gpu.Buffer(1 << 20)\n\
                  for name in ('snap.json', 'link.json', 'theirs.json'):\n\
                  \x20   try:\n\
                  \x20       cuguard.snapshot(os.path.join(sys.argv[1], name), held=True)\n\
                  \x20       print(name, 'written')\n\
                  \x20   except OSError as e:\n\
                  \x20       print(name, 'refused:', e.strerror)\n";
    let python = victims_python(&home);
    let mut cmd = shim_command(&python, &home.join("r.json"));
    cmd.args(["-c", script])
        .arg(&d)
        .env("PYTHONPATH", victims_pythonpath())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("CUGUARD_RUNTIME_DIR", home.join("runtime"))
        .env("CUGUARD_QUIET", "1");
    let out = run(&mut as_user_pid1(&cmd, VICTIM, &home), true);
    assert_untouched(&precious, "cuguard.snapshot(path, held=True)");
    assert_eq!(
        text(&out.stdout),
        "snap.json written\n\
         link.json refused: is a symbolic link; cuguard never writes through a link (remove it, \
         or give the path it points to)\n\
         theirs.json refused: belongs to another user (uid 1001); cuguard does not replace \
         another user's file\n",
        "{}",
        both(&out)
    );
    let snap = d.join("snap.json");
    assert_eq!(mode_of(&snap), 0o600);
    let written = read_report(&snap);
    assert_eq!(written["python"]["view"]["at"], "snapshot");
    assert_eq!(written["reason"], "request");
    // The attacker's names are as they were, and the victim left nothing but the snapshot.
    assert_eq!(
        std::fs::read(d.join("theirs.json")).unwrap(),
        b"the attacker's"
    );
    assert_eq!(std::fs::read_link(d.join("link.json")).unwrap(), precious);
    assert_eq!(owned_by(&d, VICTIM), ["home", "snap.json"]);
}

#[test]
fn install_kernel_writes_through_no_link_and_into_no_other_users_directory() {
    if !can_switch_users("install_kernel_writes_through_no_link_and_into_no_other_users_directory")
    {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let d = shared_dir("shared-python-kernel");
    let home = d.join("home");
    let precious = victims_file(&d, "precious");
    let python = victims_python(&home);
    let install = |prefix: &Path, name: &str| {
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "cuguard", "jupyter", "install-kernel", "--prefix"])
            .arg(prefix)
            .args(["--name", name, "--python"])
            .arg(&python)
            .env("PYTHONPATH", victims_pythonpath())
            .env("PYTHONDONTWRITEBYTECODE", "1");
        run(&mut as_user_pid1(&cmd, VICTIM, &home), false)
    };
    // Directories made `parents` deep, each of mode `mode` and owned by `uid`.
    let make = |base: &Path, parts: &[&str], uid: u32, mode: u32| -> PathBuf {
        let mut p = base.to_path_buf();
        for part in parts {
            p = p.join(part);
            std::fs::create_dir(&p).unwrap();
            chown(&p, uid);
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        p
    };
    let kernels = ["share", "jupyter", "kernels"];

    // The victim installs into the shared directory itself, where the attacker made the
    // kernel's directory first and planted links at kernel.json and at the old temporary name.
    // The first of the attacker's directories on the way, `share`, is refused: nothing is made
    // or written below it.
    let theirs = make(&d, &kernels, ATTACKER, 0o755);
    let theirs = make(&theirs, &["cuguard"], ATTACKER, 0o755);
    plant_link(&theirs.join(".kernel.json.1"), &precious);
    plant_link(&theirs.join("kernel.json"), &precious);
    let out = install(&d, "cuguard");
    assert_untouched(&precious, "cuguard jupyter install-kernel");
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert_eq!(
        text(&out.stderr),
        format!(
            "cuguard jupyter install-kernel: {}: belongs to another user (uid 1001), who could \
             change the kernel's command; give another --prefix or --name\n",
            d.join("share").display()
        )
    );

    // A team's prefix of the victim's, whose kernel directory every user may add to (sticky,
    // like /tmp): the attacker planted a link at the old temporary name, and at kernel.json of a
    // second kernel.
    let team = make(&d, &["team"], VICTIM, 0o755);
    let shared = make(&team, &kernels, VICTIM, 0o755);
    for name in ["cuguard", "second"] {
        let k = make(&shared, &[name], VICTIM, 0o1777);
        plant_link(&k.join(".kernel.json.1"), &precious);
    }
    plant_link(&shared.join("second/kernel.json"), &precious);
    let out = install(&team, "cuguard");
    assert_untouched(&precious, "cuguard jupyter install-kernel");
    assert!(out.status.success(), "{}", both(&out));
    let spec = shared.join("cuguard/kernel.json");
    assert_eq!(mode_of(&spec), 0o600);
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&spec).unwrap()).unwrap();
    assert_eq!(written["display_name"], "Python 3 (cuguard)");
    assert_eq!(
        owned_by(&shared.join("cuguard"), VICTIM),
        ["kernel.json"],
        "no temporary file left"
    );
    let out = install(&team, "second");
    assert_untouched(&precious, "cuguard jupyter install-kernel");
    assert_eq!(out.status.code(), Some(2), "{}", both(&out));
    assert_eq!(
        text(&out.stderr),
        format!(
            "cuguard jupyter install-kernel: {}: is a symbolic link; cuguard never writes \
             through a link (remove it, or give the path it points to)\n",
            shared.join("second/kernel.json").display()
        )
    );
    assert_eq!(
        owned_by(&shared.join("second"), VICTIM),
        Vec::<String>::new()
    );
}
