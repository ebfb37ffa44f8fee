"""blocks_probe.py MODE: PyTorch's blocks as a preloaded library sees them (scripts/gpu/blocks.sh).

MODE: `none` (no probe: the baseline), `probe` (blocks_probe.so preloaded, counting), `line` (and
the Python line of each), `history` (PyTorch's own _record_memory_history, no stacks),
`history-python` (with Python stacks), `check` (the probe and PyTorch's recorder at once: every
block event the probe saw is one of PyTorch's trace, in order). Prints one JSON line."""
import ctypes
import json
import os
import sys
import time

import torch

mode = sys.argv[1]
probe = ctypes.CDLL(os.environ["PROBE"]) if mode in ("probe", "line", "check") else None
torch.empty(1, device="cuda")
torch.cuda.synchronize()


def word(name, kind=ctypes.c_uint64):
    return kind.in_dll(probe, name).value


if mode == "line":
    ctypes.c_uint64.in_dll(probe, "probe_mode").value = 1
if mode in ("history", "check"):
    torch.cuda.memory._record_memory_history("all", context=None, max_entries=1_000_000)
if mode == "history-python":
    torch.cuda.memory._record_memory_history("all", context="alloc", stacks="python", max_entries=1_000_000)


def pairs(n):
    t = time.perf_counter()
    for _ in range(n):
        y = torch.empty(1000, device="cuda")  # PAIR
        del y
    return (time.perf_counter() - t) / n * 1e9


out = {"mode": mode, "torch": torch.__version__, "cuda": torch.version.cuda,
       "device": torch.cuda.get_device_name(), "backend": torch._C._cuda_getAllocatorBackend()}
if mode == "check":
    # A small training step: many tensors of many sizes, freed in another order than made.
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = word("probe_count")
    for _ in range(3):
        x = torch.randn(256, 512, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    seen = word("probe_count") - before
    snap = torch.cuda.memory._snapshot()
    trace = [e for t in snap["device_traces"] for e in t if e["action"] in ("alloc", "free_requested")]
    n = min(seen, 65536)
    k0 = word("probe_count") - n
    addrs = (ctypes.c_uint64 * 65536).in_dll(probe, "probe_addr")
    sizes = (ctypes.c_int64 * 65536).in_dll(probe, "probe_size")
    mine = [(addrs[(k0 + i) % 65536], sizes[(k0 + i) % 65536]) for i in range(n)]
    theirs = [(e["addr"], e["size"] if e["action"] == "alloc" else -e["size"]) for e in trace][-n:]
    out.update(probe_events=seen, trace_events=len(trace), equal_tail=mine == theirs[-len(mine):],
               first_mismatch=next((i for i, (a, b) in enumerate(zip(mine, theirs[-len(mine):])) if a != b), None))
    # Both sequences whole, each event (address, signed size; PyTorch's with its action), for a
    # mismatch to be read.
    with open(os.environ.get("SEQUENCES", "/tmp/blocks_sequences.json"), "w") as f:
        json.dump({"probe": mine, "pytorch": [(e["action"], e["addr"], e["size"]) for e in trace]}, f)
else:
    pairs(20000)
    out["ns_per_pair"] = round(min(pairs(100000) for _ in range(5)), 1)
if probe is not None:
    out.update(allocs=word("probe_allocs"), frees=word("probe_frees"), other=word("probe_other"),
               forwarded=word("probe_forwarded"),
               lines=word("probe_lines"), last_line=word("probe_last_line", ctypes.c_int64))
print(json.dumps(out), flush=True)
