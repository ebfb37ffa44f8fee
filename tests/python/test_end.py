"""The end of a Python program's code (the report's `python` section, `cuguard._end`): under
`cuguard run`, the bootstrap marks the moment the program's code ended, before the interpreter's
teardown, and what held each allocation then. Real programs (`end/`) run under `cuguard run
--driver sim`; their reports, `cuguard summary` and `cuguard check` are read as a user would."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import END, INNER, clean_env, cuguard_command, load_report, marked_line, run, run_sim, strip_ansi

PLUMBING = "file:*/gpu.py"
MiB = 1 << 20


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The end programs and the inner project's `gpu.py` in a fresh directory."""
    for source in list(END.glob("*.py")) + [INNER / "gpu.py"]:
        shutil.copy(source, tmp_path / source.name)
    shutil.copytree(END / "usersite", tmp_path / "usersite")
    return tmp_path


def run_program(project: Path, args, report: str = "r.json", **env):
    env.setdefault("CUGUARD_PLUMBING", PLUMBING)
    result = run_sim([sys.executable, *args], project, project / report, **env)
    return result, project / report


def view(report: dict) -> dict:
    python = report.get("python")
    assert python is not None, "the report has no python section"
    return python


def by_size(allocations):
    return {a["size"]: a for a in allocations}


def command(project: Path, *args: str):
    return run(cuguard_command() + list(args), project)


def test_held_and_lost_at_the_end(project: Path):
    result, path = run_program(project, ["keeps.py"])
    assert result.returncode == 0, result.stderr
    # The walk read no attribute of the program's objects (one that warns on every read is there).
    assert "deprecated" not in result.stderr, result.stderr
    report = load_report(path)
    python = view(report)
    assert python["end"]["recorded"] is True and python["end"]["how"] == "finished"
    v = python["view"]
    assert v["at"] == "end" and v["complete"] is True, v.get("notes")
    found = by_size(v["allocations"])
    assert sorted(found) == [1 * MiB, 2 * MiB, 3 * MiB, 4 * MiB], "the freed 5 MiB is not live at the end"
    paths = {
        1 * MiB: ["KEPT", "[0]", ".ptr"],
        2 * MiB: ["KEPT", "[1]", ".ptr"],
        3 * MiB: ["WEIGHTS", ".ptr"],
    }
    for size, steps in paths.items():
        a = found[size]
        assert a["class"] == "held", a
        assert a["freed_after"] is True, "the teardown freed it after the end"
        holder = a["holders"][0]
        assert holder["weak"] is True and holder["kind"] == "int" and holder["holder"] == "Buffer"
        assert holder["path"][:-1] == steps
        assert holder["path"][-1] == f"int {a['address']}"
    lost = found[4 * MiB]
    assert lost["class"] == "lost" and not lost.get("freed_after") and not lost.get("holders")
    # What was live at exit, after the teardown: only the lost one.
    assert [leak["size"] for leak in report["leaks"]] == [4 * MiB]

    text = strip_ansi(command(project, "summary", "r.json").stdout)
    program = project / "keeps.py"
    line = lambda marker: marked_line(program, marker)  # noqa: E731
    assert (
        "the end  the program's code finished at " in text
        and ": held 6.0 MiB in 3 allocations, lost 4.0 MiB in 1 allocation (3 freed later, by the interpreter's teardown)" in text
    ), text
    held = text.split("held at the end (Python objects keep them)\n", 1)[1].split("lost at the end", 1)[0]
    rows = [r.split() for r in held.splitlines() if not r.startswith("    ")]
    assert [r[:2] for r in rows] == [["3.0", "MiB"], ["2.0", "MiB"], ["1.0", "MiB"]], held
    assert f"WEIGHTS → .ptr (a number inside it: a weak match)" in held
    init = f"Buffer.__init__ (keeps.py:{line('buffer')})"
    # Buffer.__init__ is the helper every allocation goes through: each is made at its caller.
    assert f"made at load (keeps.py:{line('kept-global')}) via {init}" in held
    assert f"made at load (keeps.py:{line('kept-list')}) via {init}" in held
    assert f"    {init} ← load (keeps.py:{line('kept-global')}) ← main (keeps.py:" in held
    assert f"    {init} ← load (keeps.py:{line('kept-list')}) ← main (keeps.py:" in held
    lost_part = text.split("lost at the end (the program's own; nothing holds them)\n", 1)[1]
    assert lost_part.splitlines()[0].split() == ["4.0", "MiB", "1", "allocation", "load", f"(keeps.py:{line('lost')})"]

    # check: the lost fails by default, naming its line; --held fails on the held too.
    check = command(project, "check", "r.json")
    out = strip_ansi(check.stdout)
    assert check.returncode == 1, out
    assert out.splitlines()[0] == "cuguard check: FAIL: 1 report, 4.0 MiB leaked in 1 leak", out
    assert f"load (keeps.py:{line('lost')})" in out
    assert "not checked: 6.0 MiB in 3 allocations held by Python objects at the end (--held to count them)" in out
    held_check = command(project, "check", "--held", "r.json")
    out = strip_ansi(held_check.stdout)
    assert held_check.returncode == 1
    assert out.splitlines()[0] == "cuguard check: FAIL: 1 report, 10.0 MiB leaked in 4 leaks", out
    assert f"Buffer.__init__ (keeps.py:{line('buffer')})" in out and f"load (keeps.py:{line('lost')})" in out


