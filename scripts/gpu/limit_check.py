"""What frameworks see under CUGUARD_LIMIT on the real driver (issue 12), one JSON line per check.

Usage: CUGUARD_LIMIT=4GiB LD_PRELOAD=libcuguard.so python3 limit_check.py CASE
CASE: torch (mem_get_info, then a tensor past the limit), rmm (RMM's default pool, half of the free
memory, then past it), nvml (pynvml's memory info, as dask-cuda reads it).
"""

import json
import sys

GiB = 1 << 30


def torch_case() -> dict:
    import torch

    free, total = torch.cuda.mem_get_info()
    keep = torch.empty(1 * GiB, dtype=torch.uint8, device="cuda")
    free2, _ = torch.cuda.mem_get_info()
    try:
        torch.empty(8 * GiB, dtype=torch.uint8, device="cuda")
        oom = None
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0][:160]
    del keep
    return {"case": "torch", "total": total, "free": free, "free_after_1GiB": free2, "oom": oom}


def rmm_case() -> dict:
    import rmm

    free0, total0 = rmm.mr.available_device_memory()
    # No initial size: RMM's pool takes half of what cuMemGetInfo says is free.
    rmm.reinitialize(pool_allocator=True)
    size = rmm.mr.get_current_device_resource().pool_size()
    buf = rmm.DeviceBuffer(size=1 * GiB)
    free1, _ = rmm.mr.available_device_memory()
    try:
        rmm.DeviceBuffer(size=8 * GiB)
        oom = None
    except MemoryError as e:
        oom = str(e).splitlines()[0][:160]
    del buf
    return {"case": "rmm", "total": total0, "free": free0, "pool": size, "free_after_pool": free1, "oom": oom}


def nvml_case() -> dict:
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    m = pynvml.nvmlDeviceGetMemoryInfo(h)
    return {"case": "nvml", "total": m.total, "free": m.free, "used": m.used}


if __name__ == "__main__":
    print(json.dumps({"torch": torch_case, "rmm": rmm_case, "nvml": nvml_case}[sys.argv[1]]()))
