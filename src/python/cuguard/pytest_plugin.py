"""The pytest plugin: GPU memory leaks and peaks per test, with limits.

Registered by the `pytest11` entry point, so it is loaded whenever the distribution is
installed; without `--cuguard` it only declares its options and markers and does nothing else.

With `--cuguard`:

- **Under the shim.** If pytest was not started under the shim (`cuguard.active()` is False), it
  restarts itself under it (`os.execve`, the same process) before the initial conftests load,
  so before anything can load CUDA: `LD_PRELOAD` (and, with `--cuguard-driver sim`, the
  simulated driver) exactly as `cuguard run` sets them (`cuguard._launcher.shim_env`). Started
  under `cuguard run` (or `LD_PRELOAD`), it does not restart. pytest-xdist's workers inherit the
  environment, so each worker is its own process under the shim. What `cuguard run` says as it
  starts a program, lost in the restart otherwise, goes into the restarted pytest's header, once:
  above all that no `libcuda.so.1` can be found on this machine (`NO_DRIVER`, in pytest's
  words: `--cuguard-driver sim` runs the tests without a GPU).
- **Per test.** Each test runs inside `cuguard.track()`, opened after a `gc.collect()` when the
  test's call starts and closed after another `gc.collect()` when its teardown has finished, so
  memory a function-scoped fixture frees in its teardown is not a leak. Memory allocated by the
  setup of fixtures is not the test's. Only leaks whose owner is `"program"` count; what
  frameworks' caches (PyTorch's caching allocator, CuPy's and RMM's pools…) and libraries kept is
  added up by owner as the cache's growth.
- **Limits.** `@pytest.mark.limit_gpu_leaks(SIZE)` fails a test whose leaks exceed SIZE;
  `@pytest.mark.limit_gpu_memory(SIZE)` fails a test whose peak (above its start) exceeds SIZE;
  `--cuguard-limit-leaks=SIZE` is the leak limit of every test without the marker. The test's
  call report becomes a failure whose message names each leak's site (Python file:line) and
  size. A bad SIZE fails the collection of the test's module, naming the test.
- **Sites and their callers.** A leak's site is followed by the line that called it when that
  line is the program's (`spike.py:18 in alloc ← spike.py:27 in step`), and leaks are grouped by
  that text: a helper's leaks from three lines are three rows. A site in one of the helpers
  `CUGUARD_HELPERS` names (`alloc,make_*`) is named by its first caller that is not one:
  `spike.py:27 in step (via alloc)` (`holders._call_path`).
- **Summary.** The terminal summary lists the tests that leaked, largest first, with their
  sites, and how much each framework cache grew; it suggests `--cuguard-uncached` when a cache
  grew. With pytest-xdist, each test's result travels on its report (`report.cuguard`, a plain
  dict) and the owners' names in `workeroutput`, so the controller's summary covers every worker.
- **Names as they are.** A frame's function and file, a driver entry, an owner's label and a
  test's id are the program's to choose: the messages and the summary escape what could break a
  line, drive the terminal or reorder the text (`_units.escaped`, the `cuguard` command's rule:
  `\\n`, `\\u{202e}`).
- `--cuguard-uncached` sets `PYTORCH_NO_CUDA_MEMORY_CACHING=1` (before the restart) and, at
  session start in each process that runs tests, makes CuPy allocate without its pool and RMM use
  its plain `CudaMemoryResource`, when they are installed: each tensor or array is then its own
  allocation, so the test that kept it is named.

To run tests the plugin restarts `pytest` itself by its command line (`sys.orig_argv`); a
program that calls `pytest.main()` itself must be started under `cuguard run` instead.
"""

import gc
import importlib.util
import os
import subprocess
import sys
import traceback
from collections import defaultdict
from typing import Any, Dict, List, Optional, Tuple

import pytest

from ._units import escaped, human_bytes, parse_size

#: Set in the environment of a pytest restarted under the shim (so it never restarts twice).
RESTARTED = "CUGUARD_PYTEST_RESTARTED"

