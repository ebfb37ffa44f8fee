"""Phases on the GPU (issue 55, item 1): a small PyTorch training program whose steps are NVTX
ranges, run under `cuguard run` by scripts/gpu/phases.sh with PyTorch's cache on and off.

    python3 phases_torch.py
        An MLP (2048 -> 4096 -> 4096 -> 1000, SGD with momentum, batch 512 of fixed random data,
        seed 0). One warm-up step in a range "warmup" (cuBLAS's handle and workspace, the
        momentum buffers: what the later steps find made), then 6 steps, each a range "step"
        holding ranges "forward", "backward" and "optimizer" (torch.cuda.nvtx has no payload, so
        cuguard numbers them step #1..#6 by their order). Step 4 also holds a 256 MiB tensor
        from its start to its end (the line marked HEAVY). Then one step inside
        torch.autograd.profiler.emit_nvtx() in a range "emit_nvtx step" (a range per autograd
        op, named "aten::…", without forward/backward/optimizer ranges of its own).

        Prints one JSON line: per step what PyTorch's allocator says, its peaks reset at the
        step's start (torch.cuda.reset_peak_memory_stats): max_memory_allocated,
        max_memory_reserved, the peak of the requested bytes, memory_reserved at the end, the
        current and cumulative counters at the start and the end, the driver's used bytes
        (cudaMemGetInfo) at both; and the HEAVY line's number.

With PYTORCH_NO_CUDA_MEMORY_CACHING=1 every tensor is one cudaMalloc of its requested size and
one cudaFree when it dies, and PyTorch's statistics stay at 0 (the uncached path bypasses them):
the cache-on run of this same program gives PyTorch's own account of the tensors.
"""

import json
import os
import sys

HEAVY_BYTES = 256 << 20
STEPS = 6
# PHASES_HEAVY=0: no step is heavier (the baseline of scripts/gpu/peak_gate.sh).
HEAVY_STEP = 4 if os.environ.get("PHASES_HEAVY", "1") != "0" else None


def counters(torch):
    """PyTorch's allocator counters now (all 0 with the cache off)."""
    s = torch.cuda.memory_stats()
    free, total = torch.cuda.mem_get_info()
    return {
        "allocated": s.get("allocated_bytes.all.current", 0),
        "requested": s.get("requested_bytes.all.current"),
        "reserved": s.get("reserved_bytes.all.current", 0),
        # Cumulative: allocation requests, their bytes (block sizes and as requested), segments.
        "allocations_total": s.get("allocation.all.allocated", 0),
        "allocated_bytes_total": s.get("allocated_bytes.all.allocated", 0),
        "requested_bytes_total": s.get("requested_bytes.all.allocated"),
        "segments_total": s.get("segment.all.allocated", 0),
        "driver_used": total - free,
    }


def train_step(torch, model, opt, x, y, inner, heavy):
    rng = torch.cuda.nvtx
    opt.zero_grad(set_to_none=True)
    big = None
    if heavy:
        big = torch.empty(HEAVY_BYTES, dtype=torch.uint8, device="cuda")  # HEAVY
        big.fill_(1)
    if inner:
        rng.range_push("forward")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    if inner:
        rng.range_pop()
        rng.range_push("backward")
    loss.backward()
    if inner:
        rng.range_pop()
        rng.range_push("optimizer")
    opt.step()
    if inner:
        rng.range_pop()
    value = float(loss.item())
    del loss
    if big is not None:
        del big  # freed at the end of its step, inside the step's range
    torch.cuda.synchronize()
    return value


def one(torch, model, opt, x, y, name, label, inner=True, heavy=False, emit=False):
    """One step in the NVTX range `name`, with PyTorch's figures for it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = counters(torch)
    torch.cuda.nvtx.range_push(name)
    if emit:
        with torch.autograd.profiler.emit_nvtx():
            loss = train_step(torch, model, opt, x, y, inner, heavy)
    else:
        loss = train_step(torch, model, opt, x, y, inner, heavy)
    torch.cuda.nvtx.range_pop()
    s = torch.cuda.memory_stats()
    return {
        "label": label,
        "loss": loss,
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "peak_requested": s.get("requested_bytes.all.peak"),
        "memory_reserved_end": torch.cuda.memory_reserved(),
        "start": start,
        "end": counters(torch),
    }


def main():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(2048, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096),
        torch.nn.ReLU(),
        torch.nn.Linear(4096, 1000),
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(512, 2048, device="cuda")
    y = torch.randint(0, 1000, (512,), device="cuda")
    steps = [one(torch, model, opt, x, y, "warmup", "warmup #1", inner=False)]
    for k in range(1, STEPS + 1):
        steps.append(one(torch, model, opt, x, y, "step", f"step #{k}", heavy=(k == HEAVY_STEP)))
        print(f"step {k}: loss {steps[-1]['loss']:.4f}", file=sys.stderr, flush=True)
    steps.append(one(torch, model, opt, x, y, "emit_nvtx step", "emit_nvtx step #1", inner=False, emit=True))
    with open(__file__) as f:
        heavy_line = next(n for n, l in enumerate(f, 1) if l.rstrip().endswith("# HEAVY"))
    print(json.dumps({
        "program": "phases_torch",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cache": "off" if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1" else "on",
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "parameters_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "heavy_bytes": HEAVY_BYTES,
        "heavy_step": HEAVY_STEP,
        "heavy_line": heavy_line,
        "steps": steps,
    }), flush=True)


if __name__ == "__main__":
    main()
