#!/usr/bin/env python3
"""The view at scale (issue 40): times `cuguard view` against `cuguard summary` on the same
reports, with each run's peak resident memory, the page's size, and how long Chromium takes to
draw the page, read from Chromium's own trace.

    scripts/view-bench.py [--cuguard PATH] [--before PATH] [--chromium PATH] [--out DIR] INPUT...

Each INPUT is what `cuguard view` is given (a directory of reports, e.g. one written by
`cuguard-bench --shapes distinct --reports 10000 --leaks 10000000 --keep --dir /tmp/viewbench`).
For `--cuguard` (default target/release/cuguard) and, with `--before`, another build on the same
files: `summary` (output discarded) and `view -o PAGE`, each's wall time, CPU time (user and system: on a
loaded machine wall times move more than the work) and peak RSS (`/usr/bin/time`), then the page opened in headless Chromium with
`--trace-startup` (categories `devtools.timeline,blink.user_timing,loading`, JSON) while its
screenshot is taken (PAGE.png beside it). The drawing time is from the trace: from the page's
`navigationStart` to the later of its first contentful paint and the end of the first paint
after its `loadEventEnd` (the page's script runs before its load event, so that paint shows the
charts and tables); its first contentful paint and load event are printed too. The goals: `view` at most
64 MiB and 1.5 x summary's time; the page at most 10 MB and drawn in at most 3 s.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def timed(cmd, stdout=subprocess.DEVNULL):
    """Runs cmd; returns (wall seconds, CPU seconds (user and system), peak RSS in KiB)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        start = time.monotonic()
        r = subprocess.run(
            ["/usr/bin/time", "-o", t.name, "-f", "%U %S %M"] + cmd,
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
        wall = time.monotonic() - start
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {r.stderr.decode(errors='replace')[-2000:]}")
        line = t.read().strip().splitlines()[-1]
        user, system, rss = line.split()
        return wall, float(user) + float(system), int(rss)


def chromium_draw(chromium, page, work):
    """Opens `page` in headless Chromium, as a window 1280 x 1000 whose screenshot is taken,
    with a startup trace; returns the trace's times (ms from the page's navigationStart): its
    first contentful paint, its load event's end, and when it was drawn (the later of the first
    contentful paint and the end of the first paint after the load event)."""
    trace = os.path.join(work, "trace.json")
    if os.path.exists(trace):
        os.remove(trace)
    profile = tempfile.mkdtemp(prefix="profile-", dir=work)
    shot = os.path.splitext(page)[0] + ".png"
    subprocess.run(
        [
            "timeout",
            "300",
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            "--window-size=1280,1000",
            "--trace-startup=devtools.timeline,blink.user_timing,loading",
            "--trace-startup-format=json",
            f"--trace-startup-file={trace}",
            "--trace-startup-duration=0",
            f"--screenshot={shot}",
            "file://" + os.path.abspath(page),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    with open(trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    url = lambda e: str(e.get("args", {}).get("data", {}).get("documentLoaderURL", ""))
    starts = [
        e["ts"] for e in events if e.get("name") == "navigationStart" and url(e).startswith("file:")
    ]
    if not starts:
        return None, None, None
    start = min(starts)

    def first(names, after, end=False):
        ts = [
            e["ts"] + (e.get("dur", 0) if end else 0)
            for e in events
            if e.get("name") in names and e.get("ts", 0) >= after
        ]
        return min(ts) if ts else None

    load = first(("loadEventEnd",), start)
    fcp = first(("firstContentfulPaint",), start)
    paint = first(("Paint",), load, end=True) if load is not None else None
    drawn = max((t for t in (fcp, paint) if t is not None), default=None)
    ms = lambda t: None if t is None else (t - start) / 1000
    return ms(fcp), ms(load), ms(drawn)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuguard", default="target/release/cuguard")
    ap.add_argument("--before")
    ap.add_argument("--chromium", default=os.environ.get("CHROMIUM", "chromium"))
    ap.add_argument("--out", default=None, help="where pages and traces go")
    ap.add_argument("inputs", nargs="+")
    o = ap.parse_args()
    work = o.out or tempfile.mkdtemp(prefix="view-bench-")
    os.makedirs(work, exist_ok=True)
    builds = [("after", o.cuguard)] + ([("before", o.before)] if o.before else [])
    print(f"load average {os.getloadavg()[0]:.2f}; pages in {work}")
    print(
        "| input | build | summary (CPU) | summary RSS | view (CPU) | view RSS | view / summary "
        "(CPU) | page | Chromium FCP | load | drawn | goals |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for inp in o.inputs:
        # Once untimed, so that every timed read finds the files cached.
        subprocess.run(["sh", "-c", f"find '{inp}' -name '*.json' -exec cat {{}} + > /dev/null"])
        for name, exe in builds:
            s_wall, s_cpu, s_rss = timed([exe, "summary", inp])
            page = os.path.join(work, f"{os.path.basename(inp.rstrip('/'))}-{name}.html")
            if os.path.exists(page):
                os.remove(page)
            v_wall, v_cpu, v_rss = timed([exe, "view", "-o", page, inp])
            size = os.path.getsize(page)
            fcp, load, drawn = chromium_draw(o.chromium, page, work)
            goals = []
            goals.append("RSS " + ("met" if v_rss <= 64 * 1024 else "not met"))
            goals.append(
                "time "
                + ("met" if v_wall <= 1.5 * s_wall else "not met")
                + " (CPU "
                + ("met" if v_cpu <= 1.5 * s_cpu else "not met")
                + ")"
            )
            goals.append("size " + ("met" if size <= 10_000_000 else "not met"))
            goals.append("draw " + ("met" if drawn is not None and drawn <= 3000 else "not met"))
            f = lambda x: "?" if x is None else f"{x / 1000:.2f} s"
            print(
                f"| {inp} | {name} | {s_wall:.2f} s ({s_cpu:.2f} s) | {s_rss / 1024:.0f} MiB | "
                f"{v_wall:.2f} s ({v_cpu:.2f} s) | {v_rss / 1024:.0f} MiB | "
                f"{v_wall / s_wall:.2f}x ({v_cpu / s_cpu:.2f}x) | {size / 1e6:.2f} MB | "
                f"{f(fcp)} | {f(load)} | {f(drawn)} | {', '.join(goals)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
