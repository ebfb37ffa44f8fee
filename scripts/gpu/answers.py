"""Issue 22, items 4-7 on the H200: what a program under cuguard is told and what its report says.
One JSON line per case, on stdout. Run under the shim (scripts/gpu/answers.sh does).

Cases:
  torch_limit   torch.cuda.mem_get_info and NVML (pynvml's memory info), then a tensor past
                the limit: under CUGUARD_POOL_LIMIT=1GiB both should say a 1 GiB device.
  empty_cache   a 3 GiB temporary, torch.cuda.empty_cache(), then the program ends: the report's
                reconciliation should have no negative line and no ~3 GiB "unexplained" (memory
                given back but not returned by the driver is named as such).
  cupy          a CuPy array made and freed (CuPy's pool off): the contexts' estimate against
                what NVML says is used, which read "unexplained -3.6 MiB" before.
  gpt2          a few GPT-2 training steps (transformers), for the bill (summary's cost line).
"""

import json
import sys

GiB = 1 << 30


def nvml_total_free():
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlInit()
    m = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
    return {"total": m.total, "free": m.free}


def torch_limit() -> dict:
    import torch

    free, total = torch.cuda.mem_get_info()
    try:
        torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
        oom = None
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0][:160]
    return {"case": "torch_limit", "total": total, "free": free, "nvml": nvml_total_free(), "oom": oom}


def empty_cache() -> dict:
    import torch

    t = torch.empty(3 * GiB, dtype=torch.uint8, device="cuda")
    t.fill_(1)
    torch.cuda.synchronize()
    del t
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    return {"case": "empty_cache", "free_after": free, "total": total}


def cupy_case() -> dict:
    import cupy

    cupy.cuda.set_allocator(None)
    a = cupy.ones(1 << 26, dtype=cupy.float32)
    s = float(a.sum())
    del a
    return {"case": "cupy", "sum": s}


def gpt2() -> dict:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 50000, (8, 256), device="cuda")
    for _ in range(5):
        loss = model(x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    return {"case": "gpt2", "loss": float(loss)}


if __name__ == "__main__":
    cases = {"torch_limit": torch_limit, "empty_cache": empty_cache, "cupy": cupy_case, "gpt2": gpt2}
    print(json.dumps(cases[sys.argv[1]]()))
