"""On the H200, under the shim: cuguard.holders() names the module globals that keep a PyTorch
tensor, a CuPy array and an RMM DeviceBuffer alive (issue 11). Default settings: PyTorch's cache
and CuPy's pool on, RMM's default resource.

usage: LD_PRELOAD=.gpu/libcuguard.so python3 scripts/gpu/holders.py OUT.json
Prints what holders() says (as a user sees it) and writes its list to OUT.json.
"""

import json
import sys

import cupy
import rmm
import torch

import cuguard

MIB = 1 << 20

# Three globals, each a dict holding one framework's device memory under a key.
WEIGHTS = {"layer1": torch.ones(4 * MIB, device="cuda")}  # 16 MiB of float32
ARRAYS = {"embedding": cupy.ones(2 * MIB, dtype=cupy.float32)}  # 8 MiB
BUFFERS = {"staging": rmm.DeviceBuffer(size=12 * MIB)}  # 12 MiB
torch.cuda.synchronize()
cupy.cuda.Device().synchronize()

found = cuguard.holders(min_bytes=MIB)
print(found)
print(f"complete={found.complete} elapsed_s={found.elapsed_s:.2f}")
with open(sys.argv[1], "w") as f:
    json.dump(list(found), f, default=str, indent=1)
