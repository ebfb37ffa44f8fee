"""CuPy's test_free_all_blocks_large_chunk as a program: 70% of the device from CuPy's async pool
(cuMemAllocAsync), freed (cuMemFreeAsync), then 30% through cudaMalloc before any
synchronization. Bare, the driver keeps the async pool's memory until a synchronization and the
second allocation fails; prints what happened, and the shim's counts when under it. (Run 9 asked
70% the second time, which no synchronization could serve; in the suite the pool had a free of
its own waiting for a fence, and synchronized for it: tests/it/pool_giveback.rs `others`.)"""

import json
import os

import cupy
from cupy.cuda import memory

pool = memory.MemoryAsyncPool()
_, total = cupy.cuda.Device().mem_info
mem = pool.malloc(int(0.7 * total)).mem
del mem
try:
    x = cupy.cuda.runtime.malloc(int(0.3 * total))
    got = "served"
    cupy.cuda.runtime.free(x)
except cupy.cuda.runtime.CUDARuntimeError as e:
    got = f"refused: {e}"
out = {"second_allocation": got}
try:
    import cuguard

    if cuguard.active():
        r = cuguard.snapshot()
        out["pool"] = [d.get("pool") for d in r["stats"]["devices"]]
except Exception as e:
    out["cuguard"] = repr(e)
print(json.dumps(out))
