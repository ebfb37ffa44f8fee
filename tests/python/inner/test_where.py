"""Each test records where it ran (process, xdist worker, whether under the shim) in
$WHERE_DIR/<test>.json."""

import json
import os

import pytest

import cuguard
from gpu import alloc, free


@pytest.mark.parametrize("n", range(6))
def test_where(n):
    free(alloc(1 << 20))
    record = {
        "pid": os.getpid(),
        "worker": os.environ.get("PYTEST_XDIST_WORKER"),
        "active": cuguard.active(),
        "preload": os.environ.get("LD_PRELOAD", ""),
        "restarted": os.environ.get("CUGUARD_PYTEST_RESTARTED"),
        "uncached": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"),
    }
    with open(os.path.join(os.environ["WHERE_DIR"], f"{n}.json"), "w") as f:
        json.dump(record, f)
