"""A small model trained with DDP on the gloo backend, every rank on GPU 0 (issue 12's torchrun check).

Usage: torchrun --nproc_per_node=2 ddp_train.py OUT_DIR [BACKEND]

BACKEND: gloo (the default: every rank on GPU 0) or nccl (rank r on GPU LOCAL_RANK; issue 13's
two-GPU run, with NCCL_NVLS_ENABLE=0 in the environment).

Each rank trains the same seeded two-layer network on its own seeded batches for 60 steps and
writes its losses (as exact float hex) to OUT_DIR/losses.rank<R>.json; `distributed_check.py`
compares them between runs with and without cuguard.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    backend = sys.argv[2] if len(sys.argv) > 2 else "gloo"
    device = int(os.environ.get("LOCAL_RANK", "0")) if backend == "nccl" else 0
    torch.cuda.set_device(device)
    dist.init_process_group(backend)
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    ).cuda()
    ddp = DDP(model, device_ids=[device])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1000 + rank)
    losses = []
    for _ in range(60):
        x = torch.randn(64, 256, generator=g).cuda()
        y = torch.randint(0, 10, (64,), generator=g).cuda()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item().hex())
    torch.cuda.synchronize()
    with open(os.path.join(out, f"losses.rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "pid": os.getpid(), "losses": losses}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
