"""Growth inside PyTorch's cache by the lines that made its tensors (run 41, issue 54): one
segment taken at the start and cached, then a list that keeps one 8 MiB tensor a step beside a
16 MiB temporary freed each step, 14 steps of 0.1 s. The driver sees one segment, flat; run
under `cuguard run`, `summary` should say the list's line grows (the shim's samples of
PyTorch's blocks by stack) and nothing else. The same program as
harness/workloads/python/torch_growth.py, on PyTorch itself.

    python3 torch_growth.py
"""
import json
import time

import torch

MiB = 2**20
held = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")  # the segment
del held
keep = []
for step in range(14):
    keep.append(torch.empty(8 * MiB, dtype=torch.uint8, device="cuda"))  # grows
    tmp = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")  # temporary
    del tmp
    time.sleep(0.1)
src = open(__file__).read().splitlines()
print(json.dumps({"reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated(),
                  "grows_line": next(i + 1 for i, l in enumerate(src) if l.endswith("# grows"))}))
