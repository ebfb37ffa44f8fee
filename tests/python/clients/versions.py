"""numba and cuda-bindings loaded together, one device array allocated through numba and one
allocation through the driver's bindings: the report's `versions` names them, the CUDA runtime
numba loaded and the driver (tests/python/test_clients.py reads the summary's versions line)."""

import numpy as np
from cuda.bindings import driver as cu
from numba import cuda

KEPT = cuda.device_array(1 << 20, dtype=np.uint8)
err, POINTER = cu.cuMemAlloc(1 << 20)
assert err == cu.CUresult.CUDA_SUCCESS, err
print("done", flush=True)
