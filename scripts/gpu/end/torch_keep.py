"""PyTorch with its cache on: a training loop that keeps two tensors per run in a module-level
list and a dict of clones per step; everything else is the cache's."""

import torch

KEPT = []
CLONES = {}


def main():
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(20):
        x = torch.randn(256, 1024, device="cuda")
        h = model[0](x)
        loss = model[2](model[1](h)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        CLONES[step] = h.clone()  # mark: clone
    KEPT.append(torch.ones(1024, 1024, device="cuda"))  # mark: kept
    KEPT.append(torch.zeros(512, 1024, device="cuda"))  # mark: kept2
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
