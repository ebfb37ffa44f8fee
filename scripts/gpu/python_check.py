"""Judges check.sh's `python` section (issue 11) and prints a Markdown table.

usage: python3 scripts/gpu/python_check.py DIR
DIR holds holders.pool0.json / holders.pool1.json (holders.py's lists), pytest-uncached.txt and
pytest-cached.txt with their exit statuses in *.rc.
"""

import json
import os
import re
import sys

d = sys.argv[1]
rows = []


def row(what, ok, detail):
    rows.append((what, "yes" if ok else "**NO**", detail.replace("|", "\\|").replace("\n", " ")))


WANT = [("WEIGHTS", "['layer1']", "torch", "PyTorch tensor"), ("ARRAYS", "['embedding']", "cupy", "CuPy array"),
        ("BUFFERS", "['staging']", "rmm", "RMM DeviceBuffer")]
for pool in ("0", "1"):
    path = os.path.join(d, f"holders.pool{pool}.json")
    try:
        found = json.load(open(path))
    except Exception as e:
        row(f"holders() ran (CUGUARD_POOL={pool})", False, repr(e))
        continue
    for name, key, kind, words in WANT:
        hit = [h for h in found if (h.get("path") or [None])[0] == name and len(h["path"]) >= 2 and h["path"][1] == key]
        ok = bool(hit) and kind in (hit[0].get("holder") or "").lower() + (hit[0].get("holder_kind") or "")
        detail = " → ".join(hit[0]["path"]) if hit else f"no path from {name}; holders: {[h.get('path') for h in found]}"
        row(f"holders() names `{name}{key}`, the {words} (CUGUARD_POOL={pool})", ok, detail)

here = os.path.dirname(os.path.abspath(__file__))
src = open(os.path.join(here, "pytest_gpu", "test_frameworks.py")).read().splitlines()
kept_line = next(i + 1 for i, l in enumerate(src) if l.rstrip().endswith("# mark: kept"))


def run(name):
    try:
        text = open(os.path.join(d, f"pytest-{name}.txt")).read()
        rc = int(open(os.path.join(d, f"pytest-{name}.rc")).read().strip())
    except Exception as e:
        return None, repr(e)
    return rc, text


rc, text = run("uncached")
if rc is None:
    row("pytest --cuguard --cuguard-uncached ran", False, text)
else:
    last = next((l.strip("= ") for l in reversed(text.splitlines()) if re.match(r"^=+ .*(passed|failed)", l)), "")
    failed = re.findall(r"^FAILED (\S+)", text, re.M)
    row("--cuguard-uncached: exit status 1, exactly test_torch_keeps_a_tensor fails", rc == 1 and failed ==
        ["test_frameworks.py::test_torch_keeps_a_tensor"], f"exit {rc}; FAILED {failed}; {last}")
    row(f"--cuguard-uncached: its failure names test_frameworks.py:{kept_line}",
        f"test_frameworks.py:{kept_line}" in text, next((l.strip() for l in text.splitlines()
                                                          if f"test_frameworks.py:{kept_line}" in l), "not named"))
rc, text = run("cached")
if rc is None:
    row("pytest --cuguard ran", False, text)
else:
    last = next((l.strip("= ") for l in reversed(text.splitlines()) if re.match(r"^=+ .*(passed|failed)", l)), "")
    row("caches on: exit status 0, every test passes", rc == 0 and last.startswith("5 passed"), f"exit {rc}; {last}")
    grew = [l.strip() for l in text.splitlines() if "PyTorch's caching allocator" in l and "grew" in l]
    row("caches on: the summary says that PyTorch's cache grew", bool(grew), grew[0] if grew else "not said")

print("| check | holds | what it showed |")
print("|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]} |")
sys.exit(0 if all(r[1] == "yes" for r in rows) else 1)
