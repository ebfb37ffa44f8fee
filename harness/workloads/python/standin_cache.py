"""standin_cache.py: a stand-in for a framework's caching allocator, for growth.py: blocks taken
from the CUDA driver (through ctypes) and kept for reuse, given back one at a time, and never
freed otherwise: like PyTorch's caching allocator, it still holds its blocks when the process
ends, so they are live at exit under the cache's owner. Tests declare its allocations a framework
cache's, as a user declares their own allocator's:

    CUGUARD_OWNERS='standin_cache:framework_cache=file:*/standin_cache.py'
"""

import ctypes


class Cache:
    """Blocks of device memory kept for reuse."""

    def __init__(self, cuda):
        self.alloc = cuda.cuMemAlloc_v2
        self.free = cuda.cuMemFree_v2
        self.blocks = []

    def grow(self, size):
        """Takes one more block from the driver."""
        p = ctypes.c_uint64()
        if self.alloc(ctypes.byref(p), size) != 0:  # cache block
            raise MemoryError("cuMemAlloc_v2 failed")
        self.blocks.append(p.value)

    def give_back(self):
        """Returns the newest block to the driver."""
        self.free(self.blocks.pop())
