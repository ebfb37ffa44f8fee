"""The driver's default memory pool under PyTorch (issue 57 item 1): PyTorch's cudaMallocAsync
backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) keeps freed tensors in the device's
default pool. 24 tensors of 1 GiB, every other one freed (12 GiB idle in the pool, between live
ones), then:

1. `fits_if_trimmed`: what the device has free plus 6 GiB. The driver refuses the first
   cuMemAllocAsync; PyTorch then synchronizes, trims the pool and asks again, which fits.
2. `never`: the device's total. Refused whatever is trimmed: PyTorch's OutOfMemoryError.

Prints one JSON line: PyTorch's backend, what each request did, the device's free memory before
each, and PyTorch's own figures (reserved is the pool's, as PyTorch reads it).
"""

import json

import torch

GiB = 1 << 30
out = {"backend": torch.cuda.get_allocator_backend()}
keep = [torch.empty(GiB, dtype=torch.uint8, device="cuda") for _ in range(24)]
for i in range(0, 24, 2):
    keep[i] = None  # ASYNC_LINE: freed into the default pool
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
out["before"] = {"free": free, "total": total, "reserved": torch.cuda.memory_reserved()}
for name, ask in (("fits_if_trimmed", free + 6 * GiB), ("never", total)):
    free_now, _ = torch.cuda.mem_get_info()
    try:
        t = torch.empty(ask, dtype=torch.uint8, device="cuda")  # ASYNC_LINE: the request
        got = "served"
        del t
    except torch.OutOfMemoryError as e:
        got = "OutOfMemoryError: " + str(e).splitlines()[0][:300]
    torch.cuda.synchronize()
    out[name] = {"asked": ask, "free_before": free_now, "got": got}
print(json.dumps(out))
