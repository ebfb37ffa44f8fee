"""The frameworks' own books of their caches: which blocks of a cache's segments are live and
which idle, and where each live block was allocated.

- **PyTorch**: the caching allocator's snapshot (``torch.cuda.memory._snapshot()``) lists every
  segment and every block with its state. Where the shim records PyTorch's blocks with their
  stacks (its hook, ``cuguard_cache_blocks``: the default under ``cuguard run``), each live
  block's line comes from that record (:func:`fill_frames`, ``cuguard_cache_block_frames``), and
  PyTorch's own memory history stays off: it cost 0.77 µs a tensor pair on the H100 (run 39).
  Elsewhere, or with ``CUGUARD_CACHE_VIEW=history``, cuguard turns that history on
  (``torch.cuda.memory._record_memory_history(enabled="all", context="alloc",
  stacks="python", max_entries=CUGUARD_CACHE_HISTORY)``): each live block then has the Python
  frames that allocated it, and the history keeps the last allocations and frees with their
  times and frames (turned on when PyTorch initializes CUDA, :func:`watch_torch`,
  through ``torch.cuda._lazy_call``, so importing PyTorch never starts CUDA). Its authors
  measured about 2 µs per allocation. From the history, :func:`history_lines` makes each
  program line's live bytes inside the cache over time (the report's ``caches[].lines``), so
  growth follows the lines whose tensors are kept, not the line that grew a segment (without
  it, the shim's own samples of PyTorch's blocks by stack do the same: ``src/growth.rs``).
- **CuPy**: its pool keeps no book it shows. cuguard adds a memory hook
  (``cupy.cuda.MemoryHook``; hooks are per thread, so it is added in the thread that imported
  CuPy) that records the blocks the pool takes from the device and each array it hands out,
  with its Python frames, until it is freed (:func:`watch_cupy`). Where those add up to CuPy's
  own figures (``total_bytes``, ``used_bytes``: every array made and freed in that thread) the
  book is whole (``hook_whole``: the arrays live by line, the rest of each block idle);
  elsewhere it gives lines only, and which blocks are live the arrays found holding them say.
- **RMM** and others: no book; ``cuguard._inventory`` tells live from idle by holders.

``CUGUARD_CACHE_VIEW=0`` turns the history and the hook off (the caches then read as their
owners' segments, live told from idle by holders and PyTorch's block states). A framework
without the API (an older PyTorch) adds one note saying so, and reads as today.
"""

import bisect
import os
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

#: The most Python frames kept for one block.
MAX_FRAMES = 32
#: The most allocations and frees PyTorch's history keeps (``CUGUARD_CACHE_HISTORY``).
HISTORY_ENTRIES = 100_000
#: The most lines whose live bytes over time are sent, the most points for each, and the least
#: peak a line needs to be sent.
MAX_LINES = 64
MAX_POINTS = 512
MIN_LINE_PEAK = 1 << 20

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def enabled() -> bool:
    """Whether cuguard turns on the frameworks' books (``CUGUARD_CACHE_VIEW``, default on)."""
    return os.environ.get("CUGUARD_CACHE_VIEW", "1").strip().lower() not in ("0", "off", "false", "no")


class Block:
    """A block of a cache's segment."""

    __slots__ = ("address", "size", "state", "frames")

    def __init__(self, address: int, size: int, state: str, frames: List[Dict[str, Any]]) -> None:
        self.address = address
        self.size = size
        self.state = state
        self.frames = frames


class Book:
    """One framework's book: its blocks (``complete``: every block of its segments, idle ones
    included), how they were told (``source``: ``history``, ``states`` or ``hook``), and a note
    when something could not be told."""

    def __init__(
        self,
        framework: str,
        source: str,
        complete: bool,
        blocks: List[Block],
        note: Optional[str],
        lines: Optional[List[Dict[str, Any]]] = None,
    ):
        self.framework = framework
        self.source = source
        self.complete = complete
        self.blocks = blocks
        self.note = note
        #: Each program line's live bytes in the cache over time (:func:`history_lines`).
        self.lines = lines or []