#: Set in the environment of a pytest restarted under the shim to the lines `cuguard run` said
#: (one a line), for its header; taken out of the environment there.
SAID = "CUGUARD_PYTEST_SAID"

#: The header's line, in pytest's words, where `cuguard run` says that the program would find no
#: CUDA driver (`_launcher.NO_DRIVER_START`).
NO_DRIVER = (
    "cuguard: no libcuda.so.1 on this machine (no NVIDIA driver?): the tests' CUDA calls will "
    "fail; --cuguard-driver sim runs them on the simulated driver"
)

#: The environment variable that turns PyTorch's caching allocator off.
TORCH_NO_CACHING = "PYTORCH_NO_CUDA_MEMORY_CACHING"

_LEAK_MARKER = "limit_gpu_leaks"
_MEMORY_MARKER = "limit_gpu_memory"

#: How many tests the summary lists, and sites per test.
_SUMMARY_TESTS = 20
_SUMMARY_SITES = 5


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cuguard", "GPU memory per test (cuguard)")
    group.addoption(
        "--cuguard",
        action="store_true",
        default=False,
        help="track each test's GPU memory under cuguard's shim (restarting pytest under it if "
        "needed); fail tests over their limits; summarize leaks",
    )
    group.addoption(
        "--cuguard-driver",
        choices=("system", "sim"),
        default="system",
        help="the CUDA driver of the restarted pytest: system (default) or sim, cuguard's "
        "simulated driver",
    )
    group.addoption(
        "--cuguard-limit-leaks",
        metavar="SIZE",
        default=None,
        help="fail every test without a limit_gpu_leaks marker that leaks more than SIZE "
        "(e.g. 0, '1 MiB', 512KiB)",
    )
    group.addoption(
        "--cuguard-uncached",
        action="store_true",
        default=False,
        help="turn PyTorch's, CuPy's and RMM's caches off, so every tensor is its own "
        "allocation and the test that kept it is named",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_LEAK_MARKER}(size): with --cuguard, fail the test if the GPU memory it leaks "
        "(allocated and still live after its teardown, framework caches not counted) exceeds "
        "size, e.g. '1 MiB'",
    )
    config.addinivalue_line(
        "markers",
        f"{_MEMORY_MARKER}(size): with --cuguard, fail the test if its GPU memory peak above "
        "its start exceeds size, e.g. '2 GiB'",
    )
    if not config.getoption("cuguard"):
        return
    limit = config.getoption("cuguard_limit_leaks")
    default_leak_limit = None
    if limit is not None:
        try:
            default_leak_limit = parse_size(limit)
        except ValueError as e:
            raise pytest.UsageError(f"--cuguard-limit-leaks: {e}") from None
    config.pluginmanager.register(_Tracker(config, default_leak_limit), "cuguard-tracker")


# --- the restart under the shim ---------------------------------------------------------------


def _active() -> bool:
    import cuguard

    return bool(cuguard.active())


def _restart_argv(invocation_args: List[str]) -> List[str]:
    """The command line that started this pytest, with this interpreter."""
    if list(invocation_args) != sys.argv[1:]:
        raise pytest.UsageError(
            "--cuguard: pytest was started by pytest.main() inside another program, so it cannot "
            "restart itself under the shim; run that program under the shim instead: "
            "cuguard run -- python your_program.py"
        )
    orig = getattr(sys, "orig_argv", None)
    if orig:
        return [sys.executable, *orig[1:]]
    flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
    main = sys.argv[0]
    if os.path.basename(main) == "__main__.py":
        return [sys.executable, *flags, "-m", "pytest", *sys.argv[1:]]
    return [sys.executable, *flags, main, *sys.argv[1:]]


