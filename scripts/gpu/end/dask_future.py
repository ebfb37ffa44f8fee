"""dask-cuda with CuPy's pool on (issue 21): a worker's 512 MiB CuPy array held by a future, then
released. Two cuguard.dask.snapshot calls around the release must differ: the array's block live
and held in the first, idle in the pool in the second. Writes both merged snapshots.

usage: python3 dask_future.py OUT_DIR
"""

import json
import sys
import time


def make():
    import cupy

    return cupy.ones((512 << 20) // 4, dtype=cupy.float32)  # mark: array


def main():
    out = sys.argv[1]
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    import cuguard.dask

    cluster = LocalCUDACluster(n_workers=1)
    client = Client(cluster)
    cuguard.dask.register(client)
    future = client.submit(make, pure=False)
    assert client.submit(lambda x: int(x.nbytes), future).result(timeout=120) == 512 << 20
    before = cuguard.dask.snapshot(client)
    del future
    time.sleep(2)
    after = cuguard.dask.snapshot(client)
    for name, doc in (("before", before), ("after", after)):
        with open(f"{out}/dask-{name}.json", "w") as f:
            json.dump(doc, f)
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