def test_a_cache_written_for_the_test_shows_its_kept_block_held_and_the_rest_idle(project: Path):
    owners = "toy_cache:framework_cache=file:*/toycache.py"
    result, path = run_program(project, ["cached.py"], CUGUARD_OWNERS=owners)
    assert result.returncode == 0, result.stderr
    v = view(load_report(path))["view"]
    [segment] = v["allocations"]
    assert segment["class"] == "cache" and segment["owner"] == "toy_cache" and segment["size"] == 4 * MiB
    blocks = segment["blocks"]
    base = int(segment["address"], 16)
    assert [(int(b["address"], 16) - base, b["size"], b["state"]) for b in blocks] == [
        (0, 2 * MiB, "idle"),
        (2 * MiB, 1 * MiB, "live"),
        (3 * MiB, 1 * MiB, "idle"),
    ], blocks
    kept = blocks[1]
    assert kept["holders"][0]["path"] == ["KEEP", "toycache.Block (1.0 MiB of a 4.0 MiB allocation)"]
    assert not kept["holders"][0].get("weak")
    [cache] = v["caches"]
    assert cache == {
        "owner": "toy_cache",
        "framework": "toy_cache",
        "source": "holders",
        "segment_bytes": 4 * MiB,
        "live_bytes": 1 * MiB,
        "idle_bytes": 3 * MiB,
    }
    text = strip_ansi(command(project, "summary", "r.json").stdout)
    assert "inside the caches at the end\n  toy_cache: 4.0 MiB in 1 segment: 1.0 MiB live in 1 block, 3.0 MiB idle" in text, text
    assert "held by KEEP → toycache.Block (1.0 MiB of a 4.0 MiB allocation)" in text
    # The default check passes (the cache is not the program's, the block is held); --held fails.
    assert command(project, "check", "r.json").returncode == 0
    held = command(project, "check", "--held", "r.json")
    assert held.returncode == 1 and "1.0 MiB" in strip_ansi(held.stdout).splitlines()[0]


@pytest.mark.parametrize(
    "args, how, exception, status",
    [
        (["keeps.py", "raise"], "raised", "ValueError", 1),
        (["keeps.py", "exit"], "finished", None, 3),
        (["-m", "keeps", "finish"], "finished", None, 0),
        (["-c", "import keeps; keeps.main()"], "finished", None, 0),
        (["keeps.py", "_exit"], "os_exit", None, 4),
        # No sitecustomize is imported: the shim hands the interpreter the bootstrap itself.
        (["-I", "keeps.py"], "finished", None, 0),
        (["-S", "keeps.py"], "finished", None, 0),
    ],
)
def test_every_way_the_code_ends(project: Path, args, how, exception, status):
    result, path = run_program(project, args)
    assert result.returncode == status, result.stderr
    end = view(load_report(path))["end"]
    assert end["recorded"] is True and end["how"] == how and end.get("exception") == exception
    classes = sorted(a["class"] for a in view(load_report(path))["view"]["allocations"])
    assert classes == ["held", "held", "held", "lost"]


