"""The frameworks' out-of-memory errors as cuguard's out-of-memory cards: PyTorch's, CuPy's and
JAX's (``cuguard_framework_oom``; the shim records each beside what it knows itself and works
out the verdict).

**PyTorch.**

PyTorch's caching allocator refuses a request itself, before the driver sees one, when its
per-process memory fraction would be exceeded, and after the driver refused and PyTorch gave
back its cached segments; either way it calls its out-of-memory observers
(``torch._C._cuda_attach_out_of_memory_observer``) just before it raises ``OutOfMemoryError``,
with the device, the size asked, its limit (the fraction's bytes, else the device's total) and
the device's free memory, its own lock released. cuguard registers one observer when PyTorch
initializes CUDA (:func:`watch_torch`). At a refusal it reads the cache's segments
(``torch.cuda.memory_snapshot()``) and sends the shim (``cuguard_framework_oom``) what a card
needs that only PyTorch knows: what it had reserved, its idle bytes, in how many free pieces and
the largest, the part in whole 20 MiB pages (what ``expandable_segments:True`` would map to
the request), and the live blocks that split the idle memory, by the Python line that made them
(from cuguard's own record of PyTorch's blocks where the shim keeps one, else from PyTorch's
memory history, which cuguard then turns on: ``_caches``). The
shim then records the card beside what it knows itself, and works out the verdict.

**CuPy.** CuPy's pool refuses under its own limit (``set_limit``, ``CUPY_GPU_MEMORY_LIMIT``)
without asking the driver, or after the driver refused, it gave back its whole idle blocks
(``free_all_blocks``) and the driver refused again; either way it makes a
``cupy.cuda.memory.OutOfMemoryError(size, total, limit)``. cuguard wraps that class's
``__init__`` (:func:`watch_cupy`), so the card is sent as the error is made, on the refusing
thread. The pool's idle bytes and pieces come from CuPy (``free_bytes``, ``n_free_blocks``);
which blocks are whole, the largest piece and the lines of the arrays that split the idle
memory come from cuguard's memory hook (``_caches.watch_cupy``: the blocks the pool took from
the device and the arrays it handed out, in the thread that imported CuPy), the blocks still
held told by the shim's live allocations.

**JAX.** XLA's allocator refuses inside the region it took (75% of the device unless
``XLA_PYTHON_CLIENT_MEM_FRACTION`` says otherwise) with a ``RESOURCE_EXHAUSTED`` error, which
jaxlib raises as ``jax.errors.JaxRuntimeError``; cuguard wraps that class's ``__init__``
(:func:`watch_jax`) and, for a ``RESOURCE_EXHAUSTED`` one, sends the device's
``memory_stats()`` (bytes in use, the limit, the region, the largest free block).

Nothing here runs before a refusal. An observer that fails says nothing and changes nothing:
the framework raises its error as it would have. A program that makes such an error itself
(a test) makes a card too.
"""

import fnmatch
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from . import _abi, _caches

#: PyTorch's expandable segments map memory in pages of 20 MiB (the large pool's).
PAGE = 20 << 20
#: The most pinning lines sent.
MAX_PINNING = 16
#: The most refusals read and sent: the shim records the first 16 refusals in full (any
#: allocator's), so a program that retries in a loop (a batch-size search) pays the snapshot
#: (milliseconds) at most this many times.
MAX_CARDS = 16

_sent = [0]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def watch_torch(torch: Any) -> None:
    """Registers the out-of-memory observer when PyTorch initializes CUDA (at once if it has)."""
    cuda = getattr(torch, "cuda", None)
    attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
    lazy = getattr(cuda, "_lazy_call", None)
    if attach is None or lazy is None:
        return

    def observer(device: int, asked: int, limit: int, free: int) -> None:
        if _sent[0] >= MAX_CARDS:
            return
        _sent[0] += 1
        try:
            card(torch, int(device), int(asked), int(limit), int(free))
        except Exception:
            pass

    def register() -> None:
        try:
            attach(observer)
            # The shim's line at a driver's refusal now waits for PyTorch's card.
            _abi.framework_watch("pytorch")
        except Exception:
            pass

    try:
        lazy(register)
    except Exception:
        pass


