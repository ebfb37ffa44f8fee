"""torch_oom.py: PyTorch's cache fragmented by live tensors, then a request it refuses (issue 53's
card for PyTorch), on the stand-in for PyTorch's caching allocator (standin_torch/, which
refuses, calls its out-of-memory observers and raises as PyTorch does). The same program as
scripts/gpu/torch_oom_probe.py runs on the GPU with PyTorch itself.

    python3 torch_oom.py fraction|device [ASK]

`fraction`: PyTorch's memory fraction allows 8 GiB; seven 1 GiB segments are cached, then 70
tensors of 100 MiB carved from them, every other one kept (3.4 GiB idle in 35 pieces between
them), then 2.5 GiB asked. `device`: the same against the whole device (segments while the
driver has 2 GiB more to give), then 3 GiB asked. ASK (`6GiB`) asks that instead. Prints one JSON line: what was asked and
PyTorch's error. With ``TORCH_OOM_HELPER=1`` the pinning tensors are made through the program's
own allocation helper, ``make()``, called from two lines.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin_torch"))
import torch  # noqa: E402

MiB, GiB = 2**20, 2**30


def make(n):
    return torch.empty(n, dtype=torch.uint8, device="cuda")  # the helper


mode = sys.argv[1] if len(sys.argv) > 1 else "fraction"
if mode == "fraction":
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(8 * GiB / total)
    segments = 7
else:
    segments = torch.cuda.mem_get_info()[0] // GiB - 2
held = [torch.empty(GiB, dtype=torch.uint8, device="cuda") for _ in range(segments)]
del held
if os.environ.get("TORCH_OOM_HELPER"):
    # Through the program's own allocation helper, from two lines, two tensors each in turn.
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
if len(sys.argv) > 2:
    ask = int(sys.argv[2].removesuffix("GiB")) * GiB
try:
    big = torch.empty(ask, dtype=torch.uint8, device="cuda")  # asks
    print(json.dumps({"mode": mode, "result": "served"}))
except torch.cuda.OutOfMemoryError as e:
    print(json.dumps({"mode": mode, "result": "refused", "ask": ask, "error": str(e)}))
