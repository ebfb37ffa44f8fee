"""Prints what the program would see of its own interpreter, for the bootstrap's test: sys.path,
__main__'s names, warnings filters, and whether the user's sitecustomize ran (and how often)."""

import json
import os
import sys
import warnings

import gpu

gpu.alloc(1 << 20)
print(
    json.dumps(
        {
            "path": sys.path,
            "main": sorted(k for k in vars(sys.modules["__main__"]) if not k.startswith("__")),
            "file": globals().get("__file__"),
            "warnings": [str(f) for f in warnings.filters],
            "sitecustomize_runs": int(os.environ.get("PROBE_RUNS", "0") and getattr(sys, "probe_runs", 0)),
        }
    )
)
sys.exit(int(os.environ.get("PROBE_STATUS", "0")))
