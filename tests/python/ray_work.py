"""What the Ray tests (test_ray.py) run in Ray's workers: two actors and a task that allocate
device memory through ctypes on the (simulated) CUDA driver (dask_tasks' helpers), one actor
keeping what it allocates (a leak), and the driver's view of the device under the limit."""

import ctypes
import os
import signal
import time

import ray

import dask_tasks

MiB = dask_tasks.MiB


@ray.remote(num_gpus=0.5)
class Leaker:
    """Keeps `count` allocations of `size` bytes each time it is asked."""

    def leak(self, count, size):
        dask_tasks.leak(count, size)
        return os.getpid()

    def leak_and_hold(self, count, size, release, seconds=60):
        """Keeps `count` more allocations, then runs until the file `release` exists."""
        dask_tasks.leak(count, size, freed=0)
        deadline = time.monotonic() + seconds
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.05)
        return os.getpid()

    def leak_and_die(self, count, size):
        """Keeps `count` allocations, then SIGKILL to itself: no report at exit."""
        dask_tasks.leak(count, size, freed=0)
        os.kill(os.getpid(), signal.SIGKILL)

    def who(self):
        return os.getpid(), ray.get_runtime_context().get_worker_id()


@ray.remote(num_gpus=0.5)
class Steady:
    """Allocates and frees; keeps nothing."""

    def work(self, size):
        dask_tasks.leak(0, size, freed=3)
        return os.getpid()

    def device_memory(self):
        """(free, total) as cuMemGetInfo tells this process: what a framework sizes itself by."""
        cuda = dask_tasks._driver()
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        dask_tasks._check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)))
        return free.value, total.value

    def environ(self, key):
        return os.environ.get(key)

    def who(self):
        return os.getpid(), ray.get_runtime_context().get_worker_id()


@ray.remote
def allocate(size):
    """A task that allocates one buffer and frees it."""
    dask_tasks.leak(0, size, freed=1)
    return os.getpid(), ray.get_runtime_context().get_worker_id()
