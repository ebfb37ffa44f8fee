"""A stand-in for a framework with a caching allocator, on ctypes: `empty(n)` returns a tensor
whose memory comes from a cache of segments (`fake_torch_cache.py`) that keeps freed blocks, or,
with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (read at each call), straight from the driver.

The outer tests run with `CUGUARD_OWNERS=pytorch_caching_allocator=file:*/fake_torch_cache.py`
(the segments are the cache's, as PyTorch's are by the built-in rules) and with this module and
`gpu.py` as plumbing, so a tensor made without the cache has the test's line as its site.
"""

import os

import fake_torch_cache
import gpu


class Tensor:
    def __init__(self, nbytes):
        self.nbytes = nbytes
        if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
            self.address = gpu.alloc(nbytes)
            self.cached = False
        else:
            self.address = fake_torch_cache.take(nbytes)
            self.cached = True

    def __del__(self):
        if self.cached:
            fake_torch_cache.give_back(self.address, self.nbytes)
        else:
            gpu.free(self.address)


def empty(nbytes):
    return Tensor(nbytes)