@pytest.mark.parametrize(
    "args, env, why",
    [
        (["keeps.py"], {"CUGUARD_PYTHON_END": "0"}, "CUGUARD_PYTHON_END=0 turned cuguard's Python bootstrap off"),
        (["-I", "keeps.py"], {"CUGUARD_PYTHON_END": "0"}, "CUGUARD_PYTHON_END=0 turned cuguard's Python bootstrap off"),
    ],
)
def test_where_the_end_cannot_be_seen_the_report_says_so(project: Path, args, env, why):
    result, path = run_program(project, args, **env)
    assert result.returncode == 0, result.stderr
    python = view(load_report(path))
    assert python["end"]["recorded"] is False and python["end"]["why"].startswith(why), python
    assert "view" not in python
    text = strip_ansi(command(project, "summary", "r.json").stdout)
    assert f"the end  not recorded: {why}" in text


def test_without_the_package_the_end_is_marked_and_its_allocations_are_not_called_held_or_lost(project: Path):
    """A program run by a Python where cuguard's package cannot be imported (another
    interpreter, and no package where the launcher said): the end is still marked, every
    allocation live then is unclassified, and the summary says so instead of "held 0 B, lost
    nothing"."""
    shadow = project / "shadow" / "cuguard"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ImportError("not this interpreter\'s package")\n')
    # The shadow is put first on the program's own path (PYTHONPATH would shadow the launcher).
    first = f"import sys, runpy; sys.path.insert(0, {str(shadow.parent)!r}); runpy.run_path('keeps.py', run_name='__main__')"
    result, path = run_program(project, ["-c", first], CUGUARD_PYTHON_PACKAGE=str(project / "nowhere"))
    assert result.returncode == 0, result.stderr
    python = view(load_report(path))
    assert python["end"]["recorded"] is True and python["end"]["how"] == "finished"
    v = python["view"]
    assert v["complete"] is False and v["notes"] == [
        "cuguard's Python package is not importable in this interpreter: held and lost are not told apart"
    ]
    assert sorted((a["class"], a["size"]) for a in v["allocations"]) == [
        ("unclassified", size * MiB) for size in (1, 2, 3, 4)
    ]
    text = strip_ansi(command(project, "summary", "r.json").stdout)
    [end] = [line for line in text.splitlines() if line.startswith("the end  ")]
    assert end.startswith("the program's code finished at ", len("the end  ")), end
    assert end.endswith(" ms: 10.0 MiB in 4 allocations not told apart (held or lost) (3 freed later, by the interpreter's teardown)"), end


