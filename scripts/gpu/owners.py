"""Real frameworks' own memory, recorded under the shim: who holds each allocation.

Usage: python3 owners.py CASE     (CASE: see CASES below; run it under libcuguard.so)

Each case allocates through a framework the way its users do, with the framework's cache or pool
on (its default), keeps some memory alive, and prints one JSON line saying what it did. The
reports these runs leave are the recorded stacks that cuguard's owner and site rules are tested
on (`shim/symbolize/tests/fixtures/`, extracted by `shim/symbolize/tests/extract_stacks.py`):

- torch_cached: PyTorch with its caching allocator on (the normal case): its segments;
- torch_autograd: PyTorch with caching off, a backward pass: tensors made on the autograd
  engine's thread, where no Python frame exists;
- cupy_pool: CuPy's default memory pool;
- rmm_pool: RMM's PoolMemoryResource;
- jax_bfc: JAX with XLA's default (BFC) allocator, preallocation off;
- torch_sigint: a PyTorch training loop that sends itself SIGINT (Ctrl-C) after a few steps: the
  shim must still write the final report.
"""

import json
import os
import signal
import sys

MiB = 1 << 20


def keep(obj):
    import ctypes

    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def case_torch_cached():
    import torch

    xs = [torch.empty(n * MiB // 4, device="cuda") for n in (1, 3, 5, 24)]
    del xs[0]
    for x in xs:
        keep(x)
    torch.cuda.synchronize()
    return {"reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated()}


def small_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    ).cuda()


def case_torch_autograd():
    import torch

    model = small_model()
    x = torch.randn(256, 512, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    for g in grads:
        keep(g)  # the gradients, made by the autograd engine's thread
    torch.cuda.synchronize()
    return {"loss": float(loss.item()), "grads": len(grads)}


def case_cupy_pool():
    import cupy

    xs = [cupy.zeros(n * MiB // 4, dtype=cupy.float32) for n in (1, 3, 5)]
    for x in xs:
        keep(x)
    pool = cupy.get_default_memory_pool()
    return {"pool_used": pool.used_bytes(), "pool_total": pool.total_bytes()}


def case_rmm_pool():
    import rmm

    rmm.mr.set_current_device_resource(
        rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=256 * MiB)
    )
    bufs = [rmm.DeviceBuffer(size=n * MiB) for n in (1, 3, 5)]
    for b in bufs:
        keep(b)
    return {"buffers": len(bufs)}


def case_jax_bfc():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax.numpy as jnp

    xs = [jnp.full((n * MiB // 4,), 1.0, dtype=jnp.float32).block_until_ready() for n in (1, 3, 5)]
    for x in xs:
        keep(x)
    return {"arrays": len(xs)}


def case_torch_sigint():
    import torch

    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 512, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    for step in range(1000):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step == 20:
            print(json.dumps({"case": "torch_sigint", "steps": step, "loss": float(loss.item())}), flush=True)
            os.kill(os.getpid(), signal.SIGINT)
    return {"not": "reached"}


CASES = {
    "torch_cached": case_torch_cached,
    "torch_autograd": case_torch_autograd,
    "cupy_pool": case_cupy_pool,
    "rmm_pool": case_rmm_pool,
    "jax_bfc": case_jax_bfc,
    "torch_sigint": case_torch_sigint,
}


if __name__ == "__main__":
    name = sys.argv[1]
    out = CASES[name]()
    out["case"] = name
    print(json.dumps(out), flush=True)
