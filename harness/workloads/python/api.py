"""api.py: the cuguard Python API (src/python/cuguard) exercised from inside a process, one scenario
per run, on the simulated driver (or a real one). Device memory comes from cuMemAlloc_v2 through
ctypes. Each scenario asserts what it expects and prints `ok SCENARIO` last; some print facts the
test then checks against the process's report.

    python3 api.py SCENARIO

Scenarios: outside, disabled, live, snapshot PATH, track, label, holders, threads, fork, atexit,
nocuda, version.
"""

import atexit
import ctypes
import gc
import json
import os
import sys
import threading

import cuguard

MiB = 1 << 20

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
cuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
_ctx = ctypes.c_void_p()


def check(result, what):
    if result != 0:
        raise SystemExit(f"{what}: CUDA error {result}")


def init():
    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(_ctx), dev), "cuDevicePrimaryCtxRetain")
    current()


def current():
    """Makes the primary context current on the calling thread."""
    check(cuda.cuCtxSetCurrent(_ctx), "cuCtxSetCurrent")


def alloc(size):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), size), "cuMemAlloc_v2")  # site: alloc
    return ptr.value


def free(ptr):
    check(cuda.cuMemFree_v2(ptr), "cuMemFree_v2")


def marked_line(marker):
    """The number of this file's line that ends with `# MARKER`."""
    return next(n for n, line in enumerate(open(__file__), 1) if line.rstrip().endswith(f"# {marker}"))


ALLOC_LINE = marked_line("site: alloc")


def expect_raises(kind, words, f, *args):
    try:
        f(*args)
    except kind as e:
        text = str(e)
        for w in words:
            assert w in text, f"{f.__name__}: {w!r} not in {text!r}"
        return e
    raise AssertionError(f"{f.__name__} did not raise {kind.__name__}")


def not_active_everywhere(words):
    assert cuguard.active() is False
    assert cuguard.inactive_reason() is not None
    expect_raises(cuguard.NotActive, words, cuguard.snapshot)
    expect_raises(cuguard.NotActive, words, cuguard.live)
    expect_raises(cuguard.NotActive, words, cuguard.label, "k", "v")
    expect_raises(cuguard.NotActive, words, cuguard.holders)
    expect_raises(cuguard.NotActive, words, lambda: cuguard.track().__enter__())
    # NotActive is a CuguardError, a RuntimeError.
    assert issubclass(cuguard.NotActive, cuguard.CuguardError)
    assert issubclass(cuguard.CuguardError, RuntimeError)


def outside():
    """Not under the shim: every call says how to get there."""
    not_active_everywhere(["not loaded", "cuguard run -- python"])


def disabled():
    """Under the shim with CUGUARD_DISABLE=1."""
    not_active_everywhere(["CUGUARD_DISABLE=1"])


def live():
    """live() counts exact bytes, allocations and the peak (one thread)."""
    assert cuguard.active(), cuguard.inactive_reason()
    assert cuguard.live() == {}, cuguard.live()
    init()
    a = alloc(3 * MiB)
    b = alloc(5 * MiB)
    c = alloc(256)
    now = cuguard.live()
    assert list(now) == [0], now
    d = now[0]
    assert d["live_bytes"] == 8 * MiB + 256, d
    assert d["live_allocations"] == 3, d
    assert d["allocated_bytes"] == 8 * MiB + 256, d
    assert d["peak_bytes"] == 8 * MiB + 256, d
    pooled = os.environ.get("CUGUARD_POOL", "1") != "0"
    assert (d["pool_reserved_bytes"] >= 8 * MiB) if pooled else (d["pool_reserved_bytes"] == 0), d
    free(b)
    free(c)
    d = cuguard.live()[0]
    assert d["live_bytes"] == 3 * MiB and d["live_allocations"] == 1, d
    # The peak is taken when the thread folds its counts in (every 1 MiB or 64 operations): the
    # last 256 bytes were not folded before the free.
    assert 8 * MiB <= d["peak_bytes"] <= 8 * MiB + 256, d
    assert d["allocated_bytes"] == 8 * MiB + 256, d
    for _ in range(1000):  # cheap enough for a loop
        cuguard.live()
    free(a)
    d = cuguard.live()[0]
    assert d["live_bytes"] == 0 and d["live_allocations"] == 0, d


