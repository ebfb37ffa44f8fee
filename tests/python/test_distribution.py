"""The distribution: one version everywhere, the `cuguard` command and `python -m cuguard` (the
Rust binary), what the wheel installs (from outside the checkout, its binaries without debug
information), the example program under `cuguard run --driver sim` straight after `pip install`,
and a C program's lines named under the installed shim."""

import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import List

import pytest

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
    # The workspace's version; the package's (which pyproject.toml reads, declaring none of its
    # own), the installed distribution's and the command's are the same.
    version = toml_version(ROOT / "Cargo.toml", "workspace.package")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = { attr = "cuguard._abi.VERSION" }' in pyproject
    with pytest.raises(AssertionError, match="no version in"):
        toml_version(ROOT / "pyproject.toml", "project")
    assert cuguard.__version__ == version
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
        "Installed with the Python package (its wheel, or `pip install .` in a checkout):\n"
        "  jupyter       Jupyter: `cuguard jupyter install-kernel` writes a kernel spec whose kernels run\n"
        "                under the shim (see `cuguard jupyter install-kernel --help`)\n"
        "  python -m cuguard ...   is the same command\n"
    )


def elf_sections(path: Path) -> List[str]:
    """The names of an ELF64 little-endian file's sections."""
    data = path.read_bytes()
    assert data[:6] == b"\x7fELF\x02\x01", f"{path} is not ELF64 LE"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    strings, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    names = []
    for i in range(shnum):
        name, = struct.unpack_from("<I", data, shoff + i * shentsize)
        start = strings + name
        names.append(data[start : data.index(b"\0", start)].decode())
    return names


def test_what_the_wheel_installs():
    if os.environ.get("CUGUARD_EXPECT_INSTALLED") == "1":
        assert installed(), f"the package at {cuguard.__file__} was not installed from a wheel"
        # Imported from the environment's site-packages (which may lie anywhere, CI's under the
        # checkout's target/), with no source tree on the path.
        where = Path(cuguard.__file__).resolve().parents
        assert Path(sysconfig.get_paths()["purelib"]).resolve() in where, cuguard.__file__
        assert ROOT / "src" not in where, cuguard.__file__
        sources = {ROOT, ROOT / "src", ROOT / "src" / "python"}
        assert not [p for p in sys.path if Path(p or os.getcwd()).resolve() in sources], sys.path
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
    # Release binaries: symbol tables, no debug information (the `dist` profile).
    for name in names:
        sections = elf_sections(_launcher.BIN_DIR / name)
        assert ".symtab" in sections, (name, sections)
        assert [s for s in sections if s.startswith(".debug_")] == [], (name, sections)


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


def test_a_programs_lines_are_named_under_the_installed_shim(tmp_path: Path):
    """The shim carries no line tables of its own (test_what_the_wheel_installs); a program built
    with -g is named from its own: its leak's site is the line that allocated."""
    cc = os.environ.get("CC") or shutil.which("cc")
    if cc is None:
        assert os.environ.get("CUGUARD_EXPECT_INSTALLED") != "1", "CI needs a C compiler here"
        pytest.skip("no C compiler")
    source = Path(__file__).resolve().parent / "native" / "keeps.c"
    program = tmp_path / "keeps"
    subprocess.run([cc, "-g", "-O0", "-Wall", "-o", str(program), str(source), "-ldl"], check=True)
    report = tmp_path / "report.json"
    result = run_sim([str(program)], tmp_path, report=report)
    assert result.returncode == 0, result.stderr
    address = result.stdout.strip()
    loaded = load_report(report)
    (leak,) = [l for l in loaded["leaks"] if l["address"] == address]
    (stack,) = [s for s in loaded["stacks"] if s["id"] == leak["stack"]]
    assert (stack["site"]["in"], stack["site"]["index"]) == ("frames", 0), stack
    frame = stack["frames"][0]
    kept = next(n for n, l in enumerate(source.read_text().splitlines(), 1) if "/* kept */" in l)
    assert (frame["function"], frame["file"], frame["line"]) == ("keep", str(source), kept), frame
    assert Path(frame["module"]).resolve() == program.resolve(), frame
