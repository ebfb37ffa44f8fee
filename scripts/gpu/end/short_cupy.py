"""CuPy, a short script: 20 arrays of 1 MiB kept in a list, then it ends. Its run is CuPy's
import and the device's start-up, then a loop of milliseconds: whether growth can be told
depends on how many samples (every 100 ms) fall before its end."""

import cupy

KEPT = []

for step in range(20):
    KEPT.append(cupy.zeros(1 << 18, dtype=cupy.float32))  # mark: keep
cupy.cuda.Device().synchronize()
