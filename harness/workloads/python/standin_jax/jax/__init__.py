"""A stand-in for JAX 0.11 on one GPU as its memory shows it, over the CUDA driver through ctypes
(the simulated one in tests), for harness/workloads/python/jax_oom.py. What it keeps: arrays'
buffers come from XLA's BFC allocator (jaxlib/_jax.py: preallocation, its limit, best fit with
splitting and coalescing, ``RESOURCE_EXHAUSTED`` as ``jax.errors.JaxRuntimeError``);
``jax.devices()`` is the one GPU, whose ``memory_stats()`` gives the allocator's stats under
XLA's keys; ``jax.numpy`` makes byte arrays only (numpy.py), no computations.
"""

from jax import errors  # noqa: F401
from jaxlib import _jax

__version__ = "0.11.0+standin"

_devices = []


def devices(backend=None):
    if not _devices:
        _devices.append(_jax.Device(0))
    return list(_devices)


local_devices = devices

from jax import numpy  # noqa: E402,F401
