"""helper_leak.py: every device allocation goes through one helper, alloc(), called from three
lines; what the program keeps is the caller's doing, not the helper's (issue 50). Through ctypes,
on the simulated driver or a real one.

    python3 helper_leak.py          main keeps a 4 MiB buffer in a global (the old leak: held at the
                                    end, then freed by the interpreter's teardown, so no report leak);
                                    load and step free theirs
    python3 helper_leak.py new      the same, and step also forgets its 16 MiB temporary (lost)

It prints the lines: `alloc <line>` (the helper's call of the driver), `keep <line>`, `load
<line>`, `step <line>` (the callers'), found by their markers.
"""

import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
KEPT = []


class Owned:
    """A device buffer freed when the object goes (at the latest, by the interpreter's teardown)."""

    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self, free=cuda.cuMemFree_v2):
        free(self.ptr)


def check(result):
    if result != 0:
        raise SystemExit(f"CUDA error {result}")


def alloc(size):
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), size))  # line: alloc
    return ptr.value


def load():
    weights = alloc(1 << 20)  # line: load
    check(cuda.cuMemFree_v2(weights))


def step(forget):
    temporary = alloc(16 << 20)  # line: step
    if not forget:
        check(cuda.cuMemFree_v2(temporary))


def main():
    check(cuda.cuInit(0))
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check(cuda.cuCtxSetCurrent(ctx))
    KEPT.append(Owned(alloc(4 << 20)))  # line: keep
    load()
    step(len(sys.argv) > 1 and sys.argv[1] == "new")
    with open(__file__) as f:
        for number, text in enumerate(f, 1):
            for marker in ("alloc", "keep", "load", "step"):
                if text.rstrip().endswith("# line: " + marker):
                    print(marker, number)


main()
