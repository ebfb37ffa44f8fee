"""A stand-in for CuPy's CUDA runtime module (cupy_backends.cuda.api.runtime), over the CUDA
driver through ctypes (the simulated one in tests). What it keeps: ``malloc``/``free`` raise
``CUDARuntimeError`` whose ``status`` is the CUDA error (``errorMemoryAllocation``, 2, when the
device is out of memory: the driver's ``CUDA_ERROR_OUT_OF_MEMORY`` has the same number), and
``memGetInfo()`` returns (free, total). The primary context of device 0 is made current at the
first call that needs it, as the runtime API does.
"""

import ctypes

errorMemoryAllocation = 2
_names = {1: "cudaErrorInvalidValue", 2: "cudaErrorMemoryAllocation", 3: "cudaErrorInitializationError"}

_cuda = ctypes.CDLL("libcuda.so.1")
_cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
_cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
_cuda.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
_state = {"init": False}


class CUDARuntimeError(RuntimeError):
    def __init__(self, status):
        self.status = status
        name = _names.get(status, "cudaError")
        super().__init__(f"{name}: {'out of memory' if status == errorMemoryAllocation else f'error {status}'}")


def _init():
    if _state["init"]:
        return
    assert _cuda.cuInit(0) == 0
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert _cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert _cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert _cuda.cuCtxSetCurrent(ctx) == 0
    _state["init"] = True


def malloc(size):
    _init()
    p = ctypes.c_uint64()
    rc = _cuda.cuMemAlloc_v2(ctypes.byref(p), size)
    if rc != 0:
        raise CUDARuntimeError(rc)
    return p.value


def free(ptr):
    rc = _cuda.cuMemFree_v2(ptr)
    if rc != 0:
        raise CUDARuntimeError(rc)


def memGetInfo():
    _init()
    free_, total = ctypes.c_size_t(), ctypes.c_size_t()
    rc = _cuda.cuMemGetInfo_v2(ctypes.byref(free_), ctypes.byref(total))
    if rc != 0:
        raise CUDARuntimeError(rc)
    return free_.value, total.value


def getDevice():
    return 0
