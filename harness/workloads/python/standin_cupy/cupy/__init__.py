"""A stand-in for CuPy 14 as its memory pool shows it, over the CUDA driver through ctypes (the
simulated one in tests), for harness/workloads/python/cupy_oom.py. What it keeps: arrays take
their memory from the current allocator, by default the pool ``get_default_memory_pool()``
(cupy/cuda/memory.py keeps CuPy's pool), and give it back when their last reference goes.
Arrays hold bytes only: ``empty(shape, dtype)`` with no data, no kernels.
"""

from cupy import cuda  # noqa: F401

__version__ = "14.0.0+standin"

uint8, int32, float32, float64 = "uint8", "int32", "float32", "float64"
_itemsize = {uint8: 1, int32: 4, float32: 4, float64: 8}


class ndarray:
    """A device array: ``data`` (a ``MemoryPointer`` into the pool), ``nbytes``, ``shape``."""

    def __init__(self, shape, dtype=float64, memptr=None):
        self.shape = (int(shape),) if isinstance(shape, int) else tuple(int(n) for n in shape)
        self.dtype = dtype
        self.size = 1
        for n in self.shape:
            self.size *= n
        self.nbytes = self.size * _itemsize[dtype]
        self.data = memptr if memptr is not None else cuda.memory.alloc(self.nbytes)

    def __repr__(self):
        return "<cupy.ndarray shape={} dtype={} ptr=0x{:x}>".format(self.shape, self.dtype, self.data.ptr)


def empty(shape, dtype=float64):
    return ndarray(shape, dtype)


_default_memory_pool = cuda.MemoryPool()
cuda.set_allocator(_default_memory_pool.malloc)


def get_default_memory_pool():
    return _default_memory_pool
