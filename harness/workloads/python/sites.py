"""sites.py: device allocations kept from two different Python lines, through ctypes.

Run under the shim on the simulated driver (or a real one). It allocates with cuMemAlloc_v2
from two functions, keeps both blocks, and prints one line per block:

    first 0x<address>
    second 0x<address>

The lines that allocate carry the markers `# site: first` and `# site: second`, and the calls
to them `# call: first` and `# call: second`, so a test can find their numbers.

    python3 sites.py [pydll|cdll]

`pydll` (the default) keeps the GIL held during the driver call; `cdll` releases it, as
PyTorch, CuPy, RMM and plain ctypes users do.
"""

import ctypes
import sys

mode = sys.argv[1] if len(sys.argv) > 1 else "pydll"
loader = ctypes.PyDLL if mode == "pydll" else ctypes.CDLL
cuda = loader("libcuda.so.1")
alloc = cuda.cuMemAlloc_v2
alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
alloc.restype = ctypes.c_int


def check(result):
    if result != 0:
        raise SystemExit(f"CUDA error {result}")


def first(size):
    ptr = ctypes.c_uint64()
    check(alloc(ctypes.byref(ptr), size))  # site: first
    return ptr.value


def second(size):
    ptr = ctypes.c_uint64()
    check(alloc(ctypes.byref(ptr), size))  # site: second
    return ptr.value


def main():
    check(cuda.cuInit(0))
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check(cuda.cuCtxSetCurrent(ctx))
    kept = [first(4096)]  # call: first
    kept.append(second(8192))  # call: second
    print(f"first {kept[0]:#x}")
    print(f"second {kept[1]:#x}")


main()