def snapshot(path):
    """snapshot() is the report now; with a path it is written there too."""
    init()
    kept = alloc(2 * MiB)
    cuguard.label("phase", "snapshot")
    s = cuguard.snapshot(path)
    with open(path) as f:
        on_disk = json.load(f)
    assert on_disk == s, "the file and the answer differ"
    assert s["schema"] == "cuguard-report" and s["reason"] == "request" and s["complete"] is False, s
    assert s["process"]["pid"] == os.getpid()
    assert s["process"]["labels"] == {"phase": "snapshot"}, s["process"]
    addresses = [int(l["address"], 16) for l in s["leaks"]]
    assert kept in addresses, (hex(kept), addresses)
    again = cuguard.snapshot()
    assert again["report_number"] == s["report_number"] + 1, (again["report_number"], s["report_number"])
    e = expect_raises(OSError, ["No such file"], cuguard.snapshot, "/nonexistent-dir/x/report.json")
    assert e.filename == "/nonexistent-dir/x/report.json", e.filename
    print(json.dumps({"kept": kept}))


def leak_of(t, address):
    found = [l for l in t.leaks if l["address"] == address]
    assert len(found) == 1, (hex(address), t.leaks)
    return found[0]


def addresses(t):
    return [l["address"] for l in t.leaks]


def track():
    """track(): exact leaks, peak and allocated bytes, whatever thread allocates; blocks nest and
    overlap."""
    init()
    before = alloc(64 * MiB)  # live before every block: not counted in peaks

    # Another thread allocates inside the block.
    with cuguard.track() as t:
        box = {}

        def worker():
            current()
            box["kept"] = alloc(3 * MiB)
            box["tid"] = threading.get_native_id()
            gone = alloc(5 * MiB)
            free(gone)

        th = threading.Thread(target=worker)
        th.start()
        th.join()
    assert addresses(t) == [box["kept"]], t.leaks
    leak = leak_of(t, box["kept"])
    assert leak["size"] == 3 * MiB and leak["api"] == "cuMemAlloc_v2", leak
    assert leak["owner"] == "program" and leak["thread"] == box["tid"], leak
    site = leak["site"]
    assert site["file"] == __file__ and site["line"] == ALLOC_LINE and site["function"] == "alloc", (
        site,
        ALLOC_LINE,
    )
    assert t.peak_bytes == 8 * MiB, t.peak_bytes
    assert t.allocated_bytes == 8 * MiB, t.allocated_bytes
    assert t.leaked_bytes == 3 * MiB
    free(box["kept"])

    # Nesting on one thread.
    with cuguard.track() as outer:
        x1 = alloc(1 * MiB)
        with cuguard.track() as inner:
            x2 = alloc(2 * MiB)
            x3 = alloc(4 * MiB)
            free(x2)
        free(x1)
    assert addresses(inner) == [x3] and inner.peak_bytes == 6 * MiB and inner.allocated_bytes == 6 * MiB, inner
    assert addresses(outer) == [x3] and outer.peak_bytes == 7 * MiB and outer.allocated_bytes == 7 * MiB, outer
    free(x3)

    # Two threads' blocks overlap in time: each sees its own window (every thread's allocations).
    steps = [threading.Event() for _ in range(4)]
    got = {}

    def a():
        current()
        with cuguard.track() as wa:
            got["a1"] = alloc(1 * MiB)
            tmp = alloc(16 * MiB)
            free(tmp)
            steps[0].set()
            steps[1].wait()
            got["a2"] = alloc(4 * MiB)
        got["wa"] = wa
        steps[2].set()

    def b():
        current()
        steps[0].wait()
        with cuguard.track() as wb:
            got["b1"] = alloc(2 * MiB)
            steps[1].set()
            steps[2].wait()
            got["b2"] = alloc(8 * MiB)
            tmp = alloc(32 * MiB)
            free(tmp)
        got["wb"] = wb

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wa, wb = got["wa"], got["wb"]
    assert addresses(wa) == [got["a1"], got["b1"], got["a2"]], (wa.leaks, got)
    assert wa.peak_bytes == 17 * MiB and wa.allocated_bytes == 23 * MiB, wa
    assert addresses(wb) == [got["b1"], got["a2"], got["b2"]], (wb.leaks, got)
    assert wb.peak_bytes == 46 * MiB and wb.allocated_bytes == 46 * MiB, wb
    for k in ("a1", "a2", "b1", "b2"):
        free(got[k])

    # A block whose body raises still closes, and the exception goes on.
    try:
        with cuguard.track() as t:
            y = alloc(MiB)
            raise KeyError("body")
    except KeyError:
        pass
    assert addresses(t) == [y], t.leaks
    free(y)
    expect_raises(cuguard.CuguardError, ["once"], lambda: t.__enter__())
    free(before)


