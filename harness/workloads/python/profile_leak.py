"""profile_leak.py: a Python program that leaks device memory through ctypes on the CUDA driver
(the simulated one in the tests), for `cuguard check --format sarif/github` and `cuguard export
--format pprof`:

    python3 profile_leak.py N    loses N blocks of 1 MiB made in leak_blocks and one of 3 MiB
                                 made in load_weights (nothing holds their addresses at the end:
                                 lost, which `check` counts), and makes and frees 3 blocks of
                                 2 MiB in churn

    python3 profile_leak.py N keep   also keeps a 4 MiB buffer in a module global (`CACHE`),
                                 freed by a `weakref.finalize` at the interpreter's exit, as
                                 JAX frees its arrays: live when the code ended, not at exit

It prints the lines of the allocations: `leak <line>`, `weights <line>`, `churn <line>` (and
`kept <line>`).
"""

import ctypes
import inspect
import sys
import weakref

MiB = 1 << 20

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]


def check(result):
    if result != 0:
        raise RuntimeError(f"CUDA error {result}")


def start():
    """The primary context of device 0, current."""
    check(cuda.cuInit(0))
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0))
    context = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
    check(cuda.cuCtxSetCurrent(context))


LINES = {}


def here(name):
    LINES[name] = inspect.currentframe().f_back.f_lineno


def leak_blocks(n):
    for _ in range(n):
        p = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(p), 1 * MiB)); here("leak")  # fmt: skip


def load_weights():
    p = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(p), 3 * MiB)); here("weights")  # fmt: skip


def churn():
    for _ in range(3):
        p = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(p), 2 * MiB)); here("churn")  # fmt: skip
        check(cuda.cuMemFree_v2(p.value))


class Buffer:
    """Device memory freed by a finalizer, at the latest at the interpreter's exit."""

    def __init__(self, size):
        self.ptr = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(self.ptr), size)); here("kept")  # fmt: skip
        weakref.finalize(self, cuda.cuMemFree_v2, self.ptr.value)


CACHE = {}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    start()
    churn()
    leak_blocks(n)
    load_weights()
    if "keep" in sys.argv[2:]:
        CACHE["weights"] = Buffer(4 * MiB)
    for name in ("leak", "weights", "churn", "kept"):
        if name in LINES:
            print(name, LINES[name])


if __name__ == "__main__":
    main()
