"""Tags: ``with cuguard.tag("kv_cache"):`` and ``cuguard.annotate(obj, name)`` name a Python
program's device memory in its report, on the simulated driver, with cuguard's pool on and off.

The programs reach the driver through ctypes, as a user's numba or CuPy would underneath; the
"tensor" and "array" are stand-ins with PyTorch's ``data_ptr()`` and the CUDA Array Interface
that ``annotate`` reads."""

import json
import sys
from pathlib import Path

import pytest

from conftest import clean_env, load_report, run, run_sim
from test_phases import DRIVER

MIB = 1 << 20

PROGRAM = DRIVER + """
import threading
import cuguard

class Tensor:  # PyTorch's way to a tensor's address
    def __init__(self, p): self.p = p
    def data_ptr(self): return self.p.value

class Array:  # the CUDA Array Interface (CuPy, numba, JAX)
    def __init__(self, p): self.__cuda_array_interface__ = {"data": (p.value, False), "shape": (1,)}

kept = []
with cuguard.tag("kv_cache"):
    kept.append(alloc(64 * MIB))
    with cuguard.tag("weights"):
        kept.append(alloc(32 * MIB))
    kept.append(alloc(16 * MIB))
    other = []
    def elsewhere():  # another thread (its own current context): untagged
        assert cuda.cuCtxSetCurrent(_ctx) == 0
        other.append(alloc(2 * MIB))
    t = threading.Thread(target=elsewhere)
    t.start(); t.join()
    kept += other
    gone = alloc(128 * MIB)
    free(gone)

@cuguard.tag("loader")
def load():
    return alloc(8 * MIB)

kept.append(load())
plain = alloc(4 * MIB)
late = alloc(1 * MIB)
arr = alloc(3 * MIB)
kept += [plain, late, arr]
assert cuguard.annotate(Tensor(late), "scratch") is True
assert cuguard.annotate(plain.value + 4096, "inner") is True  # a pointer inside it
assert cuguard.annotate(Array(arr), "array") is True
try:
    cuguard.annotate(gone.value + (1 << 40), "nothing")
    raise SystemExit("annotate of an address nothing holds did not raise")
except LookupError as e:
    print("lookup:", e)
for bad, kind in ((True, TypeError), (object(), TypeError)):
    try:
        cuguard.annotate(bad, "x")
        raise SystemExit(f"annotate({bad!r}) did not raise")
    except kind:
        pass
for bad in ("", "a\\0b", "x" * 257):
    try:
        cuguard.tag(bad)
        raise SystemExit(f"tag({bad!r}) did not raise")
    except ValueError:
        pass
print("done")
"""

WANT = {
    64: "kv_cache",
    32: "weights",
    16: "kv_cache",
    2: None,
    8: "loader",
    4: "inner",
    1: "scratch",
    3: "array",
}


@pytest.mark.parametrize("pool", ["0", "1"])
def test_tags_name_allocations_in_the_report(tmp_path: Path, pool: str):
    program = tmp_path / "tags.py"
    program.write_text(PROGRAM)
    report = tmp_path / "r.json"
    result = run_sim([sys.executable, str(program)], tmp_path, report=report, CUGUARD_POOL=pool)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "done", result.stdout
    lookup = [line for line in result.stdout.splitlines() if line.startswith("lookup:")]
    assert len(lookup) == 1 and "no live allocation cuguard tracks holds 0x" in lookup[0], result.stdout
    leaks = load_report(report)["leaks"]
    got = {leak["size"] // MIB: leak.get("tag") for leak in leaks}
    assert got == WANT
    # An untagged leak has no `tag` key at all (reports without tags are as before).
    (untagged,) = [leak for leak in leaks if leak["size"] == 2 * MIB]
    assert "tag" not in untagged


def test_without_cuguard_tags_do_nothing_and_raise_nothing(tmp_path: Path):
    program = tmp_path / "plain.py"
    program.write_text(
        """
import cuguard
assert not cuguard.active()
with cuguard.tag("kv_cache"):
    pass
@cuguard.tag("f")
def f():
    return 3
assert f() == 3
assert cuguard.annotate(0x7f0000000000, "x") is False
print("ok")
"""
    )
    result = run([sys.executable, str(program)], tmp_path, clean_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ok\n"
    assert result.stderr == ""