def _worker_id() -> Optional[str]:
    return os.environ.get("PYTEST_XDIST_WORKER")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: Any, args: List[str]) -> None:
    namespace = early_config.known_args_namespace
    if not getattr(namespace, "cuguard", False):
        return
    limit = getattr(namespace, "cuguard_limit_leaks", None)
    if limit is not None:
        try:
            parse_size(limit)
        except ValueError as e:
            raise pytest.UsageError(f"--cuguard-limit-leaks: {e}") from None
    uncached = getattr(namespace, "cuguard_uncached", False)
    if uncached:
        os.environ[TORCH_NO_CACHING] = "1"
    if _active():
        return
    if _worker_id() is not None:
        raise pytest.UsageError(
            f"--cuguard: xdist worker {_worker_id()} is not under cuguard's shim; start pytest "
            "with --cuguard (it restarts under the shim and its workers inherit it) or under "
            "`cuguard run`"
        )
    if os.environ.get(RESTARTED):
        raise pytest.UsageError(
            "--cuguard: pytest was restarted under cuguard's shim, but the shim is not active "
            f"in it (LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r}); is CUGUARD_DISABLE set?"
        )
    from . import _launcher

    driver = getattr(namespace, "cuguard_driver", "system") or "system"
    try:
        env, said = _launcher.shim_env_said(driver)
    except (_launcher.NotInstalled, RuntimeError, OSError) as e:
        raise pytest.UsageError(f"--cuguard: cannot restart pytest under cuguard's shim: {e}") from None
    env[RESTARTED] = driver
    said = [NO_DRIVER if line.startswith(_launcher.NO_DRIVER_START) else line for line in said]
    if said:
        env[SAID] = "\n".join(said)
    argv = _restart_argv(list(early_config.invocation_params.args))
    # pytest captures file descriptors 0, 1 and 2 while conftests load: give the restarted
    # process the real ones.
    capture = early_config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)


# --- limits -------------------------------------------------------------------------------------


def _marker_limit(item: pytest.Item, name: str) -> Optional[int]:
    marker = item.get_closest_marker(name)
    if marker is None:
        return None
    values = list(marker.args) + list(marker.kwargs.values())
    if len(values) != 1:
        raise ValueError(f"@pytest.mark.{name} takes one size, such as {name}(\"1 MiB\")")
    try:
        return parse_size(values[0])
    except ValueError as e:
        raise ValueError(f"@pytest.mark.{name}({values[0]!r}): {e}") from None


class _Limits:
    """A test's limits: leaked bytes and where that limit comes from; peak bytes."""

    __slots__ = ("leaks", "leaks_from", "memory")

    def __init__(self, leaks: Optional[int], leaks_from: str, memory: Optional[int]):
        self.leaks = leaks
        self.leaks_from = leaks_from
        self.memory = memory


# --- results --------------------------------------------------------------------------------


def _frame_text(frame: Dict[str, Any], rootdir: str) -> str:
    """`file:line in function`, the file relative to `rootdir` when it lies inside it."""
    file = str(frame["file"])
    try:
        relative = os.path.relpath(file, rootdir)
        if not relative.startswith(".."):
            file = relative
    except ValueError:
        pass
    text = f"{file}:{frame.get('line')}" if frame.get("line") is not None else file
    if frame.get("function"):
        text += f" in {frame['function']}"
    return text


def _site_text(site: Any, rootdir: str) -> str:
    """A leak's site as its messages name it: `spike.py:18 in alloc`, with the line that called
    it (`← spike.py:27 in step`), or by that line when the site is a helper's
    (`spike.py:27 in step (via alloc)`): see `holders._call_path`."""
    if not isinstance(site, dict) or not site.get("file"):
        return "(no Python line)"
    from .holders import _call_path

    frame, caller, via = _call_path(site)
    text = _frame_text(frame, rootdir)
    if via is not None:
        return f"{text} (via {via})"
    if caller is not None:
        text += f" ← {_frame_text(caller, rootdir)}"
    return text


