"""PyTorch's expandable segments in cuguard's history (issue 54, run 50): tensors grown, half of
them freed, more grown, the cache emptied, each followed by a pause phase (`cuguard.phase`) in
which nothing changes. Prints one JSON line per pause: PyTorch's memory_allocated() and
memory_reserved() then, and its snapshot's segments (address, total size, live blocks' bytes).
expandable.sh reads `cuguard summary --at phase:NAME` beside each.

    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 expandable.py
"""
import json

import torch

import cuguard

MiB = 2**20
torch.cuda.init()
torch.empty(1, device="cuda")


def pause(name):
    torch.cuda.synchronize()
    with cuguard.phase(name):
        segs = torch.cuda.memory_snapshot()
        print(json.dumps({
            "pause": name,
            "allocated": torch.cuda.memory_allocated(),
            "reserved": torch.cuda.memory_reserved(),
            "segments": [[s["address"], s["total_size"],
                          sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")]
                         for s in segs],
        }), flush=True)


kept = [torch.empty(100 * MiB + 512 * 1024 * i, dtype=torch.uint8, device="cuda")  # grown
        for i in range(40)]
small = [torch.empty(64 * 1024, dtype=torch.uint8, device="cuda") for _ in range(50)]  # small
pause("grown")
del kept[::2]
pause("half_freed")
more = [torch.empty(250 * MiB, dtype=torch.uint8, device="cuda") for _ in range(10)]  # more
pause("more")
del more
torch.cuda.empty_cache()
pause("emptied")
