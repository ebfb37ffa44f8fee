"""Phases: NVTX ranges and ``cuguard.phase`` in a program's history, read back by ``cuguard summary
--by phase``, ``--at phase:NAME#N`` and ``--between phase:NAME#N``, on the simulated driver.

The programs are real: a C program built with NVIDIA's own nvtx3 headers (from the ``nvidia-nvtx``
wheel of the ``test`` extra), Python's ``nvtx`` package from PyPI, and ``cuguard.phase``. Each
allocates known sizes inside its ranges, so every peak, allocation and kept byte is exact."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_env, cuguard_command, run, run_sim

MIB = 1 << 20

# A Python program's way to the simulated driver: ctypes, as a user's numba or cupy would reach
# it underneath.
DRIVER = """
import ctypes
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
_dev, _ctx = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuDeviceGet(ctypes.byref(_dev), 0) == 0
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(_ctx), _dev) == 0
assert cuda.cuCtxSetCurrent(_ctx) == 0
MIB = 1 << 20
def alloc(n):
    p = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0
    return p
def free(p):
    assert cuda.cuMemFree_v2(p) == 0
"""


def by_phase(report: Path, cwd: Path) -> dict:
    """`cuguard summary --by phase --format json`, read."""
    out = run(cuguard_command() + ["summary", "--by", "phase", "--top", "0", "--format", "json", str(report)], cwd)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def figures(summary: dict, name: str) -> list:
    """Each occurrence of `name`: (label, peak MiB, allocated MiB, allocations, stayed MiB)."""
    (row,) = [n for n in summary["names"] if n["name"] == name]
    return [
        (o["label"], o["peak_bytes"] / MIB, o["allocated_bytes"] / MIB, o["allocations"], o["stayed_bytes"] / MIB)
        for o in row["list"]
    ]


def nvtx_include() -> Path:
    """The nvtx3 headers of the `nvidia-nvtx` wheel in this environment."""
    for entry in sys.path:
        for found in sorted(Path(entry or ".").glob("nvidia/*/include/nvtx3/nvToolsExt.h")):
            return found.parent.parent
    raise AssertionError("the nvidia-nvtx wheel's nvtx3 headers are not installed (the `test` extra has them)")


def test_a_c_programs_nvtx_ranges_are_phases_with_exact_peaks(tmp_path: Path):
    cc = os.environ.get("CC") or shutil.which("cc")
    if cc is None:
        assert os.environ.get("CUGUARD_EXPECT_INSTALLED") != "1", "CI needs a C compiler here"
        pytest.skip("no C compiler")
    source = Path(__file__).resolve().parent / "native" / "nvtx_phases.c"
    program = tmp_path / "nvtx_phases"
    subprocess.run(
        [cc, "-g", "-O0", "-Wall", "-I", str(nvtx_include()), "-o", str(program), str(source), "-ldl"],
        check=True,
    )
    report = tmp_path / "r.json"
    result = run_sim([str(program)], tmp_path, report=report)
    assert result.returncode == 0, result.stderr
    s = by_phase(report, tmp_path)
    assert s["span"]["complete"] is True
    assert s["odd"] == {
        "pops_without_push": 0,
        "ends_without_start": 0,
        "never_ended": 0,
        "ended_on_another_thread": 0,
        "not_read": 0,
    }
    # The header's arithmetic (nvtx_phases.c): step #i peaks at 64 + 8(i-1) + 32i + 16 MiB.
    assert figures(s, "step") == [
        ("step #1", 112, 56, 3, 8),
        ("step #2", 152, 88, 3, 8),
        ("step #3", 192, 120, 3, 8),
    ]
    assert figures(s, "forward") == [
        ("forward #1", 112, 16, 1, 0),
        ("forward #2", 152, 16, 1, 0),
        ("forward #3", 192, 16, 1, 0),
    ]
    assert figures(s, "epoch") == [("epoch #1", 192, 264, 9, 24)]
    assert figures(s, "load") == [("load #1", 64, 64, 1, 64)]
    # By name, the highest peak first (then by name).
    assert [(n["name"], n["occurrences"], n["peak_occurrence"]) for n in s["names"]] == [
        ("epoch", 1, "epoch #1"),
        ("forward", 3, "forward #3"),
        ("step", 3, "step #3"),
        ("load", 1, "load #1"),
    ]

    # --at a phase is its peak; --between a phase is what it kept.
    at = run(cuguard_command() + ["summary", "--at", "phase:step#2", "--format", "json", str(report)], tmp_path)
    assert at.returncode == 0, at.stderr
    m = json.loads(at.stdout)
    assert (m["phase"], sum(d["bytes"] for d in m["devices"]) / MIB) == ("step #2", 152)
    kept = run(cuguard_command() + ["summary", "--between", "phase:step#3", str(report)], tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert ", by phase step #3: 8.0 MiB in 1 allocation " in kept.stdout, kept.stdout
    assert "keep_site (nvtx_phases.c:" in kept.stdout, kept.stdout
    missing = run(cuguard_command() + ["summary", "--at", "phase:step#4", str(report)], tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        'cuguard: error: --at "step" occurred 3 times in this history: #4 is not one of them'
    )


def test_pythons_nvtx_package_ranges_are_phases_and_payloads_name_them(tmp_path: Path):
    program = tmp_path / "train.py"
    program.write_text(
        DRIVER
        + """
