"""oom.py: runs out of device memory through ctypes on the CUDA driver (the simulated one in tests).

    python3 oom.py [STORM]

`hoard()` allocates 32 MiB blocks and keeps them (the line marked `# hoards`) until the driver
refuses one; then `ask()` asks for 64 MiB more (the line marked `# asks`), which fails too. With
STORM, the program then asks STORM more times in a loop (the line marked `# storm`), as a
program that retries without backing off does. At the end it frees everything it holds, so the
leak report is empty: what the report must keep is what held the memory when it ran out. Prints
one JSON line: how many blocks it held and the result codes.
"""

import ctypes
import json
import sys

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
MiB = 1 << 20

assert cuda.cuInit(0) == 0
dev = ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
held = []


def hoard():
    while True:
        p = ctypes.c_uint64()
        r = cuda.cuMemAlloc_v2(ctypes.byref(p), 32 * MiB)  # hoards
        if r != 0:
            return r
        held.append(p.value)


def ask():
    p = ctypes.c_uint64()
    return cuda.cuMemAlloc_v2(ctypes.byref(p), 64 * MiB)  # asks


hoarded = hoard()
asked = ask()
storm = int(sys.argv[1]) if len(sys.argv) > 1 else 0
for _ in range(storm):
    p = ctypes.c_uint64()
    cuda.cuMemAlloc_v2(ctypes.byref(p), 64 * MiB)  # storm
print(json.dumps({"held": len(held), "hoard_result": hoarded, "ask_result": asked}), flush=True)
for p in held:
    cuda.cuMemFree_v2(p)
