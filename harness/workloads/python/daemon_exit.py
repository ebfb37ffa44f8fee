"""daemon_exit.py: daemon threads allocating device memory while the interpreter shuts down.

    python3 daemon_exit.py [THREADS]

Starts THREADS daemon threads (default 4) that allocate and free through ctypes (which releases
the GIL around each call) as fast as they can, lets them run for a moment, and returns from the
main thread, so the interpreter finalizes while they are inside the driver call (and inside the
shim's stack capture). It must exit with status 0; prints `started N`.
"""

import ctypes
import sys
import threading
import time

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 4
cuda = ctypes.CDLL("libcuda.so.1")
alloc = cuda.cuMemAlloc_v2
alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
free = cuda.cuMemFree_v2
free.argtypes = [ctypes.c_uint64]


def check(result):
    if result != 0:
        raise SystemExit(f"CUDA error {result}")


check(cuda.cuInit(0))
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0))
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))


def churn(depth):
    if depth > 0:
        return churn(depth - 1)
    cuda.cuCtxSetCurrent(ctx)
    ptr = ctypes.c_uint64()
    ref = ctypes.byref(ptr)
    while True:
        if alloc(ref, 256) == 0:
            free(ptr.value)


for i in range(threads):
    threading.Thread(target=churn, args=(i * 5,), daemon=True).start()
time.sleep(0.05)
print(f"started {threads}")
