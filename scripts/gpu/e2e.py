"""End-to-end figures on the GPU: PyTorch resnet18 training and RMM DeviceBuffer loops.

Usage: python3 e2e.py resnet [steps]   -> one JSON line: {"ms_per_step": median, "losses": [...]}
       python3 e2e.py rmm RESOURCE     -> one JSON line: {"us_per_pair": median}
         RESOURCE: default (cudaMalloc), pool (RMM's PoolMemoryResource), async
       python3 e2e.py all SHIM OUT.json -> runs every configuration side by side, prints a table

`all` runs each configuration as its own process (the environment decides the allocator), in
interleaved rounds, and checks that the losses are identical with the pool on and off.
"""

import json
import os
import statistics
import subprocess
import sys
import time


def resnet(steps):
    import torch
    import torchvision

    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    model = torchvision.models.resnet18(num_classes=1000).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(64, 3, 224, 224, device="cuda", generator=g)
    y = torch.randint(0, 1000, (64,), device="cuda", generator=g)
    loss_fn = torch.nn.CrossEntropyLoss()
    times, losses = [], []
    for i in range(steps + 5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= 5:
            times.append((time.perf_counter() - t) * 1e3)
        losses.append(float(loss.item()))
    return {"ms_per_step": statistics.median(times), "losses": losses}


def rmm_loop(resource, n=20000):
    import rmm

    if resource == "pool":
        rmm.mr.set_current_device_resource(
            rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 30)
        )
    elif resource == "async":
        rmm.mr.set_current_device_resource(rmm.mr.CudaAsyncMemoryResource())
    for _ in range(1000):
        rmm.DeviceBuffer(size=1 << 20)
    samples = []
    for _ in range(20):
        t = time.perf_counter()
        for _ in range(n // 20):
            rmm.DeviceBuffer(size=1 << 20)
        samples.append((time.perf_counter() - t) * 1e6 / (n // 20))
    return {"us_per_pair": statistics.median(samples)}


def run(args, env):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.update(env)
    out = subprocess.run([sys.executable, __file__] + args, env=e, capture_output=True, text=True, timeout=600)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    sys.stderr.write(f"{args} {env}: exit {out.returncode}\n{out.stderr[-2000:]}\n")
    return None


def all_configs(shim, out_path, only=None, rounds=2):
    nocache = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    det = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    quiet = {"CUGUARD_QUIET": "1", "CUGUARD_REPORT": "/tmp/cuguard-e2e.%p.json"}
    resnet_cfgs = {
        "torch caching allocator": det,
        "no caching, bare driver": nocache,
        "no caching, cuguard pass-through": {**nocache, **quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "0", "CUGUARD_STACK_DEPTH": "0"},
        "no caching, cuguard pool, stacks off": {**nocache, **quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "1", "CUGUARD_STACK_DEPTH": "0"},
        "no caching, cuguard pool, stacks on": {**nocache, **quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "1", "CUGUARD_STACK_DEPTH": "32"},
    }
    rmm_cfgs = {
        "RMM default (cudaMalloc), bare": (["rmm", "default"], {}),
        "RMM default (cudaMalloc), cuguard pool": (["rmm", "default"], {**quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "1", "CUGUARD_STACK_DEPTH": "0"}),
        "RMM default (cudaMalloc), cuguard pool, stacks on": (["rmm", "default"], {**quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "1"}),
        "RMM PoolMemoryResource, bare": (["rmm", "pool"], {}),
        "RMM CudaAsyncMemoryResource, bare": (["rmm", "async"], {}),
    }
    base_shim = os.path.join(os.path.dirname(shim), "baseline", "libcuguard.so")
    if os.path.exists(base_shim):
        # Another build (say the one before a change) beside this one, each in its own process.
        resnet_cfgs["torch caching allocator, cuguard stacks on"] = {**det, **quiet, "LD_PRELOAD": shim}
        resnet_cfgs["torch caching allocator, baseline cuguard stacks on"] = {**det, **quiet, "LD_PRELOAD": base_shim}
        resnet_cfgs["no caching, baseline cuguard pool, stacks on"] = {**nocache, **quiet, "LD_PRELOAD": base_shim, "CUGUARD_POOL": "1", "CUGUARD_STACK_DEPTH": "32"}
    if only == "resnet":
        rmm_cfgs = {}
    results = {k: [] for k in list(resnet_cfgs) + list(rmm_cfgs)}
    losses = {}
    for _round in range(rounds):
        for name, env in resnet_cfgs.items():
            r = run(["resnet", "20"], env)
            if r:
                results[name].append(r["ms_per_step"])
                losses[name] = r["losses"]
        for name, (args, env) in rmm_cfgs.items():
            r = run(args, env)
            if r:
                results[name].append(r["us_per_pair"])
    med = {k: (statistics.median(v) if v else None) for k, v in results.items()}
    base = losses.get("no caching, bare driver")
    same = {
        k: (max(abs(a - b) for a, b in zip(v, base)) if base and len(v) == len(base) else None)
        for k, v in losses.items()
    }
    print("| configuration | median | unit | max abs loss difference from the bare no-caching run |")
    print("|---|---|---|---|")
    for k, v in med.items():
        unit = "ms/step" if k in resnet_cfgs else "µs per 1 MiB DeviceBuffer"
        eq = same.get(k, "") if k in resnet_cfgs else ""
        print(f"| {k} | {v:.3f} | {unit} | {eq} |" if v is not None else f"| {k} | failed | {unit} | |")
    def ratio(a, b):
        return med[a] / med[b] if med.get(a) and med.get(b) else float("nan")
    print()
    print("| ratio | value |")
    print("|---|---|")
    print(f"| resnet18 step, cuguard pool (stacks off) / torch caching allocator | {ratio('no caching, cuguard pool, stacks off', 'torch caching allocator'):.2f} |")
    print(f"| resnet18 step, cuguard pool stacks on / stacks off | {ratio('no caching, cuguard pool, stacks on', 'no caching, cuguard pool, stacks off'):.3f} |")
    print(f"| resnet18 step, no caching bare / cuguard pool | {ratio('no caching, bare driver', 'no caching, cuguard pool, stacks off'):.2f} |")
    if os.path.exists(base_shim):
        print(f"| resnet18 step, caching on, cuguard stacks on: this build / baseline | {ratio('torch caching allocator, cuguard stacks on', 'torch caching allocator, baseline cuguard stacks on'):.3f} |")
        print(f"| resnet18 step, no caching, cuguard pool stacks on: this build / baseline | {ratio('no caching, cuguard pool, stacks on', 'no caching, baseline cuguard pool, stacks on'):.3f} |")
        print(f"| resnet18 step, caching on: cuguard stacks on / bare | {ratio('torch caching allocator, cuguard stacks on', 'torch caching allocator'):.3f} |")
    print(f"| RMM 1 MiB DeviceBuffer, default+cuguard pool / RMM pool resource | {ratio('RMM default (cudaMalloc), cuguard pool', 'RMM PoolMemoryResource, bare'):.2f} |")
    json.dump({"medians": med, "losses_equal": same, "losses": losses}, open(out_path, "w"))


def main():
    what = sys.argv[1]
    if what == "resnet":
        print(json.dumps(resnet(int(sys.argv[2]) if len(sys.argv) > 2 else 20)))
    elif what == "rmm":
        print(json.dumps(rmm_loop(sys.argv[2])))
    elif what == "all":
        all_configs(sys.argv[2], sys.argv[3])
    elif what == "resnet-only":
        all_configs(sys.argv[2], sys.argv[3], only="resnet", rounds=1)


if __name__ == "__main__":
    main()
