"""Judges what distributed.sh left in its directory and prints docs/compatibility.md's rows (issue 12).

Usage: python3 distributed_check.py DIR
"""

import json
import os
import sys

GiB = 1 << 30
D = sys.argv[1]
rows = []


def read(*p, default=""):
    try:
        with open(os.path.join(D, *p)) as f:
            return f.read()
    except OSError:
        return default


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def row(name, ok, what):
    rows.append(f"| {name} | {'PASS' if ok else 'FAIL'} | {what} |")


def losses(variant):
    out = {}
    for r in (0, 1):
        try:
            out[r] = json.loads(read("torch", variant, f"losses.rank{r}.json"))["losses"]
        except ValueError:
            out[r] = None
    return out


def tail(text, n=3):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " / ".join(l.strip()[:140] for l in lines[-n:]).replace("|", "\\|")


if os.path.isdir(os.path.join(D, "torch")):
    plain = losses("plain")
    ok = read("torch", "plain.rc").strip() == "0" and all(plain.values())
    row("torchrun plain, 2 gloo ranks on GPU 0", ok,
        f"rc {read('torch', 'plain.rc').strip()}, {len(plain[0] or [])} steps per rank; " + ("" if ok else tail(read("torch", "plain.log"))))
    for v, what in (("outer", "`cuguard run -- torchrun`"), ("outer-pool0", "`cuguard run -- torchrun`, CUGUARD_POOL=0"),
                    ("inner", "`torchrun -m cuguard run --`")):
        rc = read("torch", f"{v}.rc").strip()
        got = losses(v)
        same = all(got[r] is not None and got[r] == plain[r] for r in (0, 1))
        try:
            merged = json.loads(read("torch", f"{v}.merged.json"))
            procs = merged["processes"]
        except (ValueError, KeyError):
            merged, procs = None, []
        def rank(p):
            pr = p["process"]
            return pr.get("rank") if pr.get("rank") is not None else pr.get("labels", {}).get("RANK")
        ranks = [rank(p) for p in procs]
        labelled = sorted(str(r) for r in ranks if r is not None)
        labels = [p["process"].get("labels", {}) for p in procs if rank(p) is not None]
        ok = rc == "0" and same and labelled == ["0", "1"] and (merged or {}).get("merged", {}).get("by") == "rank"
        summ = read("torch", f"{v}.summary.txt")
        first = summ.strip().splitlines()[0] if summ.strip() else "(no summary)"
        keys = sorted({k for l in labels for k in l})
        row(f"torchrun {what}", ok,
            f"rc {rc}; losses {'identical to plain (60 steps × 2 ranks, exact)' if same else 'DIFFER'}; "
            f"{len(procs)} reports merged (ranks {labelled}, labels {keys}); summary: {first}; "
            f"check rc {read('torch', f'{v}.check.rc').strip()}" + ("" if ok else "; " + tail(read("torch", f"{v}.log"))))

if os.path.isdir(os.path.join(D, "limit")):
    for c in ("torch", "rmm", "nvml"):
        for suffix, virt in (("", True), (".novirt", False)):
            got = last_json(read("limit", f"{c}{suffix}.out"))
            rc = read("limit", f"{c}{suffix}.rc").strip()
            name = f"CUGUARD_LIMIT=4GiB, {c}" + ("" if virt else ", CUGUARD_LIMIT_VIRTUAL=0")
            err = read("limit", f"{c}{suffix}.err")
            if c == "rmm" and not virt:
                # Enforcement only: RMM sizes its pool from the device's real free memory, and the
                # limit refuses it.
                refused = rc != "0" and "MemoryError" in err and "1 alloc failed" in err
                row(name, refused, "RMM's default pool asks half of the device's real free memory; the limit "
                    "refuses it: " + tail(err, 2))
                continue
            if not got:
                row(name, False, f"rc {rc}: " + tail(read("limit", f"{c}{suffix}.err")))
                continue
            total = got.get("total")
            if virt:
                ok = total == 4 * GiB and 0 <= got.get("free", -1) <= 4 * GiB
            else:
                ok = total is not None and total > 100 * GiB
            if c in ("torch", "rmm"):
                ok = ok and got.get("oom") is not None
            if c == "rmm" and virt:
                ok = ok and got["pool"] <= 4 * GiB
            got["total_GiB"] = round(total / GiB, 2) if total else None
            row(name, ok, "`" + json.dumps(got) + "`")
    bare = last_json(read("limit", "nvml.bare.out"))
    if bare:
        row("NVML without the shim (reference)", True, f"total {bare['total'] / GiB:.2f} GiB, free {bare['free'] / GiB:.2f} GiB")

def judge_dask(part, mode, what):
    rc = read(part, f"{mode}.rc").strip()
    got = last_json(read(part, f"{mode}.out"))
    if not got:
        row(f"dask-cuda: {what}", False, f"rc {rc}: " + tail(read(part, f"{mode}.err"), 4))
        return
    ws = list(got.get("workers", {}).values())
    ok = rc == "0" and len(ws) == 1 and all(
        w["under_shim"] and isinstance(w["pool_size"], int) and 0 < w["pool_size"] <= 8 * GiB for w in ws
    ) and got.get("work_bytes") == 8 * (256 << 20)
    row(f"dask-cuda: {what}", ok, "`" + json.dumps(got) + "`")


if os.path.isdir(os.path.join(D, "dask")):
    for mode, what in (("dask_cuda", "LocalCUDACluster(rmm_pool_size=0.5) + register(limit=8GiB)"),
                       ("rmm", "LocalCUDACluster + register(limit=8GiB), RMM pool = 50% of free"),
                       ("whole", "`CUGUARD_LIMIT=8GiB cuguard run -- python3 …` (client too), rmm_pool_size=0.5")):
        judge_dask("dask", mode, what)
    summ = read("dask", "summary.txt")
    row("dask-cuda: worker reports merged --by worker", bool(summ.strip()) and "worker" in summ,
        tail(summ, 6) if summ.strip() else tail(read("dask", "merge.log")))

if os.path.isdir(os.path.join(D, "daskcli")):
    judge_dask("daskcli", "cli", "`dask cuda worker --rmm-pool-size 0.5` started by hand + register(limit=8GiB)")

print("| check | result | what was seen |")
print("|---|---|---|")
print("\n".join(rows))
print()
print("```")
print(read("versions.txt").strip())
print("```")
sys.exit(0 if all("| PASS |" in r for r in rows) else 1)