def framework_of(owner: Optional[str]) -> str:
    """``pytorch_caching_allocator`` → ``pytorch``, ``cupy_memory_pool`` → ``cupy``, …"""
    if not owner:
        return "unknown"
    for prefix, name in (("pytorch", "pytorch"), ("cupy", "cupy"), ("rmm", "rmm"), ("xla", "jax")):
        if owner.startswith(prefix):
            return name
    return owner


def books(notes: List[str], start_unix_ms: Optional[float] = None) -> List[Book]:
    """The books of the frameworks loaded in this process; a framework whose book cannot be read
    adds a line to ``notes`` saying why. ``start_unix_ms``: when the process started by the
    shim's clock (its report's ``process.start_unix_ms``), for the lines' times; without it the
    lines are left out."""
    out = []
    torch = sys.modules.get("torch")
    if torch is not None:
        book = _torch_book(torch, notes, start_unix_ms)
        if book is not None:
            out.append(book)
    if _cupy_lines is not None:
        out.append(_cupy_lines.book())
    return out


# --- numba -----------------------------------------------------------------------------------


def _attrs(obj: Any) -> Dict[str, Any]:
    """An object's instance dictionary, read without running any of its code (empty if none)."""
    try:
        d = object.__getattribute__(obj, "__dict__")
    except Exception:
        return {}
    return d if type(d) is dict else {}


def _address(handle: Any) -> Optional[int]:
    """A device address as numba queues it: an int, a ctypes pointer, or a cuda-bindings
    ``CUdeviceptr`` (read as its type documents, ``int(ptr)``)."""
    if type(handle) is int:
        return handle
    tp = type(handle)
    try:
        if tp.__module__ in ("cuda.bindings.driver", "cuda.cuda") and tp.__name__.startswith("CUdeviceptr"):
            return int(handle)
        value = getattr(handle, "value", None) if tp.__module__ == "ctypes" else None
    except Exception:
        return None
    return value if type(value) is int else None


def pending_frees() -> Dict[int, str]:
    """The frees a framework has queued but not yet made, by address, each with the framework's
    name: numba's deferred deallocations. An array numba no longer uses waits in its context's
    queue (``memory_manager.deallocations``) and is freed with the queue's next flush (when
    ``CUDA_DEALLOCS_COUNT`` items or a share of the device's memory wait, or at teardown). Such
    an allocation is ``pending_free``: the framework's to free, neither lost nor a leak."""
    driver_module = sys.modules.get("numba.cuda.cudadrv.driver")
    if driver_module is None:
        return {}
    driver = _attrs(driver_module).get("driver")
    devices = _attrs(driver).get("devices") if driver is not None else None
    if not isinstance(devices, dict):
        return {}
    out: Dict[int, str] = {}
    for device in list(dict.values(devices)):
        context = _attrs(device).get("primary_context")
        manager = _attrs(context).get("memory_manager") if context is not None else None
        queues = [_attrs(manager).get("deallocations"), _attrs(context).get("deallocations")]
        for queue in queues:
            cons = _attrs(queue).get("_cons") if queue is not None else None
            if cons is None or type(cons).__name__ != "deque":
                continue
            for item in list(cons):
                if type(item) is not tuple or len(item) != 3:
                    continue
                dtor, handle, size = item
                try:  # numba queues the driver's function (a plain function or a binding's)
                    name = object.__getattribute__(dtor, "__name__")
                except Exception:
                    continue
                if not (isinstance(name, str) and name.startswith("cuMemFree") and not name.startswith("cuMemFreeHost")):
                    continue
                address = _address(handle)
                if address is None or type(size) is not int or size <= 0:
                    continue
                out[address] = "numba"
    return out


# --- PyTorch ---------------------------------------------------------------------------------

_torch_history: Dict[str, Any] = {"on": False, "trace": False, "note": None, "cuguard": False}


def _view_mode() -> str:
    """``CUGUARD_CACHE_VIEW``: ``history`` (PyTorch's memory history, always), else the default."""
    return os.environ.get("CUGUARD_CACHE_VIEW", "1").strip().lower()


