"""leaks.py: a Python program that leaks GPU memory, through ctypes on the CUDA driver.

Run it under cuguard, on the simulated driver if there is no GPU:

    cuguard run --driver sim -- python -m cuguard.examples.leaks
    cuguard run --driver sim -- python path/to/cuguard/examples/leaks.py

It allocates three blocks: it frees the first, keeps the second in a module-level cache that it
forgets to clear (the line marked `# leak: cache`), and loses the third (`# leak: lost`). Inside
`cuguard.track()` it prints what the block leaked, and at exit the shim prints its one-line
summary and writes the report (`cuguard summary cuguard.*.json`).
"""

import ctypes
import sys

import cuguard

MiB = 1 << 20

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]

CACHE = {}


def check(result):
    if result != 0:
        raise SystemExit(f"CUDA error {result}")


def open_context():
    check(cuda.cuInit(0))
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0))
    context = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
    check(cuda.cuCtxSetCurrent(context))


def work():
    scratch = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(scratch), 8 * MiB))
    check(cuda.cuMemFree_v2(scratch))
    cached = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(cached), 2 * MiB))  # leak: cache
    CACHE["weights"] = cached.value
    lost = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(lost), 1 * MiB))  # leak: lost


def main():
    open_context()
    if not cuguard.active():
        print("not under cuguard's shim: run `cuguard run -- python -m cuguard.examples.leaks`")
        work()
        return 0
    with cuguard.track() as block:
        work()
    print(f"leaked in the block: {len(block.leaks)} allocations")
    for leak in sorted(block.leaks, key=lambda l: -l["size"]):
        site = leak["site"] or {}
        print(f"  {leak['size']} bytes at {site.get('file')}:{site.get('line')} ({site.get('function')})")
    print(f"peak in the block: {block.peak_bytes} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
