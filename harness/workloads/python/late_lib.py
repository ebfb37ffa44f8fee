"""late_lib.py: a C library loaded with ctypes after CUDA started and allocated from, built
without frame pointers (`harness/workloads/c/late_lib.c`, -O1): the shim must unwind through all
of its frames although its module and unwind tables were read before it was loaded.

    python3 late_lib.py LIBRARY

It initializes CUDA and keeps a first block (the shim's first capture, which reads the module
list), then loads LIBRARY and keeps a block allocated through it. It prints one line per block:

    first 0x<address>
    late 0x<address>

The line that calls into the library carries the marker `# site: load_weights`, and the call to
that function `# call: load_weights`.
"""

import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1")
alloc = cuda.cuMemAlloc_v2
alloc.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
alloc.restype = ctypes.c_int


def check(result):
    if result != 0:
        raise SystemExit(f"CUDA error {result}")


def first(size):
    ptr = ctypes.c_uint64()
    check(alloc(ctypes.byref(ptr), size))
    return ptr.value


def load_weights(entry, size):
    ptr = ctypes.c_uint64()
    check(entry(ctypes.byref(ptr), size))  # site: load_weights
    return ptr.value


def main():
    check(cuda.cuInit(0))
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check(cuda.cuCtxSetCurrent(ctx))
    kept = [first(4096)]
    # Loaded only now, after the shim's first capture read the module list.
    lib = ctypes.CDLL(sys.argv[1])
    entry = lib.late_entry
    entry.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    entry.restype = ctypes.c_int
    kept.append(load_weights(entry, 1 << 20))  # call: load_weights
    print(f"first {kept[0]:#x}")
    print(f"late {kept[1]:#x}")


main()
