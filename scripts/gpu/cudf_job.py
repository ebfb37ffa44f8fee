"""A cuDF job for issue 57 item 1 (RMM's pool under cuDF): the same deterministic ETL three ways.

    python3 cudf_job.py plain ROWS           RMM's default resource (each buffer a cudaMalloc)
    python3 cudf_job.py pool ROWS INITIAL    a PoolMemoryResource of INITIAL bytes, no maximum
    python3 cudf_job.py oom ROWS INITIAL MAX the same with maximum_pool_size MAX: the job is
                                             expected to run out; the MemoryError is caught

Prints one JSON line last: the resource, RMM's pool_size() at the end (the pool never gives
memory back, so that is its largest), the job's checksums (identical in every mode) and, for
`oom`, the error's text.
"""

import json
import sys

mode, rows = sys.argv[1], int(sys.argv[2])
import rmm  # noqa: E402  (the pool is set before cuDF is imported)

out = {"mode": mode, "rows": rows}
if mode in ("pool", "oom"):
    initial = int(sys.argv[3])
    maximum = int(sys.argv[4]) if mode == "oom" else None
    rmm.mr.set_current_device_resource(
        rmm.mr.PoolMemoryResource(
            rmm.mr.CudaMemoryResource(),
            initial_pool_size=initial,
            maximum_pool_size=maximum,
        )
    )
    out.update(initial=initial, maximum=maximum)

import cudf  # noqa: E402
import cupy  # noqa: E402


def job():
    rng = cupy.random.default_rng(57)
    keys = cudf.DataFrame(
        {
            "key": cupy.arange(1 << 16, dtype="int64"),
            "weight": rng.random(1 << 16),
        }
    )
    df = cudf.DataFrame(
        {
            "key": rng.integers(0, 1 << 16, rows, dtype="int64"),
            "a": rng.random(rows),
            "b": rng.random(rows),
        }
    )
    df["c"] = df["a"] * df["b"]  # JOB_LINE: a column
    joined = df.merge(keys, on="key", how="inner")  # JOB_LINE: the join
    g = joined.groupby("key").agg({"c": "sum", "weight": "max", "a": "count"})
    top = joined.sort_values("c", ascending=False).head(1000)  # JOB_LINE: the sort
    return {
        "groups": int(len(g)),
        "c_sum": round(float(g["c"].sum()), 3),
        "top_key": int(top["key"].iloc[0]),
        "joined": int(len(joined)),
    }


try:
    out["result"] = job()
except MemoryError as e:
    out["error"] = f"{type(e).__name__}: {e}"[:600]
cupy.cuda.runtime.deviceSynchronize()
mr = rmm.mr.get_current_device_resource()
out["resource"] = type(mr).__name__
if hasattr(mr, "pool_size"):
    out["pool_size"] = int(mr.pool_size())
print(json.dumps(out))