def cuguard_records_torch() -> bool:
    """Whether the shim records PyTorch's blocks with their stacks (``cuguard_cache_blocks``):
    its hook receives them, the history is on, ``CUGUARD_CACHE_BLOCKS`` is not 0."""
    try:
        from . import _abi

        return _abi.cache_blocks("pytorch")
    except Exception:
        return False


def fill_frames(segments: List[Dict[str, Any]]) -> Tuple[int, int]:
    """Gives each live block of PyTorch's ``segments`` (its snapshot's shape) that has no
    ``frames`` the Python frames of the stack cuguard's hook recorded for it (innermost first,
    in PyTorch's frame shape); returns how many live blocks were asked and how many got none.
    Never raises."""
    wanting, addresses = [], []
    try:
        for segment in segments:
            at = int(segment["address"])
            for b in segment.get("blocks") or []:
                address = int(b.get("address", at))  # a block follows the one before it
                at = address + int(b["size"])
                if str(b.get("state", "")).startswith("active") and not b.get("frames"):
                    wanting.append(b)
                    addresses.append(address)
        if not wanting:
            return 0, 0
        from . import _abi

        recorded = _abi.cache_block_frames(addresses)
    except Exception:
        return len(wanting), len(wanting)
    missing = 0
    # Blocks of one stack share its list: converted once, and shared, so that the reader's
    # look at each block's frames is done once a stack (``_oom.places``).
    converted: Dict[int, List[Dict[str, Any]]] = {}
    for b, listed in zip(wanting, recorded):
        frames = converted.get(id(listed)) if listed is not None else None
        if frames is None:
            frames = [
                {"filename": f["file"], "line": f.get("line"), "name": f.get("function") or "?"}
                for f in listed or []
                if isinstance(f, dict) and f.get("file")
            ][:MAX_FRAMES]
            if listed is not None:
                converted[id(listed)] = frames
        if frames:
            b["frames"] = frames
        else:
            missing += 1
    return len(wanting), missing


def _history_entries() -> int:
    try:
        return max(0, int(os.environ.get("CUGUARD_CACHE_HISTORY", HISTORY_ENTRIES)))
    except ValueError:
        return HISTORY_ENTRIES


def watch_torch(torch: Any) -> None:
    """Turns PyTorch's memory history on when it initializes CUDA (at once if it has)."""
    if not enabled():
        return
    cuda = getattr(torch, "cuda", None)
    record = getattr(getattr(cuda, "memory", None), "_record_memory_history", None)
    lazy = getattr(cuda, "_lazy_call", None)
    if record is None or lazy is None:
        version = getattr(torch, "__version__", "?")
        _torch_history["note"] = (
            f"PyTorch {version} has no memory history (torch.cuda.memory._record_memory_history): "
            "its live blocks are shown without the lines that allocated them"
        )
        return

    def turn_on() -> None:
        if _view_mode() != "history" and cuguard_records_torch():
            # cuguard's own record names the blocks' lines (fill_frames): PyTorch's recorder,
            # 0.77 µs a tensor pair on the H100 (run 39), stays off.
            _torch_history["cuguard"] = True
            return
        try:
            try:
                record(enabled="all", context="alloc", stacks="python", max_entries=_history_entries())
                _torch_history["trace"] = True
            except (TypeError, ValueError, RuntimeError):  # a version without these arguments
                record(enabled="state", context="state", stacks="python")
            _torch_history["on"] = True
        except Exception as e:  # a version whose arguments differ
            _torch_history["note"] = (
                f"PyTorch's memory history could not be turned on ({type(e).__name__}: {e}): its live "
                "blocks are shown without the lines that allocated them"
            )

    try:
        lazy(turn_on)
    except Exception as e:
        _torch_history["note"] = f"PyTorch's memory history could not be scheduled ({type(e).__name__}: {e})"


