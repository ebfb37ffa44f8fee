"""ray_job.py: a Ray job whose workers allocate GPU memory, one actor leaking, under cuguard.

Run it on a machine without a GPU (Ray is told of two GPUs, the simulated driver gives CUDA):

    python -m cuguard.examples.ray_job --driver sim
    cuguard summary --by worker cuguard-ray/

It starts a local Ray cluster with every worker under the shim (``cuguard.ray.init``), then two
actors, ``leaker`` and ``steady``, and a task, ``allocate``, which allocate through ctypes on the
CUDA driver (in ``alloc``); ``leaker`` keeps what it allocates (the line marked ``# leak``). While ``leaker``
still runs, it prints the live snapshot's line for each worker; then it kills ``leaker``
(``ray.kill``), which writes its final report, and shuts Ray down. The workers' reports are in
``cuguard-ray/``. ``--address auto`` joins a running cluster (``ray start --head``) instead.
"""

import argparse
import ctypes
import os
import time

import ray

import cuguard.ray

MiB = 1 << 20

_cuda = None


def cuda():
    """The CUDA driver, with a current context."""
    global _cuda
    if _cuda is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        device, context = ctypes.c_int(), ctypes.c_void_p()
        for result in (
            lib.cuInit(0),
            lib.cuDeviceGet(ctypes.byref(device), 0),
            lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
            lib.cuCtxSetCurrent(context),
        ):
            if result != 0:
                raise RuntimeError(f"CUDA error {result}")
        _cuda = lib
    return _cuda


def alloc(size):
    pointer = ctypes.c_uint64()
    if cuda().cuMemAlloc_v2(ctypes.byref(pointer), size) != 0:
        raise RuntimeError("cuMemAlloc failed")
    return pointer.value


@ray.remote(num_gpus=0.5)
class Leaker:
    def __init__(self):
        self.kept = []

    def step(self, size, release):
        """Keeps one buffer per step, then runs until the file `release` exists."""
        self.kept.append(alloc(size))  # leak
        while not os.path.exists(release):
            time.sleep(0.05)


@ray.remote(num_gpus=0.5)
class Steady:
    def step(self, size):
        cuda().cuMemFree_v2(alloc(size))


@ray.remote
def allocate(size):
    cuda().cuMemFree_v2(alloc(size))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--driver", choices=["sim", "system"], default="system")
    parser.add_argument("--address", default=None, help="a running cluster's (`auto`)")
    parser.add_argument("--reports", default="cuguard-ray")
    args = parser.parse_args()
    os.makedirs(args.reports, exist_ok=True)
    local = {} if args.address else {"num_cpus": 4, "num_gpus": 2, "include_dashboard": False}
    cuguard.ray.init(
        args.address,
        driver=args.driver,
        report=os.path.join(args.reports, "cuguard.ray-worker.%h.%p.json"),
        runtime_env={"env_vars": {"CUGUARD_QUIET": "1"}},
        **local,
    )
    leaker = Leaker.options(name="leaker").remote()
    steady = Steady.options(name="steady").remote()
    ray.get([steady.step.remote(8 * MiB), allocate.remote(4 * MiB)])
    release = os.path.join(args.reports, ".release")
    running = [leaker.step.remote(2 * MiB, release) for _ in range(3)]
    deadline = time.monotonic() + 60
    while True:  # until the snapshot holds leaker's first step
        merged = cuguard.ray.snapshot()
        workers = {p["process"]["labels"].get("worker"): p for p in merged["processes"]}
        if "leaker" in workers or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    print("live, while leaker runs:")
    for name, report in sorted(workers.items()):
        leaked = sum(leak["size"] for leak in report["leaks"])
        print(f"  {name}: pid {report['process']['pid']}, {len(report['leaks'])} leaks, {leaked // MiB} MiB")
    open(release, "w").close()
    ray.get(running)
    os.unlink(release)
    ray.kill(leaker)  # its final report is written as it goes
    cuguard.ray.shutdown()  # ray.shutdown(), then the workers' ends (and their reports)
    print(f"reports: {args.reports}/; next: cuguard summary --by worker {args.reports}/")


if __name__ == "__main__":
    main()
