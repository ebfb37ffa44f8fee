"""The user's own sitecustomize: counts its runs."""

import sys

sys.probe_runs = getattr(sys, "probe_runs", 0) + 1
