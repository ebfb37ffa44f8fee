"""cuguard's Python API: ask the cuguard shim about this process's GPU memory, from inside it.

The program must run under the shim (``cuguard run -- python prog.py``, or ``--driver sim`` on a
machine without a GPU). Then::

    import cuguard

    cuguard.active()                  # True
    cuguard.live()                    # {0: {"live_bytes": ..., "peak_bytes": ..., ...}}
    with cuguard.track() as t:        # every thread of the process, while the block runs
        step()
    t.leaks, t.peak_bytes, t.allocated_bytes
    cuguard.label("epoch", 3)         # process.labels in the report
    cuguard.snapshot("now.json")      # the report as it stands, as a dict (and a file)
    print(cuguard.holders(min_bytes=1 << 20))   # which names keep GPU memory alive

Outside the shim, :func:`active` is False and every other function raises :class:`NotActive`,
which says how to run under the shim. A shim of another version raises :class:`VersionMismatch`.
Every function is safe from any thread, in a forked child and in ``atexit`` handlers. The full
reference is ``docs/python.md``.
"""

import os
import threading
from typing import Any, Dict, List, Optional

from . import _abi
from ._abi import CuguardError, NotActive, VersionMismatch
from .holders import Holders, format_holders, holders

__version__ = _abi.VERSION

__all__ = [
    "CuguardError",
    "Holders",
    "NotActive",
    "Track",
    "VersionMismatch",
    "active",
    "annotate",
    "format_holders",
    "holders",
    "inactive_reason",
    "label",
    "live",
    "phase",
    "snapshot",
    "tag",
    "track",
]


def active() -> bool:
    """Whether the cuguard shim tracks this process now (and speaks this package's version). Never
    raises."""
    try:
        return _abi.inactive_reason() is None
    except Exception:
        return False


def inactive_reason() -> Optional[str]:
    """``None`` when :func:`active`; else why not, in words (how to run under the shim, the versions
    that differ, ...). Never raises."""
    try:
        return _abi.inactive_reason()
    except Exception as e:  # pragma: no cover - a broken interpreter state
        return f"cuguard cannot tell: {e!r}"


def snapshot(path: Optional[Any] = None, *, held: bool = False, timeout: float = 10.0) -> Dict[str, Any]:
    """The report as it stands now, as a dict (the shim's report format: ``docs/report.schema.json``;
    ``reason`` is ``"request"`` and ``complete`` is False). With ``path`` (a str or path-like), it is
    also written there (replacing the file; mode 0600; a symbolic link or another user's file at
    ``path`` is refused with an :class:`OSError` that says so). With ``held``, it also says what holds each live
    allocation now (its ``python.view``, ``at: "snapshot"``: held by which objects, lost, a
    cache's live and idle blocks), as the end of the program does; the walk of references is
    bounded by ``timeout`` seconds. Raises :class:`NotActive`, or :class:`OSError` when the file
    cannot be written."""
    p = None if path is None else os.fspath(path)
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not held:
        return _abi.snapshot(p)
    from . import _inventory

    allocations = _abi.live_allocations(0)
    classification = _inventory.classify(allocations, timeout=timeout)
    report = _abi.snapshot(None)
    report["python"] = {
        "end": {"recorded": False, "why": "the program was still running (a snapshot)"},
        "view": _inventory.view_of(report, classification),
    }
    if p is not None:
        import json

        from . import _files

        # Mode 0600, through a fresh temporary file beside it; a link or another user's file at
        # `p` is refused, never written through.
        _files.replace(p, json.dumps(report).encode(), 0o600)
    return report


def live() -> Dict[int, Dict[str, int]]:
    """Live and peak bytes per device that allocated, by device ordinal::

        {0: {"live_bytes": 8388608, "peak_bytes": 16777216, "pool_reserved_bytes": 0,
             "live_allocations": 3, "allocated_bytes": 25165824}}

    Cheap enough to call in a loop (no report is built). ``peak_bytes`` is exact for one allocating
    thread; with several it may miss up to 1 MiB per thread (use :func:`track` for an exact peak)."""
    return {
        int(d.device): {
            "live_bytes": int(d.live_bytes),
            "peak_bytes": int(d.peak_bytes),
            "pool_reserved_bytes": int(d.pool_reserved_bytes),
            "live_allocations": int(d.live_allocations),
            "allocated_bytes": int(d.allocated_bytes),
        }
        for d in _abi.live()
    }