def _torch_book(torch: Any, notes: List[str], start_unix_ms: Optional[float]) -> Optional[Book]:
    cuda = getattr(torch, "cuda", None)
    try:
        initialized = bool(cuda is not None and cuda.is_initialized())
    except Exception:
        initialized = False
    if not initialized:
        return None
    snapshot = getattr(getattr(cuda, "memory", None), "_snapshot", None)
    version = getattr(torch, "__version__", "?")
    if snapshot is None:
        notes.append(
            f"PyTorch {version} has no allocator snapshot (torch.cuda.memory._snapshot): its cache "
            "reads as its segments, live told from idle by the tensors found"
        )
        return None
    try:
        snap = snapshot()
    except Exception as e:
        notes.append(
            f"PyTorch's allocator snapshot failed ({type(e).__name__}: {e}): its cache reads as its "
            "segments, live told from idle by the tensors found"
        )
        return None
    blocks: List[Block] = []
    any_frames = False
    asked = unnamed = 0
    if _torch_history["cuguard"] and isinstance(snap, dict):
        asked, unnamed = fill_frames(snap.get("segments") or [])
    try:
        for segment in snap.get("segments", []) if isinstance(snap, dict) else []:
            at = int(segment["address"])
            for b in segment.get("blocks", []):
                size = int(b["size"])
                address = int(b.get("address", at))
                at = address + size
                state = str(b.get("state", ""))
                live = state.startswith("active")
                frames = []
                if live:
                    for f in (b.get("frames") or [])[:MAX_FRAMES]:
                        frames.append(
                            {"file": str(f.get("filename", "?")), "line": f.get("line"), "function": str(f.get("name", "?"))}
                        )
                any_frames = any_frames or bool(frames)
                blocks.append(Block(address, size, "live" if live else "idle", frames))
    except (KeyError, TypeError, ValueError) as e:
        notes.append(
            f"PyTorch {version}'s allocator snapshot has another shape ({type(e).__name__}: {e}): its "
            "cache reads as its segments"
        )
        return None
    note = _torch_history["note"]
    if not enabled():
        note = "CUGUARD_CACHE_VIEW=0: PyTorch's memory history is off, so live blocks have no lines"
    elif note is None and not _torch_history["on"] and not _torch_history["cuguard"] and not any_frames:
        note = (
            "PyTorch's memory history was not on (PyTorch was imported before cuguard's bootstrap "
            "could watch it): live blocks have no lines"
        )
    elif note is None and unnamed:
        note = (
            f"{unnamed:,} of its {asked:,} live blocks have no line: cuguard's record of PyTorch's "
            "blocks has none at their addresses (made before cuguard could see them, or beyond its "
            f"{1 << 20:,} blocks)"
        )
    lines: List[Dict[str, Any]] = []
    if start_unix_ms is not None and _torch_history["trace"] and isinstance(snap, dict):
        try:
            lines, cut = history_lines(snap.get("device_traces") or [], _torch_dir(torch), start_unix_ms)
        except (KeyError, TypeError, ValueError) as e:
            lines, cut = [], None
            notes.append(
                f"PyTorch {version}'s memory history has another shape ({type(e).__name__}: {e}): "
                "growth inside its cache follows its segments"
            )
        if cut is not None:
            notes.append(
                f"PyTorch's memory history kept its last {_history_entries():,} allocations and frees "
                f"(from {cut:,} ms): live bytes by line in its cache are over that stretch "
                "(CUGUARD_CACHE_HISTORY keeps more)"
            )
    # Lines from cuguard's record where it gave any (a program that turned PyTorch's history on
    # itself has PyTorch's frames on its blocks, which are kept).
    source = ("cuguard" if asked > unnamed else "history") if any_frames else "states"
    return Book("pytorch", source, True, blocks, note, lines)


def _torch_dir(torch: Any) -> str:
    return os.path.dirname(os.path.abspath(getattr(torch, "__file__", "") or "")) + os.sep


