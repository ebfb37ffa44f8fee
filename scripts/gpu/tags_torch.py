"""tags_torch.py: cuguard.tag and cuguard.annotate on real PyTorch (issue 55, item 2), run under
`cuguard run` by scripts/gpu/blocks.sh. PyTorch's cache takes a segment from the driver inside
each tag's block (the sizes are chosen past any segment it already holds: 2 MiB segments serve
small tensors, so each tensor here is larger than 1 MiB and its own segment); the report then
names the segments by tag, and `annotate` names the segment that holds a tensor made untagged.
Prints one JSON line: each tensor's size, address and the tag it should carry."""
import json

import torch

import cuguard

MIB = 1 << 20
torch.empty(1, device="cuda")
kept = {}
with cuguard.tag("kv_cache"):
    kept["kv_cache"] = torch.empty(96 * MIB, dtype=torch.uint8, device="cuda")
    with cuguard.tag("weights"):
        kept["weights"] = torch.empty(40 * MIB, dtype=torch.uint8, device="cuda")
plain = torch.empty(24 * MIB, dtype=torch.uint8, device="cuda")
cuguard.annotate(plain, "scratch")
kept["scratch"] = plain
print(json.dumps({
    "active": cuguard.active(),
    "tensors": {k: {"bytes": t.numel(), "address": t.data_ptr()} for k, t in kept.items()},
    "segments": [
        {"address": s["address"], "total_size": s["total_size"]}
        for s in torch.cuda.memory_snapshot()
    ],
}), flush=True)
