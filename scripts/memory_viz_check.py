#!/usr/bin/env python3
"""Checks a PyTorch memory snapshot written by `cuguard export` (cuguard::export::memory_viz)
the way its readers will read it, and prints a JSON summary of it.

    python3 scripts/memory_viz_check.py SNAPSHOT.pickle   (or the pickle on standard input)

What it checks, failing with the reason:
- the pickle: protocol 4, and only opcodes that the JavaScript unpickler of PyTorch's viewer
  (torch/utils/viz/MemoryViz.js, `unpickle`) reads; every integer fits in 64 signed bits;
- the snapshot: the keys PyTorch's writer gives segments, blocks, trace entries and frames
  (torch/csrc/cuda/memory_snapshot.cpp); each segment's blocks tile it exactly; block states;
- each device's trace: known actions, `time_us` never going back, each `free_requested`
  followed at once by its `free_completed` (the viewer folds the pair into one `free`);
- the viewer's replay (MemoryView's simulate_memory in MemoryViz.js walks the trace backwards
  from the segments): every block it puts back lies in a segment live then, every segment it
  takes away is there and holds no block, every allocation it takes away is there.

The summary: {"segments": [[device, address, total_size, [[state, address, size], ...]], ...],
"traces": [[[action, addr, size, time_us], ...] per device]}.
"""

import json
import pickle
import pickletools
import sys

# The opcodes MemoryViz.js's unpickler knows.
VIEWER_OPCODES = {
    "APPENDS", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME",
    "LONG1", "LONG_BINGET", "MARK", "MEMOIZE", "PROTO", "SETITEMS", "SHORT_BINUNICODE", "STOP",
    "TUPLE2", "APPEND", "NEWFALSE", "BINPUT", "BINUNICODE", "EMPTY_TUPLE", "NEWTRUE", "NONE",
    "BINFLOAT", "TUPLE", "TUPLE1", "TUPLE3", "LONG_BINPUT", "LIST", "DICT", "SETITEM",
}
SEGMENT_KEYS = {
    "device", "address", "total_size", "allocated_size", "active_size", "requested_size",
    "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks",
}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}
EVENT_KEYS = {"action", "addr", "size", "stream", "time_us", "frames"}
OOM_KEYS = {"action", "device_free", "size", "stream", "time_us", "frames"}
ACTIONS = {"segment_alloc", "segment_free", "alloc", "free_requested", "free_completed", "oom"}


def fail(why):
    raise SystemExit(f"memory_viz_check: {why}")


def ints(v):
    if isinstance(v, bool):
        return
    if isinstance(v, int):
        if not -(1 << 63) <= v < (1 << 63):
            fail(f"integer {v} does not fit in 64 signed bits")
    elif isinstance(v, dict):
        for k, x in v.items():
            ints(k)
            ints(x)
    elif isinstance(v, (list, tuple)):
        for x in v:
            ints(x)


def frames(fs, where):
    if not isinstance(fs, list):
        fail(f"{where}: frames is not a list")
    for f in fs:
        if set(f) != {"name", "filename", "line"}:
            fail(f"{where}: a frame's keys are {sorted(f)}")
        if not (isinstance(f["name"], str) and isinstance(f["filename"], str)
                and isinstance(f["line"], int)):
            fail(f"{where}: a frame's types {f}")


