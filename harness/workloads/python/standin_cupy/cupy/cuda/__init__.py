"""A stand-in for ``cupy.cuda``: the device (device 0 only), the current stream (always the
legacy default stream, pointer 0), the memory pool and hooks (memory.py, memory_hook.py) and
the runtime API (runtime.py)."""

from cupy.cuda import memory, memory_hook, runtime  # noqa: F401
from cupy.cuda.memory import (  # noqa: F401
    MemoryPointer, MemoryPool, OutOfMemoryError, PooledMemory, alloc, get_allocator, set_allocator,
)
from cupy.cuda.memory_hook import MemoryHook  # noqa: F401


class Device:
    """A CUDA device: only device 0 exists here."""

    def __init__(self, device=None):
        self.id = 0 if device is None else int(device)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        pass

    @property
    def mem_info(self):
        return runtime.memGetInfo()

    def __repr__(self):
        return "<CUDA Device %d>" % self.id


class Stream:
    """A CUDA stream; only the legacy default stream (``ptr`` 0) exists here."""

    def __init__(self, ptr=0):
        self.ptr = ptr

    def synchronize(self):
        pass


_default_stream = Stream(0)


def get_current_stream(device_id=None):
    return _default_stream


def set_pinned_memory_allocator(allocator=None):
    """No pinned memory pool here: accepted, does nothing."""
