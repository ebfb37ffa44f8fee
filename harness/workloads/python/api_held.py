"""api_held.py: a module whose global dict keeps device memory alive, for `api.py holders`.

`DeviceArray` is a pure-Python object exposing `__cuda_array_interface__` over memory from the
driver (the simulated one in the tests); `CACHE` is the module global that holds one.
"""

CACHE = {}


class DeviceArray:
    """Bytes `[ptr, ptr + nbytes)` of device memory, as CUDA array interface consumers see them."""

    def __init__(self, ptr, nbytes):
        self.ptr = ptr
        self.nbytes = nbytes

    @property
    def __cuda_array_interface__(self):
        return {"data": (self.ptr, False), "shape": (self.nbytes,), "typestr": "|u1", "version": 3}