import nvtx
kept = []
for i in range(1, 4):
    with nvtx.annotate("step", payload=10 + i):
        t = alloc(32 * i * MIB)
        kept.append(alloc(8 * MIB))
        free(t)
r = nvtx.start_range("tail")
kept.append(alloc(4 * MIB))
nvtx.end_range(r)
"""
    )
    report = tmp_path / "r.json"
    result = run_sim([sys.executable, str(program)], tmp_path, report=report)
    assert result.returncode == 0, result.stderr
    s = by_phase(report, tmp_path)
    # A payload names its occurrence: step #11 is the first.
    assert figures(s, "step") == [
        ("step #11", 40, 40, 2, 8),
        ("step #12", 80, 72, 2, 8),
        ("step #13", 120, 104, 2, 8),
    ]
    assert figures(s, "tail") == [("tail #1", 28, 4, 1, 4)]
    at = run(cuguard_command() + ["summary", "--at", "phase:step#12", "--format", "json", str(report)], tmp_path)
    assert at.returncode == 0, at.stderr
    assert sum(d["bytes"] for d in json.loads(at.stdout)["devices"]) == 80 * MIB
    wrong = run(cuguard_command() + ["summary", "--at", "phase:step#2", str(report)], tmp_path)
    assert wrong.returncode == 2
    assert "carries the number 2 (its ranges carry NVTX payloads: #N names the payload)" in wrong.stderr


def test_cuguard_phase_marks_code_without_nvtx_and_nests(tmp_path: Path):
    program = tmp_path / "train.py"
    program.write_text(
        DRIVER
        + """
import cuguard

@cuguard.phase("load")
def load():
    return alloc(64 * MIB)

data = load()
kept = []
for i in range(2):
    with cuguard.phase("step"):
        t = alloc(16 * MIB)
        with cuguard.phase("backward"):
            g = alloc(32 * MIB)
            free(g)
        kept.append(alloc(4 * MIB))
        free(t)
"""
    )
    report = tmp_path / "r.json"
    result = run_sim([sys.executable, str(program)], tmp_path, report=report)
    assert result.returncode == 0, result.stderr
    s = by_phase(report, tmp_path)
    assert figures(s, "load") == [("load #1", 64, 64, 1, 64)]
    assert figures(s, "step") == [("step #1", 112, 52, 3, 4), ("step #2", 116, 52, 3, 4)]
    assert figures(s, "backward") == [("backward #1", 112, 32, 1, 0), ("backward #2", 116, 32, 1, 0)]


def test_cuguard_phase_does_nothing_without_cuguard(tmp_path: Path):
    """Code marked with cuguard.phase runs the same outside cuguard: no error, no output."""
    out = run(
        [sys.executable, "-c", "import cuguard\nwith cuguard.phase('step'):\n    x = 1\nprint(x)"],
        tmp_path,
        clean_env(),
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, "1\n", "")
    bad = run([sys.executable, "-c", "import cuguard\ncuguard.phase('')"], tmp_path, clean_env())
    assert bad.returncode == 1
    assert "cuguard.phase: the name must be 1 to 256 bytes of UTF-8, not 0" in bad.stderr
