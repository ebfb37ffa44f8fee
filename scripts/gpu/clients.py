"""Real GPU clients that allocate device memory and keep some of it on purpose.

Usage: python3 clients.py CASE      (CASE: torch, cupy, rmm, jax, numba, torch_sites)

Each case makes a known number of allocations of distinct sizes through its framework and keeps
some of them alive past exit by leaking a Python reference (the way real programs leak: a cache,
a global, a reference cycle held by an extension). It also computes a checksum on the GPU, so runs
with and without the pool can be compared. It prints one JSON line:

    {"case": ..., "allocated": N, "kept": K, "kept_sizes": [...], "checksum": ...,
     "used_delta": bytes of device memory in use at the end minus at the start (cuMemGetInfo)}

`used_delta` is an independent check that the report invents nothing: the live bytes cuguard
reports should account for it (up to the driver's own granularity and the framework's
bookkeeping allocations).
"""

import ctypes
import json
import os
import sys

MiB = 1 << 20
SIZES = [(i + 1) * MiB for i in range(8)]  # distinct sizes, 1..8 MiB
KEEP = [1, 3, 6]  # indices kept: 2, 4 and 7 MiB


def leak(obj):
    """Keeps obj alive forever, as a leaked reference would."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def used_bytes():
    """Device memory in use (total - free), asked of the driver directly."""
    cuda = ctypes.CDLL("libcuda.so.1")
    free = ctypes.c_size_t()
    total = ctypes.c_size_t()
    fn = cuda.cuMemGetInfo_v2
    fn.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    r = fn(ctypes.byref(free), ctypes.byref(total))
    return total.value - free.value if r == 0 else None


def case_torch():
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # context and runtime setup, before the baseline
    x = torch.zeros(1, device="cuda")
    del x
    start = used_bytes()
    arrays = []
    for n in SIZES:
        arrays.append(torch.full((n // 4,), 1.0, device="cuda", dtype=torch.float32))
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(256, 256, device="cuda", generator=g)
    checksum = float((a * 2.0 + 1.0).sum().item())
    del a
    torch.cuda.synchronize()
    for i in KEEP:
        leak(arrays[i])
    del arrays
    torch.cuda.synchronize()
    # PyTorch makes allocations of its own (generator state, reductions): the count is not the
    # script's to know; the kept set and the device-memory delta are checked instead.
    return dict(allocated=None, start=start, checksum=checksum)


def case_torch_sites():
    """Tensors kept alive from two different Python lines (for the sites check)."""
    import torch

    torch.zeros(1, device="cuda")
    start = used_bytes()
    kept_a = torch.empty(3 * MiB // 4, device="cuda")  # site A
    kept_b = torch.empty(5 * MiB // 4, device="cuda")  # site B
    leak(kept_a)
    leak(kept_b)
    return dict(allocated=None, kept=2, kept_sizes=[3 * MiB, 5 * MiB], start=start, checksum=0.0)


def case_cupy():
    import cupy

    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)
    cupy.zeros(1)
    start = used_bytes()
    arrays = [cupy.full(n // 4, 1.0, dtype=cupy.float32) for n in SIZES]
    rng = cupy.random.RandomState(0)
    a = rng.standard_normal((256, 256), dtype=cupy.float32)
    checksum = float((a * 2.0 + 1.0).sum())
    del a
    cupy.cuda.Device().synchronize()
    for i in KEEP:
        leak(arrays[i])
    del arrays
    return dict(allocated=None, start=start, checksum=checksum)


def case_rmm():
    import rmm

    rmm.DeviceBuffer(size=1)
    start = used_bytes()
    bufs = [rmm.DeviceBuffer(size=n) for n in SIZES]
    for i in KEEP:
        leak(bufs[i])
    data = bytes(range(256)) * 4096
    b = rmm.DeviceBuffer.to_device(data)
    back = b.tobytes()
    checksum = float(sum(back[::4096]))
    assert back == data
    del b, bufs
    # the warm-up buffer, SIZES, and the round-trip buffer
    return dict(allocated=len(SIZES) + 2, start=start, checksum=checksum)


def case_jax():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    import jax
    import jax.numpy as jnp

    jnp.zeros(1).block_until_ready()
    start = used_bytes()
    arrays = [jnp.full((n // 4,), 1.0, dtype=jnp.float32).block_until_ready() for n in SIZES]
    a = jax.random.normal(jax.random.PRNGKey(0), (256, 256), dtype=jnp.float32)
    checksum = float((a * 2.0 + 1.0).sum())
    del a
    for i in KEEP:
        leak(arrays[i])
    del arrays
    return dict(allocated=None, start=start, checksum=checksum)


def case_numba():
    # numba defers frees; flush them at once so that what is freed is freed before exit.
    os.environ["NUMBA_CUDA_MAX_PENDING_DEALLOCS_COUNT"] = "0"
    import numpy as np
    from numba import cuda

    cuda.device_array(1, dtype=np.uint8)
    start = used_bytes()
    arrays = [cuda.to_device(np.ones(n // 4, dtype=np.float32)) for n in SIZES]
    host = arrays[0].copy_to_host()
    checksum = float(host.sum())
    for i in KEEP:
        leak(arrays[i])
    del arrays
    cuda.current_context().deallocations.clear()
    # The warm-up array and SIZES. numba frees every allocation it made when it resets its
    # context at exit, the leaked arrays too, so nothing is left for the report: what is checked
    # is that all nine allocations and their frees were seen.
    return dict(allocated=len(SIZES) + 1, kept=0, kept_sizes=[], start=start, checksum=checksum)


CASES = {
    "torch": case_torch,
    "torch_sites": case_torch_sites,
    "cupy": case_cupy,
    "rmm": case_rmm,
    "jax": case_jax,
    "numba": case_numba,
}


def main():
    name = sys.argv[1]
    out = CASES[name]()
    out.setdefault("kept", len(KEEP))
    out.setdefault("kept_sizes", [SIZES[i] for i in KEEP])
    out.setdefault("checksum", 0.0)
    end = used_bytes()
    start = out.pop("start")
    out["used_delta"] = None if start is None or end is None else end - start
    out["case"] = name
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