def history_lines(
    traces: List[List[Dict[str, Any]]], framework_dir: str, start_unix_ms: float
) -> Tuple[List[Dict[str, Any]], Optional[int]]:
    """Each program line's live bytes inside the cache over time, from PyTorch's history
    (``_snapshot()["device_traces"]``: per device, ``alloc`` and ``free_requested`` /
    ``free_completed`` entries with ``addr``, ``size``, ``time_us`` (Unix time) and the
    allocating Python ``frames``).

    A line is the innermost frame outside the framework's package and cuguard's; its bytes
    count from the first entry kept (0 then), up with each block it allocated, down when that
    block is freed (requested: the tensor is gone). Returns at most :data:`MAX_LINES` lines whose
    peak is at least :data:`MIN_LINE_PEAK`, largest peak first, each ``{"device", "frames",
    "samples": [[ms since start, bytes], ...]}`` with at most :data:`MAX_POINTS` points (the last
    value in each of as many equal stretches of time), and when the history was cut (the ms of
    its first entry, when it holds as many as it keeps; else ``None``)."""
    ours = (framework_dir, _PACKAGE_DIR + os.sep)
    lines: Dict[Tuple[int, Tuple[str, int, str]], Dict[str, Any]] = {}
    cut: Optional[int] = None
    keep = _history_entries()
    for device, entries in enumerate(traces):
        if not entries:
            continue
        if keep and len(entries) >= keep:
            first = entries[0].get("time_us")
            if first is not None:
                at = int(first / 1000 - start_unix_ms)
                cut = at if cut is None else min(cut, at)
        blocks: Dict[int, Tuple[Tuple[int, Tuple[str, int, str]], int]] = {}
        for e in entries:
            action = e.get("action")
            t = e.get("time_us")
            if t is None:
                continue
            ms = max(0, int(t / 1000 - start_unix_ms))
            if action == "alloc":
                frames = e.get("frames") or []
                at = next((f for f in frames if not str(f.get("filename", "")).startswith(ours)), None)
                if at is None:
                    continue
                key = (device, (str(at.get("filename", "?")), int(at.get("line") or 0), str(at.get("name", "?"))))
                size = int(e["size"])
                blocks[int(e["addr"])] = (key, size)
                line = lines.get(key)
                if line is None:
                    kept = [
                        {"file": str(f.get("filename", "?")), "line": f.get("line"), "function": str(f.get("name", "?"))}
                        for f in frames[:MAX_FRAMES]
                    ]
                    line = lines[key] = {"device": device, "frames": kept, "bytes": 0, "peak": 0, "points": [[ms, 0]]}
                line["bytes"] += size
                line["peak"] = max(line["peak"], line["bytes"])
                line["points"].append([ms, line["bytes"]])
            elif action in ("free_requested", "free_completed"):
                found = blocks.pop(int(e["addr"]), None)
                if found is None:
                    continue
                key, size = found
                line = lines[key]
                line["bytes"] -= size
                line["points"].append([ms, line["bytes"]])
    chosen = sorted((l for l in lines.values() if l["peak"] >= MIN_LINE_PEAK), key=lambda l: -l["peak"])
    out = []
    for line in chosen[:MAX_LINES]:
        out.append({"device": line["device"], "frames": line["frames"], "samples": _thin(line["points"])})
    return out, cut