def card(torch: Any, device: int, asked: int, limit: int, free: int) -> None:
    """Sends the shim the card's figures of one refusal (see the module's doc)."""
    started = time.perf_counter_ns()
    try:
        total = int(torch.cuda.get_device_properties(device).total_memory)
    except Exception:
        total = None
    segments = [s for s in torch.cuda.memory_snapshot() if int(s.get("device", device)) == device]
    if _caches._torch_history["cuguard"]:
        _caches.fill_frames([s for s in segments if any(b.get("state") == "inactive" for b in s.get("blocks") or [])])
    cache, reserved = figures(segments, _torch_dir(torch))
    cache["name"] = "PyTorch's caching allocator"
    # PyTorch passes its fraction's bytes where one is set, else the device's total.
    fraction = limit if total is not None and 0 < limit < total else None
    allocated = reserved - cache["idle_bytes"]
    message = f"PyTorch had reserved {_bytes(reserved)}, {_bytes(allocated)} of it allocated"
    if fraction is not None:
        message += f"; its memory fraction allows {_bytes(fraction)}"
    doc = {
        "framework": "pytorch",
        "device": device,
        "requested": asked,
        "device_free": free,
        "limit": fraction,
        "reserved": reserved,
        "message": message,
        "cache": cache,
        "read_ns": time.perf_counter_ns() - started,
    }
    _abi.framework_oom(doc)


def _wrap_init(error: Any, card_of: Any) -> bool:
    """Wraps ``error.__init__`` so that each error made calls ``card_of(error_instance, *args)``
    after it (at most :data:`MAX_CARDS` times, failures swallowed). False when it cannot."""
    original = getattr(error, "__init__", None)
    if original is None or getattr(original, "_cuguard", False):
        return False

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if _sent[0] >= MAX_CARDS:
            return
        try:
            if card_of(self, *args, **kwargs):
                _sent[0] += 1
        except Exception:
            pass

    __init__._cuguard = True  # type: ignore[attr-defined]
    try:
        error.__init__ = __init__
    except Exception:
        return False
    return True


def watch_cupy(cupy: Any) -> None:
    """Sends a card for each ``OutOfMemoryError`` CuPy's pool makes."""
    error = getattr(getattr(getattr(cupy, "cuda", None), "memory", None), "OutOfMemoryError", None)
    if error is None:
        return

    def card_of(_: Any, size: Any, total: Any, limit: Any = 0, *rest: Any) -> bool:
        cupy_card(cupy, int(size), int(total), int(limit or 0))
        return True

    if _wrap_init(error, card_of):
        try:
            # The driver's refusals inside CuPy's pool wait for its card.
            _abi.framework_watch("cupy")
        except Exception:
            pass


def cupy_card(cupy: Any, size: int, total: int, limit: int) -> None:
    """Sends the shim the card of CuPy's refusal of ``size`` bytes, ``total`` taken so far, under
    ``limit`` (0: none)."""
    started = time.perf_counter_ns()
    pool = cupy.get_default_memory_pool()
    device = int(cupy.cuda.Device().id)
    reserved = int(pool.total_bytes())
    idle = int(pool.free_bytes())
    try:
        free: Optional[int] = int(cupy.cuda.runtime.memGetInfo()[0])
    except Exception:
        free = None
    cache = {
        "holder": "cupy_pool",
        "name": "CuPy's memory pool",
        "reserved_bytes": reserved,
        "idle_bytes": idle,
        "pieces": int(pool.n_free_blocks()),
        "pinning": [],
    }
    cache.update(_cupy_pieces(idle))
    message = f"CuPy's pool had taken {_bytes(reserved)} from the device, {_bytes(reserved - idle)} of it in use"
    if limit:
        message += f"; its limit allows {_bytes(limit)}"
    _abi.framework_oom({
        "framework": "cupy",
        "device": device,
        "requested": size,
        "device_free": free,
        "limit": limit or None,
        "reserved": reserved,
        "message": message,
        "cache": cache,
        "read_ns": time.perf_counter_ns() - started,
    })


