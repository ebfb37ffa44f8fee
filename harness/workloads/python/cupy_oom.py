"""cupy_oom.py: CuPy's pool refusing a request (issue 53's card for CuPy), on the stand-in for
CuPy's memory pool (standin_cupy/, which splits cached blocks, gives back only its non-split
free blocks when the driver refuses, refuses under its own limit without giving anything back,
and raises ``cupy.cuda.memory.OutOfMemoryError`` as CuPy 14 does).

    python3 cupy_oom.py device|limit

`device`: 1 GiB blocks cached while the driver has 2 GiB more to give, then ten 100 MiB arrays
carved from each, every other one kept (each block split, so none can be given back), then
3 GiB asked: the driver refuses, the pool frees its non-split blocks (none), asks again, and
raises. `limit`: the pool's limit at 4 GiB; one 1 GiB array kept, two more made and freed (two
whole idle blocks, 2 GiB), then 2 GiB asked: 3 GiB + 2 GiB is over the limit, refused at once
though giving back the idle blocks would have made room. Prints one JSON line: what was asked,
CuPy's error and the pool's figures then.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "standin_cupy"))
import cupy  # noqa: E402

MiB, GiB = 2**20, 2**30

mode = sys.argv[1] if len(sys.argv) > 1 else "device"
pool = cupy.get_default_memory_pool()
if mode == "device":
    segments = cupy.cuda.runtime.memGetInfo()[0] // GiB - 2
    held = [cupy.empty(GiB, dtype=cupy.uint8) for _ in range(segments)]
    del held
    arrays = [cupy.empty(100 * MiB, dtype=cupy.uint8) for _ in range(segments * 10)]  # pinning
    keep = arrays[1::2]
    del arrays
    ask = 3 * GiB
elif mode == "limit":
    pool.set_limit(size=4 * GiB)
    live = cupy.empty(GiB, dtype=cupy.uint8)
    held = [cupy.empty(GiB, dtype=cupy.uint8) for _ in range(2)]
    del held
    ask = 2 * GiB
else:
    sys.exit(f"cupy_oom.py: unknown mode {mode!r}")
try:
    big = cupy.empty(ask, dtype=cupy.uint8)  # asks
    result, error = "served", None
except cupy.cuda.memory.OutOfMemoryError as e:
    result, error = "refused", str(e)
figures = {"used": pool.used_bytes(), "total": pool.total_bytes(), "free": pool.free_bytes(),
           "n_free": pool.n_free_blocks()}
print(json.dumps({"mode": mode, "result": result, "ask": ask, "error": error, "pool": figures}))
