"""pprof beside JAX's own (the H200 issue, item 5): a JAX program keeps arrays in a global dict,
then writes JAX's device memory profile (`jax.profiler.save_device_memory_profile`, the pprof
file JAX documents for finding leaks) to $JAX_PROFILE. Run under `cuguard run`, whose report is
exported with `cuguard export --format pprof`; both are read by `pprof -top`.

XLA's default allocator takes 75% of the device up front (one allocation cuguard sees, no
lines): this runs with XLA_PYTHON_CLIENT_ALLOCATOR=platform, so each array is its own driver
allocation, as in JAX's leak-hunting advice. Prints one JSON line: the arrays kept and bytes.
"""

import json
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

CACHE = {}


def load_embeddings(n):
    return jnp.ones((n, 1024), dtype=jnp.float32)  # mark: embeddings


def load_weights(n):
    return jnp.zeros((n, 1024), dtype=jnp.float32)  # mark: weights


def step(i):
    x = jnp.arange(1 << 20, dtype=jnp.float32) * i  # mark: temporary
    return float(x.sum())


for i in range(4):
    CACHE[f"emb{i}"] = load_embeddings(4096)  # 16 MiB each
CACHE["weights"] = load_weights(16384)  # 64 MiB
total = sum(step(i) for i in range(10))
for v in CACHE.values():
    v.block_until_ready()
jax.profiler.save_device_memory_profile(os.environ.get("JAX_PROFILE", "jax.prof"))
print(json.dumps({"kept": len(CACHE), "kept_bytes": sum(v.nbytes for v in CACHE.values()), "total": total}), flush=True)
