#!/usr/bin/env python3
"""Runs PyTorch's own readers of a memory snapshot on one written by `cuguard export`
(cuguard::export::memory_viz), without torch installed.

    python3 scripts/memory_viz_torch.py PATH/TO/torch/cuda/_memory_viz.py SNAPSHOT.pickle

`torch/cuda/_memory_viz.py` imports nothing of torch at its top (only `_profile_to_snapshot`
does, inside), so the file alone is loaded, from a PyTorch checkout or from any machine's
torch (`python -c 'import torch.cuda._memory_viz as m; print(m.__file__)'`). It runs, and
fails with their error if one fails:
- `segsum` (the segments' summary: it asserts that each segment's blocks account for it);
- `trace` (the trace as Python-like text: it reads `device_free` of each `oom`);
- `segments` and `memory` with a flame-graph formatter that returns its input (no download of
  flamegraph.pl);
- `trace_plot`, `trace_plot(plot_segments=True)` and `segment_plot` (the HTML pages that embed
  the snapshot for the viewer).
It prints the summary `segsum` gives.
"""

import importlib.util
import pickle
import sys


def main(viz_path, snapshot_path):
    spec = importlib.util.spec_from_file_location("_memory_viz", viz_path)
    viz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(viz)
    with open(snapshot_path, "rb") as f:
        data = pickle.load(f)
    summary = viz.segsum(data)
    text = viz.trace(data)
    flame = viz.segments(data, format_flamegraph=lambda lines: lines)
    mem = viz.memory(data, format_flamegraph=lambda lines: lines)
    pages = [viz.trace_plot(data), viz.trace_plot(data, plot_segments=True), viz.segment_plot(data)]
    for page in pages:
        assert "snapshot.pickle" in page, "a page without its snapshot"
    assert all(line.rsplit(" ", 1)[1].isdigit() for line in flame.splitlines()), flame
    assert all(line.rsplit(" ", 1)[1].isdigit() for line in mem.splitlines()), mem
    print(summary)
    print(text)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
