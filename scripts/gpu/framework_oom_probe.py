"""Issue 53's CuPy and JAX cards, thin probe: whether a framework's out-of-memory error can be
seen where it is made (its class's __init__ wrapped: nothing runs before a refusal), and what
the framework tells of its memory then. Prints one JSON line.

    python3 framework_oom_probe.py cupy|jax
"""
import json, sys, time

MiB, GiB = 2**20, 2**30
which = sys.argv[1]
out = {"which": which}
seen = []


def wrap(cls):
    orig = cls.__init__

    def __init__(self, *args, **kw):
        orig(self, *args, **kw)
        seen.append({"args": [a if isinstance(a, int) else str(a)[:300] for a in args], "t": time.perf_counter()})

    cls.__init__ = __init__


if which == "cupy":
    import cupy
    out["version"] = cupy.__version__
    err = cupy.cuda.memory.OutOfMemoryError
    out["class"] = f"{err.__module__}.{err.__qualname__}"
    wrap(err)
    pool = cupy.get_default_memory_pool()
    out["pool_attrs"] = sorted(a for a in dir(pool) if not a.startswith("__"))
    free, total = cupy.cuda.runtime.memGetInfo()
    # A 1 GiB block freed into the pool, then 100 MiB arrays carved from it, every other kept.
    segs = int(free // GiB) - 2
    held = [cupy.empty(GiB, dtype=cupy.uint8) for _ in range(segs)]
    del held
    arrays = [cupy.empty(100 * MiB, dtype=cupy.uint8) for _ in range(segs * 10)]
    keep = arrays[1::2]
    del arrays
    out["before"] = {"used": pool.used_bytes(), "total": pool.total_bytes(), "free": pool.free_bytes(),
                     "n_free": pool.n_free_blocks(), "device_free": cupy.cuda.runtime.memGetInfo()[0]}
    try:
        sp = pool._pools  # noqa
        out["pools"] = "has _pools"
    except Exception as e:
        out["pools"] = repr(e)
    for ask, label in ((3 * GiB, "device"),):
        t0 = time.perf_counter()
        try:
            x = cupy.empty(ask, dtype=cupy.uint8)
            out[label] = "served"
        except cupy.cuda.memory.OutOfMemoryError as e:
            out[label] = {"message": str(e), "ms": round((time.perf_counter() - t0) * 1e3, 3)}
        out[label + "_after"] = {"used": pool.used_bytes(), "total": pool.total_bytes(), "free": pool.free_bytes(),
                                 "n_free": pool.n_free_blocks()}
    # The pool's own limit.
    pool.set_limit(size=pool.total_bytes() + 512 * MiB)
    try:
        x = cupy.empty(GiB, dtype=cupy.uint8)
        out["limit"] = "served"
    except cupy.cuda.memory.OutOfMemoryError as e:
        out["limit"] = {"message": str(e)}
    # Internals the card could read: the current stream's arena.
    try:
        sdp = None
        for name in ("_pools",):
            sdp = getattr(pool, name)[cupy.cuda.Device().id]
        ptr = cupy.cuda.get_current_stream().ptr
        arena = sdp._arena(ptr)
        chunks = [c for s in arena if s for c in s]
        c = chunks[0] if chunks else None
        out["arena"] = {"stream": ptr, "bins": len(arena), "chunks": len(chunks),
                        "chunk_attrs": sorted(a for a in dir(c) if not a.startswith("__")) if c else None,
                        "largest": max((ch.size for ch in chunks), default=0),
                        "split": sum(1 for ch in chunks if ch.prev is not None or ch.next is not None)}
    except Exception as e:
        out["arena"] = repr(e)
elif which == "rmm":
    import rmm
    out["version"] = rmm.__version__
    out["mr_names"] = sorted(n for n in dir(rmm.mr) if "Adaptor" in n or "Resource" in n)
    pool = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=GiB, maximum_pool_size=4 * GiB)
    rmm.mr.set_current_device_resource(pool)
    bufs = [rmm.DeviceBuffer(size=100 * MiB) for _ in range(30)]
    keep = bufs[1::2]
    del bufs
    for label, ask in (("pool_max", 3 * GiB), ("device", 200 * GiB)):
        t0 = time.perf_counter()
        try:
            b = rmm.DeviceBuffer(size=ask)
            out[label] = "served"
        except BaseException as e:
            out[label] = {"type": f"{type(e).__module__}.{type(e).__qualname__}", "mro": [c.__name__ for c in type(e).__mro__],
                          "message": str(e)[:600], "ms": round((time.perf_counter() - t0) * 1e3, 3)}
    out["pool_size"] = pool.pool_size() if hasattr(pool, "pool_size") else None
    try:
        calls = []
        def cb(nbytes, *rest):
            calls.append(nbytes)
            return False
        fc = rmm.mr.FailureCallbackResourceAdaptor(rmm.mr.get_current_device_resource(), cb)
        rmm.mr.set_current_device_resource(fc)
        try:
            rmm.DeviceBuffer(size=3 * GiB)
        except BaseException as e:
            out["callback_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        out["callback_calls"] = calls
    except Exception as e:
        out["callback"] = repr(e)[:300]
else:
    import jax, jax.numpy as jnp
    out["version"] = jax.__version__
    classes = []
    for path in ("jax.errors.JaxRuntimeError", "jaxlib.xla_extension.XlaRuntimeError", "jaxlib._jax.JaxRuntimeError", "jaxlib._jax.XlaRuntimeError"):
        mod, _, name = path.rpartition(".")
        try:
            m = __import__(mod, fromlist=[name])
            cls = getattr(m, name)
            classes.append((path, cls))
        except Exception as e:
            out.setdefault("missing", []).append(f"{path}: {e!r}"[:200])
    out["classes"] = [p for p, _ in classes]
    out["same"] = len({id(c) for _, c in classes})
    if classes:
        wrap(classes[0][1])
    d = jax.devices()[0]
    x = jnp.ones((256 * MiB,), dtype=jnp.uint8)
    parts = [jnp.ones((100 * MiB,), dtype=jnp.uint8) + i for i in range(40)]
    keep = parts[1::2]
    del parts
    out["stats_before"] = d.memory_stats()
    t0 = time.perf_counter()
    try:
        y = jnp.ones((int(out["stats_before"].get("bytes_limit", 60 * GiB)),), dtype=jnp.uint8)
        y.block_until_ready()
        out["device"] = "served"
    except Exception as e:
        out["device"] = {"type": f"{type(e).__module__}.{type(e).__qualname__}", "message": str(e)[:600],
                         "ms": round((time.perf_counter() - t0) * 1e3, 3)}
    out["stats_after"] = d.memory_stats()
out["seen"] = seen
print(json.dumps(out))