def check(data):
    if data[:2] != b"\x80\x04":
        fail(f"not pickle protocol 4: {data[:2]!r}")
    for op, _, pos in pickletools.genops(data):
        if op.name not in VIEWER_OPCODES:
            fail(f"opcode {op.name} at {pos} is not one the viewer reads")
    snap = pickle.loads(data)
    if set(snap) != {"segments", "device_traces"}:
        fail(f"top-level keys {sorted(snap)}")
    ints(snap)

    summary_segments = []
    for i, seg in enumerate(snap["segments"]):
        where = f"segment {i}"
        if set(seg) != SEGMENT_KEYS:
            fail(f"{where}: keys {sorted(seg)}")
        frames(seg["frames"], where)
        at = seg["address"]
        allocated = 0
        tiles = []
        for j, b in enumerate(seg["blocks"]):
            if set(b) != BLOCK_KEYS:
                fail(f"{where} block {j}: keys {sorted(b)}")
            if b["address"] != at:
                fail(f"{where} block {j}: at {b['address']}, the tiling is at {at}")
            if b["state"] not in ("active_allocated", "inactive"):
                fail(f"{where} block {j}: state {b['state']}")
            if b["state"] == "active_allocated":
                allocated += b["size"]
                if b["requested_size"] != b["size"]:
                    fail(f"{where} block {j}: requested_size {b['requested_size']}")
            elif b["requested_size"] != 0 or b["frames"]:
                fail(f"{where} block {j}: free space with a request or frames")
            frames(b["frames"], f"{where} block {j}")
            at += b["size"]
            tiles.append([b["state"], b["address"], b["size"]])
        if at != seg["address"] + seg["total_size"]:
            fail(f"{where}: the blocks end at {at}, the segment at "
                 f"{seg['address'] + seg['total_size']}")
        for k in ("allocated_size", "active_size", "requested_size"):
            if seg[k] != allocated:
                fail(f"{where}: {k} {seg[k]}, its blocks hold {allocated}")
        if not 0 <= seg["device"] < max(len(snap["device_traces"]), 1):
            fail(f"{where}: device {seg['device']} has no trace")
        summary_segments.append([seg["device"], seg["address"], seg["total_size"], tiles])

    summary_traces = []
    for d, trace in enumerate(snap["device_traces"]):
        last = None
        out = []
        for k, e in enumerate(trace):
            where = f"device {d} event {k}"
            if e.get("action") not in ACTIONS:
                fail(f"{where}: action {e.get('action')}")
            # `user_metadata`: a tagged allocation's tag, where PyTorch's writer puts
            # _set_memory_metadata's (trace entries only); absent on untagged ones.
            if set(e) - {"user_metadata"} != (OOM_KEYS if e["action"] == "oom" else EVENT_KEYS):
                fail(f"{where}: keys {sorted(e)}")
            if not isinstance(e.get("user_metadata", ""), str):
                fail(f"{where}: user_metadata {e['user_metadata']!r} is not a string")
            frames(e["frames"], where)
            if last is not None and e["time_us"] < last:
                fail(f"{where}: time_us {e['time_us']} after {last}")
            last = e["time_us"]
            if e["action"] == "free_requested":
                n = trace[k + 1] if k + 1 < len(trace) else {}
                if n.get("action") != "free_completed" or n.get("addr") != e["addr"]:
                    fail(f"{where}: free_requested without its free_completed")
            if e["action"] == "free_completed":
                p = trace[k - 1] if k > 0 else {}
                if p.get("action") != "free_requested" or p.get("addr") != e["addr"]:
                    fail(f"{where}: free_completed without its free_requested")
            out.append([e["action"], e.get("addr", e.get("device_free")), e["size"], e["time_us"]])
        summary_traces.append(out)
        viewer_replay(snap, d, trace)
    return {"segments": summary_segments, "traces": summary_traces}


def viewer_replay(snap, device, trace):
    """MemoryView's walk: from the segments back through the trace (pairs folded)."""
    segs = {s["address"]: s["total_size"] for s in snap["segments"] if s["device"] == device}
    blocks = {}
    for s in snap["segments"]:
        if s["device"] == device:
            for b in s["blocks"]:
                if b["state"] == "active_allocated":
                    blocks[b["address"]] = b["size"]
    folded = []
    for e in trace:
        if e["action"] == "free_completed" and folded and folded[-1][0] == "free_requested" \
                and folded[-1][1] == e["addr"]:
            folded[-1] = ("free", e["addr"], e["size"])
            continue
        folded.append((e["action"], e.get("addr"), e["size"]))

    def inside(addr):
        return any(a <= addr < a + n for a, n in segs.items())

    for k in range(len(folded) - 1, -1, -1):
        action, addr, size = folded[k]
        where = f"device {device}, walking back over event {k} ({action} {addr})"
        if action == "free":
            if not inside(addr):
                fail(f"{where}: the block put back is in no segment")
            blocks[addr] = size
        elif action == "alloc":
            if addr not in blocks:
                fail(f"{where}: the block taken away is not there")
            del blocks[addr]
        elif action == "segment_free":
            segs[addr] = size
        elif action == "segment_alloc":
            if addr not in segs:
                fail(f"{where}: the segment taken away is not there")
            if any(addr <= b < addr + size for b in blocks):
                fail(f"{where}: the segment taken away still holds a block")
            del segs[addr]
        elif action in ("free_requested", "free_completed"):
            fail(f"{where}: a free the viewer does not fold")


if __name__ == "__main__":
    raw = open(sys.argv[1], "rb").read() if len(sys.argv) > 1 else sys.stdin.buffer.read()
    print(json.dumps(check(raw)))
