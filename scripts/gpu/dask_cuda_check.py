"""dask-cuda under cuguard on the real GPU (issue 12): a LocalCUDACluster with one worker, made part
of the run by `cuguard.dask.register(client, limit=...)`, whose RMM pool is sized as a share of the
device. Prints one JSON line: what the worker saw and whether its pool fits inside the limit.

Usage: python3 dask_cuda_check.py LIMIT REPORT_TEMPLATE [MODE [SCHEDULER_FILE]]
MODE: dask_cuda (rmm_pool_size=0.5, a share dask-cuda reads from NVML; the default), cli (a
`dask cuda worker --rmm-pool-size 0.5` already started against SCHEDULER_FILE) or rmm
(the worker makes RMM's default pool: half of what cuMemGetInfo says is free).
"""

import json
import sys

GiB = 1 << 30


def worker_view():
    import os

    import rmm

    import cuguard

    free, total = rmm.mr.available_device_memory()
    mr = rmm.mr.get_current_device_resource()
    pool = mr.pool_size() if hasattr(mr, "pool_size") else None
    try:
        import pynvml

        pynvml.nvmlInit()
        nvml_total = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total
    except Exception as e:  # noqa: BLE001 - reported, not judged here
        nvml_total = repr(e)
    return {
        "pid": os.getpid(),
        "under_shim": cuguard.active(),
        "resource": type(mr).__name__,
        "pool_size": pool,
        "cuMemGetInfo_total": total,
        "cuMemGetInfo_free": free,
        "nvml_total": nvml_total,
    }


def rmm_share_pool():
    import rmm

    # No initial size: RMM's pool takes half of what cuMemGetInfo says is free.
    rmm.reinitialize(pool_allocator=True)
    return rmm.mr.get_current_device_resource().pool_size()


def work(n):
    import rmm

    bufs = [rmm.DeviceBuffer(size=256 << 20) for _ in range(n)]
    return sum(b.size for b in bufs)


def main() -> None:
    limit, report = sys.argv[1], sys.argv[2]
    mode = sys.argv[3] if len(sys.argv) > 3 else "dask_cuda"
    from dask.distributed import Client
    from dask_cuda import LocalCUDACluster

    import cuguard.dask

    result = {"mode": mode, "limit": limit}

    def check(client):
        result["registered"] = cuguard.dask.register(client, limit=limit, report=report)
        if mode == "rmm":
            result["rmm_share_pool"] = client.run(rmm_share_pool)
        result["workers"] = client.run(worker_view)
        result["work_bytes"] = client.submit(work, 8).result()
        result["snapshot_processes"] = len(cuguard.dask.snapshot(client)["processes"])

    if mode == "cli":
        with Client(scheduler_file=sys.argv[4]) as client:
            client.wait_for_workers(1, timeout=60)
            check(client)
    else:
        kw = {"rmm_pool_size": 0.5} if mode == "dask_cuda" else {}
        with LocalCUDACluster(n_workers=1, CUDA_VISIBLE_DEVICES="0", **kw) as cluster, Client(cluster) as client:
            check(client)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
