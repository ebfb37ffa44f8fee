"""deep_lib.py: a program that calls a native library of its own, loaded with ctypes after CUDA
started (`harness/workloads/c/deep_lib.c`: 11 calls deep, -O1, no frame pointers), and keeps the
block it allocated in a global. Run from the directory that holds `libdeep.so`:

    cuguard run --driver sim -- python3 deep_lib.py

The line that calls into the library carries the marker `# site: load_weights`, and the call to
that function `# call: load_weights`.
"""

import ctypes

cuda = ctypes.CDLL("libcuda.so.1")


def check(result):
    if result != 0:
        raise SystemExit(f"CUDA error {result}")


def load_weights(size):
    lib = ctypes.CDLL("./libdeep.so")
    ptr = ctypes.c_uint64()
    check(lib.deep_10(ctypes.byref(ptr), ctypes.c_size_t(size)))  # site: load_weights
    return ptr


check(cuda.cuInit(0))
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
check(cuda.cuCtxSetCurrent(ctx))
weights = load_weights(1 << 20)  # call: load_weights
