"""The distribution: one version everywhere, the `cuguard` command and `python -m cuguard` (the
Rust binary), what the wheel installs, and the example program under `cuguard run --driver sim`
straight after `pip install`."""

import os
import re
import sys
from importlib import metadata
from pathlib import Path

import cuguard
from cuguard import _launcher
from conftest import ROOT, cuguard_command, installed, load_report, marked_line, run, run_sim

EXAMPLE = Path(cuguard.__file__).resolve().parent / "examples" / "leaks.py"


def toml_version(path: Path, table: str) -> str:
    """`version = "…"` in [TABLE] of a TOML file (no TOML parser on Python 3.9-3.10)."""
    current = None
    for line in path.read_text().splitlines():
        header = re.match(r"^\[([^\]]+)\]\s*$", line)
        if header:
            current = header.group(1)
        elif current == table:
            found = re.match(r'^version\s*=\s*"([^"]+)"', line)
            if found:
                return found.group(1)
    raise AssertionError(f"no version in [{table}] of {path}")


def test_one_version_everywhere(tmp_path: Path):
    version = toml_version(ROOT / "Cargo.toml", "workspace.package")
    assert toml_version(ROOT / "pyproject.toml", "project") == version
    assert metadata.version("cuguard") == version
    result = run(cuguard_command() + ["--version"], tmp_path)
    assert (result.returncode, result.stdout) == (0, f"cuguard {version}\n")


def test_python_m_cuguard_is_the_same_command(tmp_path: Path):
    for args in (["--version"], ["summary", "no-such-report.json"], ["run"]):
        command = run(cuguard_command() + args, tmp_path)
        module = run([sys.executable, "-m", "cuguard"] + args, tmp_path)
        assert (module.returncode, module.stdout, module.stderr) == (
            command.returncode,
            command.stdout,
            command.stderr,
        ), args
    assert run([sys.executable, "-m", "cuguard", "summary", "x.json"], tmp_path).returncode == 2


def test_help_names_the_launchers_subcommand(tmp_path: Path):
    result = run(cuguard_command() + ["--help"], tmp_path)
    assert result.returncode == 0
    assert "Commands:" in result.stdout and "  run " in result.stdout
    assert result.stdout.endswith(
        "Installed with the Python package (`pip install cuguard`):\n"
        "  jupyter       Jupyter: `cuguard jupyter install-kernel` writes a kernel spec whose kernels run\n"
        "                under the shim (see `cuguard jupyter install-kernel --help`)\n"
        "  python -m cuguard ...   is the same command\n"
    )


def test_what_the_wheel_installs():
    if os.environ.get("CUGUARD_EXPECT_INSTALLED") == "1":
        assert installed(), f"the package at {cuguard.__file__} was not installed from a wheel"
    if not installed():
        # The development environment (tests/it/python.rs without CUGUARD_TEST_PYTHON): the
        # checkout's sources, the built binary on PATH; nothing was installed.
        assert _launcher.binary().parent.name in ("debug", "release")
        return
    names = sorted(p.name for p in _launcher.BIN_DIR.iterdir() if p.is_file())
    assert names[0] == "cuguard", names
    assert [n.split(".")[0] for n in names[1:]] == ["libcuguard", "libcuguard_simcuda"], names
    assert all(os.access(_launcher.BIN_DIR / n, os.X_OK) for n in names)
    assert _launcher.shim().name.startswith("libcuguard.")
    assert _launcher.sim_driver().name.startswith("libcuguard_simcuda.")
    entry_points = metadata.distribution("cuguard").entry_points
    found = {(e.group, e.name, e.value) for e in entry_points}
    assert ("console_scripts", "cuguard", "cuguard.__main__:main") in found
    assert ("pytest11", "cuguard", "cuguard.pytest_plugin") in found
    assert (Path(sys.executable).parent / "cuguard").is_file()


def test_the_example_runs_under_the_simulated_driver(tmp_path: Path):
    report = tmp_path / "report.json"
    result = run_sim([sys.executable, str(EXAMPLE)], tmp_path, report=report)
    assert result.returncode == 0, result.stderr
    cache = marked_line(EXAMPLE, "leak: cache")
    lost = marked_line(EXAMPLE, "leak: lost")
    assert result.stdout.splitlines() == [
        "leaked in the block: 2 allocations",
        f"  2097152 bytes at {EXAMPLE}:{cache} (work)",
        f"  1048576 bytes at {EXAMPLE}:{lost} (work)",
        "peak in the block: 8388608 bytes",
    ]
    leaks = sorted(load_report(report)["leaks"], key=lambda l: -l["size"])
    assert [(l["size"], l["api"]) for l in leaks] == [
        (2097152, "cuMemAlloc_v2"),
        (1048576, "cuMemAlloc_v2"),
    ]
    summary = run(cuguard_command() + ["summary", str(report)], tmp_path)
    assert f"work (leaks.py:{cache})" in summary.stdout
    assert f"work (leaks.py:{lost})" in summary.stdout
    # As a module, with the shim's line at exit.
    module = run_sim([sys.executable, "-m", "cuguard.examples.leaks"], tmp_path)
    assert module.returncode == 0, module.stderr
    assert module.stdout.splitlines()[0] == "leaked in the block: 2 allocations"
    assert re.search(r"^cuguard: 2 leaks \(3\.0 MiB\) in 1 context; report: ", module.stderr, re.M)
