"""NVIDIA's own Python clients on the simulated driver, from PyPI, under `cuguard run`: the
driver bindings (`cuda-bindings`), their Pythonic layer (`cuda.core`) and numba (`numba-cuda`).
Each program (`clients/`) keeps, drops and frees device memory; the report's end view, `cuguard
summary` and `cuguard check` are read as a user would. `versions.py` loads numba and
cuda-bindings together: the summary's versions line names what is installed (read with
importlib.metadata), and under a driver of an older CUDA major the mismatches.

Versions these tests expect: cuda-bindings 13 (its `CUdeviceptr`, read as `int(ptr)`),
cuda.core 1.2, numba-cuda 0.30 (its deferred deallocations: a queue flushed when more than
`CUDA_DEALLOCS_COUNT`, 10, frees wait)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import clean_env, cuguard_command, load_report, marked_line, run, run_sim, strip_ansi

CLIENTS = Path(__file__).resolve().parent / "clients"
MiB = 1 << 20


def needs(module: str):
    """The client, imported; in CI a missing one fails the test (`.ci/run` installs it)."""
    try:
        return __import__(module)
    except ImportError as e:
        if __import__("os").environ.get("CI"):
            pytest.fail(f"{module} is missing in CI ({e}): the `test` extra installs it")
        pytest.skip(f"{module} is not installed")


def run_client(tmp_path: Path, program: str, **env: str):
    shutil.copy(CLIENTS / program, tmp_path / program)
    result = run_sim([sys.executable, program], tmp_path, tmp_path / "r.json", **env)
    assert result.returncode == 0, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    summary = strip_ansi(run(cuguard_command() + ["summary", "r.json"], tmp_path).stdout)
    check = run(cuguard_command() + ["check", "r.json"], tmp_path)
    line = lambda marker: marked_line(tmp_path / program, marker)  # noqa: E731
    return report, summary, check, line


def classes(report: dict):
    return sorted((a["size"] // MiB, a["class"]) for a in report["python"]["view"]["allocations"])


def section(text: str, title: str) -> list:
    """The rows under a summary section's title, each split on white space."""
    part = text.split(title + "\n", 1)[1]
    rows = []
    for row in part.splitlines():
        if not row.startswith("  "):
            break
        rows.append(row.split())
    return rows


