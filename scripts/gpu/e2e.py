"""End-to-end figures on the GPU: PyTorch resnet18 training and RMM DeviceBuffer loops.

Usage: python3 e2e.py resnet [steps]   -> one JSON line: {"ms_per_step": median, "losses": [...]}
       python3 e2e.py rmm RESOURCE     -> one JSON line: {"us_per_pair": median}
         RESOURCE: default (cudaMalloc), pool (RMM's PoolMemoryResource), async
       python3 e2e.py cudf_loop RESOURCE -> {"ms_per_iter": median, "checksum": ...}: the seed's
         loop, `cudf.DataFrame({'a': range(1_000_000)})` and its sum, 100 times a repetition
       python3 e2e.py cudf_cold RESOURCE -> the same loop's first 100 iterations in a fresh
         process, each timed (issue 23, item 2: the cold start), with the import before them
       python3 e2e.py cudf_etl RESOURCE  -> {"ms_per_rep": median, "checksum": ...}: a 10M-row
         groupby, merge and sort
       python3 e2e.py all SHIM OUT.json -> runs every configuration side by side, prints a table
       python3 e2e.py resnet-only / cudf-only SHIM OUT.json -> only those rows of `all`
       python3 e2e.py cold SHIM OUT.json -> cudf_cold bare, on RMM's pool and under cuguard, each a
         fresh process, rounds interleaved (E2E_ROUNDS, 3): from the spawn to the 100th iteration,
         the whole process, and cuguard's bill

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


def _rmm_resource(resource):
    import rmm

    if resource == "ctx":
        # RMM's default resource, with the CUDA context made in the set-up (one cudaMalloc), as
        # the pool resource's first 1 GiB makes it: the loop then starts on a context that exists.
        rmm.DeviceBuffer(size=1)
    elif resource == "pool":
        rmm.mr.set_current_device_resource(
            rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 30)
        )


def cudf_loop(resource, reps=7):
    _rmm_resource(resource)
    import cudf

    checksum = 0
    samples = []
    for rep in range(reps + 1):
        t = time.perf_counter()
        for _ in range(100):
            df = cudf.DataFrame({"a": range(1_000_000)})
            checksum += int(df["a"].sum())
        if rep:  # the first repetition warms up
            samples.append((time.perf_counter() - t) * 1e3 / 100)
    return {"ms_per_iter": statistics.median(samples), "checksum": checksum}


def _since_process_start_ms():
    """Milliseconds since this process started (the kernel's start time, /proc/self/stat)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    start_ticks = int(fields[19])  # field 22: starttime, in clock ticks since boot
    with open("/proc/uptime") as f:
        uptime_s = float(f.read().split()[0])
    return (uptime_s - start_ticks / os.sysconf("SC_CLK_TCK")) * 1e3


def cudf_cold(resource, n=100):
    """The seed's loop from a cold start (issue 23, item 2): the first `n` iterations of a fresh
    process, each timed, with the import and the process's start before them."""
    t0 = time.perf_counter()
    _rmm_resource(resource)
    import cudf

    import_ms = (time.perf_counter() - t0) * 1e3
    started_ms = _since_process_start_ms()
    checksum = 0
    each = []
    for _ in range(n):
        t = time.perf_counter()
        df = cudf.DataFrame({"a": range(1_000_000)})
        checksum += int(df["a"].sum())
        each.append((time.perf_counter() - t) * 1e3)
    # From the parent's spawn (`cold`) to the end of the last iteration: the goal's measure.
    spawned = os.environ.get("E2E_SPAWNED_AT")
    return {
        "spawn_to_last_ms": round((time.time() - float(spawned)) * 1e3, 1) if spawned else None,
        "each_ms": [round(x, 3) for x in each],
        "since_process_start_ms": round(started_ms, 1),
        "import_ms": round(import_ms, 1),
        "first_iter_ms": round(each[0], 3),
        "first_n_ms_per_iter": round(sum(each) / n, 3),
        "after_first_ms_per_iter": round(sum(each[1:]) / (n - 1), 3),
        "first10_ms": [round(x, 3) for x in each[:10]],
        "checksum": checksum,
    }


def cudf_etl(resource, reps=7):
    _rmm_resource(resource)
    import cupy
    import cudf

    n = 10_000_000
    rng = cupy.random.RandomState(0)
    left = cudf.DataFrame({"k": rng.randint(0, 100_000, n), "v": rng.random_sample(n)})
    right = cudf.DataFrame({"k": cupy.arange(100_000), "w": rng.random_sample(100_000)})
    checksum = 0.0
    samples = []
    for rep in range(reps + 1):
        cupy.cuda.runtime.deviceSynchronize()
        t = time.perf_counter()
        g = left.groupby("k").agg({"v": "sum"}).reset_index()
        m = g.merge(right, on="k")
        out = m.sort_values("w")
        total = float(out["v"].sum() + out["w"].sum())
        cupy.cuda.runtime.deviceSynchronize()
        if rep:
            samples.append((time.perf_counter() - t) * 1e3)
        checksum = round(total, 6)
    return {"ms_per_rep": statistics.median(samples), "checksum": checksum}


REPORTS = "/tmp/cuguard-e2e"


def slug(name):
    return "".join(c if c.isalnum() else "_" for c in name)


def run(args, env, name=""):
    e = dict(os.environ)
    e.pop("LD_PRELOAD", None)
    e.update(env)
    if "CUGUARD_REPORT" in e:
        os.makedirs(REPORTS, exist_ok=True)
        e["CUGUARD_REPORT"] = os.path.join(REPORTS, slug(name) + ".%p.json")
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
        "no caching, cuguard pool, fence rule alone, stacks off": {
            **nocache, **quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "1", "CUGUARD_STACK_DEPTH": "0", "CUGUARD_POOL_STREAM_REUSE": "0"},
    }
    rmm_cfgs = {
        "RMM default (cudaMalloc), bare": (["rmm", "default"], {}),
        "RMM default (cudaMalloc), cuguard pool": (["rmm", "default"], {**quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "1", "CUGUARD_STACK_DEPTH": "0"}),
        "RMM default (cudaMalloc), cuguard pool, stacks on": (["rmm", "default"], {**quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "1"}),
        "RMM PoolMemoryResource, bare": (["rmm", "pool"], {}),
        "RMM CudaAsyncMemoryResource, bare": (["rmm", "async"], {}),
    }
    # What a PyTorch user gets: the cache on, cuguard's defaults.
    resnet_cfgs["torch caching allocator, cuguard stacks on"] = {**det, **quiet, "LD_PRELOAD": shim}
    base_shim = os.path.join(os.path.dirname(shim), "baseline", "libcuguard.so")
    if os.path.exists(base_shim):
        # Another build (say the one before a change) beside this one, each in its own process.
        resnet_cfgs["torch caching allocator, baseline cuguard stacks on"] = {**det, **quiet, "LD_PRELOAD": base_shim}
        resnet_cfgs["torch caching allocator, cuguard stacks on, fence rule alone"] = {
            **det, **quiet, "LD_PRELOAD": shim, "CUGUARD_POOL_STREAM_REUSE": "0"}
        resnet_cfgs["no caching, baseline cuguard pool, stacks on"] = {**nocache, **quiet, "LD_PRELOAD": base_shim, "CUGUARD_POOL": "1", "CUGUARD_STACK_DEPTH": "32"}
    cudf_cfgs = {}
    try:
        import cudf  # noqa: F401

        for what in ("cudf_loop", "cudf_etl"):
            cudf_cfgs[f"{what}, RMM default, bare"] = ([what, "default"], {})
            cudf_cfgs[f"{what}, RMM pool resource, bare"] = ([what, "pool"], {})
            cudf_cfgs[f"{what}, RMM default, cuguard pool"] = ([what, "default"], {**quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "1"})
            cudf_cfgs[f"{what}, RMM default, cuguard pool, no thread cache"] = (
                [what, "default"], {**quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "1", "CUGUARD_POOL_THREAD_CACHE": "0"})
            if os.path.exists(base_shim):
                cudf_cfgs[f"{what}, RMM default, baseline cuguard pool"] = ([what, "default"], {**quiet, "LD_PRELOAD": base_shim, "CUGUARD_POOL": "1"})
    except ImportError:
        pass
    rmm_cfgs.update(cudf_cfgs)
    if only == "resnet":
        rmm_cfgs = {}
    elif only == "cudf":
        resnet_cfgs, rmm_cfgs = {}, cudf_cfgs
    results = {k: [] for k in list(resnet_cfgs) + list(rmm_cfgs)}
    losses = {}
    checksums = {}
    for _round in range(rounds):
        for name, env in resnet_cfgs.items():
            r = run(["resnet", "20"], env, name)
            if r:
                results[name].append(r["ms_per_step"])
                losses[name] = r["losses"]
        for name, (args, env) in rmm_cfgs.items():
            r = run(args, env, name)
            if r:
                results[name].append(r.get("us_per_pair") or r.get("ms_per_iter") or r.get("ms_per_rep"))
                if "checksum" in r:
                    checksums.setdefault(name, set()).add(r["checksum"])
    med = {k: (statistics.median(v) if v else None) for k, v in results.items()}
    base = losses.get("no caching, bare driver")
    same = {
        k: (max(abs(a - b) for a, b in zip(v, base)) if base and len(v) == len(base) else None)
        for k, v in losses.items()
    }
    print("| configuration | median | unit | max abs loss difference from the bare no-caching run |")
    print("|---|---|---|---|")
    def unit_of(k):
        if k in resnet_cfgs:
            return "ms/step"
        if k.startswith("cudf_loop"):
            return "ms per iteration"
        if k.startswith("cudf_etl"):
            return "ms per repetition"
        return "µs per 1 MiB DeviceBuffer"

    for k, v in med.items():
        unit = unit_of(k)
        if k in resnet_cfgs:
            eq = same.get(k, "")
        elif k in checksums:
            bare = checksums.get(k.split(",")[0] + ", RMM default, bare")
            eq = f"checksums {sorted(checksums[k])}" + (" = bare" if bare and checksums[k] == bare else " DIFFER from bare")
        else:
            eq = ""
        print(f"| {k} | {v:.3f} | {unit} | {eq} |" if v is not None else f"| {k} | failed | {unit} | |")
    def ratio(a, b):
        return med[a] / med[b] if med.get(a) and med.get(b) else float("nan")
    print()
    print("| ratio | value |")
    print("|---|---|")
    print(f"| resnet18 step, cuguard pool (stacks off) / torch caching allocator | {ratio('no caching, cuguard pool, stacks off', 'torch caching allocator'):.2f} |")
    print(f"| resnet18 step, cuguard pool, fence rule alone (stacks off) / torch caching allocator | {ratio('no caching, cuguard pool, fence rule alone, stacks off', 'torch caching allocator'):.2f} |")
    print(f"| resnet18 step, cuguard pool stacks on / stacks off | {ratio('no caching, cuguard pool, stacks on', 'no caching, cuguard pool, stacks off'):.3f} |")
    print(f"| resnet18 step, no caching bare / cuguard pool | {ratio('no caching, bare driver', 'no caching, cuguard pool, stacks off'):.2f} |")
    if os.path.exists(base_shim):
        print(f"| resnet18 step, caching on, cuguard stacks on: this build / baseline | {ratio('torch caching allocator, cuguard stacks on', 'torch caching allocator, baseline cuguard stacks on'):.3f} |")
        print(f"| resnet18 step, no caching, cuguard pool stacks on: this build / baseline | {ratio('no caching, cuguard pool, stacks on', 'no caching, baseline cuguard pool, stacks on'):.3f} |")
        print(f"| resnet18 step, caching on: cuguard stacks on / bare | {ratio('torch caching allocator, cuguard stacks on', 'torch caching allocator'):.3f} |")
        print(f"| resnet18 step, caching on, cuguard stacks on: stream reuse on / off | {ratio('torch caching allocator, cuguard stacks on', 'torch caching allocator, cuguard stacks on, fence rule alone'):.3f} |")
    print(f"| RMM 1 MiB DeviceBuffer, default+cuguard pool / RMM pool resource | {ratio('RMM default (cudaMalloc), cuguard pool', 'RMM PoolMemoryResource, bare'):.2f} |")
    for what in ("cudf_loop", "cudf_etl"):
        if f"{what}, RMM default, bare" in med:
            print(f"| {what}: cuguard pool / RMM pool resource | {ratio(what + ', RMM default, cuguard pool', what + ', RMM pool resource, bare'):.2f} |")
            print(f"| {what}: cuguard pool / bare | {ratio(what + ', RMM default, cuguard pool', what + ', RMM default, bare'):.2f} |")
            print(f"| {what}: cuguard pool, thread cache on / off | {ratio(what + ', RMM default, cuguard pool', what + ', RMM default, cuguard pool, no thread cache'):.2f} |")
    # The shim's own bill (the report's `cost`), per tracked allocation, from each configuration's
    # last report: the stack-capture goal measured directly.
    import glob

    print()
    print("| configuration (cuguard's own bill, last report) | allocations | hooks per allocation | native stacks per capture | Python frames per capture | cuguard's memory |")
    print("|---|---|---|---|---|---|")
    bills = {}
    for name in list(resnet_cfgs) + list(rmm_cfgs):
        files = sorted(glob.glob(os.path.join(REPORTS, slug(name) + ".*.json")), key=os.path.getmtime)
        if not files:
            continue
        try:
            cost = json.load(open(files[-1])).get("cost")
        except Exception:
            cost = None
        if not cost:
            continue
        # Per allocation, parts included, so that no part reads larger than its whole (the
        # parts are within the hooks' time since the bill adds up).
        per = lambda part: (cost[part]["ns"] / cost["hooks"]["calls"] / 1e3) if cost.get(part, {}).get("calls") and cost["hooks"]["calls"] else None
        fmt = lambda v: f"{v:.2f} µs" if v is not None else "-"
        bills[name] = cost
        print(f"| {name} | {cost['hooks']['calls']} | {fmt(per('hooks'))} | {fmt(per('stacks'))} | {fmt(per('python'))} | {cost.get('heap_bytes', 0) / 1048576:.1f} MiB |")
    json.dump({"medians": med, "rounds": results, "losses_equal": same, "losses": losses, "bills": bills,
               "checksums": {k: sorted(v) for k, v in checksums.items()}}, open(out_path, "w"))


