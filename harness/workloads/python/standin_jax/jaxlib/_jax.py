"""A stand-in for jaxlib's extension (jaxlib/_jax) as JAX 0.11's GPU memory shows it: XLA's BFC
allocator (xla/tsl/framework/bfc_allocator.cc) over the CUDA driver through ctypes (the
simulated one in tests), for harness/workloads/python/jax_oom.py.

What it keeps: the allocator may hold ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (default 0.75) of the
device's total memory (``bytes_limit``). With preallocation (the default), the first allocation
takes all of it from the driver in one ``cuMemAlloc_v2``; with
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` regions are taken as needed, as the BFC allocator grows:
each region twice the last one (from 2 MiB) or what the request needs, at most what is left
under the limit, and 10% less each time while the driver refuses (``Extend``'s backpedal).
Requests are rounded up to 256 bytes; the smallest free chunk that holds one is taken (the
lowest address among equals), and split when it is at least twice the request or more than
128 MiB would be left. A freed chunk merges with its free neighbours of the same region;
regions are never given back. When nothing fits and no region can be added, ``JaxRuntimeError
("RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes.")``, raised through the
module global. ``Device.memory_stats()`` gives the BFC allocator's stats under XLA's keys.
One device (0), no streams, no computations: buffers only. As XLA's stream executor, it makes
its device's primary context current only around each driver call (pushed, then popped), so
the program's thread has none current between calls.
"""

import ctypes
import os

_cuda = ctypes.CDLL("libcuda.so.1")
_cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
_cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
_cuda.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
_cuda.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
_cuda.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]


class _Active:
    """The device's primary context current for one driver call (XLA's ScopedActivateContext)."""

    def __enter__(self):
        assert _cuda.cuCtxPushCurrent_v2(_client["ctx"]) == 0

    def __exit__(self, *exc):
        popped = ctypes.c_void_p()
        _cuda.cuCtxPopCurrent_v2(ctypes.byref(popped))

MiB = 1 << 20
MIN_ALLOCATION = 256
MAX_INTERNAL_FRAGMENTATION = 128 * MiB


class JaxRuntimeError(RuntimeError):
    pass


def _round(n, unit):
    return max(unit, -(-n // unit) * unit)


class BFCAllocator:
    """Best-fit with coalescing over regions taken from the driver. A chunk is
    ``[address, size, in_use]``; each region keeps its chunks in address order."""

    def __init__(self, memory_limit, allow_growth):
        self.memory_limit = memory_limit
        self.allow_growth = allow_growth
        self.regions = []  # [address, size, [chunk...]]
        self.region_bytes = 2 * MiB if allow_growth else memory_limit
        self.backpedal = False
        self.stats = {"num_allocs": 0, "bytes_in_use": 0, "peak_bytes_in_use": 0, "largest_alloc_size": 0,
                      "pool_bytes": 0, "peak_pool_bytes": 0}

    def _extend(self, rounded):
        available = (self.memory_limit - self.stats["pool_bytes"]) // MIN_ALLOCATION * MIN_ALLOCATION
        if rounded > available:
            return False
        increased = False
        while rounded > self.region_bytes:
            self.region_bytes *= 2
            increased = True
        size = min(self.region_bytes, available)
        p = ctypes.c_uint64()
        with _Active():
            ok = _cuda.cuMemAlloc_v2(ctypes.byref(p), size) == 0  # region
        if not ok and not self.backpedal:
            self.backpedal = True
            while not ok:
                size = _round(int(size * 0.9), MIN_ALLOCATION)
                if size < rounded:
                    break
                with _Active():
                    ok = _cuda.cuMemAlloc_v2(ctypes.byref(p), size) == 0  # smaller region
        if not ok:
            return False
        if not increased:
            self.region_bytes *= 2
        self.regions.append([p.value, size, [[p.value, size, False]]])
        self.stats["pool_bytes"] += size
        self.stats["peak_pool_bytes"] = max(self.stats["peak_pool_bytes"], self.stats["pool_bytes"])
        return True

    def _best_fit(self, rounded):
        fits = [(c[1], c[0], r, i) for r in self.regions for i, c in enumerate(r[2]) if not c[2] and c[1] >= rounded]
        return min(fits, key=lambda t: (t[0], t[1])) if fits else None

    def allocate(self, nbytes):
        rounded = _round(nbytes, MIN_ALLOCATION)
        fit = self._best_fit(rounded)
        if fit is None and self._extend(rounded):
            fit = self._best_fit(rounded)
        if fit is None:
            raise JaxRuntimeError(f"RESOURCE_EXHAUSTED: Out of memory while trying to allocate {nbytes} bytes.")
        _, _, region, i = fit
        chunk = region[2][i]
        if chunk[1] >= 2 * rounded or chunk[1] - rounded >= MAX_INTERNAL_FRAGMENTATION:
            region[2].insert(i + 1, [chunk[0] + rounded, chunk[1] - rounded, False])
            chunk[1] = rounded
        chunk[2] = True
        s = self.stats
        s["num_allocs"] += 1
        s["bytes_in_use"] += chunk[1]
        s["peak_bytes_in_use"] = max(s["peak_bytes_in_use"], s["bytes_in_use"])
        s["largest_alloc_size"] = max(s["largest_alloc_size"], chunk[1])
        return chunk[0]

    def deallocate(self, address):
        for region in self.regions:
            chunks = region[2]
            for i, c in enumerate(chunks):
                if c[0] == address and c[2]:
                    c[2] = False
                    self.stats["bytes_in_use"] -= c[1]
                    if i + 1 < len(chunks) and not chunks[i + 1][2]:
                        c[1] += chunks.pop(i + 1)[1]
                    if i > 0 and not chunks[i - 1][2]:
                        chunks[i - 1][1] += chunks.pop(i)[1]
                    return

    def largest_free_block(self):
        return max((c[1] for r in self.regions for c in r[2] if not c[2]), default=0)


_client = {}


def _mem_get_info():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    with _Active():
        assert _cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    return free.value, total.value


def allocator():
    """The GPU client's allocator, made with the CUDA context at the backend's start."""
    if "allocator" not in _client:
        assert _cuda.cuInit(0) == 0
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        assert _cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
        assert _cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
        _client["ctx"] = ctx
        name = ctypes.create_string_buffer(256)
        _client["kind"] = name.value.decode() if _cuda.cuDeviceGetName(name, 256, dev) == 0 else "GPU"
        fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))
        preallocate = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true").lower() not in ("false", "0")
        _client["allocator"] = BFCAllocator(int(_mem_get_info()[1] * fraction), not preallocate)
    return _client["allocator"]


class Device:
    """A CUDA device as JAX shows it (``CudaDevice(id=0)``)."""

    platform = "gpu"

    def __init__(self, id):
        self.id = id
        allocator()
        self.device_kind = _client["kind"]

    def __repr__(self):
        return f"CudaDevice(id={self.id})"

    def memory_stats(self):
        a = allocator()
        s = a.stats
        return {
            "num_allocs": s["num_allocs"], "bytes_in_use": s["bytes_in_use"],
            "peak_bytes_in_use": s["peak_bytes_in_use"], "largest_alloc_size": s["largest_alloc_size"],
            "bytes_limit": a.memory_limit, "bytes_reserved": 0, "peak_bytes_reserved": 0,
            "largest_free_block_bytes": a.largest_free_block(),
            "pool_bytes": s["pool_bytes"], "peak_pool_bytes": s["peak_pool_bytes"],
        }