class Track:
    """A :func:`track` block. After it ends:

    - ``leaks``: allocations made inside it, on any thread, still live at its end, in the order they
      were made; each a dict ``{"size", "api", "owner", "site": {"file", "line", "function"}, ...}``
      (also ``address``, ``requested``, ``memory``, ``device``, ``thread``, ``time_ms``,
      ``owner_kind``, and ``site["module"]`` for a native site);
    - ``peak_bytes``: the most device memory live inside it, above what was live at its start;
    - ``allocated_bytes``: device bytes allocated inside it;
    - ``leaked_bytes``: the bytes of ``leaks``.
    """

    def __init__(self) -> None:
        self.leaks: List[Dict[str, Any]] = []
        self.peak_bytes = 0
        self.allocated_bytes = 0
        self.leaked_bytes = 0
        self._token: Optional[int] = None
        self._pid: Optional[int] = None
        self._lock = threading.Lock()
        self._done = False

    def __enter__(self) -> "Track":
        with self._lock:
            if self._token is not None or self._done:
                raise CuguardError("a cuguard.track() block can be entered once")
            self._token = _abi.track_begin()
            self._pid = os.getpid()
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        with self._lock:
            token, self._token = self._token, None
            if token is None or self._done:
                return
            self._done = True
        try:
            if self._pid != os.getpid():
                raise CuguardError(
                    "this cuguard.track() block was opened before os.fork(), in the parent process; "
                    "the child cannot close it (open a new block in the child)"
                )
            seen = _abi.track_end(token)
        except Exception:
            if kind is None:
                raise
            return  # the block's own exception goes on
        self.leaks = list(seen.get("leaks") or [])
        self.peak_bytes = int(seen.get("peak_bytes") or 0)
        self.allocated_bytes = int(seen.get("allocated_bytes") or 0)
        self.leaked_bytes = int(seen.get("leaked_bytes") or 0)

    def __repr__(self) -> str:
        return (
            f"<cuguard.Track leaks={len(self.leaks)} leaked_bytes={self.leaked_bytes} "
            f"peak_bytes={self.peak_bytes} allocated_bytes={self.allocated_bytes}>"
        )


def track() -> Track:
    """A context manager that sees the allocations of every thread of the process while its block
    runs (PyTorch's backward pass allocates on its own thread). Blocks nest, and blocks open at once
    in several threads each see their own time window. See :class:`Track` for what it holds after."""
    return Track()


