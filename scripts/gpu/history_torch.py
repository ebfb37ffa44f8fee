"""The history on the GPU: PyTorch resnet18 training under the shim, beside PyTorch's own memory
history (issue 36; the H200 issue, items 1-4).

    python3 history_torch.py train STEPS [spike]   -> trains; with `spike`, step STEPS//2 holds a
        4 GiB temporary for 300 ms (SPIKE_LINE below). With TORCH_HISTORY=1 PyTorch records its
        own history (torch.cuda.memory._record_memory_history) and its snapshot is written to
        $TORCH_SNAPSHOT. Prints one JSON line: ms_per_step (median), spike_unix_ms (from, to),
        spike_line, torch's segments and reserved bytes at the end.
    python3 history_torch.py time STEPS   -> the median ms per step after 10 warm-up steps.
    python3 history_torch.py gpt2 STEPS   -> a transformers GPT-2 (4 layers, random weights) trained
        STEPS steps on random tokens; one JSON line with the loss.
    python3 history_torch.py peaks SNAPSHOT.pickle -> from PyTorch's own trace: the peak of its
        reserved (segment) bytes and of its active (allocated) bytes, with their unix ms, and the
        blocks live at the active peak by size; one JSON line.
    python3 history_torch.py viz SNAPSHOT.pickle -> runs torch.cuda._memory_viz's segsum,
        trace_plot and segment_plot on it; one JSON line of what each returned (sizes) or raised.
"""

import json
import os
import pickle
import statistics
import sys
import time


def model_and_data():
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    return torch, model, opt, x, y


def step(torch, model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def spike(torch):
    t0 = time.time()
    big = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")  # SPIKE_LINE
    big.fill_(1)
    torch.cuda.synchronize()
    time.sleep(0.3)
    t1 = time.time()
    del big
    return t0, t1


def train(steps, with_spike):
    if os.environ.get("TORCH_HISTORY") == "1":
        import torch

        torch.cuda.memory._record_memory_history(max_entries=200000)
    torch, model, opt, x, y = model_and_data()
    times, window = [], None
    for i in range(steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step(torch, model, opt, x, y)
        if with_spike and i == steps // 2:
            window = spike(torch)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    out = {"ms_per_step": statistics.median(times[5:] or times)}
    if window:
        out["spike_unix_ms"] = [round(window[0] * 1e3), round(window[1] * 1e3)]
        with open(__file__) as f:
            out["spike_line"] = next(n for n, l in enumerate(f, 1) if l.rstrip().endswith("# SPIKE_LINE"))
    if os.environ.get("TORCH_HISTORY") == "1":
        snap = torch.cuda.memory._snapshot()
        with open(os.environ["TORCH_SNAPSHOT"], "wb") as f:
            pickle.dump(snap, f)
        out["torch_segments"] = len(snap["segments"])
        out["torch_reserved_bytes"] = sum(s["total_size"] for s in snap["segments"])
        out["torch_active_bytes"] = sum(
            b["size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"
        )
        out["torch_trace_entries"] = sum(len(t) for t in snap["device_traces"])
    print(json.dumps(out), flush=True)


def timing(steps):
    torch, model, opt, x, y = model_and_data()
    for _ in range(10):
        step(torch, model, opt, x, y)
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step(torch, model, opt, x, y)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"ms_per_step": statistics.median(times)}), flush=True)


def gpt2(steps):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (8, 256), device="cuda")
    loss = None
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    print(json.dumps({"case": "gpt2", "loss": float(loss)}), flush=True)


def peaks(path):
    """PyTorch's own answer for its peak, replayed from its trace (time_us is unix microseconds)."""
    with open(path, "rb") as f:
        snap = pickle.load(f)
    events = sorted((e for t in snap["device_traces"] for e in t), key=lambda e: e["time_us"])
    reserved = active = 0
    peak_r = peak_a = (0, None)
    live = {}
    at_peak = {}
    for e in events:
        a, size = e["action"], e["size"]
        if a == "segment_alloc":
            reserved += size
        elif a == "segment_free":
            reserved -= size
        elif a == "alloc":
            active += size
            live[e["addr"]] = size
        elif a == "free_completed":
            active -= size
            live.pop(e["addr"], None)
        if reserved > peak_r[0]:
            peak_r = (reserved, e["time_us"])
        if active > peak_a[0]:
            peak_a = (active, e["time_us"])
            at_peak = dict(live)
    sizes = {}
    for size in at_peak.values():
        sizes[size] = sizes.get(size, 0) + 1
    top = sorted(sizes.items(), key=lambda kv: -kv[0] * kv[1])[:8]
    first = events[0]["time_us"] if events else None
    print(json.dumps({
        "trace_entries": len(events),
        "trace_first_unix_ms": first and first / 1e3,
        "peak_reserved_bytes": peak_r[0], "peak_reserved_unix_ms": peak_r[1] and peak_r[1] / 1e3,
        "peak_active_bytes": peak_a[0], "peak_active_unix_ms": peak_a[1] and peak_a[1] / 1e3,
        "blocks_at_active_peak": len(at_peak),
        "largest_at_active_peak": [{"size": s, "count": n} for s, n in top],
        "note": "reserved counts only segments allocated after _record_memory_history began",
    }), flush=True)


def viz(path):
    from torch.cuda import _memory_viz as mv

    with open(path, "rb") as f:
        snap = pickle.load(f)
    out = {"segments": len(snap["segments"]), "trace_entries": sum(len(t) for t in snap["device_traces"])}
    for name, fn in [("segsum", mv.segsum), ("trace_plot", mv.trace_plot), ("segment_plot", mv.segment_plot)]:
        try:
            r = fn(snap)
            out[name] = {"ok": True, "chars": len(r)}
        except Exception as e:  # noqa: BLE001 - the point is to record what the reader says
            out[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "train":
        train(int(sys.argv[2]), len(sys.argv) > 3 and sys.argv[3] == "spike")
    elif what == "time":
        timing(int(sys.argv[2]))
    elif what == "gpt2":
        gpt2(int(sys.argv[2]))
    elif what == "peaks":
        peaks(sys.argv[2])
    elif what == "viz":
        viz(sys.argv[2])
    else:
        sys.exit(f"unknown {what}")