def _thin(points: List[List[int]]) -> List[List[int]]:
    """At most :data:`MAX_POINTS` of a step function's points: the last value in each of as many
    equal stretches of its time (the first and last points kept)."""
    if len(points) <= MAX_POINTS:
        return points
    first, last = points[0][0], points[-1][0]
    span = max(1, last - first)
    out: List[List[int]] = [points[0]]
    bucket = 0
    for p in points[1:]:
        b = min(MAX_POINTS - 2, (p[0] - first) * (MAX_POINTS - 2) // span)
        if b == bucket and len(out) > 1:
            out[-1] = p
        else:
            out.append(p)
            bucket = b
    if out[-1] is not points[-1]:
        out.append(points[-1])
    return out


# --- CuPy ------------------------------------------------------------------------------------


class _CupyLines:
    """Where each block of CuPy's pool that a thread with the hook allocated came from, and the
    blocks the pool took from the device."""

    def __init__(self) -> None:
        self.live: Dict[int, tuple] = {}
        #: The blocks the pool took from the device, by address (their sizes); some may have
        #: been given back since (``free_all_blocks`` tells no hook).
        self.segments: Dict[int, int] = {}
        self.lock = threading.Lock()

    def book(self) -> Book:
        """The whole book where :meth:`whole` can tell it, else the lines of the live blocks."""
        whole = self.whole()
        if whole is not None:
            blocks = []
            for start, size, live in whole:
                at = start
                for ptr, n, frames in live:
                    if ptr > at:
                        blocks.append(Block(at, ptr - at, "idle", []))
                    blocks.append(Block(ptr, n, "live", frames))
                    at = ptr + n
                if at < start + size:
                    blocks.append(Block(at, start + size - at, "idle", []))
            return Book("cupy", "hook_whole", True, blocks, None)
        with self.lock:
            blocks = [Block(ptr, size, "live", frames) for ptr, (size, frames) in self.live.items()]
        return Book("cupy", "hook", False, blocks, None)

    def whole(self) -> Optional[List[Tuple[int, int, List[Tuple[int, int, List[Dict[str, Any]]]]]]]:
        """The pool's blocks still held on the device, each ``(address, size, live)`` with its live
        arrays ``(address, size, frames)`` in address order, the rest idle: ``None`` unless they
        add up to CuPy's own figures (``total_bytes``, ``used_bytes``), as they do when every
        array was made and freed in the thread with the hook. A block is held while the shim
        has a live allocation of its address and size."""
        cupy = sys.modules.get("cupy")
        try:
            pool = cupy.get_default_memory_pool()
            total, used = int(pool.total_bytes()), int(pool.used_bytes())
            from . import _abi

            held = {_address_of(a["address"]): int(a["size"]) for a in _abi.live_allocations(0)}
        except Exception:
            return None
        with self.lock:
            segments = {p: n for p, n in self.segments.items() if held.get(p) == n}
            live = dict(self.live)
        starts = sorted(segments)
        inside: Dict[int, List[Tuple[int, int, List[Dict[str, Any]]]]] = {p: [] for p in starts}
        for ptr, (n, frames) in live.items():
            i = bisect.bisect_right(starts, ptr) - 1
            if i >= 0 and ptr + n <= starts[i] + segments[starts[i]]:
                inside[starts[i]].append((ptr, n, frames))
        in_use = sum(n for arrays in inside.values() for _, n, _ in arrays)
        if sum(segments.values()) != total or in_use != used:
            return None
        return [(p, segments[p], sorted(inside[p], key=lambda a: a[0])) for p in starts]


def _address_of(value: Any) -> int:
    """An address as the shim's JSON has it (``"0x…"``) or as a number."""
    return int(value, 0) if isinstance(value, str) else int(value)


_cupy_lines: Optional[_CupyLines] = None


def _frames(skip: int) -> List[Dict[str, Any]]:
    out = []
    f = sys._getframe(skip)
    while f is not None and len(out) < MAX_FRAMES:
        code = f.f_code
        if not code.co_filename.startswith(_PACKAGE_DIR):
            out.append({"file": code.co_filename, "line": f.f_lineno, "function": code.co_name})
        f = f.f_back
    return out


def watch_cupy(cupy: Any) -> None:
    """Adds cuguard's memory hook to CuPy in this thread."""
    global _cupy_lines
    if not enabled() or _cupy_lines is not None:
        return
    try:
        from cupy.cuda import memory_hook
    except Exception:
        return
    lines = _CupyLines()

    class CuguardHook(memory_hook.MemoryHook):
        name = "cuguard"

        def alloc_postprocess(self, device_id, mem_size, mem_ptr):
            if mem_ptr:
                with lines.lock:
                    lines.segments[int(mem_ptr)] = int(mem_size)

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            # A refused request is told too, with no pointer.
            if mem_ptr:
                with lines.lock:
                    lines.live[int(mem_ptr)] = (int(mem_size), _frames(2))

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            with lines.lock:
                lines.live.pop(int(mem_ptr), None)

    try:
        CuguardHook().__enter__()
    except Exception:
        return
    _cupy_lines = lines
