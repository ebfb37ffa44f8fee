"""repeating_loop.py: a training loop in miniature over the CUDA driver through ctypes (the
simulated driver in tests): 10 steps, each the same 200 allocations of 24 sizes in
[2 MiB, 42 MiB) (half live until the step's end, half for 1-6 allocations), all freed at the
step's end. Its sizes repeat exactly, so a pool that keeps a loop's sizes adds chunks in its
first steps only; the report's `stats.devices[0].pool.chunks_added` says how many it added.

    python3 repeating_loop.py [SEED]

On the simulated driver (16 GiB, so the default keep is 1.6 GiB, under this loop's 2.5 GB
idle at a step's end): 345 chunks, about 25 a step after the first (what the keep trims at
each step's end); 121 with `CUGUARD_POOL_KEEP=none`. The build before `dedicated_release` left
kept chunks alone (bd8745f) added 1,841 (1,156 in a debug build): at a step's first miss it
gave back every kept chunk, nothing being live yet.
"""
import ctypes, random, sys
cu = ctypes.CDLL("libcuda.so.1")
def ck(r):
    assert r == 0, r
ck(cu.cuInit(0))
dev = ctypes.c_int()
ck(cu.cuDeviceGet(ctypes.byref(dev), 0))
ctx = ctypes.c_void_p()
ck(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
ck(cu.cuCtxSetCurrent(ctx))
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
MIB = 1 << 20
shapes = [2 * MIB + rng.randrange(40 * MIB) for _ in range(24)]
plan = [(rng.choice(shapes), None if rng.random() < 0.5 else 1 + rng.randrange(6)) for _ in range(200)]
for step in range(10):
    live = []
    for i, (size, life) in enumerate(plan):
        keep = []
        for (p, until) in live:
            if until <= i:
                ck(cu.cuMemFree_v2(ctypes.c_uint64(p)))
            else:
                keep.append((p, until))
        live = keep
        p = ctypes.c_uint64()
        ck(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)))
        live.append((p.value, 10**9 if life is None else i + life))
    for p, _ in reversed(live):
        ck(cu.cuMemFree_v2(ctypes.c_uint64(p)))
print("ok")
