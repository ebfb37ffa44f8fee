"""A user's first hour (issue 50): `pytest --cuguard` without `--cuguard-driver sim`, where no
CUDA driver can be found, says so once, in its header, in pytest's words, and runs the tests all
the same; with `--cuguard-driver sim` it says nothing of the kind."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import strip_ansi

#: The header's line (`cuguard.pytest_plugin.NO_DRIVER`), written out: what a user reads.
NO_DRIVER = (
    "cuguard: no libcuda.so.1 on this machine (no NVIDIA driver?): the tests' CUDA calls will "
    "fail; --cuguard-driver sim runs them on the simulated driver"
)


@pytest.fixture
def no_driver_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An `LD_LIBRARY_PATH` without a `libcuda.so.1`, and none of the shim's or the plugin's
    variables in the environment."""
    empty = tmp_path / "no-driver-here"
    empty.mkdir()
    monkeypatch.setenv("LD_LIBRARY_PATH", str(empty))
    for variable in ("LD_PRELOAD", "CUGUARD_PYTEST_RESTARTED", "CUGUARD_PYTEST_SAID"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CUGUARD_REPORT", str(tmp_path / "cuguard.%e.%p.json"))
    return empty


def a_driver_loads(library_path: Path) -> bool:
    """Whether `libcuda.so.1` loads in a Python started with this `LD_LIBRARY_PATH` (loading runs
    no `cuInit`)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import ctypes; ctypes.CDLL('libcuda.so.1')"],
        env={"LD_LIBRARY_PATH": str(library_path), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return probe.returncode == 0


PLAIN = """
def test_plain():
    assert 1 + 1 == 2
"""


def test_without_a_driver_the_header_says_so_once(pytester: pytest.Pytester, no_driver_path: Path):
    pytester.makepyfile(test_plain=PLAIN)
    result = pytester.runpytest_subprocess("--cuguard", "-p", "no:cacheprovider", "test_plain.py")
    result.assert_outcomes(passed=1)
    out = strip_ansi(result.stdout.str())
    err = strip_ansi(result.stderr.str())
    header = [l for l in out.splitlines() if l.startswith("cuguard: ")]
    assert header[0].startswith(
        "cuguard: GPU memory tracked per test, restarted under the shim (--cuguard-driver system)"
    ), out
    said = [l for l in (out + "\n" + err).splitlines() if "libcuda.so.1" in l]
    if a_driver_loads(no_driver_path):
        assert said == [], out + err
        pytest.skip("this machine has a libcuda.so.1 of its own: the line is rightly not said")
    assert header[1:] == [NO_DRIVER], out
    assert said == [NO_DRIVER], out + err


def test_with_the_simulated_driver_nothing_is_said(pytester: pytest.Pytester, no_driver_path: Path):
    pytester.makepyfile(test_plain=PLAIN)
    result = pytester.runpytest_subprocess(
        "--cuguard", "--cuguard-driver", "sim", "-p", "no:cacheprovider", "test_plain.py"
    )
    result.assert_outcomes(passed=1)
    out = strip_ansi(result.stdout.str() + "\n" + result.stderr.str())
    assert [l for l in out.splitlines() if l.startswith("cuguard: ")] == [
        "cuguard: GPU memory tracked per test, restarted under the shim (--cuguard-driver sim); "
        "no leak limit unless marked"
    ], out
