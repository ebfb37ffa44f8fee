"""Judges the live-watching run (issue 15): a PyTorch training run under the shim, watched with
`cuguard top --once` and the exporter while it ran, then stopped with SIGINT.

Usage: python3 live_check.py DIR BARE_RC

DIR holds watched.pid, top1.txt/top2.txt (two frames, seconds apart), metrics1.txt/metrics2.txt
(two scrapes), watched.rc (the program's exit status), watched.json (its report) and
watched.out. BARE_RC is the status the same program gets from Python without the shim. Prints
a markdown table and exits 1 if a check failed.
"""

import json
import os
import re
import sys

ROWS = []


def row(what, ok, detail=""):
    ROWS.append((what, "PASS" if ok else "FAIL", str(detail).replace("|", "\\|").replace("\n", " ")[:300]))


def read(d, name):
    try:
        return open(os.path.join(d, name)).read()
    except OSError:
        return ""


def live_from_metrics(text, pid):
    total = 0
    labels = []
    for line in text.splitlines():
        if line.startswith("cuguard_live_bytes{") and f'pid="{pid}"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
            labels.append(line.split("}")[0])
    return total, labels


def main():
    d, bare_rc = sys.argv[1], sys.argv[2]
    pid = read(d, "watched.pid").strip()
    for n in ("1", "2"):
        top = read(d, f"top{n}.txt")
        mine = [l for l in top.splitlines() if l.split()[:1] == [pid]]
        row(f"top --once frame {n}: a line for the training process with its live, peak and reserved sizes",
            len(mine) == 1 and len(re.findall(r"\d+\.\d (KiB|MiB|GiB)", mine[0])) >= 2, mine or top[:200])
    m1, l1 = live_from_metrics(read(d, "metrics1.txt"), pid)
    m2, _ = live_from_metrics(read(d, "metrics2.txt"), pid)
    row("exporter: cuguard_live_bytes for the process, with the GPU's UUID", m1 > 0 and any('UUID="GPU-' in l for l in l1),
        l1[:1])
    row("exporter: live bytes rose between scrapes (1 MiB kept every 10 steps)", m2 > m1, f"{m1} -> {m2}")
    for name in ("cuguard_peak_bytes", "cuguard_reserved_bytes", "cuguard_leaks", "cuguard_oom_total", "cuguard_alerts_total"):
        row(f"exporter: {name}", f"\n{name}{{" in read(d, "metrics2.txt"))
    rc = read(d, "watched.rc").strip()
    row("SIGINT: the exit status Python gives without the shim", rc == bare_rc, f"{rc} under the shim, {bare_rc} bare")
    try:
        r = json.load(open(os.path.join(d, "watched.json")))
        sig = (r.get("signal") or {}).get("name")
        row("SIGINT: a complete final report", r["complete"] and r["reason"] in ("signal", "exit"),
            f"reason {r['reason']}, signal {sig}, complete {r['complete']}, {len(r['leaks'])} leaks")
    except (OSError, ValueError, KeyError) as e:
        row("SIGINT: a complete final report", False, e)
    print("| check | result | detail |")
    print("|---|---|---|")
    for r in ROWS:
        print("| " + " | ".join(r) + " |")
    return 0 if all(r[1] == "PASS" for r in ROWS) else 1


if __name__ == "__main__":
    sys.exit(main())
