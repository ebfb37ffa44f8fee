"""A Dask client that runs under the shim itself (test_dask.py runs it with `cuguard run`): one
worker process, registered, a leak in the worker and one in this process, and the merged live
snapshot printed as JSON on stdout: {"workers_active_before", "pids", "inputs", "processes":
[{pid, labels, leaks, leaked_bytes}]}."""

import json
import os
import sys

import distributed

import cuguard
import cuguard.dask
import dask_tasks


def main():
    with (
        distributed.LocalCluster(
            n_workers=1,
            processes=True,
            threads_per_worker=1,
            dashboard_address=None,
            silence_logs=40,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        before = client.run(cuguard.active)
        pids = cuguard.dask.register(client, driver="sim", report=sys.argv[1])
        (address,) = pids
        client.submit(dask_tasks.leak, 2, dask_tasks.MiB, workers=[address], pure=False).result()
        dask_tasks.leak(1, 3 * dask_tasks.MiB)
        merged = cuguard.dask.snapshot(client)
        json.dump(
            {
                "workers_active_before": sorted(before.values()),
                "client_pid": os.getpid(),
                "pids": pids,
                "inputs": merged["merged"]["inputs"],
                "processes": [
                    {
                        "pid": p["process"]["pid"],
                        "labels": p["process"].get("labels", {}),
                        "leaks": len(p["leaks"]),
                        "leaked_bytes": sum(leak["size"] for leak in p["leaks"]),
                    }
                    for p in merged["processes"]
                ],
            },
            sys.stdout,
        )


if __name__ == "__main__":
    main()
