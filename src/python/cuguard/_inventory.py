"""What holds each live allocation: held, lost, a framework cache's blocks (live and idle), or a
library's. The end of a Python program (``cuguard._end``), ``cuguard.snapshot(held=True)``,
``%cuguard`` and ``cuguard.dask.snapshot`` all ask :func:`classify`.

For each allocation the shim lists (``cuguard_live_allocations``, with its owner):

1. **A framework cache's segment** (owner kind ``framework_cache``, or a segment a framework's
   own book lists): split into blocks. Where the framework keeps a book of its blocks
   (``cuguard._caches``: PyTorch's allocator snapshot, with its memory history's allocation
   lines; cuguard's hook in CuPy's pool), the book says which blocks are live and where each was
   allocated; otherwise a block is live where a Python object that declares device memory holds
   it (a tensor, an array, a ``__cuda_array_interface__``), and the rest of the segment is idle.
   Numbers never make a cache block live: a cache keeps its free blocks as numbers.
2. **Held**: a Python object holds it, found as ``holders()`` finds them, or, as a weaker match,
   a number (``int``, a ctypes integer or pointer) reached from a name has a value inside it.
3. **Pending free**: a framework has queued its free and makes it later (numba's deferred
   deallocations, ``cuguard._caches.pending_frees``): the framework's, neither lost nor a leak.
4. **Library**: owned by a library or the driver, and nothing in Python holds it.
5. **Lost**: the program's own, and nothing holds it.

The walk of references is bounded in time (``timeout``) and depth; past its bound the answer says
it is incomplete, and allocations not reached stay lost or idle as found so far.
"""

import collections
import time
from typing import Any, Dict, List, Optional, Tuple

import sys

from . import _caches
from . import holders as _unused  # noqa: F401  (the submodule, loaded)

# `cuguard.holders` is the function in the package's namespace: take the module itself.
_holders = sys.modules[__package__ + ".holders"]

#: At most this many holders are kept for one allocation or block, shortest path first.
MAX_HOLDERS = 4


def _hex(n: int) -> str:
    return f"0x{int(n):x}"


def _holder_entry(h: Any, path: Optional[List[str]]) -> Dict[str, Any]:
    return {
        "path": path,
        "holder": _holders._type_name(type(h.obj)),
        "kind": h.kind,
        "weak": False,
        "address": _hex(h.start),
        "bytes": int(h.nbytes),
    }


def _render_path(walk: Any, target: int, last: str) -> Optional[List[str]]:
    p = walk.path(target)
    if not p:
        return None
    steps = [p[0][1] or "?"]
    for _, step, obj in p[1:]:
        steps.append(step if step is not None else _holders._type_name(type(obj)))
    steps.append(last)
    return steps