def millis(ms: int) -> str:
    """As the summary writes a duration."""
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def test_a_loop_too_short_for_its_samples_is_not_called_free_of_growth(project: Path):
    """20 steps that keep 1 MiB each, in a few milliseconds: growth, but the run ends with
    fewer samples (one every 100 ms) than growth needs. The summary, the view and --max-growth
    say it could not be told, instead of "No site grew" or a silent pass."""
    result, path = run_program(project, ["short_loop.py"])
    assert result.returncode == 0, result.stderr
    report = load_report(path)
    end_ms = view(report)["end"]["time_ms"]
    times = report["stack_samples"]["times_ms"]
    samples = len([t for t in times if t <= end_ms])
    assert samples < 5, (samples, end_ms)
    summary = json.loads(command(project, "summary", "--format", "json", "r.json").stdout)
    [process] = summary["processes"]
    assert process["growing"] == []
    # The shim samples from the first allocation, and at the report's end too (after the end
    # of the program's code).
    interval = report["stack_samples"]["interval_ms"]
    span = end_ms - times[0] if samples else None
    assert process["growth_not_told"] == {
        "samples": samples,
        "needed": 5,
        "end_ms": end_ms,
        "span_ms": span,
        "code_end": True,
        "interval_ms": interval,
    }
    if samples:
        noun = "sample" if samples == 1 else "samples"
        why = f"{samples} {noun} in the {millis(span)} from the first to the end of the code (at {millis(end_ms)}); 5 are needed, one every {millis(interval)}"
    else:
        why = f"no sample before the end of the code (at {millis(end_ms)}); 5 are needed, one every {millis(interval)} from the first allocation"
    text = strip_ansi(command(project, "summary", "r.json").stdout)
    # The summary says it in one short line near its end; the view and the JSON say it whole.
    short = f"{samples} {noun} in {millis(span)}; 5 are needed" if samples else "no sample; 5 are needed"
    assert text.splitlines()[-2] == f"growing  not told ({short})", text
    # The 20 buffers the list holds read alike: one line, the indices they span.
    source = project / "short_loop.py"
    held = text.split("held at the end (Python objects keep them)\n", 1)[1].splitlines()
    assert held[:2] == [
        f"  20.0 MiB  20 allocations  KEPT → [0…19] → .ptr (a number inside it: a weak match)  made at Buffer.__init__ (short_loop.py:{marked_line(source, 'step')})",
        f"    Buffer.__init__ (short_loop.py:{marked_line(source, 'step')}) ← main (short_loop.py:{marked_line(source, 'keep')}) ← <module> (short_loop.py:{len(source.read_text().splitlines())})",
    ], held
    # Nothing leaked (the list holds them): no sites; who the process was comes next.
    assert held[2].startswith("process  "), held
    html = command(project, "view", "r.json", "-o", "v.html")
    assert html.returncode == 0, html.stderr
    page = (project / "v.html").read_text()
    assert f"Growth not told: {why}." in page and "No site grew." not in page
    # The end of the code is marked on the timeline, with the 20 MiB the list held then, and on
    # the growth chart.
    data = json.loads(page.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0])
    [end] = [m for m in data["charts"][0]["markers"] if m["kind"] == "end"]
    assert (end["time_ms"], end["live_bytes"]) == (end_ms, 20 * MiB)
    assert data["growth"][0]["end_ms"] == end_ms
    check = command(project, "check", "--max-growth", "1MiB", "r.json")
    assert check.returncode == 0, check.stdout
    lines = strip_ansi(check.stdout).splitlines()
    at = lines.index("growth not checked (too few samples; a longer run has more)")
    assert lines[at + 1] == f"  r.json: {why}", lines
    # Without --max-growth, nothing is said of it.
    assert "growth not checked" not in command(project, "check", "r.json").stdout


def test_a_program_that_leaves_through_libc_exit_has_its_report_saying_so(project: Path):
    """libc's _exit, past os._exit's wrapper: no atexit handler runs, the report is still
    written, and it says why the end is not known."""
    result, path = run_program(project, ["keeps.py", "native_exit"])
    assert result.returncode == 5, result.stderr
    report = load_report(path)
    assert report["reason"] == "exit" and report["complete"] is True
    assert sorted(leak["size"] for leak in report["leaks"]) == [1 * MiB, 2 * MiB, 3 * MiB, 4 * MiB]
    python = view(report)
    assert python["end"]["recorded"] is False
    assert python["end"]["why"].startswith("the program left through _exit(5) (os._exit, or native code)"), python
    text = strip_ansi(command(project, "summary", "r.json").stdout)
    assert "the end  not recorded: the program left through _exit(5)" in text


def test_a_child_forked_without_exec_has_its_own_end(project: Path):
    """multiprocessing's forked child leaves through os._exit: its report has its own end and
    classes; the parent's, with a failed exec (a vfork child's _exit) between, has its own."""
    result, _ = run_program(project, ["forks.py"])
    assert result.returncode == 0, result.stderr
    child_pid = int(result.stdout.split()[1])
    reports = {}
    for path in sorted(project.glob("r*.json")):
        reports[load_report(path)["process"]["pid"]] = path
    assert len(reports) == 2, sorted(reports)
    child = reports.pop(child_pid)
    (parent,) = reports.values()
    source = project / "forks.py"
    line = lambda marker: marked_line(source, marker)  # noqa: E731
    for path, how, function, kept, lost in [
        (child, "os_exit", "child_work", "child-kept", "child-lost"),
        (parent, "finished", "main", "parent-kept", "parent-lost"),
    ]:
        python = view(load_report(path))
        assert python["end"]["recorded"] is True and python["end"]["how"] == how, python["end"]
        classes = sorted((a["class"], a["size"]) for a in python["view"]["allocations"])
        sizes = (1 * MiB, 2 * MiB) if path == child else (3 * MiB, 4 * MiB)
        assert classes == [("held", sizes[0]), ("lost", sizes[1])], classes
        text = strip_ansi(command(project, "summary", path.name).stdout)
        assert f"KEPT → [0] (a number inside it: a weak match)  made at {function} (forks.py:{line(kept)})" in text
        assert f"  {function} (forks.py:{line(lost)})\n" in text.split("lost at the end")[1], text