def test_cuda_bindings_pointers_are_holders_and_the_dropped_one_is_lost(tmp_path: Path):
    needs("cuda.bindings")
    report, text, check, line = run_client(tmp_path, "bindings.py")
    assert classes(report) == [(1, "lost"), (2, "held"), (4, "held")]
    held = {a["size"] // MiB: a["holders"][0] for a in report["python"]["view"]["allocations"] if a["class"] == "held"}
    assert held[4]["path"] == ["WEIGHTS", "cuda.CUdeviceptr (4.0 MiB)"] and not held[4].get("weak")
    assert held[2]["path"] == ["CACHE", "['activations']", "cuda.CUdeviceptr (2.0 MiB)"]
    assert held[2]["kind"] == "cuda-bindings"
    assert ": held 6.0 MiB in 2 allocations, lost 1.0 MiB in 1 allocation" in text, text
    rows = section(text, "held at the end (Python objects keep them)")
    assert rows[0][:5] == ["4.0", "MiB", "1", "allocation", "WEIGHTS"], text
    assert " ".join(rows[0][5:]) == f"→ cuda.CUdeviceptr (4.0 MiB) made at <module> (bindings.py:{line('HELD')})"
    assert " ".join(rows[1][4:]) == (
        f"CACHE → ['activations'] → cuda.CUdeviceptr (2.0 MiB) made at <module> (bindings.py:{line('ASYNC')})"
    )
    lost = section(text, "lost at the end (the program's own; nothing holds them)")
    assert lost[0] == ["1.0", "MiB", "1", "allocation", "scratch", f"(bindings.py:{line('LOST')})"], text
    # check fails on the lost one alone, at its line; the held are named as not checked.
    out = strip_ansi(check.stdout)
    assert check.returncode == 1, out
    assert out.splitlines()[0] == "cuguard check: FAIL: 1 report, 1.0 MiB leaked in 1 leak", out
    assert f"scratch (bindings.py:{line('LOST')})" in out
    assert "not checked: 6.0 MiB in 2 allocations held by Python objects at the end" in out


def test_a_correct_cuda_bindings_program_passes_check(tmp_path: Path):
    needs("cuda.bindings")
    report, text, check, _ = run_client(tmp_path, "bindings.py", CLIENT_CORRECT="1")
    assert classes(report) == [(2, "held"), (4, "held")]
    out = strip_ansi(check.stdout)
    assert check.returncode == 0, out
    assert out.splitlines()[0] == "cuguard check: PASS: 1 report, 0 B leaked in 0 leaks", out


def test_cuda_core_buffers_kept_closed_and_from_a_memory_resource(tmp_path: Path):
    needs("cuda.core")
    report, text, check, line = run_client(tmp_path, "core.py")
    assert classes(report) == [(1, "held"), (4, "held")], "the closed buffer is freed"
    assert ": held 5.0 MiB in 2 allocations, lost nothing" in text, text
    rows = section(text, "held at the end (Python objects keep them)")
    assert " ".join(rows[0][4:]) == f"KEPT → cuda.Buffer (4.0 MiB) made at <module> (core.py:{line('KEPT')})", text
    assert " ".join(rows[1][4:]) == (
        f"FROM_RESOURCE → [0] → cuda.Buffer (1.0 MiB) made at <module> (core.py:{line('RESOURCE')})"
    ), text
    assert check.returncode == 0, check.stdout
    assert strip_ansi(check.stdout).splitlines()[0] == "cuguard check: PASS: 1 report, 0 B leaked in 0 leaks"


def test_numba_arrays_kept_dropped_into_its_queue_and_freed_in_a_batch(tmp_path: Path):
    needs("numba.cuda")
    report, text, check, line = run_client(tmp_path, "numba_arrays.py")
    # The kept array is held; the dropped one waits in numba's queue of frees; the batch was freed.
    assert classes(report) == [(2, "pending_free"), (4, "held")]
    assert (
        ": held 4.0 MiB in 1 allocation, lost nothing, 2.0 MiB in 1 allocation waiting in numba's queue of frees"
        in text
    ), text
    rows = section(text, "held at the end (Python objects keep them)")
    assert " ".join(rows[0][4:]) == (
        f"KEPT → numba.DeviceNDArray (4.0 MiB) made at <module> (numba_arrays.py:{line('KEPT')})"
    ), text
    pending = section(text, "waiting in numba's queue of frees at the end (numba frees them at its next flush: not leaks)")
    assert pending[0] == ["2.0", "MiB", "1", "allocation", "dropped", f"(numba_arrays.py:{line('DROPPED')})"], text
    # The batch's 11 arrays were live together at the peak, and freed by numba's flush.
    peak = text.split("at the peak\n", 1)[1]
    assert f"11.0 MiB  11 allocations  batch (numba_arrays.py:{line('BATCH')})" in peak, text
    # numba's teardown destroys its context with the arrays it had not freed: said once, not an event.
    events = [e["kind"] for e in report["events"]]
    assert events == ["context_destroyed_with_live_allocations"], events
    assert (
        "1 context destroyed by the interpreter's teardown after the program's code ended, with 6.0 MiB "
        "still live (a framework's own exit, as numba's): not a finding against the program"
    ) in text
    assert "\nevents\n" not in text, text
    out = strip_ansi(check.stdout)
    assert check.returncode == 0, out
    assert out.splitlines()[0] == "cuguard check: PASS: 1 report, 0 B leaked in 0 leaks", out
    strict = run(cuguard_command() + ["check", "--fail-on-events", "all", "r.json"], tmp_path)
    assert strict.returncode == 0, strict.stdout
    # What the program keeps fails `--held`, at the kept array's line, and nothing else does.
    held = run(cuguard_command() + ["check", "--held", "r.json"], tmp_path)
    out = strip_ansi(held.stdout)
    assert held.returncode == 1, out
    assert out.splitlines()[0] == "cuguard check: FAIL: 1 report, 4.0 MiB leaked in 1 leak", out
    assert f"<module> (numba_arrays.py:{line('KEPT')})" in out, out


def test_a_kernel_launch_on_the_simulated_driver_is_refused_clearly(tmp_path: Path):
    needs("cuda.bindings")
    shutil.copy(CLIENTS / "launch.py", tmp_path / "launch.py")
    result = run_sim([sys.executable, "launch.py"], tmp_path, tmp_path / "r.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "cuModuleLoadData raised FunctionNotFoundError function cuModuleLoadData is not found",
        "cuLaunchKernel raised FunctionNotFoundError function cuLaunchKernel is not found",
    ], result.stdout


def test_the_versions_line_names_numba_cuda_bindings_and_the_runtime_they_loaded(tmp_path: Path):
    needs("numba.cuda")
    needs("cuda.bindings")
    from importlib.metadata import version

    expected = " · ".join(
        [
            "versions driver CUDA 13.0",
            f"runtime {version('nvidia-cuda-runtime')}",
            f"numba {version('numba')}",
            f"numba-cuda {version('numba-cuda')}",
            f"cuda-bindings {version('cuda-bindings')}",
            f"cuda-core {version('cuda-core')}",
        ]
    )
    report, text, _, _ = run_client(tmp_path, "versions.py")
    assert report["versions"]["frameworks"][1]["name"] == "numba-cuda", report["versions"]
    lines = text.splitlines()
    at = [i for i, l in enumerate(lines) if l.startswith("versions ")]
    assert len(at) == 1, text
    assert lines[at[0]] == expected, text
    assert not lines[at[0] + 1].lstrip().startswith("mismatch:"), "a driver of CUDA 13.0 runs all of them"
    # A driver of CUDA 12.8 (the simulated driver's reported version) cannot run CUDA 13 builds:
    # each is named, with the rule.
    report, text, _, _ = run_client(tmp_path, "versions.py", CUGUARD_SIM_VERSION="12080")
    mismatches = [l.strip() for l in text.splitlines() if l.startswith("  mismatch: ")]
    assert mismatches == [
        f"mismatch: cuda-bindings {version('cuda-bindings')} is built for CUDA "
        f"{'.'.join(version('cuda-bindings').split('.')[:2])}, the driver supports CUDA 12.8: a newer CUDA "
        "major release does not run on this driver (minor-version compatibility holds within one major "
        "release only) [cuda-newer-than-driver]",
        f"mismatch: runtime {version('nvidia-cuda-runtime')} is CUDA 13, the driver supports CUDA 12.8: a "
        "newer CUDA major release does not run on this driver (minor-version compatibility holds within "
        "one major release only) [cuda-newer-than-driver]",
    ], text


def test_frameworks_installed_outside_site_packages_are_in_the_versions_line(tmp_path: Path):
    """As cuDF and RMM were on the H100 (docs/gpu-runs/2026-12-07-run40), installed with `pip
    install --target DIR` and found through PYTHONPATH: a family's folder beside its
    `.dist-info` is a site, and a pure-Python package (its `__init__.py` maps nothing) is named
    from the file the Python side declares at the end."""
    needs("cuda.bindings")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        if os.environ.get("CI"):
            pytest.fail("no C compiler in CI: .ci/run installs gcc")
        pytest.skip("no C compiler")
    site = tmp_path / "site"
    for dist, name, version in (
        ("rmm_cu13-26.10.0", "rmm-cu13", "26.10.0"),
        ("librmm_cu13-26.10.0", "librmm-cu13", "26.10.0"),
        ("cudf_cu13-26.10.2", "cudf-cu13", "26.10.2"),
    ):
        (site / f"{dist}.dist-info").mkdir(parents=True)
        (site / f"{dist}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (site / "librmm" / "lib64").mkdir(parents=True)
    (tmp_path / "empty.c").write_text("int librmm_stand_in(void) { return 0; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(site / "librmm/lib64/librmm.so"), str(tmp_path / "empty.c")], check=True)
    (site / "rmm").mkdir()
    (site / "rmm" / "__init__.py").write_text(
        "import ctypes, os\nctypes.CDLL(os.path.join(os.path.dirname(__file__), '..', 'librmm', 'lib64', 'librmm.so'))\n"
    )
    (site / "cudf").mkdir()
    (site / "cudf" / "__init__.py").write_text("import rmm\n")
    (tmp_path / "uses_cudf.py").write_text(
        "import cudf\nfrom cuda.bindings import driver as cu\n"
        "cu.cuInit(0)\nerr, dev = cu.cuDeviceGet(0)\nerr, ctx = cu.cuDevicePrimaryCtxRetain(dev)\n"
        "cu.cuCtxSetCurrent(ctx)\nerr, p = cu.cuMemAlloc(1 << 20)\nassert err == cu.CUresult.CUDA_SUCCESS, err\n"
    )
    result = run_sim([sys.executable, "uses_cudf.py"], tmp_path, tmp_path / "r.json", PYTHONPATH=str(site))
    assert result.returncode == 0, result.stdout + result.stderr
    report = load_report(tmp_path / "r.json")
    named = [(f["name"], f["version"], f.get("cuda"), f["site"]) for f in report["versions"]["frameworks"]]
    assert [n for n in named if n[3] == str(site)] == [
        ("cudf", "26.10.2", "13", str(site)),
        ("rmm", "26.10.0", "13", str(site)),
        ("librmm", "26.10.0", "13", str(site)),
    ], named
    summary = strip_ansi(run(cuguard_command() + ["summary", "r.json"], tmp_path).stdout)
    line = next(l for l in summary.splitlines() if l.startswith("versions "))
    assert "cudf 26.10.2 (CUDA 13) · rmm 26.10.0 (CUDA 13) · librmm 26.10.0 (CUDA 13)" in line, summary
