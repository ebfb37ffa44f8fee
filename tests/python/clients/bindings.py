"""cuda-bindings (NVIDIA's driver API bindings) on the driver: a held, a lost and an async
allocation. Lines marked `# HELD`, `# LOST`, … are read by tests/python/test_clients.py."""

import os

from cuda.bindings import driver as cu


def ok(result):
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{err!r}")
    return result[1] if len(result) == 2 else result[1:]


ok(cu.cuInit(0))
device = ok(cu.cuDeviceGet(0))
context = ok(cu.cuDevicePrimaryCtxRetain(device))
ok(cu.cuCtxSetCurrent(context))
stream = ok(cu.cuStreamCreate(0))

WEIGHTS = ok(cu.cuMemAlloc(4 << 20))  # HELD
CACHE = {"activations": ok(cu.cuMemAllocAsync(2 << 20, stream))}  # ASYNC
ok(cu.cuStreamSynchronize(stream))


def scratch():
    p = ok(cu.cuMemAlloc(1 << 20))  # LOST
    return int(p) * 0  # the pointer is dropped, the memory never freed


def freed():
    p = ok(cu.cuMemAlloc(3 << 20))  # FREED
    ok(cu.cuMemFree(p))


if os.environ.get("CLIENT_CORRECT") != "1":  # the correct program frees what it does not keep
    scratch()
freed()
print("done", flush=True)