def _cupy_pieces(idle: int) -> Dict[str, Any]:
    """From cuguard's memory hook (``_caches._CupyLines.whole``): the largest free piece, the
    bytes in whole idle blocks and the lines of the arrays that split idle blocks; nothing where
    the hook's books do not add up to CuPy's own figures (a thread without the hook made
    arrays), since a partial book would mislead."""
    book = _caches._cupy_lines
    whole = book.whole() if book is not None else None
    if whole is None:
        return {}
    largest = freeable = counted = 0
    pinned: List[Tuple[int, List[Dict[str, Any]]]] = []
    for start, size, live in whole:
        if not live:
            freeable += size
            largest = max(largest, size)
            counted += size
            continue
        at, gaps = start, []
        for ptr, n, _ in live:
            gaps.append(ptr - at)
            at = ptr + n
        gaps.append(start + size - at)
        gaps = [g for g in gaps if g > 0]
        counted += sum(gaps)
        largest = max([largest] + gaps)
        if gaps:
            pinned.extend((n, frames) for _, n, frames in live)
    if counted != idle:
        return {}
    frames = [[{"filename": f["file"], "line": f["line"], "name": f["function"]} for f in fr] for _, fr in pinned]
    pinning: Dict[Tuple[str, Optional[str]], List[int]] = {}
    for (n_bytes, _), key in zip(pinned, places(frames, _cupy_dir())):
        entry = pinning.setdefault(key, [0, 0])
        entry[0] += n_bytes
        entry[1] += 1
    ranked = sorted(pinning.items(), key=lambda kv: (-kv[1][0], kv[0][0]))[:MAX_PINNING]
    return {
        "largest_free_bytes": largest,
        "freeable_bytes": freeable,
        "pinning": [
            {"site": site, "location": location, "bytes": n_bytes, "blocks": n}
            for (site, location), (n_bytes, n) in ranked
        ],
    }


def _cupy_dir() -> str:
    """CuPy's folder (its frames are not the program's lines); a prefix no file has without it."""
    cupy = sys.modules.get("cupy")
    f = getattr(cupy, "__file__", None)
    return os.path.dirname(os.path.abspath(f)) + os.sep if f else "\0"


#: The size a ``RESOURCE_EXHAUSTED`` error says was asked: ``allocate 17179869184 bytes``,
#: ``allocate 59.38GiB`` (JAX 0.11 on the H100), ``allocate request for 16.00GiB (17179869184B)``.
_ASKED = re.compile(r"allocat\w* (?:request for \S+ \()?(\d+(?:\.\d+)?)\s*(bytes|B|KiB|MiB|GiB|TiB)\b")
#: The device it names: ``on device 0``, ``on device ordinal 0``.
_DEVICE = re.compile(r"on device (?:ordinal )?(\d+)")
_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _asked(text: str) -> int:
    """The bytes ``text`` says were asked (XLA rounds a size in GiB to two decimals); 0 when it
    says none."""
    m = _ASKED.search(text)
    return int(float(m.group(1)) * _UNITS[m.group(2)]) if m else 0


def watch_jax(jax: Any) -> None:
    """Sends a card for each ``RESOURCE_EXHAUSTED`` error jaxlib makes."""
    error = getattr(getattr(jax, "errors", None), "JaxRuntimeError", None)
    if error is None:
        try:
            from jaxlib import xla_extension  # type: ignore[import-not-found]

            error = getattr(xla_extension, "XlaRuntimeError", None)
        except Exception:
            return
    if error is None:
        return

    def card_of(_: Any, *args: Any, **kwargs: Any) -> bool:
        text = str(args[0]) if args else ""
        if "RESOURCE_EXHAUSTED" not in text:
            return False
        jax_card(jax, text)
        return True

    _wrap_init(error, card_of)


