"""The pytest plugin, run on the inner project (`inner/`) by pytest in a subprocess, on the
simulated driver: markers that pass and fail, `--cuguard-limit-leaks`, bad limits, the restart
under the shim, `cuguard run`, pytest-xdist with two workers, framework caches and
`--cuguard-uncached`, the callers of a helper that allocates and `CUGUARD_HELPERS` (in the
messages and in `cuguard.holders()`). Each test checks which inner tests pass and fail, and the
lines and sizes the messages and the summary name."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import INNER, clean_env, cuguard_command, marked_line, run, run_sim, strip_ansi

SIM = ("--cuguard", "--cuguard-driver", "sim", "-p", "no:cacheprovider")

PLUMBING = "file:*/gpu.py,file:*/fake_torch.py,file:*/fake_torch_cache.py"
OWNERS = "pytorch_caching_allocator=file:*/fake_torch_cache.py"


@pytest.fixture(autouse=True)
def settings(monkeypatch: pytest.MonkeyPatch):
    """The shim's settings the inner project relies on (see inner/gpu.py, inner/fake_torch.py)."""
    for variable in ("LD_PRELOAD", "PYTORCH_NO_CUDA_MEMORY_CACHING", "CUGUARD_PYTEST_RESTARTED"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CUGUARD_PLUMBING", PLUMBING)
    monkeypatch.setenv("CUGUARD_OWNERS", OWNERS)
    monkeypatch.setenv("CUGUARD_REPORT", "cuguard.%e.%p.json")


def output(result: pytest.RunResult) -> str:
    return strip_ansi(result.stdout.str())


def section(text: str, title: str) -> List[str]:
    """The lines of the terminal's section headed TITLE (up to the next heading)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("=") and f" {title} " in line:
            body = []
            for rest in lines[i + 1 :]:
                if rest.startswith("=") or rest.startswith("_" * 5):
                    break
                body.append(rest)
            return body
    raise AssertionError(f"no section {title!r} in:\n{text}")


def failure(text: str, test: str) -> List[str]:
    """The lines of TEST's failure message."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("_") and f" {test} " in line:
            body = []
            for rest in lines[i + 1 :]:
                if rest.startswith("_") or rest.startswith("="):
                    break
                body.append(rest)
            return [b for b in body if not b.startswith("[gw")]
    raise AssertionError(f"no failure of {test} in:\n{text}")


def leak_site(
    path: str, line: int, function: str, size: str, count: str = "1 allocation", caller: str = ""
) -> str:
    """A site's row; `caller`, when given, is what follows its `←`."""
    called = f" ← {caller}" if caller else ""
    return f"{size:>10}  {path}:{line} in {function}{called}  ({count}, cuMemAlloc_v2)"


def limits_summary(line, *, indent: int) -> List[str]:
    pad = " " * indent
    return [
        "   3.0 MiB  test_limits.py::test_leak_over_limit  (2 allocations)",
        pad + leak_site("test_limits.py", line("test_limits.py", "leak: over-first"), "test_leak_over_limit", "2.0 MiB"),
        pad + leak_site("test_limits.py", line("test_limits.py", "leak: over-second"), "test_leak_over_limit", "1.0 MiB"),
        " 512.0 KiB  test_limits.py::test_leak_under_limit  (1 allocation)",
        pad + leak_site("test_limits.py", line("test_limits.py", "leak: under"), "test_leak_under_limit", "512.0 KiB"),
        "   4.0 KiB  test_limits.py::test_unlimited_leak  (1 allocation)",
        pad + leak_site("test_limits.py", line("test_limits.py", "leak: unlimited"), "test_unlimited_leak", "4.0 KiB"),
    ]


def check_limits_run(result: pytest.RunResult, line) -> None:
    text = output(result)
    result.assert_outcomes(passed=5, failed=2)
    failed = sorted(l.split()[1] for l in text.splitlines() if l.startswith("FAILED "))
    assert failed == [
        "test_limits.py::test_leak_over_limit",
        "test_limits.py::test_peak_over_limit",
    ], text
    assert failure(text, "test_leak_over_limit") == [
        "cuguard: this test leaked 3.0 MiB of GPU memory in 2 allocations, over its limit of "
        "1.0 MiB (@pytest.mark.limit_gpu_leaks); still live after its teardown:",
        "  " + leak_site("test_limits.py", line("test_limits.py", "leak: over-first"), "test_leak_over_limit", "2.0 MiB"),
        "  " + leak_site("test_limits.py", line("test_limits.py", "leak: over-second"), "test_leak_over_limit", "1.0 MiB"),
    ], text
    assert failure(text, "test_peak_over_limit") == [
        "cuguard: this test's GPU memory peaked at 8.0 MiB above its start, over its limit of "
        "4.0 MiB (@pytest.mark.limit_gpu_memory)"
    ], text
    assert section(text, "cuguard: GPU memory per test") == [
        "3 of 7 tests leaked GPU memory, 3.5 MiB in all (the program's own; framework caches "
        "are not leaks), largest first:",
        *limits_summary(line, indent=14),
    ], text


def test_without_the_option_the_plugin_is_inert(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_plain="""
        import os
        import pytest

        @pytest.mark.limit_gpu_leaks("lots")
        @pytest.mark.limit_gpu_memory("1 MiB")
        def test_not_under_the_shim():
            assert "libcuguard" not in open("/proc/self/maps").read()
            assert "LD_PRELOAD" not in os.environ
        """
    )
    result = pytester.runpytest_subprocess("--strict-markers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    text = output(result)
    # Loaded by its entry point, and nothing more.
    assert [l for l in text.splitlines() if "cuguard" in l] == [
        next(l for l in text.splitlines() if l.startswith("plugins: "))
    ], text
    assert "cuguard-0.1.0" in text
    markers = output(pytester.runpytest_subprocess("--markers"))
    assert "@pytest.mark.limit_gpu_leaks(size):" in markers
    assert "@pytest.mark.limit_gpu_memory(size):" in markers


def test_markers_pass_and_fail_naming_lines_and_sizes(pytester: pytest.Pytester, inner_project):
    result = pytester.runpytest_subprocess(*SIM, "test_limits.py")
    check_limits_run(result, inner_project)
    assert output(result).splitlines()[2].startswith(
        "cuguard: GPU memory tracked per test, restarted under the shim (--cuguard-driver sim); "
        "no leak limit unless marked"
    )


def test_a_failed_tests_locals_are_not_its_leaks(pytester: pytest.Pytester, inner_project):
    result = pytester.runpytest_subprocess(*SIM, "test_failing.py")
    text = output(result)
    result.assert_outcomes(failed=1)
    assert "assert buffer.address == 0" in text
    assert "cuguard: this test leaked" not in text
    assert section(text, "cuguard: GPU memory per test") == [
        "No test leaked GPU memory (1 test tracked)."
    ], text


def test_limit_leaks_option_applies_to_tests_without_a_marker(
    pytester: pytest.Pytester, inner_project
):
    result = pytester.runpytest_subprocess(*SIM, "--cuguard-limit-leaks=1KiB", "test_limits.py")
    text = output(result)
    result.assert_outcomes(passed=4, failed=3)
    failed = sorted(l.split()[1] for l in text.splitlines() if l.startswith("FAILED "))
    assert failed == [
        "test_limits.py::test_leak_over_limit",
        "test_limits.py::test_peak_over_limit",
        "test_limits.py::test_unlimited_leak",
    ], text
    assert failure(text, "test_unlimited_leak") == [
        "cuguard: this test leaked 4.0 KiB of GPU memory in 1 allocation, over its limit of "
        "1.0 KiB (--cuguard-limit-leaks); still live after its teardown:",
        "  "
        + leak_site(
            "test_limits.py",
            inner_project("test_limits.py", "leak: unlimited"),
            "test_unlimited_leak",
            "4.0 KiB",
        ),
    ], text
    # test_leak_under_limit (512 KiB) passes: its marker's 1 MiB wins over the option's 1 KiB.


def test_bad_limits_fail_collection_naming_the_test(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.limit_gpu_leaks("lots")
        def test_words():
            pass

        @pytest.mark.limit_gpu_memory("2 XB")
        def test_unit():
            pass

        @pytest.mark.limit_gpu_leaks("1 MiB", "2 MiB")
        def test_two():
            pass

        def test_fine():
            pass
        """
    )
    result = pytester.runpytest_subprocess(*SIM)
    text = output(result)
    assert result.ret == pytest.ExitCode.INTERRUPTED, text
    assert "ERROR collecting test_bad.py" in text
    # Each once (pytest 9.2 and later repeat a collection error's whole message in the short
    # test summary).
    assert list(dict.fromkeys(l for l in text.splitlines() if l.startswith("  test_bad.py::"))) == [
        "  test_bad.py::test_words: @pytest.mark.limit_gpu_leaks('lots'): 'lots' is not a size "
        '(write e.g. "512 KiB", "1 MiB", "2GB" or "4096")',
        "  test_bad.py::test_unit: @pytest.mark.limit_gpu_memory('2 XB'): '2 XB' has an unknown "
        "unit 'XB' (use B, kB, MB, GB, TB, KiB, MiB, GiB or TiB)",
        '  test_bad.py::test_two: @pytest.mark.limit_gpu_leaks takes one size, such as '
        'limit_gpu_leaks("1 MiB")',
    ], text
    assert "1 error" in text and "passed" not in text

    option = pytester.runpytest_subprocess(*SIM, "--cuguard-limit-leaks=a lot")
    assert option.ret == pytest.ExitCode.USAGE_ERROR
    assert strip_ansi(option.stderr.str()).strip() == (
        "ERROR: --cuguard-limit-leaks: 'a lot' is not a size "
        '(write e.g. "512 KiB", "1 MiB", "2GB" or "4096")'
    )


def where(directory: Path) -> List[Dict]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("[0-9]*.json"))]


def test_restarts_in_place_under_the_shim_before_conftests_load(
    pytester: pytest.Pytester, inner_project, tmp_path: Path
):
    records = tmp_path / "where"
    records.mkdir()
    env = clean_env(WHERE_DIR=str(records), CUGUARD_REPORT="cuguard.%e.%p.json")
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", *SIM, "--cuguard-uncached", "test_where.py"],
        cwd=str(pytester.path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, out
    tests = where(records)
    assert len(tests) == 6
    for record in tests:
        assert record["pid"] == process.pid, "restarted with execve: the same process"
        assert record["active"] is True
        assert "libcuguard" in record["preload"]
        assert record["restarted"] == "sim"
        assert record["uncached"] == "1"
        assert record["worker"] is None
    conftest = json.loads((records / f"conftest-{process.pid}.json").read_text())
    assert conftest == {"pid": process.pid, "active": True}
    assert "No test leaked GPU memory (6 tests tracked)." in strip_ansi(out)


def test_started_under_cuguard_run_it_does_not_restart(
    pytester: pytest.Pytester, inner_project, tmp_path: Path
):
    records = tmp_path / "where"
    records.mkdir()
    result = run(
        cuguard_command()
        + ["run", "--driver", "sim", "--quiet", "--", sys.executable, "-m", "pytest", "--cuguard",
           "-p", "no:cacheprovider", "test_where.py", "test_limits.py"],
        pytester.path,
        clean_env(WHERE_DIR=str(records), CUGUARD_PLUMBING=PLUMBING),
    )
    text = strip_ansi(result.stdout)
    assert result.returncode == 1, text + result.stderr
    assert (
        "cuguard: GPU memory tracked per test, started under the shim; no leak limit unless marked"
        in text
    )
    for record in where(records):
        assert record["active"] is True and record["restarted"] is None
    assert "2 failed, 11 passed" in text, text
    assert section(text, "cuguard: GPU memory per test")[0].startswith("3 of 13 tests leaked")


def test_xdist_two_workers_each_under_the_shim_results_gathered(
    pytester: pytest.Pytester, inner_project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    records = tmp_path / "where"
    records.mkdir()
    monkeypatch.setenv("WHERE_DIR", str(records))
    result = pytester.runpytest_subprocess(
        *SIM, "-n", "2", "test_limits.py", "test_where.py", timeout=180
    )
    text = output(result)
    assert "2 workers [13 items]" in text, text
    result.assert_outcomes(passed=11, failed=2)
    tests = where(records)
    # Which worker runs test_where's cases is xdist's choice (on a loaded machine one worker can
    # take them all): each ran in a worker, under the shim; both workers are seen below.
    assert {r["worker"] for r in tests} <= {"gw0", "gw1"} and tests, tests
    assert len({r["pid"] for r in tests}) == len({r["worker"] for r in tests})
    assert all(r["active"] and "libcuguard" in r["preload"] for r in tests)
    workers = {r["pid"] for r in tests}
    conftests = [json.loads(p.read_text()) for p in records.glob("conftest-*.json")]
    # The controller and both workers loaded the conftest, each under the shim.
    assert len(conftests) == 3 and all(c["active"] for c in conftests)
    assert len({c["pid"] for c in conftests}) == 3, conftests
    assert workers < {c["pid"] for c in conftests}
    assert failure(text, "test_leak_over_limit")[0].startswith(
        "cuguard: this test leaked 3.0 MiB of GPU memory in 2 allocations"
    )
    assert section(text, "cuguard: GPU memory per test") == [
        "3 of 13 tests leaked GPU memory, 3.5 MiB in all (the program's own; framework caches "
        "are not leaks), largest first:",
        *limits_summary(inner_project, indent=14),
    ], text


def test_a_framework_cache_is_not_a_leak_and_the_summary_says_it_grew(
    pytester: pytest.Pytester, inner_project
):
    result = pytester.runpytest_subprocess(*SIM, "test_cache.py")
    text = output(result)
    result.assert_outcomes(passed=3)
    assert section(text, "cuguard: GPU memory per test") == [
        "No test leaked GPU memory (3 tests tracked).",
        "Kept by frameworks' caches and libraries (not leaks):",
        "  PyTorch's caching allocator (pytorch_caching_allocator) grew by 6.0 MiB: "
        "test_cache.py::test_keeps_tensor 3.0 MiB, test_cache.py::test_another_temporary 2.0 MiB, "
        "test_cache.py::test_temporary_tensor 1.0 MiB",
        "A framework's cache grew: it can hide which test kept a tensor or array. Run with "
        "--cuguard-uncached to turn the caches off, so each one is its own allocation.",
    ], text


def test_uncached_names_the_test_that_keeps_a_tensor(pytester: pytest.Pytester, inner_project):
    result = pytester.runpytest_subprocess(*SIM, "--cuguard-uncached", "test_cache.py")
    text = output(result)
    result.assert_outcomes(passed=2, failed=1)
    line = inner_project("test_cache.py", "leak: tensor")
    assert failure(text, "test_keeps_tensor") == [
        "cuguard: this test leaked 3.0 MiB of GPU memory in 1 allocation, over its limit of 0 B "
        "(@pytest.mark.limit_gpu_leaks); still live after its teardown:",
        "  " + leak_site("test_cache.py", line, "test_keeps_tensor", "3.0 MiB"),
    ], text
    assert section(text, "cuguard: GPU memory per test") == [
        "1 of 3 tests leaked GPU memory, 3.0 MiB in all (the program's own; framework caches "
        "are not leaks), largest first:",
        "   3.0 MiB  test_cache.py::test_keeps_tensor  (1 allocation)",
        " " * 14 + leak_site("test_cache.py", line, "test_keeps_tensor", "3.0 MiB"),
    ], text
    assert "framework caches off (--cuguard-uncached)" in text


#: A function name and a file name a program can give its code (`code.replace`): a line break
#: and a rule, a terminal escape, NEL, LINE SEPARATOR and RIGHT-TO-LEFT OVERRIDE.
HOSTILE_FUNCTION = "make\nleak:*\nbuf\x1b[2J\x85\u2028\u202efdp"
HOSTILE_FILE = "ev\u202eil\x1b.py"
#: As the plugin shows them: escaped as the `cuguard` command escapes (`\n`, `\u{1b}`).
HOSTILE_FUNCTION_SHOWN = r"make\nleak:*\nbuf\u{1b}[2J\u{85}\u{2028}\u{202e}fdp"
HOSTILE_FILE_SHOWN = r"ev\u{202e}il\u{1b}.py"


def test_names_from_the_program_are_escaped_in_messages_and_summary(
    pytester: pytest.Pytester, inner_project
):
    pytester.makepyfile(
        test_hostile=r'''
        import os
        import types

        import pytest

        from gpu import alloc

        KEPT = []
        NAME = "make\nleak:*\nbuf\x1b[2J\x85\u2028\u202efdp"
        FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ev\u202eil\x1b.py")


        def _keep():
            KEPT.append(alloc(4096))  # leak: hostile


        names = {"co_name": NAME, "co_filename": FILE}
        if hasattr(_keep.__code__, "co_qualname"):
            names["co_qualname"] = NAME
        keep = types.FunctionType(_keep.__code__.replace(**names), globals())


        @pytest.mark.limit_gpu_leaks(0)
        def test_hostile_names():
            keep()  # call: hostile
        '''
    )
    result = pytester.runpytest_subprocess(*SIM, "test_hostile.py")
    text = output(result)
    result.assert_outcomes(failed=1)
    for c in ("\x1b", "\x85", "\u2028", "\u202e"):
        assert c not in text, (c, text)
    line = inner_project("test_hostile.py", "leak: hostile")
    caller = f"test_hostile.py:{inner_project('test_hostile.py', 'call: hostile')} in test_hostile_names"
    site = leak_site(HOSTILE_FILE_SHOWN, line, HOSTILE_FUNCTION_SHOWN, "4.0 KiB", caller=caller)
    assert failure(text, "test_hostile_names") == [
        "cuguard: this test leaked 4.0 KiB of GPU memory in 1 allocation, over its limit of 0 B "
        "(@pytest.mark.limit_gpu_leaks); still live after its teardown:",
        "  " + site,
    ], text
    assert section(text, "cuguard: GPU memory per test") == [
        "1 of 1 tests leaked GPU memory, 4.0 KiB in all (the program's own; framework caches "
        "are not leaks), largest first:",
        "   4.0 KiB  test_hostile.py::test_hostile_names  (1 allocation)",
        " " * 14 + site,
    ], text


HELPERS_PROJECT = """
import ctypes

import pytest

from gpu import check, driver, free

KEPT = []


def alloc(size):
    pointer = ctypes.c_uint64()
    check(driver().cuMemAlloc_v2(ctypes.byref(pointer), size))  # site: alloc
    return pointer.value


def make_scratch(size):
    return alloc(size)  # site: make_scratch


@pytest.mark.limit_gpu_leaks(0)
def test_one_of_three_leaks():
    first = alloc(1 << 20)  # call: first
    KEPT.append(alloc(4096))  # call: kept
    second = alloc(2 << 20)  # call: second
    free(first)
    free(second)


@pytest.mark.limit_gpu_leaks(0)
def test_three_lines_three_rows():
    KEPT.append(alloc(1 << 20))  # call: a
    KEPT.append(alloc(2 << 20))  # call: b
    KEPT.append(make_scratch(3 << 20))  # call: c
"""

HELPERS_HEAD = (
    "cuguard: this test leaked {} of GPU memory in {}, over its limit of 0 B "
    "(@pytest.mark.limit_gpu_leaks); still live after its teardown:"
)


def run_helpers_project(pytester: pytest.Pytester, line):
    """Runs HELPERS_PROJECT (both tests fail); returns the output and where a marked line is."""
    pytester.makepyfile(test_helpers=HELPERS_PROJECT)
    result = pytester.runpytest_subprocess(*SIM, "test_helpers.py")
    result.assert_outcomes(failed=2)
    return output(result), lambda marker: f"test_helpers.py:{line('test_helpers.py', marker)}"


def test_a_helpers_leak_is_named_with_the_line_that_called_it(
    pytester: pytest.Pytester, inner_project
):
    text, at = run_helpers_project(pytester, inner_project)
    alloc = f"{at('site: alloc')} in alloc"
    # Three lines called the helper; the one that kept its memory is named, the others not.
    assert failure(text, "test_one_of_three_leaks") == [
        HELPERS_HEAD.format("4.0 KiB", "1 allocation"),
        f"     4.0 KiB  {alloc} ← {at('call: kept')} in test_one_of_three_leaks  "
        "(1 allocation, cuMemAlloc_v2)",
    ], text
    # One helper's leaks from three lines are three rows; the first caller only.
    assert failure(text, "test_three_lines_three_rows") == [
        HELPERS_HEAD.format("6.0 MiB", "3 allocations"),
        f"     3.0 MiB  {alloc} ← {at('site: make_scratch')} in make_scratch  (1 allocation, cuMemAlloc_v2)",
        f"     2.0 MiB  {alloc} ← {at('call: b')} in test_three_lines_three_rows  (1 allocation, cuMemAlloc_v2)",
        f"     1.0 MiB  {alloc} ← {at('call: a')} in test_three_lines_three_rows  (1 allocation, cuMemAlloc_v2)",
    ], text
    summary = section(text, "cuguard: GPU memory per test")
    assert summary[1:3] == [
        "   6.0 MiB  test_helpers.py::test_three_lines_three_rows  (3 allocations)",
        " " * 14 + f"   3.0 MiB  {alloc} ← {at('site: make_scratch')} in make_scratch  "
        "(1 allocation, cuMemAlloc_v2)",
    ], text


@pytest.mark.parametrize(
    "helpers, third",
    [
        ("alloc", "{make_scratch} in make_scratch (via alloc)"),
        (" alloc , make_* ", "{c} in test_three_lines_three_rows (via make_scratch)"),
    ],
)
def test_named_helpers_give_way_to_their_callers(
    pytester: pytest.Pytester, inner_project, monkeypatch: pytest.MonkeyPatch, helpers: str, third: str
):
    monkeypatch.setenv("CUGUARD_HELPERS", helpers)
    text, at = run_helpers_project(pytester, inner_project)
    assert failure(text, "test_one_of_three_leaks") == [
        HELPERS_HEAD.format("4.0 KiB", "1 allocation"),
        f"     4.0 KiB  {at('call: kept')} in test_one_of_three_leaks (via alloc)  "
        "(1 allocation, cuMemAlloc_v2)",
    ], text
    third = third.format(make_scratch=at("site: make_scratch"), c=at("call: c"))
    assert failure(text, "test_three_lines_three_rows") == [
        HELPERS_HEAD.format("6.0 MiB", "3 allocations"),
        f"     3.0 MiB  {third}  (1 allocation, cuMemAlloc_v2)",
        f"     2.0 MiB  {at('call: b')} in test_three_lines_three_rows (via alloc)  (1 allocation, cuMemAlloc_v2)",
        f"     1.0 MiB  {at('call: a')} in test_three_lines_three_rows (via alloc)  (1 allocation, cuMemAlloc_v2)",
    ], text


HOLDERS_PROGRAM = """
import ctypes
import sys

sys.path.insert(0, sys.argv[1])

import cuguard
from gpu import check, driver, free


class Array:
    def __init__(self, address, size):
        self.__cuda_array_interface__ = {"data": (address, False), "shape": (size,), "typestr": "|u1"}


def alloc(size):
    pointer = ctypes.c_uint64()
    check(driver().cuMemAlloc_v2(ctypes.byref(pointer), size))  # site: alloc
    return pointer.value


KEPT = []


def step():
    first = alloc(1 << 20)  # call: first
    KEPT.append(Array(alloc(2 << 20), 2 << 20))  # call: kept
    second = alloc(3 << 20)  # call: second
    free(first)
    free(second)


step()  # call: step
found = cuguard.holders()
print(found)
print("made_at:", found[0]["made_at"])
print("callers:", [(c["function"], c["line"]) for c in found[0]["site"]["callers"]])
"""


@pytest.mark.parametrize("helpers", [None, "alloc"])
def test_holders_name_the_line_that_called_a_helper(tmp_path: Path, helpers):
    program = tmp_path / "keeps.py"
    program.write_text(HOLDERS_PROGRAM)
    env = {"CUGUARD_HELPERS": helpers} if helpers else {}
    result = run_sim([sys.executable, str(program), str(INNER)], tmp_path, **env)
    assert result.returncode == 0, result.stdout + result.stderr
    site, kept = marked_line(program, "site: alloc"), marked_line(program, "call: kept")
    made_at = f"keeps.py:{kept} (via alloc)" if helpers else f"keeps.py:{site} ← keeps.py:{kept}"
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        "cuguard holders: 1 live allocation (2.0 MiB); 1 reached from a name",
        f"   2.0 MiB  KEPT → [0] → Array (2.0 MiB, made at {made_at})",
    ], result.stdout
    assert lines[2:] == [
        f"made_at: {made_at}",
        f"callers: [('step', {kept}), ('<module>', {marked_line(program, 'call: step')})]",
    ], result.stdout


def test_call_path_picks_the_frame_to_name(monkeypatch: pytest.MonkeyPatch):
    """`holders._call_path` on sites as the shim gives them, and on odd ones."""
    from cuguard.holders import _call_path as call_path

    def frame(file, line, function):
        return {"file": file, "line": line, "function": function, "module": None}

    alloc = frame("/w/app.py", 18, "Pool.alloc")
    make = frame("/w/app.py", 30, "make_buffer")
    step = frame("/w/app.py", 40, "step")
    pytest_frame = frame("/v/lib/python3.12/site-packages/_pytest/python.py", 159, "pytest_pyfunc_call")
    native = {"file": None, "line": None, "function": "run", "module": "/w/app"}
    monkeypatch.delenv("CUGUARD_HELPERS", raising=False)
    assert call_path({**alloc, "callers": [make, step]}) == ({**alloc, "callers": [make, step]}, make, None)
    # A caller outside the program (pytest calling a test) or without a file is not named.
    assert call_path({**step, "callers": [pytest_frame]})[1:] == (None, None)
    assert call_path({**step, "callers": [frame("<string>", 1, "<module>")]})[1:] == (None, None)
    assert call_path({**step, "callers": [native]})[1:] == (None, None)
    # Sites from a shim without callers, and odd values.
    assert call_path(alloc) == (alloc, None, None)
    assert call_path(None) == ({}, None, None)
    assert call_path({**alloc, "callers": "x"}) == ({**alloc, "callers": "x"}, None, None)
    assert call_path({**alloc, "callers": [None, step]})[1:] == (None, None)

    # Helpers: by a method's own name, by glob; the helper named is the one the line called.
    site = {**alloc, "callers": [make, step, pytest_frame]}
    monkeypatch.setenv("CUGUARD_HELPERS", "alloc")
    assert call_path(site) == (make, None, "Pool.alloc")
    monkeypatch.setenv("CUGUARD_HELPERS", "none,Pool.alloc,make_*")
    assert call_path(site) == (step, None, "make_buffer")
    # `none` (the command's: no helpers found by their paths) names no function.
    monkeypatch.setenv("CUGUARD_HELPERS", "none")
    assert call_path({**frame("/w/app.py", 1, "none"), "callers": [step]})[1:] == (step, None)
    # No caller that is not a helper, or the first one without a file: named as without helpers.
    monkeypatch.setenv("CUGUARD_HELPERS", "*")
    assert call_path(site) == (site, make, None)
    monkeypatch.setenv("CUGUARD_HELPERS", "alloc")
    assert call_path({**alloc, "callers": [native, step]})[1:] == (None, None)
    # A site that is no helper keeps its caller.
    assert call_path({**step, "callers": [make]}) == ({**step, "callers": [make]}, make, None)


def test_escaped_is_the_commands_rule():
    """The plugin's escaping is the command's (`cuguard_format::escaped`): the Rust test
    `every_character_of_the_rule` (shim/format/src/units.rs) checks the same text."""
    from cuguard._units import escaped

    assert escaped(
        "\0\t\r\n\x1b\x7f\x85\x9f\xa0\u061c\u200d\u200e\u200f\u2028\u2029\u202a\u202e\u202f"
        "\u2066\u2069\u206a é"
    ) == (
        r"\u{0}\t\r\n\u{1b}\u{7f}\u{85}\u{9f}" "\xa0" r"\u{61c}" "\u200d" r"\u{200e}\u{200f}"
        r"\u{2028}\u{2029}\u{202a}\u{202e}" "\u202f" r"\u{2066}\u{2069}" "\u206a é"
    )
