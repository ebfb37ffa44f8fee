"""A caching allocator written for the test: segments from the driver (cuMemAlloc), blocks handed
out as objects with `__cuda_array_interface__`, freed blocks kept for reuse as plain numbers (as
PyTorch's and CuPy's caches keep them)."""

import gpu

SEGMENT = 4 << 20
BLOCK = 1 << 20


class Block:
    """A block of a segment, as the program sees it (a tensor, an array)."""

    def __init__(self, cache, ptr):
        self._cache = cache
        self.ptr = ptr

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (BLOCK,), "typestr": "|u1", "version": 3}

    def __del__(self):
        self._cache.free.append(self.ptr)


class Cache:
    def __init__(self):
        self.free = []

    def take(self):
        if not self.free:
            base = gpu.alloc(SEGMENT)  # segment
            self.free.extend(base + i * BLOCK for i in range(SEGMENT // BLOCK))
        return Block(self, self.free.pop(0))


CACHE = Cache()