def jax_card(jax: Any, text: str) -> None:
    """Sends the shim the card of JAX's refusal that ``text`` says."""
    started = time.perf_counter_ns()
    asked = _asked(text)
    devices = [d for d in jax.local_devices() if getattr(d, "platform", "") == "gpu"]
    named = _DEVICE.search(text)
    if named is not None:
        devices = [d for d in devices if int(getattr(d, "id", -1)) == int(named.group(1))] or devices
    # The device that refused: the one the error names, else the first whose largest free block
    # is smaller than the request, else the first.
    stats_of = [(d, d.memory_stats() or {}) for d in devices]
    if not stats_of:
        return
    chosen, stats = next(
        ((d, st) for d, st in stats_of if int(st.get("largest_free_block_bytes", asked)) < asked),
        stats_of[0],
    )
    in_use = int(stats.get("bytes_in_use", 0))
    limit = stats.get("bytes_limit")
    region = int(stats.get("pool_bytes", limit or in_use))
    largest = stats.get("largest_free_block_bytes")
    cache = {
        "holder": "jax_allocator",
        "name": "JAX's allocator",
        "reserved_bytes": region,
        "idle_bytes": max(region - in_use, 0),
        "pinning": [],
    }
    if largest is not None:
        cache["largest_free_bytes"] = int(largest)
    message = f"JAX had {_bytes(in_use)} in use of the {_bytes(region)} its allocator took"
    if limit is not None:
        message += f", its limit {_bytes(int(limit))}"
    _abi.framework_oom({
        "framework": "jax",
        "device": int(getattr(chosen, "id", 0)),
        "requested": asked,
        "device_free": None,
        "limit": int(limit) if limit is not None else None,
        "reserved": in_use,
        "message": message,
        "cache": cache,
        "read_ns": time.perf_counter_ns() - started,
    })


