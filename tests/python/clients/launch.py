"""A kernel launch on the simulated driver: the driver has no module or launch entries, so the
bindings say so (no kernel pretends to run)."""

from cuda.bindings import driver as cu

assert cu.cuInit(0)[0] == cu.CUresult.CUDA_SUCCESS
device = cu.cuDeviceGet(0)[1]
assert cu.cuCtxSetCurrent(cu.cuDevicePrimaryCtxRetain(device)[1])[0] == cu.CUresult.CUDA_SUCCESS
for name, call in [
    ("cuModuleLoadData", lambda: cu.cuModuleLoadData(b"\x7fELF")),
    ("cuLaunchKernel", lambda: cu.cuLaunchKernel(cu.CUfunction(), 1, 1, 1, 1, 1, 1, 0, 0, 0, 0)),
]:
    try:
        print(name, "returned", call())
    except Exception as e:  # noqa: BLE001 - what the bindings raise is the point
        print(name, "raised", type(e).__name__, e)
