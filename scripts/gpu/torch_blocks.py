"""torch_blocks.py MODE: PyTorch's tensors in cuguard's history (issue 54), on the GPU; run by
scripts/gpu/torch_blocks.sh.

MODE `check`: a small training program under `cuguard run` with PyTorch's own recorder on; at
four moments (`inside`: step 2 after its forward pass, its activations live; `after`: step 2
done; `freed`: a 256 MiB temporary made and freed; `final`) it takes PyTorch's snapshot inside a
`cuguard.phase` of that name and writes the segments' blocks (address, size, state) to $SNAPS,
for torch_blocks.sh to compare with `cuguard export --between phase:NAME` of the same run.

MODE `pairs`: nanoseconds a tensor's allocate-and-free pair (torch.empty(1000) and del) takes,
200,000 pairs after 20,000 to warm up; with HISTORY=python, PyTorch's own recorder on with
Python stacks, with HISTORY=plain without stacks. MODE `steps`: milliseconds a training step of a
larger model takes (30 steps after 5). Each prints one JSON line."""
import json
import os
import sys
import time

import torch

mode = sys.argv[1]
out = {"mode": mode, "torch": torch.__version__, "cuda": torch.version.cuda,
       "device": torch.cuda.get_device_name()}


def model_of(width, depth):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).cuda()


if mode == "check":
    import cuguard

    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    model = model_of(1024, 3)
    opt = torch.optim.Adam(model.parameters())
    snaps = []

    def snap(name):
        torch.cuda.synchronize()
        with cuguard.phase(name):
            s = torch.cuda.memory._snapshot()
        snaps.append({
            "name": name,
            "segments": [[g["address"], g["total_size"],
                          [[b["address"], b["size"], b["state"]] for b in g["blocks"]]]
                         for g in s["segments"]],
        })

    for step in range(3):
        x = torch.randn(512, 1024, device="cuda")  # the batch
        y = model(x)  # forward
        if step == 1:
            snap("inside")
        loss = y.square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 1:
            snap("after")
    big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # temporary
    del big
    snap("freed")
    snap("final")
    with open(os.environ["SNAPS"], "w") as f:
        json.dump(snaps, f)
    out["snapshots"] = len(snaps)
elif mode == "pairs":
    history = os.environ.get("HISTORY", "")
    if history == "python":
        torch.cuda.memory._record_memory_history("all", context="alloc", stacks="python", max_entries=1_000_000)
    elif history == "plain":
        torch.cuda.memory._record_memory_history("all", context=None, max_entries=1_000_000)
    torch.empty(1, device="cuda")

    def pairs(n):
        t = time.perf_counter()
        for _ in range(n):
            y = torch.empty(1000, device="cuda")  # PAIR
            del y
        return (time.perf_counter() - t) / n * 1e9

    # Batches, their median: a batch that another process or an interrupt slowed does not move
    # it (run 38 timed one batch of 200,000 a process: rounds of one variant spread by 1.4 µs).
    pairs(20_000)
    batches = sorted(pairs(5_000) for _ in range(40))
    out["ns_per_pair"] = round(batches[len(batches) // 2], 1)
    out["ns_p10_p90"] = [round(batches[len(batches) // 10], 1), round(batches[-1 - len(batches) // 10], 1)]
elif mode == "steps":
    model = model_of(2048, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def steps(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            x = torch.randn(1024, 2048, device="cuda")
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / n * 1e3

    steps(5)
    out["ms_per_step"] = round(steps(30), 3)
print(json.dumps(out))