def _cached_blocks() -> Dict[Tuple[str, int, int], List[Dict[str, Any]]]:
    """The live blocks of the frameworks' caches now (PyTorch's allocator, CuPy's pool with
    cuguard's hook): (framework, address, size) -> the frames that allocated it."""
    from . import _caches

    torch = sys.modules.get("torch")
    if torch is not None:
        # PyTorch keeps cuBLAS workspaces in its cache for as long as the handle lives: the first
        # test that multiplies matrices did not keep them (PyTorch's own leak check clears them).
        clear = getattr(getattr(torch, "_C", None), "_cuda_clearCublasWorkspaces", None)
        try:
            if clear is not None and torch.cuda.is_initialized():
                clear()
        except Exception:
            pass
    out: Dict[Tuple[str, int, int], List[Dict[str, Any]]] = {}
    try:
        for book in _caches.books([]):
            for b in book.blocks:
                if b.state == "live":
                    out[(book.framework, b.address, b.size)] = b.frames
    except Exception:
        pass
    return out


def _kept_in_caches(before: Dict[Tuple[str, int, int], Any]) -> List[Dict[str, Any]]:
    """The cache blocks live now that were not live when the test started: tensors and arrays
    the test kept, each as a leak of the program's at the line that allocated it."""
    kept = []
    for (framework, address, size), frames in _cached_blocks().items():
        if (framework, address, size) in before:
            continue
        site = _user_frame(frames)
        kept.append(
            {
                "size": size,
                "address": address,
                "owner": "program",
                "api": f"{framework} cache",
                "site": site,
            }
        )
    return kept


