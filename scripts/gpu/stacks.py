"""Issue 21 item 5 on the real GPU: stacks users can read. Run by scripts/gpu/stacks.sh.

  python3 stacks.py torch SNAPSHOT        the workload, under the shim (see stacks.sh): a small
                                          PyTorch training loop with the cache off
                                          (PYTORCH_NO_CUDA_MEMORY_CACHING=1), cuguard's origin
                                          wrapper installed; while its tensors and gradients are
                                          alive it writes the report to SNAPSHOT
  python3 stacks.py judge SUMMARY_JSON    what `cuguard summary --format json` says of it, as a
                                          Markdown table; exit 1 when a row fails

What must hold:
- the autograd thread's sites name the line that called backward() (`…, backward from
  stacks.py:N`, N the line marked `# backward`);
- the main thread's PyTorch sites have one-line stacks that fold ATen's frames (`… N frames in
  libtorch…`) and reach this file's lines within the budget (no trailing `…` before them).
"""

import json
import sys


def torch_case(snapshot):
    import torch

    import cuguard
    from cuguard import _origin

    print("origin installed", _origin.install_torch(torch), flush=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    ).cuda()
    kept = [torch.ones(1 << 18, device="cuda")]  # kept
    for _ in range(3):
        x = torch.randn(64, 512, device="cuda")
        loss = model(x).square().mean()
        loss.backward()  # backward
    torch.cuda.synchronize()
    cuguard.snapshot(snapshot)  # the gradients and `kept` are alive here, not at exit
    print("done", len(kept), flush=True)


def line_of(marker):
    for n, line in enumerate(open(__file__).read().splitlines(), 1):
        if line.rstrip().endswith(f"# {marker}"):
            return n
    raise SystemExit(f"no {marker}")


def judge(path):
    s = json.load(open(path))
    sites = [site for p in s["processes"] for site in p["sites"]]
    rows = []
    backward = f"backward from stacks.py:{line_of('backward')}"
    autograd = [x for x in sites if x["label"].startswith("on the autograd thread:")]
    rows.append(("autograd-thread sites exist", bool(autograd), f"{len(autograd)} sites"))
    rows.append((
        "each names the backward() line",
        bool(autograd) and all(x["label"].endswith(backward) for x in autograd),
        "; ".join(x["label"] for x in autograd[:3]),
    ))
    kept = [x for x in sites if x["label"].endswith(f"(stacks.py:{line_of('kept')})")]
    chain = kept[0]["stack"] if kept else []
    rows.append(("the kept tensor's site is its line", bool(kept), kept[0]["label"] if kept else "missing"))
    rows.append((
        "its one-line stack folds ATen and reaches the user's lines",
        any(e.startswith("… ") and "frames in" in e for e in chain)
        and any("stacks.py:" in e for e in chain) and chain[-1] != "…",
        " ← ".join(chain),
    ))
    print("| check | ok | detail |\n|---|---|---|")
    for what, ok, detail in rows:
        print(f"| {what} | {'yes' if ok else '**NO**'} | {detail.replace('|', '/')} |")
    return all(ok for _, ok, _ in rows)


if __name__ == "__main__":
    if sys.argv[1] == "torch":
        torch_case(sys.argv[2])
    elif sys.argv[1] == "judge":
        sys.exit(0 if judge(sys.argv[2]) else 1)
