"""Judges the attribution runs (issue 10): reads each report and runs `cuguard` on it as a user would.

Usage: python3 attribution_check.py DIR CUGUARD

DIR holds, per case, CASE.json (the report), CASE.out (the case's stdout; its last JSON line says
what it did and which lines of attribution.py the report must name) and CASE.err. CUGUARD is the
command. Prints a markdown table, one row per check, and exits 1 if any check failed.
"""

import json
import os
import re
import subprocess
import sys

MiB = 1 << 20
ROWS = []


def row(case, what, ok, detail=""):
    ROWS.append((case, what, "PASS" if ok else "FAIL", str(detail).replace("|", "\\|").replace("\n", " ")[:300]))


def last_json(path):
    try:
        for line in reversed(open(path).read().splitlines()):
            if line.startswith("{"):
                return json.loads(line)
    except (OSError, ValueError):
        pass
    return None


def cli(*args):
    p = subprocess.run([CUGUARD, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def section(text, heading):
    """The lines under a summary heading (a line starting with it), up to the next unindented line."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith(heading):
            inside = True
            out.append(line)
        elif inside and line.strip() and not line.startswith((" ", "\t")):
            inside = False
        elif inside:
            out.append(line)
    return "\n".join(out)


def site_of(report, stack_id):
    """(function, file:line) of a stack's site, Python or native."""
    for s in report.get("stacks", []):
        if s["id"] == stack_id and s.get("site"):
            site = s["site"]
            f = (s["python"] if site["in"] == "python" else s["frames"])[site["index"]]
            return f.get("function") or "", f"{os.path.basename(f.get('file') or '?')}:{f.get('line')}"
    return "", "?"


def leaked(report, owner=None):
    return sum(l["size"] for l in report["leaks"] if owner is None or l.get("owner") == owner)


def reconciliation(case, report):
    for r in report.get("reconciliation", []):
        e = r["explained"]
        explained = sum(e.values())
        used = r.get("process_used_bytes")
        if used:
            share = explained / used
            note = r.get("unexplained_note")
            row(case, f"reconciliation, device {r['device']}: cuguard explains ≥ 95% of NVML's use, or says why not",
                share >= 0.95 or bool(note),
                f"{explained / MiB:.1f} of {used / MiB:.1f} MiB ({share:.1%}); {e}" + (f"; why: {note}" if note else ""))
        else:
            row(case, f"reconciliation, device {r['device']}: NVML's use, or why not", bool(r.get("process_used_note")),
                r.get("process_used_note"))


def warm_up_is_not_growth(case, path, summary):
    """Issue 21: PyTorch's cache filled in the first step, then held, is set-up, not growth."""
    grow = section(summary, "growing")
    row(case, "no growth (warm-up is set-up)", not grow, grow[:300])
    args = ["check", "--owners", "framework_cache", "--max-leaked-bytes", "64GiB", "--max-growth", "256MiB", path]
    rc, out = cli(*args)
    row(case, "`check --owners framework_cache --max-leaked-bytes 64GiB --max-growth 256MiB` passes",
        rc == 0 and "grew" not in out, out.strip()[-300:])
    try:
        samples = json.load(open(path)).get("stack_samples") or {}
        times = samples.get("times_ms") or []
        row(case, "sampled over the run (for the record)", len(times) >= 10,
            f"{len(times)} samples, {times[0] if times else '?'}-{times[-1] if times else '?'} ms, "
            f"interval {samples.get('interval_ms')} ms")
    except (OSError, ValueError) as e:
        row(case, "sampled over the run (for the record)", False, e)


def main():
    d = sys.argv[1]
    cases = sorted(f[:-5] for f in os.listdir(d) if f.endswith(".json"))
    for case in cases:
        path = os.path.join(d, case + ".json")
        did = last_json(os.path.join(d, case + ".out")) or {}
        marks = did.get("marks", {})
        try:
            report = json.load(open(path))
        except (OSError, ValueError) as e:
            row(case, "a report", False, e)
            continue
        row(case, "a complete report", report.get("complete") and report.get("reason") in ("exit", "oom"),
            f"reason {report.get('reason')}, complete {report.get('complete')}")
        rc, summary = cli("summary", path)
        open(os.path.join(d, case + ".summary.txt"), "w").write(summary)
        owners = {}
        for l in report["leaks"]:
            owners[l.get("owner")] = owners.get(l.get("owner"), 0) + l["size"]
        owner_text = ", ".join(f"{k}: {v / MiB:.1f} MiB" for k, v in sorted(owners.items(), key=lambda kv: -kv[1]))

        if case == "torch_train_cached":
            row(case, "cache under PyTorch's caching allocator", owners.get("pytorch_caching_allocator", 0) > 0
                and "PyTorch's caching allocator" in summary, owner_text)
            row(case, "no leak of the program's own", leaked(report, "program") == 0, owner_text)
            rc, out = cli("check", path)
            row(case, "`cuguard check` passes", rc == 0, out.strip().splitlines()[-1] if out.strip() else rc)
            warm_up_is_not_growth(case, path, summary)
        elif case in ("gpt2_train_cached", "resnet18_train_cached"):
            row(case, "cache under PyTorch's caching allocator", owners.get("pytorch_caching_allocator", 0) > 0,
                owner_text)
            warm_up_is_not_growth(case, path, summary)
        elif case == "torch_train_growth":
            line = f"attribution.py:{marks.get('grows')}"
            rc, out = cli("check", "--max-growth", "16MiB", path)
            row(case, f"`check --max-growth 16MiB` fails naming {line}", rc == 1 and line in out, out.strip()[-300:])
            grow = section(summary, "growing")
            row(case, f"summary's growing section names {line}", line in grow, grow[:300])
            row(case, "the list is no leak at exit", leaked(report, "program") < 4 * MiB, owner_text)
        elif case == "torch_train_autograd":
            sites = [site_of(report, l.get("stack")) for l in report["leaks"]]
            backward = [s for s in sites if "Backward" in s[0]]
            allocator = [s for s in sites if "CachingAllocator" in s[0]]
            row(case, "gradients charged to backward nodes", len(backward) > 0 and not allocator,
                f"{len(backward)} of {len(sites)} leaks at backward nodes, e.g. {backward[:2]}; at the allocator: {len(allocator)}")
            view = os.path.join(d, case + ".html")
            rc, out = cli("view", path, "-o", view)
            html = open(view).read() if os.path.exists(view) else ""
            row(case, "the flame graph shows Python functions, not the interpreter's",
                rc == 0 and "train (attribution.py" in html and "_PyEval_EvalFrameDefault" not in html,
                f"view exit {rc}; 'train (attribution.py' in page: {'train (attribution.py' in html}; "
                f"_PyEval_EvalFrameDefault in page: {'_PyEval_EvalFrameDefault' in html}")
        elif case == "torch_oom":
            line = f"attribution.py:{marks.get('oom')}"
            ooms = report.get("ooms", [])
            where = [site_of(report, o.get("stack"))[1] for o in ooms]
            row(case, f"an OOM record naming {line}", did.get("error") == "OutOfMemoryError" and line in where,
                f"program saw {did.get('error')}; {len(ooms)} records at {where[:3]}")
            oom = section(summary, "out of memory")
            row(case, f"summary's out-of-memory section names {line}", line in oom, oom[:300])
            err = open(os.path.join(d, case + ".err")).read()
            said = [l for l in err.splitlines() if l.startswith("cuguard: out of memory")]
            row(case, "one stderr line", len(said) == 1 and line in said[0], said[:2])
        elif case in ("cupy_pool", "rmm_pool", "jax_bfc"):
            want = {"cupy_pool": "cupy_memory_pool", "rmm_pool": "rmm_pool", "jax_bfc": "xla_bfc_allocator"}[case]
            label = {o["id"]: o["label"] for o in report.get("owners", [])}.get(want, want)
            row(case, f"memory under {want}", owners.get(want, 0) > 0 and label in summary, owner_text)
        elif case == "cudf_loop":
            line = f"attribution.py:{marks.get('loop')}"
            grow = section(summary, "growing")
            row(case, "no growth", not grow, grow[:300])
            peak = section(summary, "at the peak")
            row(case, f"the peak breakdown names {line}", line in peak, peak[:300])
            pinned = sum(l["size"] for l in report["leaks"] if l.get("memory") == "host_pinned")
            pinned_rmm = sum(l["size"] for l in report["leaks"]
                             if l.get("memory") == "host_pinned" and l.get("owner") == "rmm_pinned_host_pool")
            row(case, "RMM's pinned host memory under RMM's owner", pinned_rmm >= 64 * MiB and pinned_rmm == pinned,
                f"{pinned_rmm / MiB:.1f} of {pinned / MiB:.1f} MiB pinned under rmm_pinned_host_pool; {owner_text}")
            row(case, "no leak of the program's own", leaked(report, "program") == 0, owner_text)
        reconciliation(case, report)

    print("| case | check | result | detail |")
    print("|---|---|---|---|")
    for r in ROWS:
        print("| " + " | ".join(r) + " |")
    return 0 if all(r[2] == "PASS" for r in ROWS) else 1


if __name__ == "__main__":
    CUGUARD = sys.argv[2]
    sys.exit(main())