def label():
    """label() lands in process.labels of the final report; the last value of a key wins."""
    init()
    alloc(MiB)
    cuguard.label("test", "tests/test_a.py::test_one")
    cuguard.label("epoch", 3)
    cuguard.label("test", "tests/test_a.py::test_two")
    expect_raises(ValueError, ["1 to 256 bytes"], cuguard.label, "", "x")
    expect_raises(ValueError, ["4096"], cuguard.label, "k", "v" * 5000)
    expect_raises(ValueError, ["NUL"], cuguard.label, "k", "a\0b")
    expect_raises(TypeError, ["str"], cuguard.label, 3, "x")
    for i in range(300):  # more keys than the shim keeps
        try:
            cuguard.label(f"k{i}", i)
        except cuguard.CuguardError as e:
            assert "256 label keys" in str(e), e
            break
    else:
        raise AssertionError("no limit on label keys")


class Raising:
    """An object whose every attribute raises, and a property that raises."""

    def __getattr__(self, name):
        raise RuntimeError(f"no {name}")

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("not today")


class Proxy:
    """A proxy that claims to be anything."""

    def __init__(self, target):
        object.__setattr__(self, "_target", target)

    def __getattribute__(self, name):
        if name == "__class__":
            return dict
        raise RuntimeError("proxy")


def holders():
    """holders(): the path from a module global through a dict key to a pure-Python object exposing
    __cuda_array_interface__; from a frame's local; a view; memory no object holds."""
    import api_held

    init()
    weights = alloc(2 * MiB)  # holders: weights
    api_held.CACHE["weights"] = api_held.DeviceArray(weights, 2 * MiB)
    unheld = alloc(3 * MiB)
    odd = [Raising(), Proxy(api_held.CACHE), Raising]

    def inner():
        buf = api_held.DeviceArray(alloc(MiB), MiB)  # noqa: F841 (held by this frame's local)
        view = type("View", (), {})()
        whole = alloc(4 * MiB)  # holders: whole
        view.__cuda_array_interface__ = {"data": (whole + MiB, False), "shape": (MiB,), "typestr": "|u1"}
        return cuguard.holders(), view, whole

    found, view, whole = inner()
    print(found)
    by_address = {}
    for h in found:
        by_address.setdefault(h["address"], []).append(h)

    # Each made at the helper's line, called from the line named after it.
    made_at = f"api.py:{ALLOC_LINE} ← api.py:{marked_line('holders: weights')}"
    [w] = by_address[weights]
    assert w["path"] == [
        "api_held.CACHE",
        "['weights']",
        f"api_held.DeviceArray (2.0 MiB, made at {made_at})",
    ], w
    assert w["holder"] == "api_held.DeviceArray" and w["size"] == 2 * MiB, w
    assert w["made_at"] == made_at and w["site"]["line"] == ALLOC_LINE, w

    [u] = by_address[unheld]
    assert u["holder"] is None and u["path"] is None, u

    [b] = [h for h in found if h["size"] == MiB]
    assert b["path"][0].startswith("buf (local of inner at api.py:"), b
    assert b["path"][-1].startswith("api_held.DeviceArray (1.0 MiB"), b

    [v] = by_address[whole]
    assert v["holder"] == "View" and v["holder_bytes"] == MiB, v
    made_at = f"api.py:{ALLOC_LINE} ← api.py:{marked_line('holders: whole')}"
    assert v["path"][-1] == f"View (1.0 MiB of a 4.0 MiB allocation made at {made_at})", v
    assert v["path"][0].startswith("view (local of inner"), v

    assert [h["size"] for h in found] == sorted((h["size"] for h in found), reverse=True)
    assert str(found).startswith("cuguard holders: 4 live allocations (10.0 MiB)"), str(found)
    assert cuguard.format_holders(found) == str(found)

    large = cuguard.holders(min_bytes=3 * MiB)
    assert sorted(h["size"] for h in large) == [3 * MiB, 4 * MiB], large
    expect_raises(ValueError, ["min_bytes"], cuguard.holders, -1)
    del odd


