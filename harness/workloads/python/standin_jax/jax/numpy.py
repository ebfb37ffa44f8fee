"""A stand-in for ``jax.numpy`` as far as making device buffers: ``zeros``, ``ones`` and
``empty`` of a 1-D shape (an int or a 1-tuple) give an ``Array`` whose buffer the BFC
allocator (jaxlib/_jax.py) hands out at once; ``x + y`` makes a new buffer of ``x``'s size, as
a computation's output would. The buffer goes back to the allocator on ``delete()`` or when the
array is dropped. No values are kept."""

from jaxlib import _jax

uint8, int32, float32 = "uint8", "int32", "float32"
_itemsize = {uint8: 1, int32: 4, float32: 4}


class Array:
    def __init__(self, shape, dtype):
        n = shape if isinstance(shape, int) else shape[0]
        self.shape, self.dtype = (int(n),), dtype
        self.nbytes = int(n) * _itemsize[dtype]
        self._ptr = _jax.allocator().allocate(self.nbytes)

    def block_until_ready(self):
        return self

    def unsafe_buffer_pointer(self):
        if self._ptr is None:
            raise RuntimeError(f"Array has been deleted with shape={self.dtype}{list(self.shape)}.")
        return self._ptr

    def is_deleted(self):
        return self._ptr is None

    def delete(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is not None:
            _jax.allocator().deallocate(ptr)

    def __del__(self):
        self.delete()

    def __add__(self, other):
        return Array(self.shape, self.dtype)

    __radd__ = __add__

    def __repr__(self):
        return f"Array(shape={self.shape}, dtype={self.dtype})"


def zeros(shape, dtype=float32):
    return Array(shape, dtype)


ones = empty = zeros
