"""Reliability cases for the real GPU (issue 6), run by scripts/gpu/reliability.sh.

  torch_train   a small PyTorch training loop that never ends (PYTORCH_NO_CUDA_MEMORY_CACHING=1,
                so every tensor is a cuMemAlloc); the script SIGKILLs it mid-run.
  cupy_segv     CuPy allocates (pool off), keeps some arrays, then segfaults on purpose.
  torch_sigterm like torch_train, ended with SIGTERM (the report is written, then the default
                action: the process dies of SIGTERM).
Each prints "ready" once its allocations are made, so the driver script knows when to strike.
"""
import ctypes
import sys
import time


def torch_train():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    keep = [torch.empty(1 << 20, dtype=torch.uint8, device="cuda") for _ in range(3)]
    step = 0
    while True:
        x = torch.randn(256, 1024, device="cuda")
        y = torch.randint(0, 10, (256,), device="cuda")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == 20:
            torch.cuda.synchronize()
            print("ready", len(keep), flush=True)


def cupy_segv():
    import cupy

    cupy.cuda.set_allocator(None)
    keep = [cupy.zeros(1 << 18, dtype=cupy.float32) for _ in range(4)]  # 4 x 1 MiB
    tmp = cupy.ones(1 << 20, dtype=cupy.uint8)
    del tmp
    cupy.cuda.runtime.deviceSynchronize()
    print("ready", len(keep), flush=True)
    time.sleep(0.2)
    ctypes.string_at(0)  # SIGSEGV


if __name__ == "__main__":
    {"torch_train": torch_train, "torch_sigterm": torch_train, "cupy_segv": cupy_segv}[sys.argv[1]]()