def threads():
    """Every call from many threads at once, with allocations going on: right answers, no crash or
    hang."""
    init()
    errors = []
    start = threading.Barrier(8)

    def worker(i):
        try:
            current()
            start.wait()
            for n in range(40):
                with cuguard.track() as t:
                    p = alloc((i + 1) * 4096)
                    cuguard.live()
                    cuguard.label(f"worker{i}", n)
                assert p in addresses(t), (p, t.leaks)
                free(p)
                if n % 20 == 0:
                    s = cuguard.snapshot()
                    assert s["process"]["labels"][f"worker{i}"] is not None
            cuguard.holders(min_bytes=1 << 40)
        except BaseException as e:  # report every thread's failure
            errors.append(f"worker {i}: {e!r}")

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert not errors, errors
    assert cuguard.live()[0]["live_allocations"] == 0, cuguard.live()


def fork():
    """In a forked child: the API works afresh; a block opened in the parent cannot be closed there."""
    init()
    parent_block = cuguard.track()
    parent_block.__enter__()
    kept = alloc(MiB)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        result = {}
        try:
            result["active"] = cuguard.active()
            result["live"] = cuguard.live()
            try:
                parent_block.__exit__(None, None, None)
                result["parent_block"] = "closed"
            except cuguard.CuguardError as e:
                result["parent_block"] = str(e)
            with cuguard.track() as t:
                pass
            result["child_leaks"] = t.leaks
            cuguard.label("child", "yes")
            result["labels"] = cuguard.snapshot()["process"].get("labels")
        except BaseException as e:
            result["error"] = repr(e)
        os.write(w, json.dumps(result).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.waitpid(pid, 0)
    child = json.loads(data)
    assert "error" not in child, child
    assert child["active"] is True, child
    assert child["live"] == {}, child
    assert "before os.fork()" in child["parent_block"], child
    assert child["child_leaks"] == [], child
    assert child["labels"] == {"child": "yes"}, child
    parent_block.__exit__(None, None, None)
    assert addresses(parent_block) == [kept], parent_block.leaks


def at_exit():
    """In atexit handlers: the API answers as usual."""
    init()
    kept = alloc(MiB)

    def handler():
        assert cuguard.active()
        assert cuguard.live()[0]["live_bytes"] == MiB
        with cuguard.track() as t:
            p = alloc(MiB)
        assert addresses(t) == [p], t.leaks
        cuguard.label("stage", "atexit")
        s = cuguard.snapshot()
        assert kept in [int(l["address"], 16) for l in s["leaks"]]
        print("ok atexit-handler", flush=True)

    atexit.register(handler)


def nocuda():
    """Under the shim, with no CUDA call at all: answers, not errors."""
    assert cuguard.active()
    assert cuguard.live() == {}
    with cuguard.track() as t:
        pass
    assert t.leaks == [] and t.peak_bytes == 0 and t.allocated_bytes == 0, t
    s = cuguard.snapshot()
    assert s["leaks"] == [] and s["schema"] == "cuguard-report", s
    assert list(cuguard.holders()) == []
    cuguard.label("k", "v")


def version():
    """A package of another version refuses to talk, saying both versions."""
    assert cuguard.active()
    real = cuguard._abi.VERSION
    cuguard._abi.VERSION = "9.9.9"
    cuguard._abi.reset()
    try:
        assert cuguard.active() is False
        reason = cuguard.inactive_reason()
        assert real in reason and "9.9.9" in reason, reason
        e = expect_raises(cuguard.VersionMismatch, [real, "9.9.9", "pip install dist/cuguard-" + real + "-"], cuguard.snapshot)
        print(e)
        expect_raises(cuguard.VersionMismatch, ["9.9.9"], cuguard.live)
    finally:
        cuguard._abi.VERSION = real
        cuguard._abi.reset()
    assert cuguard.active()


SCENARIOS = {
    "outside": outside,
    "disabled": disabled,
    "live": live,
    "snapshot": snapshot,
    "track": track,
    "label": label,
    "holders": holders,
    "threads": threads,
    "fork": fork,
    "atexit": at_exit,
    "nocuda": nocuda,
    "version": version,
}

if __name__ == "__main__":
    name = sys.argv[1]
    SCENARIOS[name](*sys.argv[2:])
    gc.collect()
    print(f"ok {name}", flush=True)