def cold_configs(shim, out_path, rounds=3):
    """The seed's loop from a cold start (issue 23, item 2), each configuration a fresh process,
    rounds interleaved: from the spawn to the end of the 100th iteration (the goal), the whole
    process (its exit and report included), and cuguard's bill from each report."""
    gpu = os.path.dirname(shim)
    cmd = [sys.executable, __file__, "cudf_cold"]
    quiet = {"CUGUARD_QUIET": "1", "CUGUARD_REPORT": "x"}
    cfgs = {
        "RMM default (cudaMalloc), bare": (cmd + ["default"], {}),
        "RMM pool resource (1 GiB up front), bare": (cmd + ["pool"], {}),
        "cuguard run (pool, stacks on: the defaults)": (
            [os.path.join(gpu, "cuguard"), "run", "--report", "x", "--"] + cmd + ["default"], {}),
        "cuguard by LD_PRELOAD (the defaults)": (cmd + ["default"], {**quiet, "LD_PRELOAD": shim}),
        "cuguard by LD_PRELOAD, stacks off": (cmd + ["default"], {**quiet, "LD_PRELOAD": shim, "CUGUARD_STACK_DEPTH": "0"}),
        "cuguard by LD_PRELOAD, pool off": (cmd + ["default"], {**quiet, "LD_PRELOAD": shim, "CUGUARD_POOL": "0"}),
        # The context made before the loop, as RMM's pool resource makes it: where its 300 ms go.
        "RMM default, context made in the set-up, bare": (cmd + ["ctx"], {}),
        "cuguard run, context made in the set-up": (
            [os.path.join(gpu, "cuguard"), "run", "--report", "x", "--"] + cmd + ["ctx"], {}),
    }
    base_shim = os.path.join(gpu, "baseline", "libcuguard.so")
    if os.path.exists(base_shim):
        cfgs["baseline cuguard by LD_PRELOAD (the defaults)"] = (cmd + ["default"], {**quiet, "LD_PRELOAD": base_shim})
    os.makedirs(REPORTS, exist_ok=True)
    rows = {k: [] for k in cfgs}
    for rnd in range(rounds):
        for name, (args, env) in cfgs.items():
            e = dict(os.environ)
            e.pop("LD_PRELOAD", None)
            e.update(env)
            report = os.path.join(REPORTS, f"cold-{slug(name)}-{rnd}.json")
            args = [report if a == "x" else a for a in args]
            if "CUGUARD_REPORT" in e:
                e["CUGUARD_REPORT"] = report
            e["E2E_SPAWNED_AT"] = repr(time.time())
            t = time.perf_counter()
            out = subprocess.run(args, env=e, capture_output=True, text=True, timeout=600)
            whole = (time.perf_counter() - t) * 1e3
            r = next((json.loads(l) for l in reversed(out.stdout.splitlines()) if l.startswith("{")), None)
            if r is None:
                sys.stderr.write(f"{name}: exit {out.returncode}\n{out.stderr[-3000:]}\n")
                continue
            r["whole_ms"] = round(whole, 1)
            try:
                r["cost"] = json.load(open(report)).get("cost")
            except Exception:
                r["cost"] = None
            rows[name].append(r)
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    bare = {r["checksum"] for r in rows["RMM default (cudaMalloc), bare"]}
    print("| configuration | spawn to the 100th iteration's end, ms (median; each round) | whole process, ms | import, ms | first iteration, ms | iterations 2-100, ms each | checksums |")
    print("|---|---|---|---|---|---|---|")
    for name, rs in rows.items():
        if not rs:
            print(f"| {name} | failed | | | | | |")
            continue
        goal = [r["spawn_to_last_ms"] for r in rs]
        sums = {r["checksum"] for r in rs}
        print(f"| {name} | {med(goal):.0f} ({', '.join(f'{g:.0f}' for g in goal)}) | {med([r['whole_ms'] for r in rs]):.0f} "
              f"| {med([r['import_ms'] for r in rs]):.0f} | {med([r['first_iter_ms'] for r in rs]):.1f} "
              f"| {med([r['after_first_ms_per_iter'] for r in rs]):.3f} | {'= bare' if sums == bare else sorted(sums)} |")
    print()
    print("| configuration (cuguard's bill, median over rounds) | hooks, ms | of which stacks | Python frames | once, ms | frames unwound | rules evaluated (ms) | pool chunks (MiB, ms) | report writing, ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rs in rows.items():
        cs = [r["cost"] for r in rs if r.get("cost")]
        if not cs:
            continue
        g = lambda f: med([f(c) for c in cs])
        uw = lambda k: g(lambda c: (c.get("unwind") or {}).get(k, 0))
        pg = lambda k: g(lambda c: (c.get("pool_growth") or {}).get(k, 0))
        print(f"| {name} | {g(lambda c: c['hooks']['ns']) / 1e6:.1f} | {g(lambda c: c['stacks']['ns']) / 1e6:.1f} | {g(lambda c: c['python']['ns']) / 1e6:.1f} "
              f"| {g(lambda c: (c.get('one_time') or {}).get('ns', 0)) / 1e6:.1f} | {uw('frames'):.0f} | {uw('evaluated'):.0f} ({uw('evaluated_ns') / 1e6:.1f}) "
              f"| {pg('chunks'):.0f} ({pg('bytes') / 1048576:.0f} MiB, {pg('ns') / 1e6:.1f}) | {g(lambda c: c['reports']['ns']) / 1e6:.1f} |")
    json.dump(rows, open(out_path, "w"))


def main():
    what = sys.argv[1]
    if what == "resnet":
        print(json.dumps(resnet(int(sys.argv[2]) if len(sys.argv) > 2 else 20)))
    elif what == "rmm":
        print(json.dumps(rmm_loop(sys.argv[2])))
    elif what == "cudf_loop":
        print(json.dumps(cudf_loop(sys.argv[2])))
    elif what == "cudf_cold":
        print(json.dumps(cudf_cold(sys.argv[2])))
    elif what == "cudf_etl":
        print(json.dumps(cudf_etl(sys.argv[2])))
    elif what == "all":
        all_configs(sys.argv[2], sys.argv[3], rounds=int(os.environ.get("E2E_ROUNDS", "2")))
    elif what == "cold":
        cold_configs(sys.argv[2], sys.argv[3], rounds=int(os.environ.get("E2E_ROUNDS", "3")))
    elif what == "cudf-only":
        all_configs(sys.argv[2], sys.argv[3], only="cudf", rounds=int(os.environ.get("E2E_ROUNDS", "1")))
    elif what == "resnet-only":
        all_configs(sys.argv[2], sys.argv[3], only="resnet", rounds=int(os.environ.get("E2E_ROUNDS", "1")))


if __name__ == "__main__":
    main()
