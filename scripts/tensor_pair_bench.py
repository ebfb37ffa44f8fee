"""tensor_pair_bench.py: what cuguard's hook on PyTorch's tensor blocks
(c10::reportMemoryUsageToProfiler, shim/src/hooks/torch_blocks.rs) adds to a tensor's
allocate-and-free pair (issue 54: at most 1 us), told from noise. Run by
scripts/tensor-pair-bench.sh, which builds the stand-ins; see there for the options.

The pair is the stand-in caching allocator's (harness/workloads/c/c10_cuda_stand_in.cc):
stand_in_alloc then stand_in_free of a 512-byte block, each reported to c10's call, from a
Python loop through ctypes a few Python frames deep (ctypes releases the GIL, as PyTorch's
bindings do, and the shim's own frame reader reads those frames).

Every configuration is a child process pinned to one core (as scripts/gpu/torch_blocks.sh pins
PyTorch's pairs): the shim's history writer shares that core, and its work on each event is
part of what a pair costs. Each round runs every configuration once, in an order shuffled anew
every round (fixed seed); the first round is a warm-up, discarded. A child warms up (a quarter
of BATCHES batches of PAIRS pairs, and at least half a second), times the other three quarters
and gives their median ns per pair, and the CPU time those batches took a pair: its own
thread's (the program's and the hook's) and its other threads' (the shim's: the history's
writer). The figures are medians over the counted rounds with their interquartile range;
"added" is a configuration's time less the untracked one's of the same round, and the A/B
difference (after - before) is shown beside the A/A control's (after - after@control, the same
binary run twice): a difference no larger than the control's is none.

    python3 tensor_pair_bench.py --child LIBC10_CUDA PAIRS BATCHES    (one child)
"""

import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SIZE = 512
WARM_UP_NS = 500_000_000


def thread_cpu_ns():
    """CPU time so far of each of this process's threads, by thread id: (name, ns). A thread's
    CPU clock is the clock id the kernel derives from its id (MAKE_THREAD_CPUCLOCK)."""
    out = {}
    for t in os.listdir("/proc/self/task"):
        tid = int(t)
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                name = f.read().strip()
            out[tid] = (name, time.clock_gettime_ns(((~tid) << 3) | 6))
        except OSError:
            pass
    return out