class phase:
    """A phase of the program, named: ``with cuguard.phase("backward"):`` records the code inside
    as a phase of the history, as an NVTX range is, so that ``cuguard summary --by phase`` gives
    its peak and what it kept, and ``--at phase:backward#3`` / ``--between phase:backward#3``
    answer for its third occurrence. Phases nest on their thread; they are apart from NVTX's
    ranges, so neither ends the other's. Also a decorator: ``@cuguard.phase("step")``.

    Costs about a microsecond a phase (Python's call into the shim). Where cuguard is not active,
    or its history is off (``CUGUARD_HISTORY=0``), it does nothing and raises nothing: code marked
    with it runs the same without cuguard. Names are 1 to 256 bytes of UTF-8."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"cuguard.phase: the name must be a str, not {type(name).__name__}")
        raw = name.encode("utf-8")
        if b"\0" in raw:
            raise ValueError("cuguard.phase: the name may not hold a NUL character")
        if not 1 <= len(raw) <= 256:
            raise ValueError(f"cuguard.phase: the name must be 1 to 256 bytes of UTF-8, not {len(raw)}")
        self._name = raw

    def __enter__(self) -> "phase":
        dll = _abi.phase_dll()
        if dll is not None:
            dll.cuguard_phase_begin(self._name)
        return self

    def __exit__(self, *exc: Any) -> None:
        dll = _abi.phase_dll()
        if dll is not None:
            dll.cuguard_phase_end()

    def __call__(self, f: Any) -> Any:
        import functools

        @functools.wraps(f)
        def marked(*args: Any, **kwargs: Any) -> Any:
            with self:
                return f(*args, **kwargs)

        return marked


def _name_bytes(what: str, name: Any) -> bytes:
    if not isinstance(name, str):
        raise TypeError(f"cuguard.{what}: the name must be a str, not {type(name).__name__}")
    raw = name.encode("utf-8")
    if b"\0" in raw:
        raise ValueError(f"cuguard.{what}: the name may not hold a NUL character")
    if not 1 <= len(raw) <= 256:
        raise ValueError(f"cuguard.{what}: the name must be 1 to 256 bytes of UTF-8, not {len(raw)}")
    return raw


class tag:
    """The program's name for the memory it makes: ``with cuguard.tag("kv_cache"):`` tags every
    device allocation this thread makes inside the block, on any backend (PyTorch's caching
    allocator, its ``cudaMallocAsync`` backend, CuPy, RMM, JAX, your own ``cuMemAlloc``): the
    tag shows in ``cuguard summary --by tag``, in ``--at`` and the view, in the memory-viz
    export's ``user_metadata`` and pprof's ``tag`` label. Tags nest on their thread; the innermost
    one names the allocation. Also a decorator: ``@cuguard.tag("kv_cache")``.

    A framework's cache tags the memory it takes from the driver inside the block: a tensor
    served from memory the cache already held carries the tag of the segment it sits in (see
    :func:`annotate` to name one after the fact). Where cuguard is not active it does nothing and
    raises nothing. Names are 1 to 256 bytes of UTF-8."""

    __slots__ = ("_name", "_pushed")

    def __init__(self, name: str) -> None:
        self._name = _name_bytes("tag", name)
        self._pushed = 0

    def __enter__(self) -> "tag":
        dll = _abi.phase_dll()
        if dll is not None and dll.cuguard_tag_push(self._name) == _abi.OK:
            self._pushed += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pushed:
            self._pushed -= 1
            dll = _abi.phase_dll()
            if dll is not None:
                dll.cuguard_tag_pop()

    def __call__(self, f: Any) -> Any:
        import functools

        @functools.wraps(f)
        def tagged(*args: Any, **kwargs: Any) -> Any:
            with tag(self._name.decode("utf-8")):
                return f(*args, **kwargs)

        return tagged


def _pointer(obj: Any) -> int:
    """The device address ``obj`` stands for: an int, a PyTorch tensor (``data_ptr()``), a CuPy
    array or memory pointer (``.data.ptr``, ``.ptr``), or anything with
    ``__cuda_array_interface__``."""
    if isinstance(obj, bool):
        raise TypeError("cuguard.annotate: a bool is not a pointer")
    if isinstance(obj, int):
        return obj
    data_ptr = getattr(obj, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    iface = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(iface, dict) and isinstance(iface.get("data"), tuple):
        return int(iface["data"][0])
    for holder in (obj, getattr(obj, "data", None)):
        ptr = getattr(holder, "ptr", None)
        if isinstance(ptr, int) and not isinstance(ptr, bool):
            return ptr
    raise TypeError(
        f"cuguard.annotate: a {type(obj).__name__} is not a device pointer, tensor or array"
        " (give an int, a tensor, or an object with __cuda_array_interface__)"
    )


def annotate(obj: Any, name: str) -> bool:
    """Names the device memory ``obj`` lives in ``name`` from now on (a tensor, an array, or a
    pointer as an int), as :class:`tag` would have named it when it was made: the allocation
    cuguard tracks that holds ``obj``'s address (inside a framework's cache, the cache's segment
    that holds it). ``True`` when named; ``False`` where cuguard is not active. Raises
    ``LookupError`` when cuguard is active but no live allocation it tracks holds the address."""
    raw = _name_bytes("annotate", name)
    ptr = _pointer(obj)
    if not 0 <= ptr < 1 << 64:
        raise ValueError(f"cuguard.annotate: {ptr:#x} is not an address")
    dll = _abi.phase_dll()
    if dll is None:
        return False
    code = dll.cuguard_annotate(ptr, raw)
    if code == _abi.E_NOT_FOUND:
        raise LookupError(f"cuguard.annotate: no live allocation cuguard tracks holds {ptr:#x}")
    if code != _abi.OK:
        _abi.check(dll, code, "annotate()")
    return True


def label(key: str, value: Any) -> None:
    """Adds a label (test id, worker, rank, epoch) to ``process.labels`` of every report written
    from now on; a later call with the same key replaces its value. ``value`` is turned into a str.
    Keys are 1 to 256 bytes of UTF-8, values at most 4096; at most 256 keys."""
    if not isinstance(key, str):
        raise TypeError(f"cuguard.label: the key must be a str, not {type(key).__name__}")
    text = value if isinstance(value, str) else str(value)
    k = key.encode("utf-8")
    v = text.encode("utf-8")
    if b"\0" in k or b"\0" in v:
        raise ValueError("cuguard.label: a key or value may not hold a NUL character")
    if not 1 <= len(k) <= 256:
        raise ValueError(f"cuguard.label: the key must be 1 to 256 bytes of UTF-8, not {len(k)}")
    if len(v) > 4096:
        raise ValueError(f"cuguard.label: the value must be at most 4096 bytes of UTF-8, not {len(v)}")
    try:
        _abi.label(k, v)
    except ValueError as e:
        raise ValueError(f"cuguard.label({key!r}, ...): {e}") from None


# `%load_ext cuguard` (IPython looks for load_ipython_extension in the package itself).
from .ipython import load_ipython_extension  # noqa: E402,F401
