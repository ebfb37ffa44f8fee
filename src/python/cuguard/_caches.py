"""The frameworks' own books of their caches: which blocks of a cache's segments are live and
which idle, and where each live block was allocated.

- **PyTorch**: the caching allocator's snapshot (``torch.cuda.memory._snapshot()``) lists every
  segment and every block with its state. With its memory history on
  (``torch.cuda.memory._record_memory_history(enabled="state", context="state",
  stacks="python")``), each live block also has the Python frames that allocated it: cuguard
  turns that on when PyTorch initializes CUDA (:func:`watch_torch`, through
  ``torch.cuda._lazy_call``, so importing PyTorch never starts CUDA). Its authors measured about
  2 µs per allocation.
- **CuPy**: its pool keeps no book it shows. cuguard adds a memory hook
  (``cupy.cuda.MemoryHook``; hooks are per thread, so it is added in the thread that imported
  CuPy) that records each pool allocation's Python frames until it is freed
  (:func:`watch_cupy`). It misses frees made in other threads, so it gives lines only: which
  blocks are live the arrays found holding them say.
- **RMM** and others: no book; ``cuguard._inventory`` tells live from idle by holders.

``CUGUARD_CACHE_VIEW=0`` turns the history and the hook off (the caches then read as their
owners' segments, live told from idle by holders and PyTorch's block states). A framework
without the API (an older PyTorch) adds one note saying so, and reads as today.
"""

import os
import sys
import threading
from typing import Any, Dict, List, Optional

#: The most Python frames kept for one block.
MAX_FRAMES = 32

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

    def __init__(self, framework: str, source: str, complete: bool, blocks: List[Block], note: Optional[str]):
        self.framework = framework
        self.source = source
        self.complete = complete
        self.blocks = blocks
        self.note = note


def framework_of(owner: Optional[str]) -> str:
    """``pytorch_caching_allocator`` → ``pytorch``, ``cupy_memory_pool`` → ``cupy``, …"""
    if not owner:
        return "unknown"
    for prefix, name in (("pytorch", "pytorch"), ("cupy", "cupy"), ("rmm", "rmm"), ("xla", "jax")):
        if owner.startswith(prefix):
            return name
    return owner


def books(notes: List[str]) -> List[Book]:
    """The books of the frameworks loaded in this process; a framework whose book cannot be read
    adds a line to ``notes`` saying why."""
    out = []
    torch = sys.modules.get("torch")
    if torch is not None:
        book = _torch_book(torch, notes)
        if book is not None:
            out.append(book)
    if _cupy_lines is not None:
        out.append(_cupy_lines.book())
    return out


# --- PyTorch ---------------------------------------------------------------------------------

_torch_history = {"on": False, "note": None}


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
        try:
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


def _torch_book(torch: Any, notes: List[str]) -> Optional[Book]:
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
    elif note is None and not _torch_history["on"] and not any_frames:
        note = (
            "PyTorch's memory history was not on (PyTorch was imported before cuguard's bootstrap "
            "could watch it): live blocks have no lines"
        )
    return Book("pytorch", "history" if any_frames else "states", True, blocks, note)


# --- CuPy ------------------------------------------------------------------------------------


class _CupyLines:
    """Where each block of CuPy's pool that a thread with the hook allocated came from."""

    def __init__(self) -> None:
        self.live: Dict[int, tuple] = {}
        self.lock = threading.Lock()

    def book(self) -> Book:
        with self.lock:
            blocks = [Block(ptr, size, "live", frames) for ptr, (size, frames) in self.live.items()]
        return Book("cupy", "hook", False, blocks, None)


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

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
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
