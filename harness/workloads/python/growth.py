"""growth.py: a loop that keeps a buffer per iteration and uses a temporary in each, through
ctypes on the CUDA driver (the simulated one in tests).

    python3 growth.py [ITERATIONS] [PAUSE_MS]

Each iteration allocates a 1 MiB buffer it keeps in a module-level list (the line marked
`# grows`) and an 8 MiB temporary it frees at once (the line marked `# temporary`), then sleeps
PAUSE_MS (default 60) so the shim's sampling sees the loop run. The kept buffers are freed when
the interpreter tears the module down at exit, as Python frees a program's globals: nothing is
left for the leak report; what the report must show is that the list's line grew and that the
temporary was live at the peak. Prints one JSON line: iterations, kept and temporary sizes.
"""

import ctypes
import json
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]

MiB = 1 << 20


def check(r):
    if r != 0:
        raise SystemExit(f"CUDA error {r}")


class Owned:
    """Device memory freed when the object goes, as a framework's tensor is."""

    def __init__(self, ptr):
        self.ptr = ptr
        self.free = cuda.cuMemFree_v2

    def __del__(self):
        self.free(self.ptr)


check(cuda.cuInit(0))
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0))
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
check(cuda.cuCtxSetCurrent(ctx))

iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20
pause = (int(sys.argv[2]) if len(sys.argv) > 2 else 60) / 1000
keep = []


def step():
    p = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(p), 1 * MiB))  # grows
    keep.append(Owned(p.value))
    t = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(t), 8 * MiB))  # temporary
    check(cuda.cuMemFree_v2(t.value))


for _ in range(iterations):
    step()
    time.sleep(pause)

print(json.dumps({"iterations": iterations, "kept": 1 * MiB, "temporary": 8 * MiB}), flush=True)