def _merge(ranges: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """Overlapping or touching (start, end) ranges, merged, in order."""
    out: List[Tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def classify(
    allocations: List[Dict[str, Any]],
    *,
    timeout: float = _holders.DEFAULT_TIMEOUT,
    max_depth: int = _holders.DEFAULT_MAX_DEPTH,
    start_unix_ms: Optional[float] = None,
) -> Dict[str, Any]:
    """The classes of ``allocations`` (as ``cuguard_live_allocations`` lists them), as the shim's
    ``cuguard_end_classify`` takes them: ``{"complete", "elapsed_ms", "notes", "caches",
    "allocations": [{"address", "class", "holders", "blocks"}]}``. ``start_unix_ms`` (the
    process's start by the shim's clock) lets the caches' lines carry times."""
    started = time.monotonic()
    notes: List[str] = []
    books = _caches.books(notes, start_unix_ms)
    # Which allocation each book segment lies in.
    order = sorted(range(len(allocations)), key=lambda i: int(allocations[i]["address"]))
    starts = [int(allocations[i]["address"]) for i in order]
    import bisect

    def allocation_at(addr: int) -> Optional[int]:
        k = bisect.bisect_right(starts, addr) - 1
        if k < 0:
            return None
        a = allocations[order[k]]
        return order[k] if addr < int(a["address"]) + int(a["size"]) else None

    booked: Dict[int, Tuple[Any, List[Any]]] = {}  # allocation index -> (book, its blocks there)
    for book in books:
        for block in book.blocks:
            i = allocation_at(block.address)
            if i is None:
                continue
            entry = booked.setdefault(i, (book, []))
            if entry[0] is book:
                entry[1].append(block)
    cache = {
        i
        for i, a in enumerate(allocations)
        if a.get("owner_kind") == "framework_cache" or i in booked
    }

    try:
        pending = _caches.pending_frees()
    except Exception as e:
        pending = {}
        notes.append(f"numba's queue of deferred frees could not be read ({type(e).__name__}: {e})")
    pending_at = {i: pending[int(a["address"])] for i, a in enumerate(allocations) if int(a["address"]) in pending}

    found = _holders._find_holders(allocations)
    by_allocation: Dict[int, List[Any]] = collections.defaultdict(list)
    for h in found:
        by_allocation[h.allocation].append(h)
    weak = _holders.WeakSearch(
        [
            (i, int(a["address"]), int(a["size"]))
            for i, a in enumerate(allocations)
            # Numbers are looked for only for the program's own memory: a library's (cuBLAS
            # workspaces) or a cache's is never held by a number in Python, and looking for one
            # would walk every object the interpreter has.
            if i not in cache
            and i not in pending_at
            and not by_allocation.get(i)
            and a.get("owner_kind") in (None, "program")
        ]
    )
    targets = {id(h.obj): h.obj for h in found}
    targets = _holders._reachable_targets(targets, [found, targets, by_allocation])
    # The bound is the whole look's: what the collection of objects and the books took comes off
    # the walk's share (a kernel's shutdown must end before jupyter_client's SIGTERM).
    left = max(0.0, float(timeout) - (time.monotonic() - started))
    walk = _holders._Walk(targets, left, max(1, int(max_depth)), weak)
    complete = True
    try:
        if targets or weak.pending:
            walk.run(_holders._roots())
        complete = walk.complete
        result = _classes(allocations, cache, booked, by_allocation, walk, weak, pending_at)
    finally:
        walk.parents = {}
    if not complete:
        notes.append(
            f"the walk of references stopped at its bound ({timeout:g} s, {max_depth} steps): "
            "some holders may not have been found"
        )
    caches = _cache_totals(allocations, result, booked, books)
    return {
        "complete": complete,
        "elapsed_ms": int((time.monotonic() - started) * 1000),
        "notes": notes,
        "caches": caches,
        "allocations": result,
    }


def _classes(
    allocations: List[Dict[str, Any]],
    cache: set,
    booked: Dict[int, Tuple[Any, List[Any]]],
    by_allocation: Dict[int, List[Any]],
    walk: Any,
    weak: Any,
    pending_at: Dict[int, str],
) -> List[Dict[str, Any]]:
    human = _holders.human_bytes
    weak_by: Dict[int, List[Tuple[Optional[int], str, int, str]]] = collections.defaultdict(list)
    for index, parent, step, value, kind in weak.found:
        weak_by[index].append((parent, step, value, kind))
    out = []
    for i, a in enumerate(allocations):
        size = int(a["size"])
        address = int(a["address"])
        strong = []
        for h in by_allocation.get(i, []):
            what = (
                f"{_holders._type_name(type(h.obj))} ({human(size)})"
                if h.nbytes >= size
                else f"{_holders._type_name(type(h.obj))} ({human(h.nbytes)} of a {human(size)} allocation)"
            )
            strong.append((h, _render_path(walk, id(h.obj), what)))
        # The deepest holder of each path, as holders() keeps it.
        on_paths = set()
        for h, _ in strong:
            p = walk.path(id(h.obj))
            if p:
                on_paths.update(j for j, _, _ in p[:-1])
        strong = [(h, p) for h, p in strong if id(h.obj) not in on_paths]
        strong.sort(key=lambda hp: len(hp[1]) if hp[1] else 1 << 30)
        entry: Dict[str, Any] = {"address": _hex(address), "holders": [], "blocks": []}
        if i in pending_at:
            # Queued for a free the framework makes later (numba's deferred deallocations).
            entry["class"] = "pending_free"
        elif i in cache:
            entry["class"] = "cache"
            entry["blocks"] = _blocks(a, booked.get(i), strong)
        elif strong or weak_by.get(i):
            entry["class"] = "held"
            holders = [_holder_entry(h, p) for h, p in strong]
            for parent, step, value, kind in weak_by.get(i, []):
                if kind == "cuda-bindings":
                    # A pointer of NVIDIA's bindings: a holder by its type, as a tensor is.
                    what = f"cuda.CUdeviceptr ({human(size)})"
                    path = [step, what] if parent is None else _render_path(walk, parent, "")
                    if parent is not None and path:
                        path = path[:-1] + [step, what]
                    holders.append(
                        {
                            "path": path,
                            "holder": "cuda.CUdeviceptr",
                            "kind": kind,
                            "weak": False,
                            "address": _hex(value),
                            "bytes": size if value == address else 1,
                        }
                    )
                    continue
                if parent is None:
                    path = [step, f"{kind} {_hex(value)}"]
                else:
                    path = _render_path(walk, parent, "")
                    path = (path[:-1] + [step, f"{kind} {_hex(value)}"]) if path else None
                parent_obj = walk.parents.get(parent, (None, None, None))[2] if parent is not None else None
                holders.append(
                    {
                        "path": path,
                        # The object whose number it is (a Buffer with a .ptr), else the number.
                        "holder": _holders._type_name(type(parent_obj)) if parent_obj is not None else kind,
                        "kind": kind,
                        "weak": True,
                        "address": _hex(value),
                        "bytes": 1,
                    }
                )
            entry["holders"] = holders[:MAX_HOLDERS]
        elif a.get("owner_kind") in ("library", "driver"):
            entry["class"] = "library"
        else:
            entry["class"] = "lost"
        out.append(entry)
    return out


def _blocks(
    allocation: Dict[str, Any], booked: Optional[Tuple[Any, List[Any]]], strong: List[Tuple[Any, Any]]
) -> List[Dict[str, Any]]:
    """A cache segment's blocks, live and idle, in address order, with their holders."""
    base = int(allocation["address"])
    end = base + int(allocation["size"])

    def holders_in(start: int, stop: int) -> List[Dict[str, Any]]:
        inside = [(h, p) for h, p in strong if h.start < stop and h.start + max(1, h.nbytes) > start]
        return [_holder_entry(h, p) for h, p in inside[:MAX_HOLDERS]]

    blocks: List[Dict[str, Any]] = []
    live: List[Tuple[int, int]] = []
    lines: Dict[int, List[Any]] = {}
    if booked is not None and booked[0].source == "hook":
        # cuguard's CuPy hook sees a block's allocation, but not its free in another thread
        # (CuPy's hooks are per thread): it gives lines, the holders say what is live. Where its
        # books add up to CuPy's own figures, the book is whole (``hook_whole``) and read as is.
        lines = {b.address: b.frames for b in booked[1]}
        booked = None
    if booked is not None:
        for b in sorted(booked[1], key=lambda b: b.address):
            blocks.append(
                {
                    "address": _hex(b.address),
                    "size": int(b.size),
                    "state": b.state,
                    "holders": holders_in(b.address, b.address + b.size),
                    "frames": list(b.frames),
                }
            )
            live.append((b.address, b.address + b.size))
        if booked[0].complete:
            return blocks
    # What the book does not cover: live where an object declares it holds memory, idle around.
    held = _merge([(max(base, h.start), min(end, h.start + max(1, h.nbytes))) for h, _ in strong])
    covered = _merge(live)
    for start, stop in held:
        if any(s <= start and stop <= e for s, e in covered):
            continue
        blocks.append(
            {
                "address": _hex(start),
                "size": stop - start,
                "state": "live",
                "holders": holders_in(start, stop),
                "frames": list(lines.get(start, [])),
            }
        )
    taken = _merge(covered + held)
    cursor = base
    for start, stop in taken:
        if start > cursor:
            blocks.append({"address": _hex(cursor), "size": start - cursor, "state": "idle", "holders": [], "frames": []})
        cursor = max(cursor, stop)
    if cursor < end:
        blocks.append({"address": _hex(cursor), "size": end - cursor, "state": "idle", "holders": [], "frames": []})
    blocks.sort(key=lambda b: int(b["address"], 16))
    return blocks


def _cache_totals(
    allocations: List[Dict[str, Any]],
    result: List[Dict[str, Any]],
    booked: Dict[int, Tuple[Any, List[Any]]],
    books: List[Any],
) -> List[Dict[str, Any]]:
    totals: Dict[Tuple[Optional[str], str, str], Dict[str, Any]] = {}
    lined = set()  # the books whose lines are in an entry already
    for i, entry in enumerate(result):
        if entry["class"] != "cache":
            continue
        owner = allocations[i].get("owner")
        book = booked.get(i, (None, None))[0]
        framework = book.framework if book is not None else _caches.framework_of(owner)
        source = book.source if book is not None else "holders"
        key = (owner, framework, source)
        t = totals.setdefault(
            key,
            {
                "owner": owner,
                "framework": framework,
                "source": source,
                "segment_bytes": 0,
                "live_bytes": 0,
                "idle_bytes": 0,
                "note": book.note if book is not None else None,
            },
        )
        if book is not None and book.lines and id(book) not in lined:
            lined.add(id(book))
            t["lines"] = book.lines
        t["segment_bytes"] += int(allocations[i]["size"])
        for b in entry["blocks"]:
            t["live_bytes" if b["state"] == "live" else "idle_bytes"] += int(b["size"])
    for book in books:
        if book.note and not any(t["framework"] == book.framework for t in totals.values()):
            totals[(None, book.framework, book.source)] = {
                "owner": None,
                "framework": book.framework,
                "source": book.source,
                "segment_bytes": 0,
                "live_bytes": 0,
                "idle_bytes": 0,
                "note": book.note,
            }
    return list(totals.values())


def view_of(report: Dict[str, Any], classification: Dict[str, Any]) -> Dict[str, Any]:
    """A snapshot's ``python.view``: its live leaks, each with the class ``classification`` found
    for its address (``unclassified`` where it has none: made while the look ran)."""
    by_address = {int(c["address"], 16): c for c in classification.get("allocations", [])}
    allocations = []
    for leak in report.get("leaks", []):
        if leak.get("state") != "live_at_exit":
            continue
        entry = {k: v for k, v in leak.items() if k not in ("state", "handle")}
        c = by_address.get(int(leak["address"], 16))
        entry["class"] = c["class"] if c else "unclassified"
        for key in ("holders", "blocks"):
            if c and c.get(key):
                entry[key] = c[key]
        allocations.append(entry)
    allocations.sort(key=lambda a: a["seq"])
    view = {
        "at": "snapshot",
        "time_ms": max([0] + [int(a["time_ms"]) for a in allocations]),
        "complete": bool(classification.get("complete")),
        "allocations": allocations,
    }
    end_ms = report.get("process", {}).get("end_unix_ms")
    start_ms = report.get("process", {}).get("start_unix_ms")
    if isinstance(end_ms, int) and isinstance(start_ms, int):
        view["time_ms"] = max(0, end_ms - start_ms)
    for key in ("elapsed_ms", "notes", "caches"):
        if classification.get(key):
            view[key] = classification[key]
    return view
