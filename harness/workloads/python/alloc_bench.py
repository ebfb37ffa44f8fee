"""alloc_bench.py: the cost of an allocation seen from Python, for measuring Python frame capture.

    python3 alloc_bench.py [N] [DEPTH] [pydll|cdll]

Makes N cuMemAlloc_v2/cuMemFree_v2 pairs of 256 bytes through ctypes, each from DEPTH nested
Python calls, and prints one JSON line: {"n", "depth", "mode", "ns_per_pair"} (the best of 5
rounds, in thread CPU time, which a busy machine disturbs less than wall time). Compare runs with CUGUARD_PYTHON=0 and =1 under the shim.
"""

import ctypes
import json
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
depth = int(sys.argv[2]) if len(sys.argv) > 2 else 10
mode = sys.argv[3] if len(sys.argv) > 3 else "cdll"
cuda = (ctypes.PyDLL if mode == "pydll" else ctypes.CDLL)("libcuda.so.1")
alloc = cuda.cuMemAlloc_v2
alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
free = cuda.cuMemFree_v2
free.argtypes = [ctypes.c_uint64]


def check(result):
    if result != 0:
        raise SystemExit(f"CUDA error {result}")


def pairs(count):
    ptr = ctypes.c_uint64()
    ref = ctypes.byref(ptr)
    for _ in range(count):
        alloc(ref, 256)
        free(ptr.value)


def nested(level, count):
    if level <= 1:
        return pairs(count)
    return nested(level - 1, count)


check(cuda.cuInit(0))
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0))
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
check(cuda.cuCtxSetCurrent(ctx))
nested(depth, 1000)  # warm up
best = None
for _ in range(5):
    t = time.thread_time_ns()
    nested(depth, n)
    dt = (time.thread_time_ns() - t) / n
    best = dt if best is None else min(best, dt)
print(json.dumps({"n": n, "depth": depth, "mode": mode, "ns_per_pair": round(best, 1)}))
