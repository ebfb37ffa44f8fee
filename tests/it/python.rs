//! The Python suite (`tests/python`): the distribution, the pytest plugin, the IPython magic and
//! the in-process API, `cuguard.dask` and `cuguard.ray`, run by pytest in a Python environment that
//! has the `cuguard` package, pytest, pytest-xdist, IPython, dask, distributed and ray. Every test
//! there runs on the simulated driver.
//!
//! Which environment:
//! - `CUGUARD_TEST_PYTHON`, a Python interpreter whose environment has the distribution installed
//!   from its wheel (`.ci/run` installs the release wheel of `scripts/release-wheel.sh` into
//!   `target/ci-venv`). The suite then also checks what the wheel installed
//!   (`CUGUARD_EXPECT_INSTALLED=1`), and runs as a user's would: from a directory outside the
//!   checkout (nothing of the source tree on `sys.path`), with no cargo on `PATH`.
//! - Else, outside CI, a development environment that this test makes once, in
//!   `target/python-dev/`: a virtual environment (`python3 -m venv`) with the packages of the
//!   `test` and `ray` extras from PyPI (made again when that list changes), in which the checkout's `src/python` is on the path and the package's
//!   pytest entry point is declared (a `.pth` file and a `.dist-info` directory: what an editable
//!   install writes, without building the wheel), and with `target/<profile>` (the binary and the
//!   libraries this test run built) first on `PATH`. The Python code and the binaries are then the
//!   checkout's own, whatever was edited since the environment was made.
//! - In CI (`CI` set) without `CUGUARD_TEST_PYTHON`, the test fails: CI must test the wheel.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::artifacts;

/// What the suite needs besides the package (the `test` and `ray` extras of pyproject.toml).
const TEST_PACKAGES: [&str; 14] = [
    "pytest>=7",
    "pytest-xdist>=3",
    "ipython>=8",
    "ipykernel>=6",
    "jupyter_client>=7",
    "dask>=2024.1",
    "distributed>=2024.1",
    "cuda-bindings>=13",
    "cuda-core>=1.2",
    "numba-cuda>=0.30",
    "nvidia-cuda-runtime>=13",
    "nvtx>=0.2.10",
    "nvidia-nvtx>=13",
    "ray>=2.40",
];

/// The development environment's Python, made on first use (see the module's documentation).
fn dev_python(root: &Path, target: &Path) -> PathBuf {
    let venv = target.join("python-dev");
    let python = venv.join("bin/python");
    // The marker holds the packages installed, so an environment made for fewer is made again.
    let ready = venv.join(".cuguard-ready");
    let packages = TEST_PACKAGES.join("\n");
    if std::fs::read_to_string(&ready).is_ok_and(|made| made == packages) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&venv);
    let base = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    let made = Command::new(&base)
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .unwrap_or_else(|e| {
            panic!("running {base:?} -m venv (Python 3.9 or later is needed): {e}")
        });
    assert!(
        made.status.success(),
        "{base:?} -m venv {} failed: {}",
        venv.display(),
        String::from_utf8_lossy(&made.stderr)
    );
    let pip = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(TEST_PACKAGES)
        .output()
        .expect("running pip");
    assert!(
        pip.status.success(),
        "installing {TEST_PACKAGES:?} into {} failed (PyPI must be reachable; or set \
         CUGUARD_TEST_PYTHON to a Python that has cuguard and the `test` extra's packages): {}",
        venv.display(),
        String::from_utf8_lossy(&pip.stderr)
    );
    let site = Command::new(&python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .expect("asking the environment for its site-packages");
    let site = PathBuf::from(String::from_utf8_lossy(&site.stdout).trim());
    let version = env!("CARGO_PKG_VERSION");
    std::fs::write(
        site.join("cuguard-dev.pth"),
        format!("{}\n", root.join("src/python").display()),
    )
    .unwrap();
    let info = site.join(format!("cuguard-{version}.dist-info"));
    std::fs::create_dir_all(&info).unwrap();
    std::fs::write(
        info.join("METADATA"),
        format!("Metadata-Version: 2.1\nName: cuguard\nVersion: {version}\n"),
    )
    .unwrap();
    std::fs::write(
        info.join("entry_points.txt"),
        "[pytest11]\ncuguard = cuguard.pytest_plugin\n",
    )
    .unwrap();
    std::fs::write(&ready, &packages).unwrap();
    python
}

