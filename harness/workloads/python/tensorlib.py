"""tensorlib.py: a stand-in for a framework's tensors (PyTorch's, with its cache off), for
train_list.py: device memory from the CUDA driver through ctypes (the simulated driver in
tests), given back when the tensor goes. Tests name this file plumbing
(`CUGUARD_PLUMBING=file:*/tensorlib.py`), so a site is the program's line that made the tensor,
as `torch.empty` is not a site."""

import ctypes

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]


def _check(r):
    if r != 0:
        raise RuntimeError(f"CUDA error {r}")


def init():
    """The primary context of device 0, made current (as `torch.cuda.init()`)."""
    _check(cuda.cuInit(0))
    dev = ctypes.c_int()
    _check(cuda.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    _check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    _check(cuda.cuCtxSetCurrent(ctx))


class Tensor:
    """`nbytes` of device memory, freed when the tensor goes."""

    def __init__(self, nbytes):
        p = ctypes.c_uint64()
        _check(cuda.cuMemAlloc_v2(ctypes.byref(p), nbytes))
        self.ptr = p.value
        self.nbytes = nbytes
        self._free = cuda.cuMemFree_v2  # kept: module globals are gone during the teardown

    def __del__(self):
        self._free(self.ptr)


def empty(nbytes):
    return Tensor(nbytes)
