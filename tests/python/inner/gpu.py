"""Device memory through ctypes on the CUDA driver (the simulated one in these tests).

The outer tests run with `CUGUARD_PLUMBING=file:*/gpu.py`, so a leak's site is the test's line
that called `alloc`, not this module's.
"""

import ctypes

MiB = 1 << 20

_cuda = None


def driver():
    """The driver, loaded and with the primary context of device 0 current, on first use."""
    global _cuda
    if _cuda is None:
        cuda = ctypes.CDLL("libcuda.so.1")
        cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        check(cuda.cuInit(0))
        device = ctypes.c_int()
        check(cuda.cuDeviceGet(ctypes.byref(device), 0))
        context = ctypes.c_void_p()
        check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
        check(cuda.cuCtxSetCurrent(context))
        _cuda = cuda
    return _cuda


def check(result):
    if result != 0:
        raise RuntimeError(f"CUDA error {result}")


def alloc(size):
    """A device allocation of `size` bytes; returns its address."""
    pointer = ctypes.c_uint64()
    check(driver().cuMemAlloc_v2(ctypes.byref(pointer), size))
    return pointer.value


def free(address):
    check(driver().cuMemFree_v2(address))


class Buffer:
    """Device memory freed when the object is: `Buffer(size).address`."""

    def __init__(self, size):
        self.address = alloc(size)

    def __del__(self):
        free(self.address)
