"""numba: a device array kept, one dropped (it waits in numba's queue of deferred frees when the
code ends), and many freed in a batch (the queue's flush). Lines marked `# KEPT`, … are read by
tests/python/test_clients.py."""

import numpy as np
from numba import cuda

KEPT = cuda.device_array(4 << 20, dtype=np.uint8)  # KEPT


def dropped():
    a = cuda.device_array(2 << 20, dtype=np.uint8)  # DROPPED
    del a


def batch():
    # One more than numba's CUDA_DEALLOCS_COUNT (10) arrays dropped: the queue is flushed, empty.
    for _ in range(11):
        a = cuda.device_array(1 << 20, dtype=np.uint8)  # BATCH
        del a


batch()
dropped()
print("done", flush=True)