def test_the_program_sees_its_interpreter_as_without_cuguard(project: Path):
    """sys.path, __main__, warnings and exit status as bare; the user's own sitecustomize runs
    once."""
    env = dict(PYTHONPATH=str(project / "usersite"), PROBE_RUNS="1", PROBE_STATUS="7")
    sim_env = clean_env(**env)
    bare = run([sys.executable, "probe.py"], project, sim_env)
    # Bare, on the simulated driver without the shim: the same program, the same Python.
    bare_cmd = cuguard_command() + ["run", "--driver", "sim", "--quiet", "--report", str(project / "bare.json"), "--", sys.executable, "probe.py"]
    off = run(bare_cmd, project, clean_env(CUGUARD_PYTHON_END="0", **env))
    under, _ = run_program(project, ["probe.py"], **env)
    assert under.returncode == 7 and off.returncode == 7, under.stderr
    seen_under = json.loads(under.stdout)
    seen_off = json.loads(off.stdout)
    assert seen_under == seen_off, (seen_under, seen_off)
    assert seen_under["sitecustomize_runs"] == 1
    assert not any("cuguard-python" in p for p in seen_under["path"])
    assert under.stderr == "", under.stderr
    del bare


def test_a_caches_history_gives_each_lines_live_bytes_over_time():
    """PyTorch's history, in the shape `torch.cuda.memory._snapshot()["device_traces"]` has it
    (Unix microseconds, the allocating Python frames innermost first): each program line's live
    bytes over time, the framework's own frames skipped, a block freed before its line's end
    counted down, and entries whose allocation the history no longer holds ignored."""
    from cuguard import _caches

    torch_dir = "/site-packages/torch/"
    start_ms = 1_000_000.0

    def frames(line):
        return [
            {"filename": torch_dir + "nn/functional.py", "line": 5, "name": "linear"},
            {"filename": "/work/train.py", "line": line, "name": "step"},
        ]

    entries = [{"action": "free_completed", "addr": 1, "size": 64 * MiB, "time_us": (start_ms + 1) * 1000}]
    for i in range(10):
        t = (start_ms + 100 * (i + 1)) * 1000
        entries.append({"action": "alloc", "addr": 1000 + i, "size": 2 * MiB, "time_us": t, "frames": frames(7)})
        entries.append({"action": "alloc", "addr": 5000 + i, "size": 4 * MiB, "time_us": t + 10, "frames": frames(8)})
        entries.append({"action": "free_requested", "addr": 5000 + i, "size": 4 * MiB, "time_us": t + 20})
        entries.append({"action": "free_completed", "addr": 5000 + i, "size": 4 * MiB, "time_us": t + 30})
        entries.append({"action": "segment_alloc", "addr": 9000 + i, "size": 20 * MiB, "time_us": t + 40})
    lines, cut = _caches.history_lines([entries], torch_dir, start_ms)
    assert cut is None
    assert [(l["frames"][1]["line"], l["device"]) for l in lines] == [(7, 0), (8, 0)], "largest peak first"
    kept, temporary = lines
    assert kept["samples"] == [[100, 0]] + [[100 * (i + 1), 2 * MiB * (i + 1)] for i in range(10)]
    assert temporary["samples"][0] == [100, 0] and max(b for _, b in temporary["samples"]) == 4 * MiB
    assert temporary["samples"][-1] == [1000, 0]