def _user_frame(frames: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The innermost frame outside installed packages and the standard library."""
    import sysconfig

    stdlib = sysconfig.get_paths().get("stdlib") or ""
    for f in frames:
        file = str(f.get("file") or "")
        if "-packages/" in file or (stdlib and file.startswith(stdlib)) or file.startswith("<"):
            continue
        return {"file": file, "line": f.get("line"), "function": f.get("function")}
    return None


def _result(block: Any, rootdir: str, kept: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    """What one test's block saw, as plain data (it travels on the report, through xdist): its
    leaks, and the cache blocks it kept (`kept`, from the frameworks' own books)."""
    sites: Dict[Tuple[str, str], List[int]] = {}
    held: Dict[str, int] = defaultdict(int)
    kinds: Dict[str, str] = {}
    leaked = 0
    count = 0
    for leak in list(block.leaks or []) + list(kept or []):
        size = int(leak.get("size") or 0)
        owner = leak.get("owner") or "program"
        if owner != "program":
            held[owner] += size
            if leak.get("owner_kind"):
                kinds[owner] = str(leak["owner_kind"])
            continue
        leaked += size
        count += 1
        key = (_site_text(leak.get("site"), rootdir), str(leak.get("api") or ""))
        entry = sites.setdefault(key, [0, 0])
        entry[0] += size
        entry[1] += 1
    ordered = sorted(sites.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return {
        "leaked_bytes": leaked,
        "leaks": count,
        "sites": [
            {"site": site, "api": api, "bytes": total, "count": n}
            for (site, api), (total, n) in ordered
        ],
        "held": dict(held),
        "owner_kinds": kinds,
        "peak_bytes": int(getattr(block, "peak_bytes", 0) or 0),
        "allocated_bytes": int(getattr(block, "allocated_bytes", 0) or 0),
    }


def _site_lines(result: Dict[str, Any], indent: str, limit: Optional[int] = None) -> List[str]:
    """The lines of a result's sites, their texts (the program's names) escaped."""
    lines = []
    sites = result["sites"]
    shown = sites if limit is None else sites[:limit]
    for s in shown:
        count = f"{s['count']} allocations" if s["count"] != 1 else "1 allocation"
        api = f", {escaped(s['api'])}" if s["api"] else ""
        site = escaped(s["site"])
        lines.append(f"{indent}{human_bytes(s['bytes']):>10}  {site}  ({count}{api})")
    if len(shown) < len(sites):
        lines.append(f"{indent}… and {len(sites) - len(shown)} more sites")
    return lines


def _failures(result: Dict[str, Any], limits: _Limits) -> List[str]:
    messages = []
    if limits.leaks is not None and result["leaked_bytes"] > limits.leaks:
        n = result["leaks"]
        messages.append(
            f"cuguard: this test leaked {human_bytes(result['leaked_bytes'])} of GPU memory in "
            f"{n} allocation{'s' if n != 1 else ''}, over its limit of "
            f"{human_bytes(limits.leaks)} ({limits.leaks_from}); still live after its teardown:"
        )
        messages.extend(_site_lines(result, "  "))
    if limits.memory is not None and result["peak_bytes"] > limits.memory:
        messages.append(
            f"cuguard: this test's GPU memory peaked at {human_bytes(result['peak_bytes'])} above "
            f"its start, over its limit of {human_bytes(limits.memory)} "
            f"(@pytest.mark.{_MEMORY_MARKER})"
        )
    return messages


# --- the plugin proper, registered with --cuguard --------------------------------------------


class _Tracker:
    """Tracks each test (in the processes that run tests) and gathers the results (in the
    process that prints the summary: the only one, or xdist's controller)."""

    def __init__(self, config: pytest.Config, default_leak_limit: Optional[int]):
        self.config = config
        self.default_leak_limit = default_leak_limit
        self.uncached = bool(config.getoption("cuguard_uncached"))
        self.rootdir = str(config.rootpath)
        self.limits: Dict[str, _Limits] = {}
        self.block: Any = None
        self.labelled = False
        # Gathered from reports: nodeid -> result.
        self.results: Dict[str, Dict[str, Any]] = {}
        self.tracked = 0
        # Owner id -> {"label", "kind"}, from the processes' reports.
        self.owners: Dict[str, Dict[str, str]] = {}
        self.owners_seen: set = set()
        self.notes: List[str] = []
        # What `cuguard run` said at the restart, for the header (this process's alone).
        self.said = [line for line in os.environ.pop(SAID, "").splitlines() if line]

    # Collection: every test's limits, checked once; bad ones fail the module's collection.

    def _limits_of(self, item: pytest.Item) -> _Limits:
        leaks = _marker_limit(item, _LEAK_MARKER)
        memory = _marker_limit(item, _MEMORY_MARKER)
        if leaks is not None:
            return _Limits(leaks, f"@pytest.mark.{_LEAK_MARKER}", memory)
        return _Limits(self.default_leak_limit, "--cuguard-limit-leaks", memory)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        outcome = yield
        report = outcome.get_result()
        if report.outcome != "passed" or not report.result:
            return
        problems = []
        for node in report.result:
            if not isinstance(node, pytest.Item):
                continue
            try:
                self.limits[node.nodeid] = self._limits_of(node)
            except ValueError as e:
                problems.append(f"  {escaped(node.nodeid)}: {escaped(str(e))}")
        if problems:
            report.outcome = "failed"
            report.longrepr = "cuguard: bad GPU memory limits:\n" + "\n".join(problems)
            report.result = []

    # The process that runs tests: set up, then one block per test.

    def _runs_tests(self) -> bool:
        return not self.config.pluginmanager.has_plugin("dsession")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self._runs_tests():
            return
        if self.uncached:
            self.notes.extend(_uncache_frameworks())

    def pytest_report_header(self, config: pytest.Config) -> List[str]:
        restarted = os.environ.get(RESTARTED)
        how = (
            f"restarted under the shim (--cuguard-driver {restarted})"
            if restarted
            else "started under the shim"
        )
        limit = (
            f"leak limit {human_bytes(self.default_leak_limit)} unless marked"
            if self.default_leak_limit is not None
            else "no leak limit unless marked"
        )
        uncached = "; framework caches off (--cuguard-uncached)" if self.uncached else ""
        said = [escaped(line) for line in self.said]
        return [f"cuguard: GPU memory tracked per test, {how}; {limit}{uncached}", *said]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        import cuguard

        if not self.labelled:
            self.labelled = True
            worker = _worker_id()
            if worker is not None:
                cuguard.label("xdist_worker", worker)
        cuguard.label("test", item.nodeid)
        gc.collect()
        self.cached_before = _cached_blocks()
        block = cuguard.track()
        block.__enter__()
        self.block = block
        yield

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Optional[pytest.Item]) -> bool:
        from _pytest.runner import runtestprotocol

        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        self.block = None
        try:
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
        finally:
            block, self.block = self.block, None
            kept: List[Dict[str, Any]] = []
            if block is not None:
                _let_go_of_failed_frames()
                gc.collect()
                kept = _kept_in_caches(getattr(self, "cached_before", {}))
                block.__exit__(None, None, None)
        if block is not None:
            self._judge(item, reports, block, kept)
        for report in reports:
            ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _judge(
        self, item: pytest.Item, reports: List[pytest.TestReport], block: Any, kept: List[Dict[str, Any]]
    ) -> None:
        result = _result(block, self.rootdir, kept)
        self.owners_seen.update(result["held"])
        limits = self.limits.get(item.nodeid) or self._limits_of(item)
        call = next((r for r in reports if r.when == "call"), None)
        carrier = call or reports[-1]
        carrier.cuguard = result  # type: ignore[attr-defined]
        messages = _failures(result, limits)
        if not messages or call is None or hasattr(call, "wasxfail"):
            return
        text = "\n".join(messages)
        if call.passed:
            call.outcome = "failed"
            call.longrepr = text
        elif call.failed:
            call.sections.append(("cuguard", text))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self._runs_tests():
            return
        owners = _owner_names(self.owners_seen) if self.owners_seen else {}
        workeroutput = getattr(self.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput["cuguard_owners"] = owners
            workeroutput["cuguard_notes"] = list(self.notes)
        else:
            self.owners.update(owners)

    # Gathering, wherever the summary is printed.

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        result = getattr(report, "cuguard", None)
        if isinstance(result, dict):
            self.results[report.nodeid] = result
            self.tracked += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        self.owners.update(output.get("cuguard_owners") or {})
        for note in output.get("cuguard_notes") or []:
            if note not in self.notes:
                self.notes.append(note)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        for line in summary_lines(self.results, self.owners, self.tracked, self.uncached, self.notes):
            if line.startswith("="):
                terminalreporter.write_sep("=", line.strip("= "))
            else:
                terminalreporter.write_line(line)


def summary_lines(
    results: Dict[str, Dict[str, Any]],
    owners: Dict[str, Dict[str, str]],
    tracked: int,
    uncached: bool,
    notes: List[str],
) -> List[str]:
    """The terminal summary's lines (a line starting with '=' is a section heading); every text
    from the program (names, labels, test ids, notes) escaped."""
    if not results and not notes:
        return []
    lines = ["= cuguard: GPU memory per test ="]
    lines.extend(f"note: {escaped(n)}" for n in notes)
    leaking = sorted(
        ((nodeid, r) for nodeid, r in results.items() if r["leaked_bytes"] > 0),
        key=lambda kv: (-kv[1]["leaked_bytes"], kv[0]),
    )
    if not leaking:
        lines.append(
            f"No test leaked GPU memory ({tracked} test{'s' if tracked != 1 else ''} tracked)."
        )
    else:
        total = sum(r["leaked_bytes"] for _, r in leaking)
        lines.append(
            f"{len(leaking)} of {tracked} tests leaked GPU memory, {human_bytes(total)} in all "
            "(the program's own; framework caches are not leaks), largest first:"
        )
        for nodeid, r in leaking[:_SUMMARY_TESTS]:
            n = r["leaks"]
            lines.append(
                f"{human_bytes(r['leaked_bytes']):>10}  {escaped(nodeid)}  "
                f"({n} allocation{'s' if n != 1 else ''})"
            )
            lines.extend(_site_lines(r, " " * 14, _SUMMARY_SITES))
        if len(leaking) > _SUMMARY_TESTS:
            lines.append(f"… and {len(leaking) - _SUMMARY_TESTS} more tests")
    growth: Dict[str, List[Tuple[str, int]]] = defaultdict(list)
    kinds: Dict[str, str] = {}
    for nodeid, r in results.items():
        kinds.update(r.get("owner_kinds") or {})
        for owner, size in r["held"].items():
            if size > 0:
                growth[owner].append((nodeid, size))
    cache_grew = False
    if growth:
        lines.append("Kept by frameworks' caches and libraries (not leaks):")
        for owner, tests in sorted(growth.items(), key=lambda kv: -sum(s for _, s in kv[1])):
            info = owners.get(owner) or {}
            kind = kinds.get(owner) or info.get("kind") or "framework_cache"
            cache_grew = cache_grew or kind == "framework_cache"
            label = info.get("label") or owner
            tests.sort(key=lambda t: (-t[1], t[0]))
            grown = sum(s for _, s in tests)
            first = ", ".join(f"{escaped(nodeid)} {human_bytes(s)}" for nodeid, s in tests[:3])
            more = f", and {len(tests) - 3} more" if len(tests) > 3 else ""
            verb = "grew by" if kind == "framework_cache" else "kept"
            lines.append(
                f"  {escaped(label)} ({escaped(owner)}) {verb} {human_bytes(grown)}: {first}{more}"
            )
    if cache_grew and not uncached:
        lines.append(
            "A framework's cache grew: it can hide which test kept a tensor or array. Run with "
            "--cuguard-uncached to turn the caches off, so each one is its own allocation."
        )
    return lines


def _let_go_of_failed_frames() -> None:
    """pytest keeps a failed test's exception in `sys.last_traceback` (for post-mortem debugging,
    which is over by now), and with it the test's frames and their locals: clear those frames, so
    that what the test's locals held is freed as it would have been had the test passed."""
    tb = getattr(sys, "last_traceback", None)
    if tb is None:
        return
    traceback.clear_frames(tb)
    # A frame whose f_locals was read (pytest's traceback formatting does) keeps that dict after
    # clear() on CPython 3.9-3.13; reading it again syncs it with the cleared locals.
    while tb is not None:
        try:
            tb.tb_frame.f_locals
        except Exception:
            pass
        tb = tb.tb_next


def _owner_names(ids: set) -> Dict[str, Dict[str, str]]:
    """Labels and kinds of owner ids, from this process's report as it stands (its `owners[]`)."""
    import cuguard

    names: Dict[str, Dict[str, str]] = {}
    try:
        report = cuguard.snapshot()
    except Exception:  # the names only make the summary nicer
        return names
    for owner in report.get("owners") or []:
        if isinstance(owner, dict) and owner.get("id") in ids:
            names[owner["id"]] = {
                "label": str(owner.get("label") or owner["id"]),
                "kind": str(owner.get("kind") or ""),
            }
    return names


def _uncache_frameworks() -> List[str]:
    """CuPy without its memory pool, RMM on its plain resource, where installed. Returns notes
    on what could not be done."""
    notes = []
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                notes.append(
                    "PyTorch initialized CUDA before --cuguard-uncached took effect: its cache "
                    "may still be on"
                )
        except Exception:
            pass
    if importlib.util.find_spec("cupy") is not None:
        try:
            import cupy  # type: ignore

            cupy.cuda.set_allocator(None)
            cupy.cuda.set_pinned_memory_allocator(None)
        except Exception as e:
            notes.append(f"--cuguard-uncached: CuPy's pool is still on ({e})")
    if importlib.util.find_spec("rmm") is not None:
        try:
            import rmm  # type: ignore

            rmm.mr.set_current_device_resource(rmm.mr.CudaMemoryResource())
        except Exception as e:
            notes.append(f"--cuguard-uncached: RMM's resource is unchanged ({e})")
    return notes
