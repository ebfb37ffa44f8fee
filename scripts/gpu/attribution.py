"""Attribution on the real GPU (issue 10): programs whose reports must name the right line.

Usage: python3 attribution.py CASE     (run it under libcuguard.so; CASE: see CASES below)

Each case prints one JSON line last: what it did, and the lines (`marks`) its report must name,
found by the comment markers below so that editing this file cannot make them stale.
`attribution_check.py` reads the reports these runs leave and runs `cuguard` on them.

- torch_train_cached: a small convolutional network trained with PyTorch's caching allocator on,
  the normal case; it leaks nothing, so `cuguard check` must pass and the cache must read as
  PyTorch's;
- torch_train_growth: the same training, caching off, 300 steps, that appends a tensor to a
  module-level list at every step (Python frees the list at shutdown, before the shim's report,
  so it is no leak at exit: only growth shows it);
- torch_train_autograd: the same training, caching off, keeping its gradients alive: tensors the
  autograd engine's thread made, where no Python frame exists;
- torch_oom: PyTorch asks for more than `CUGUARD_POOL_LIMIT` allows: one line is out of memory;
- cudf_loop: the seed's loop, `cudf.DataFrame({'a': range(1_000_000)})` a hundred times;
- torch_train_until_stopped: training (caching on) that keeps 1 MiB every 10 steps until Ctrl-C,
  for `cuguard top` and the exporter to watch (issue 15);
- gpt2_train_cached, resnet18_train_cached: warm-up, not growth (issue 21): a transformers GPT-2
  built from a config (4 layers, 30 steps) and torchvision's resnet18 (batch 64, 30 steps), caching
  on. PyTorch's cache fills in the first step and then holds: no site may grow.
"""

import json
import os
import sys

MiB = 1 << 20
HERE = os.path.abspath(__file__)


def mark(tag):
    """The line of this file that carries `# mark: TAG`."""
    for n, line in enumerate(open(HERE), 1):
        if line.rstrip().endswith("# mark: " + tag):
            return n
    raise KeyError(tag)


def net():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    ).cuda()


def train(steps, keep=None, keep_grads=False):
    import torch

    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for step in range(steps):
        x = torch.randn(64, 3, 64, 64, device="cuda")
        y = torch.randint(0, 10, (64,), device="cuda")
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
        if keep is not None:
            keep.append(torch.empty(MiB // 4, device="cuda"))  # mark: grows
    torch.cuda.synchronize()
    grads = [p.grad for p in model.parameters()] if keep_grads else []
    return losses, len(keep or ()), grads


def case_torch_train_cached():
    import torch

    losses, _, _ = train(40)
    return {"steps": len(losses), "loss": losses[-1], "reserved": torch.cuda.memory_reserved()}


HISTORY = []


def case_torch_train_growth():
    # Long enough for the shim's 100 ms samples to see the list grow (a few seconds), kept in a
    # module global that Python frees at shutdown: no leak at exit, only growth shows it.
    losses, kept, _ = train(300, keep=HISTORY)
    return {"steps": len(losses), "kept": kept, "kept_bytes": kept * MiB, "marks": {"grows": mark("grows")}}


KEPT = []


def case_torch_train_autograd():
    losses, _, grads = train(5, keep_grads=True)
    KEPT.extend(grads)
    # Python frees module globals at shutdown; these must still be live when the shim reports.
    import ctypes

    for g in grads:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(g))
    return {"steps": len(losses), "grads": len(grads), "grad_bytes": sum(g.numel() * 4 for g in grads)}


def case_torch_oom():
    import torch

    limit = os.environ.get("CUGUARD_POOL_LIMIT", "")
    x = torch.empty(64 * MiB, device="cuda")  # 256 MiB that fits
    try:
        y = torch.empty(1024 * MiB, device="cuda")  # mark: oom
        got = "no error"
        del y
    except torch.OutOfMemoryError as e:
        got = type(e).__name__
    del x
    return {"limit": limit, "error": got, "asked": 4096 * MiB, "marks": {"oom": mark("oom")}}


def case_torch_train_until_stopped():
    """Trains (caching on) until SIGINT, printing a line per 50 steps: for watching it live."""
    import torch

    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []
    step = 0
    try:
        while True:
            x = torch.randn(64, 3, 64, 64, device="cuda")
            y = torch.randint(0, 10, (64,), device="cuda")
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if step % 10 == 0:
                kept.append(torch.empty(MiB // 4, device="cuda"))  # mark: watched
            if step % 50 == 0:
                print(json.dumps({"step": step, "loss": float(loss.item()), "kept": len(kept)}), flush=True)
            step += 1
    finally:
        print(json.dumps({"stopped_at": step, "kept": len(kept)}), flush=True)


def case_cudf_loop():
    import cudf

    for _ in range(100):
        df = cudf.DataFrame({"a": range(1_000_000)})  # mark: loop
    return {"rows": len(df), "marks": {"loop": mark("loop")}}


def case_gpt2_train_cached():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=4)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses = []
    for _ in range(30):
        ids = torch.randint(0, model.config.vocab_size, (8, 512), device="cuda")
        loss = model(ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    torch.cuda.synchronize()
    return {"steps": len(losses), "loss": losses[-1], "reserved": torch.cuda.memory_reserved()}


def case_resnet18_train_cached():
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(30):
        x = torch.randn(64, 3, 224, 224, device="cuda")
        y = torch.randint(0, 1000, (64,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    torch.cuda.synchronize()
    return {"steps": len(losses), "loss": losses[-1], "reserved": torch.cuda.memory_reserved()}


CASES = {
    "torch_train_cached": case_torch_train_cached,
    "torch_train_growth": case_torch_train_growth,
    "torch_train_autograd": case_torch_train_autograd,
    "torch_oom": case_torch_oom,
    "cudf_loop": case_cudf_loop,
    "torch_train_until_stopped": case_torch_train_until_stopped,
    "gpt2_train_cached": case_gpt2_train_cached,
    "resnet18_train_cached": case_resnet18_train_cached,
}


if __name__ == "__main__":
    name = sys.argv[1]
    out = CASES[name]()
    out["case"] = name
    out["file"] = HERE
    print(json.dumps(out), flush=True)
