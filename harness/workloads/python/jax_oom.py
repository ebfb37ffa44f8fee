"""jax_oom.py: XLA's BFC allocator refusing a request (issue 53's card for JAX), on the stand-in
for JAX on a GPU (standin_jax/, which preallocates its fraction of the device, splits and
coalesces inside it and raises ``JaxRuntimeError('RESOURCE_EXHAUSTED: ...')`` as JAX 0.11 does).

    python3 jax_oom.py fragmented|limit

`fragmented`: with the default fraction (0.75 of the device: 12 GiB of the simulated 16), one
filler array takes the region but 40 x 100 MiB, then 40 arrays of 100 MiB fill the rest, every
other one kept: 2000 MiB idle in 20 holes of 100 MiB, then 1 GiB asked. `limit`: 10 GiB kept
in the 12 GiB region, then 3 GiB asked: more than the region has free, less than the device
has beside it plus the region's idle (a larger XLA_PYTHON_CLIENT_MEM_FRACTION would fit).
Prints one JSON line: what was asked, JAX's error and the device's ``memory_stats()`` then.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin_jax"))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

MiB, GiB = 2**20, 2**30

mode = sys.argv[1] if len(sys.argv) > 1 else "fragmented"
device = jax.devices()[0]
limit = device.memory_stats()["bytes_limit"]
if mode == "fragmented":
    filler = jnp.empty(limit - 40 * 100 * MiB, dtype=jnp.uint8)
    arrays = [jnp.ones(100 * MiB, dtype=jnp.uint8) for _ in range(40)]  # pinning
    keep = arrays[1::2]
    del arrays
    ask = GiB
elif mode == "limit":
    live = [jnp.ones(GiB, dtype=jnp.uint8) for _ in range(10)]
    ask = 3 * GiB
else:
    sys.exit(f"jax_oom.py: unknown mode {mode!r}")
try:
    big = jnp.empty(ask, dtype=jnp.uint8).block_until_ready()  # asks
    result, error = "served", None
except jax.errors.JaxRuntimeError as e:
    result, error = "refused", str(e)
print(json.dumps({"mode": mode, "result": result, "ask": ask, "error": error, "stats": device.memory_stats()}))
