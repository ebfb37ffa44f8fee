"""resnet18 training steps with PyTorch's cache on: median step time, for the cost of the cache
view (run under cuguard with CUGUARD_CACHE_VIEW=1 and =0 side by side)."""

import statistics
import sys
import time

import torch
import torchvision

model = torchvision.models.resnet18().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 3, 224, 224, device="cuda")
y = torch.randint(0, 1000, (64,), device="cuda")
times = []
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 60):
    torch.cuda.synchronize()
    t = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
print(f"step_ms {statistics.median(times[10:]) * 1000:.3f}")
