"""What the Dask tests (test_dask.py) run on the workers: device memory through ctypes on the
(simulated) CUDA driver, kept alive in a module-level list so that it leaks, and a worker's own
death. Imported by reference on the workers (spawned worker processes get the client's sys.path).
"""

import ctypes
import os
import signal

MiB = 1 << 20

#: What this worker keeps (its leaks at exit).
KEPT = []

_cuda = None


def _driver():
    global _cuda
    if _cuda is None:
        cuda = ctypes.CDLL("libcuda.so.1")
        cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        _check(cuda.cuInit(0))
        device = ctypes.c_int()
        _check(cuda.cuDeviceGet(ctypes.byref(device), 0))
        context = ctypes.c_void_p()
        _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
        _check(cuda.cuCtxSetCurrent(context))
        _cuda = cuda
    return _cuda


def _check(result):
    if result != 0:
        raise RuntimeError(f"CUDA error {result}")


def _alloc(size):
    pointer = ctypes.c_uint64()
    _check(_driver().cuMemAlloc_v2(ctypes.byref(pointer), size))
    return pointer.value


def leak(count, size, freed=2):
    """Allocates and frees `freed` buffers of `size` bytes, then allocates `count` more and keeps
    them; returns this worker's pid."""
    for _ in range(freed):
        _check(_driver().cuMemFree_v2(_alloc(size)))
    for _ in range(count):
        KEPT.append(_alloc(size))
    return os.getpid()


def die():
    """SIGKILL to this worker process: no report at exit, only its last checkpoint."""
    os.kill(os.getpid(), signal.SIGKILL)
