"""torch_growth.py: a list that keeps one tensor a step, carved from PyTorch's cache (one segment
taken at the start and cached), beside a temporary freed each step, on the stand-in for
PyTorch's caching allocator (standin_torch/), whose blocks reach cuguard's hook through the C
stand-in of libc10_cuda.so named by STANDIN_C10_CUDA. The driver sees one segment, flat from
the start; growth inside the cache is at the line that keeps the tensors (issue 54: the shim's
samples of PyTorch's blocks by the stacks that made them).

    STANDIN_C10_CUDA=.../libc10_cuda.so python3 torch_growth.py
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin_torch"))
import torch  # noqa: E402

MiB = 2**20
held = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")  # the segment
del held
keep = []
for step in range(14):
    keep.append(torch.empty(8 * MiB, dtype=torch.uint8, device="cuda"))  # grows
    tmp = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")  # temporary
    del tmp
    time.sleep(0.1)
print("done", flush=True)
