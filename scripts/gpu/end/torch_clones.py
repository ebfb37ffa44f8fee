"""PyTorch with its cache on: a training loop that keeps a clone of its hidden layer per step in
a dict (1 MiB each, 300 steps over several seconds), beside the step's own temporaries. Growth
must name the clone line, not the line whose allocation happened to grow the cache's segments.
Then the program leaves through os._exit (ARG `os_exit`), or returns."""

import os
import sys
import time

import torch

CLONES = {}


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(300):
        x = torch.randn(256, 1024, device="cuda")
        h = model[0](x)  # mark: matmul
        loss = model[2](model[1](h)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        CLONES[step] = h.clone()  # mark: clone
        torch.cuda.synchronize()
        time.sleep(0.01)
    print("kept", len(CLONES), "clones", flush=True)


if __name__ == "__main__":
    main()
    if sys.argv[1:] == ["os_exit"]:
        os._exit(0)
