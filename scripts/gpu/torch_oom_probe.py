"""Issue 53's PyTorch card, thin probe (run 39): PyTorch's cache fragmented by live tensors, then a
request PyTorch refuses, once under its per-process fraction (no driver refusal) and once against
the whole device. Prints, as JSON lines: what PyTorch's out-of-memory observer is called with, the
cache's idle bytes, pieces and largest piece from memory_snapshot() at that moment, and PyTorch's
own message. Run under `cuguard run` to see what cuguard's card says beside it.

    python3 torch_oom_probe.py fraction|device

With HELPER=1 the pinning tensors are made through a helper, make(), from two lines (run 40:
cuguard's card charges each to its caller). The result names the lines that made them
(`lines`), to read the card's pinning lines against.
"""
import json, os, sys, time

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "fraction"
MiB, GiB = 2**20, 2**30
seen = []


def observer(*args):
    t0 = time.perf_counter()
    segs = torch.cuda.memory_snapshot()
    idle, pieces, largest, pinning = 0, 0, 0, 0
    for s in segs:
        free = [b["size"] for b in s["blocks"] if b["state"] == "inactive"]
        live = [b for b in s["blocks"] if b["state"] == "active_allocated"]
        idle += sum(free); pieces += len(free); largest = max([largest] + free)
        if free and live:
            pinning += len(live)
    seen.append({"observer_args": list(args), "segments": len(segs), "idle": idle, "pieces": pieces,
                 "largest": largest, "pinning_blocks": pinning,
                 "snapshot_ms": round((time.perf_counter() - t0) * 1e3, 3)})


torch.cuda.init()
torch._C._cuda_attach_out_of_memory_observer(observer)
total = torch.cuda.get_device_properties(0).total_memory
if mode == "fraction":
    torch.cuda.set_per_process_memory_fraction(8 * GiB / total)
    segments = 7
else:
    segments = int(torch.cuda.mem_get_info()[0] // GiB) - 2
# Whole 1 GiB segments, cached; then 100 MiB tensors carved from them, every other one freed.
torch.cuda.empty_cache()
held = [torch.empty(GiB, dtype=torch.uint8, device="cuda") for _ in range(segments)]
del held
def make(n):
    return torch.empty(n, dtype=torch.uint8, device="cuda")  # helper


if os.environ.get("HELPER"):
    tensors = []
    for i in range(segments * 10):
        if i % 4 < 2:
            tensors.append(make(100 * MiB))  # first caller
        else:
            tensors.append(make(100 * MiB))  # second caller
else:
    tensors = [torch.empty(100 * MiB, dtype=torch.uint8, device="cuda") for _ in range(segments * 10)]  # pinning
keep = tensors[1::2]
del tensors
ask = int(2.5 * GiB) if mode == "fraction" else 3 * GiB
result = {"mode": mode, "segments_made": segments, "ask": ask, "reserved": torch.cuda.memory_reserved(),
          "allocated": torch.cuda.memory_allocated(), "device_free": torch.cuda.mem_get_info()[0]}
t0 = time.perf_counter()
try:
    big = torch.empty(ask, dtype=torch.uint8, device="cuda")
    result["result"] = "served"
except torch.cuda.OutOfMemoryError as e:
    result["result"] = "refused"
    result["message"] = str(e)[:600]
# From the request to PyTorch's error (its observers', cuguard's card included).
result["refusal_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
result["observed"] = seen
src = open(__file__).read().splitlines()
result["lines"] = {m: next(i + 1 for i, l in enumerate(src) if l.endswith("# " + m))
                   for m in ("pinning", "helper", "first caller", "second caller")}
print(json.dumps(result))
