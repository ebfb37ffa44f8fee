"""growth.py: a loop over the CUDA driver through ctypes (the simulated driver in tests) that
grows, or warms up and then holds, with an 8 MiB temporary allocated and freed in every
iteration (the line marked `# temporary`).

    python3 growth.py [ITERATIONS] [PAUSE_MS] [MODE]

Each iteration sleeps PAUSE_MS (default 60) after its work, so the shim's sampling sees the loop
run. MODE (default `list`):
- `list`: each iteration allocates a 1 MiB buffer it keeps in a module-level list (the line
  marked `# grows`). The kept buffers are freed when the interpreter tears the module down at
  exit, as Python frees a program's globals: nothing is left for the leak report; what the
  report must show is that the list's line grew and that the temporary was live at the peak.
- `leak`: the seed's loop: each iteration allocates 1 MiB and drops its handle (the line marked
  `# leaks`): ITERATIONS buffers leak, and the line grows for the whole run.
- `warmup`: start-up, set-up, then steady work. With W = ITERATIONS // 8 (at least 3): the
  first W iterations only use the temporary; the next W each load a 2 MiB weight the program
  keeps (`# weights`) and fill a stand-in framework cache with a 4 MiB block (standin_cache.py,
  `# cache block`); two iterations later the program drops one weight and the cache gives one
  block back; the remaining iterations only use the temporary. Nothing grows. The weights are
  freed at the teardown; the cache keeps its blocks to the end (live at exit, as a framework's).
- `cache`: the stand-in cache takes one more 4 MiB block in every iteration and never gives one
  back: growth inside a cache (`# cache block`), live at exit.

Prints one JSON line: the mode, iterations, warm-up iterations, kept and temporary sizes.
"""

import ctypes
import json
import sys
import time

from standin_cache import Cache

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
mode = sys.argv[3] if len(sys.argv) > 3 else "list"
warm = max(3, iterations // 8)
keep = []
weights = []
cache = Cache(cuda)


def temporary():
    t = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(t), 8 * MiB))  # temporary
    check(cuda.cuMemFree_v2(t.value))


def keep_one():
    p = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(p), 1 * MiB))  # grows
    keep.append(Owned(p.value))


def leak_one():
    p = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(p), 1 * MiB))  # leaks


def load_weight():
    p = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(p), 2 * MiB))  # weights
    weights.append(Owned(p.value))


def step(i):
    if mode == "list":
        keep_one()
    elif mode == "leak":
        leak_one()
    elif mode == "warmup":
        if warm <= i < 2 * warm:
            load_weight()
            cache.grow(4 * MiB)
        elif i == 2 * warm + 2:
            weights.pop()
            cache.give_back()
    elif mode == "cache":
        cache.grow(4 * MiB)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    temporary()


for i in range(iterations):
    step(i)
    time.sleep(pause)

print(
    json.dumps(
        {
            "mode": mode,
            "iterations": iterations,
            "warm": warm,
            "kept": 1 * MiB,
            "temporary": 8 * MiB,
        }
    ),
    flush=True,
)
