"""PyTorch's out-of-memory errors as cuguard's out-of-memory cards.

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

Nothing here runs before a refusal. An observer that fails says nothing and changes nothing:
PyTorch raises its error as it would have.
"""

import os
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
    }
    _abi.framework_oom(doc)


def figures(segments: List[Dict[str, Any]], torch_dir: str) -> Tuple[Dict[str, Any], int]:
    """The cache's idle holder (``ooms[].idle[]``'s fields) and its reserved bytes, from
    PyTorch's segments: idle bytes are its inactive blocks; pinning blocks are the live ones of
    a segment that has inactive blocks."""
    reserved = idle = pieces = largest = pages = 0
    pinning: Dict[Tuple[str, Optional[str]], List[int]] = {}
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
        for b in blocks:
            if not str(b.get("state", "")).startswith("active"):
                continue
            key = line_of(b.get("frames") or [], torch_dir)
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


def line_of(frames: List[Dict[str, Any]], torch_dir: str) -> Tuple[str, Optional[str]]:
    """The program's line that made a block: the innermost of its frames outside PyTorch and
    cuguard (``function (file:line)``, and ``file:line``); ``unknown`` without frames."""
    for f in frames:
        filename = str(f.get("filename", ""))
        if not filename or filename.startswith(torch_dir) or filename.startswith(_PACKAGE_DIR):
            continue
        if filename.startswith("<") and filename != "<stdin>":
            continue
        place = f"{os.path.basename(filename)}:{f.get('line')}"
        return f"{f.get('name', '?')} ({place})", place
    if frames:
        return "inside PyTorch", None
    return "unknown (no line was recorded for them)", None


def _torch_dir(torch: Any) -> str:
    return os.path.dirname(os.path.abspath(getattr(torch, "__file__", "") or "")) + os.sep


def _bytes(n: int) -> str:
    from ._units import human_bytes

    return human_bytes(n)