def figures(segments: List[Dict[str, Any]], torch_dir: str) -> Tuple[Dict[str, Any], int]:
    """The cache's idle holder (``ooms[].idle[]``'s fields) and its reserved bytes, from
    PyTorch's segments: idle bytes are its inactive blocks; pinning blocks are the live ones of
    a segment that has inactive blocks."""
    reserved = idle = pieces = largest = pages = 0
    pinning: Dict[Tuple[str, Optional[str]], List[int]] = {}
    pinned: List[Dict[str, Any]] = []
    for s in segments:
        reserved += int(s.get("total_size", 0))
        blocks = s.get("blocks") or []
        free = [int(b["size"]) for b in blocks if b.get("state") == "inactive"]
        idle += sum(free)
        pieces += len(free)
        largest = max([largest] + free)
        if s.get("segment_type", "large") == "large":
            pages += sum(f // PAGE * PAGE for f in free)
        if not free:
            continue
        pinned.extend(b for b in blocks if str(b.get("state", "")).startswith("active"))
    for b, key in zip(pinned, places([b.get("frames") or [] for b in pinned], torch_dir)):
        entry = pinning.setdefault(key, [0, 0])
        entry[0] += int(b["size"])
        entry[1] += 1
    ranked = sorted(pinning.items(), key=lambda kv: (-kv[1][0], kv[0][0]))[:MAX_PINNING]
    holder = {
        "holder": "pytorch_cache",
        "name": "",
        "reserved_bytes": reserved,
        "idle_bytes": idle,
        "largest_free_bytes": largest,
        "pieces": pieces,
        "expandable_bytes": pages,
        "pinning": [
            {"site": site, "location": location, "bytes": n_bytes, "blocks": n}
            for (site, location), (n_bytes, n) in ranked
        ],
    }
    return holder, reserved


#: How far outward from a block's line its callers are followed.
MAX_PATH = 16


def places(all_frames: List[List[Dict[str, Any]]], torch_dir: str) -> List[Tuple[str, Optional[str]]]:
    """The place each block (by its frames, innermost first) is charged to, as the command
    charges a site (``src/call_path.rs``): its line (:func:`line_of`), except where the blocks
    of one line came from different callers. Their paths (the program's frames, outward) share
    the line and the frames after it that every path goes through (the program's allocation
    helper); each block is then charged to its first frame past them,
    ``caller (file:line) via helper (file:line)``. A function ``CUGUARD_HELPERS`` names (a name
    or a glob, a method's own name too) is passed over wherever it is; ``none`` there turns the
    first rule off."""
    # Blocks of one stack share one list of frames (``_caches.fill_frames``): each distinct
    # list is looked at once, and charged once.
    distinct: Dict[int, List[Dict[str, Any]]] = {}
    for frames in all_frames:
        distinct.setdefault(id(frames), frames)
    paths = {key: _path(frames, torch_dir) for key, frames in distinct.items()}
    named, found = _helpers()
    shared: Dict[str, Optional[int]] = {}
    if found:
        # Paths that are one list's are alike: the shared frames are the distinct paths'.
        by_line: Dict[str, List[List[Tuple[str, str, str]]]] = {}
        for path in paths.values():
            if path:
                by_line.setdefault(path[0][0], []).append(path)
        shared = {key: _shared(group) for key, group in by_line.items()}
    charged: Dict[int, Tuple[str, Optional[str]]] = {}
    for key, frames in distinct.items():
        path = paths[key]
        if not path:
            charged[key] = line_of(frames, torch_dir)
            continue
        at = shared.get(path[0][0]) or 0
        for k, (_, _, function) in enumerate(path):
            if _is_named(function, named):
                at = max(at, k + 1)
        at = min(at, len(path) - 1)
        if at == 0:
            charged[key] = (path[0][0], path[0][1])
            continue
        caller, helper = path[at], path[at - 1]
        charged[key] = (f"{caller[0]} via {helper[0]}", caller[1])
    return [charged[id(frames)] for frames in all_frames]


def _path(frames: List[Dict[str, Any]], torch_dir: str) -> List[Tuple[str, str, str]]:
    """The program's frames of a block, innermost first: ``(label, file:line, function)``."""
    out = []
    for f in frames:
        filename = str(f.get("filename", ""))
        if not filename or filename.startswith(torch_dir) or filename.startswith(_PACKAGE_DIR):
            continue
        if filename.startswith("<") and filename != "<stdin>":
            continue
        place = f"{os.path.basename(filename)}:{f.get('line')}"
        function = str(f.get("name", "?"))
        out.append((f"{function} ({place})", place, function))
        if len(out) == MAX_PATH:
            break
    return out


def _shared(group: List[List[Tuple[str, str, str]]]) -> Optional[int]:
    """How many frames every path of a group shares, when the paths differ past them."""
    first = group[0]
    shared, differ = len(first), False
    for path in group[1:]:
        same = 0
        for a, b in zip(first, path):
            if a[0] != b[0]:
                break
            same += 1
        shared = min(shared, same)
        differ = differ or same < max(len(first), len(path))
    return shared if differ and shared > 0 else None


def _helpers() -> Tuple[List[str], bool]:
    """``CUGUARD_HELPERS``: the helpers named, and whether shared frames are helpers."""
    named, found = [], True
    for name in (n.strip() for n in os.environ.get("CUGUARD_HELPERS", "").split(",")):
        if name == "none":
            found = False
        elif name and name not in named:
            named.append(name)
    return named, found


def _is_named(function: str, named: List[str]) -> bool:
    short = function.replace(":", ".").rsplit(".", 1)[-1]
    return any(fnmatch.fnmatchcase(function, p) or fnmatch.fnmatchcase(short, p) for p in named)


def line_of(frames: List[Dict[str, Any]], torch_dir: str) -> Tuple[str, Optional[str]]:
    """The program's line that made a block: the innermost of its frames outside PyTorch and
    cuguard (``function (file:line)``, and ``file:line``); ``unknown`` without frames."""
    path = _path(frames, torch_dir)
    if path:
        return path[0][0], path[0][1]
    if frames:
        return "inside PyTorch", None
    return "unknown (no line was recorded for them)", None


def _torch_dir(torch: Any) -> str:
    return os.path.dirname(os.path.abspath(getattr(torch, "__file__", "") or "")) + os.sep


def _bytes(n: int) -> str:
    from ._units import human_bytes

    return human_bytes(n)