/// This process's `PATH` without the directories that hold a `cargo` or a `rustc`: what a user
/// who installed the wheel, without a Rust toolchain, has.
fn without_cargo() -> std::ffi::OsString {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|d| !d.join("cargo").exists() && !d.join("rustc").exists())
        .collect();
    std::env::join_paths(kept).unwrap()
}

#[test]
fn python_suite() {
    let a = artifacts();
    let target = a.bin_dir.parent().expect("target dir");
    let given = std::env::var_os("CUGUARD_TEST_PYTHON").filter(|p| !p.is_empty());
    let installed = given.is_some();
    let mut cmd;
    // Where pytest runs: outside the checkout for the installed distribution.
    let mut outside = None;
    match given {
        Some(python) => {
            cmd = Command::new(python);
            let dir = std::env::temp_dir().join(format!("cuguard-suite-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            cmd.env("PATH", without_cargo()).env_remove("CARGO");
            outside = Some(dir);
        }
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run the Python suite in the environment it installed the wheel into: \
                 set CUGUARD_TEST_PYTHON (.ci/run does)"
            );
            cmd = Command::new(dev_python(&a.root, target));
            let path = std::env::var_os("PATH").unwrap_or_default();
            let mut dirs = vec![a.bin_dir.clone()];
            dirs.extend(std::env::split_paths(&path));
            cmd.env("PATH", std::env::join_paths(dirs).unwrap());
        }
    }
    cmd.current_dir(outside.as_deref().unwrap_or(&a.root))
        .args(["-m", "pytest"])
        .arg(a.root.join("tests/python"))
        .args(["-p", "no:cacheprovider", "-q", "-rs"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("LD_PRELOAD")
        .env_remove("PYTEST_ADDOPTS");
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CUGUARD_") && key != "CUGUARD_TEST_PYTHON" {
            cmd.env_remove(key);
        }
    }
    if installed {
        cmd.env("CUGUARD_EXPECT_INSTALLED", "1");
    }
    let out = cmd.output().expect("running pytest");
    if let Some(dir) = outside {
        let _ = std::fs::remove_dir_all(dir);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the Python suite failed ({}):\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // Skips are counted and named (`-rs`): in CI, where .ci/run installs everything the suite
    // needs, a skip not listed in EXPECTED_SKIPS (with its reason) fails the suite.
    let skipped = skips(&stdout);
    let unexpected: Vec<&String> = skipped
        .iter()
        .filter(|s| !EXPECTED_SKIPS.iter().any(|(what, _)| s.contains(what)))
        .collect();
    if !unexpected.is_empty() {
        let list = unexpected
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            std::env::var_os("CI").is_none(),
            "{} Python tests skipped that CI must run:\n{list}",
            unexpected.len()
        );
        eprintln!(
            "{} Python tests skipped (CI would fail them):\n{list}",
            unexpected.len()
        );
    }
}

/// Skips of the Python suite that are expected everywhere, with the reason (a substring of the
/// skip's line); none today.
const EXPECTED_SKIPS: &[(&str, &str)] = &[];

/// The lines pytest's `-rs` summary gives for skipped tests (`SKIPPED [N] FILE:LINE: REASON`).
fn skips(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("SKIPPED "))
        .map(str::to_string)
        .collect()
}

#[test]
fn pytest_skip_lines_are_read() {
    let out = "....s.\n=== short test summary info ===\n\
               SKIPPED [1] tests/python/test_dask.py:21: could not import 'distributed'\n\
               5 passed, 1 skipped in 2.0s\n";
    assert_eq!(
        skips(out),
        ["SKIPPED [1] tests/python/test_dask.py:21: could not import 'distributed'"]
    );
}