def child(cuda_so, pairs, batches):
    cuda = ctypes.CDLL(cuda_so)
    cuda.stand_in_alloc.restype = ctypes.c_ulonglong
    cuda.stand_in_alloc.argtypes = [ctypes.c_size_t]
    cuda.stand_in_free.argtypes = [ctypes.c_ulonglong]
    alloc, free = cuda.stand_in_alloc, cuda.stand_in_free
    clock = time.perf_counter_ns

    def pairs_of(n):
        # The loop a training step's tensors come from: a few frames below the module's.
        t0 = clock()
        for _ in range(n):
            p = alloc(SIZE)
            free(p)
        return clock() - t0

    def layer(n):
        return pairs_of(n)

    def step(n):
        return layer(n)

    # One block kept throughout, so the segment stays and each pair is the same block's.
    keep = alloc(SIZE)
    # Warm-up: a quarter of the batches, and at least WARM_UP_NS (the shim's start-up work on
    # its own threads, some 50 ms of CPU after the first block, is over by then).
    t0 = clock()
    warm = 0
    while warm < batches // 4 or clock() - t0 < WARM_UP_NS:
        step(pairs)
        warm += 1
    cpu0 = thread_cpu_ns()
    per_pair = [step(pairs) / pairs for _ in range(batches - batches // 4)]
    cpu1 = thread_cpu_ns()
    free(keep)
    me = threading.get_native_id()
    n = pairs * len(per_pair)
    spent = {t: (name, (v - cpu0.get(t, (name, 0))[1]) / n) for t, (name, v) in cpu1.items()}
    print(json.dumps({
        "ns_per_pair": statistics.median(per_pair),
        "cpu_own": spent[me][1],
        "cpu_others": sum(v for t, (_, v) in spent.items() if t != me),
        "threads": {name: v for t, (name, v) in spent.items() if t != me},
    }))


def quartiles(xs):
    xs = sorted(xs)
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def show(name, xs):
    lo, mid, hi = quartiles(xs)
    return f"{name:<28} {mid:8.1f} ns  IQR {lo:8.1f} .. {hi:8.1f}  (n={len(xs)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuda-so", required=True)
    ap.add_argument("--sim-dir", required=True)
    ap.add_argument("--after", required=True, help="this build's libcuguard.so")
    ap.add_argument("--before", help="another build's libcuguard.so")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--batches", type=int, default=12)
    ap.add_argument("--core", type=int, default=max(os.sched_getaffinity(0)))
    ap.add_argument("--seed", type=int, default=54)
    ap.add_argument("--json")
    a = ap.parse_args()

    configs = {"untracked": None, "after": a.after, "after@control": a.after}
    if a.before:
        configs["before"] = a.before
    scratch = tempfile.mkdtemp(prefix="tensor-pair-bench-")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("CUGUARD_")}
    base_env.pop("LD_PRELOAD", None)
    base_env["LD_LIBRARY_PATH"] = a.sim_dir
    base_env["PYTHONDONTWRITEBYTECODE"] = "1"

    def run(name, shim):
        env = dict(base_env)
        if shim:
            env["LD_PRELOAD"] = shim
            env["CUGUARD_REPORT"] = os.path.join(scratch, f"{name}.json")
            env["CUGUARD_RUNTIME_DIR"] = os.path.join(scratch, "runtime")
        out = subprocess.run(
            ["taskset", "-c", str(a.core), sys.executable, os.path.abspath(__file__),
             "--child", a.cuda_so, str(a.pairs), str(a.batches)],
            env=env, check=True, capture_output=True, text=True,
        )
        return json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])

    rng = random.Random(a.seed)
    got = {n: [] for n in configs}
    print(f"tensor-pair-bench: {os.uname().nodename}, core {a.core}, {a.rounds} counted rounds "
          f"(+1 warm-up), {a.batches} batches of {a.pairs} pairs a child")
    for r in range(a.rounds + 1):
        order = list(configs)
        rng.shuffle(order)
        for name in order:
            res = run(name, configs[name])
            if r > 0:
                got[name].append(res)
        if r > 0:
            print(f"  round {r}: " + ", ".join(
                f"{n} {got[n][-1]['ns_per_pair']:.0f}" for n in configs), flush=True)

    per = {n: [g["ns_per_pair"] for g in got[n]] for n in configs}
    own = {n: [g["cpu_own"] for g in got[n]] for n in configs}
    writer = {n: [g["threads"].get("cuguard-history", 0.0) for g in got[n]] for n in configs}
    rest = {n: [g["cpu_others"] - w for g, w in zip(got[n], writer[n])] for n in configs}
    shimmed = [n for n in configs if configs[n]]

    def less_untracked(xs):
        return {n: [x - u for x, u in zip(xs[n], xs["untracked"])] for n in shimmed}

    added, added_own = less_untracked(per), less_untracked(own)
    print("\nns a pair (alloc + free), wall clock:")
    for n in configs:
        print("  " + show(n, per[n]))
    print("ns added a pair (less untracked, same round), wall clock:")
    for n in shimmed:
        print("  " + show(n, added[n]))
    print("of it, CPU time a pair: the program's thread (the hook; less untracked's), the "
          "history's writer (cuguard-history), the shim's other threads, all on the same core:")
    for n in shimmed:
        print("  " + show(n + " hook", added_own[n]))
        print("  " + show(n + " writer", writer[n]))
        print("  " + show(n + " other threads", rest[n]))
    print("differences (same round), wall clock:")
    aa = [x - y for x, y in zip(per["after"], per["after@control"])]
    print("  " + show("A/A after - after@control", aa))
    result = {"runs": got, "added": added, "added_own": added_own, "aa": aa}
    if a.before:
        ab = [x - y for x, y in zip(per["after"], per["before"])]
        print("  " + show("A/B after - before", ab))
        ab_m, aa_q = statistics.median(ab), quartiles([abs(x) for x in aa])[2]
        told = "within the control's: none" if abs(ab_m) <= aa_q else "beyond the control's"
        print(f"  A/B median {ab_m:+.1f} ns against the A/A's |upper quartile| {aa_q:.1f} ns: {told}")
        result["ab"] = ab
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
