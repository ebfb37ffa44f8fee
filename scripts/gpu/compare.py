"""Compares what each GPU case says it did with what cuguard reported; prints a markdown table.

Usage: python3 compare.py DIR

DIR holds, per case and pool setting P (0 or 1): CASE.poolP.out (the case's stdout; its last
JSON line says what it allocated and kept), CASE.poolP.json (cuguard's report), and cs.txt
(compute-sanitizer --leak-check full on the planted-leak program).

A case passes when:
- the program ran (exit 0) and cuguard wrote a complete report;
- every size the case kept is among the reported leaks, and nothing else is reported beyond a
  small, listed allowance for framework bookkeeping (`extra`);
- for cases that know their allocation count, the report's allocation count matches;
- with the pool on, the checksum equals the one with the pool off;
- for the planted program, the leaks equal compute-sanitizer's (count and bytes).
"""

import collections
import json
import os
import re
import sys

MiB = 1 << 20


def last_json_line(path):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def sanitizer(path):
    try:
        text = open(path).read()
    except OSError:
        return None
    m = re.search(r"LEAK SUMMARY: (\d+) bytes leaked in (\d+) allocations", text)
    return (int(m.group(2)), int(m.group(1))) if m else (0, 0)


def sites(rep):
    """Each leak's site, as file:line function (Python frames first, then native)."""
    stacks = {s["id"]: s for s in rep.get("stacks", [])}
    out = []
    for l in rep["leaks"]:
        s = stacks.get(l.get("stack"))
        site = s and s.get("site")
        if not site:
            out.append("?")
            continue
        frame = s.get(site["in"], [])[site["index"]]
        out.append(f"{frame.get('file')}:{frame.get('line')} {frame.get('function')}")
    return out


def check(d, case, pool, baseline_checksum):
    out = last_json_line(os.path.join(d, f"{case}.pool{pool}.out"))
    rep = load(os.path.join(d, f"{case}.pool{pool}.json"))
    rc_path = os.path.join(d, f"{case}.pool{pool}.rc")
    rc = open(rc_path).read().strip() if os.path.exists(rc_path) else "?"
    row = dict(case=case, pool=pool, rc=rc, ok=True, why=[])
    if rc != "0":
        row["ok"] = False
        row["why"].append(f"exit {rc}")
    if out is None:
        row["ok"] = False
        row["why"].append("no result line")
        return row
    if rep is None:
        row["ok"] = False
        row["why"].append("no report")
        return row
    leaks = rep["leaks"]
    # VMM allocations come in the driver's 2 MiB granules: a kept array of n bytes is a handle of
    # n rounded up.
    granule = 2 * MiB
    sizes = collections.Counter(l["size"] for l in leaks)
    kept = collections.Counter()
    vmm_sizes = {l["size"] for l in leaks if l["memory"] == "vmm"}
    for k in out["kept_sizes"]:
        rounded = -(-k // granule) * granule
        kept[k if k in sizes or rounded not in vmm_sizes else rounded] += 1
    missing = kept - sizes
    extra = sizes - kept
    allocations = sum(s["allocations"] for s in rep["stats"]["devices"])
    row.update(
        allocations=allocations,
        expected_allocations=out.get("allocated"),
        kept=sum(kept.values()),
        leaks=len(leaks),
        leaked_bytes=sum(l["size"] for l in leaks),
        extra=sum(extra.values()),
        extra_bytes=sum(s * n for s, n in extra.items()),
        states=sorted({l["state"] for l in leaks}),
        apis=sorted({l["api"] for l in leaks}),
        doors=rep.get("doors"),
        used_delta=out.get("used_delta"),
        checksum=out.get("checksum"),
        complete=rep.get("complete"),
        events=collections.Counter(e["kind"] for e in rep.get("events", [])),
    )
    if missing:
        row["ok"] = False
        row["why"].append(f"kept but not reported: {dict(missing)}")
    if row["extra_bytes"] > 64 * MiB:
        row["ok"] = False
        row["why"].append(f"{row['extra']} unexplained leaks ({row['extra_bytes']} B)")
    exp = out.get("allocated")
    if exp is not None and allocations != exp:
        row["ok"] = False
        row["why"].append(f"{allocations} allocations seen, {exp} made")
    if not rep.get("complete"):
        row["ok"] = False
        row["why"].append("report incomplete")
    if pool == 1 and baseline_checksum is not None and out.get("checksum") != baseline_checksum:
        row["ok"] = False
        row["why"].append(f"checksum {out.get('checksum')} != {baseline_checksum} (pool off)")
    if case in ("planted", "torch_sites"):
        row["sites"] = sites(rep)
    if case == "torch_sites" and pool == 1:
        lines = sorted({s for s in row["sites"] if "clients.py" in s})
        if len(lines) != 2:
            row["ok"] = False
            row["why"].append(f"expected two Python sites in clients.py, got {lines}")
    if case == "planted":
        named = {n for n in ("leak_in_static_function", "leak_in_thread", "leak_in_loop") if any(n in x for x in row["sites"])}
        if len(named) != 3 or any("planted_leaks.cu" not in x for x in row["sites"]):
            row["ok"] = False
            row["why"].append(f"sites do not name the planted functions and lines: {row['sites']}")
        cs = sanitizer(os.path.join(d, "cs.txt"))
        row["sanitizer"] = cs
        if cs != (len(leaks), row["leaked_bytes"]):
            row["ok"] = False
            row["why"].append(f"compute-sanitizer found {cs[0]} leaks / {cs[1]} B")
    return row


def main():
    d = sys.argv[1]
    cases = []
    for name in sorted(os.listdir(d)):
        m = re.match(r"(.+)\.pool0\.out$", name)
        if m:
            cases.append(m.group(1))
    rows = []
    for case in cases:
        base = check(d, case, 0, None)
        rows.append(base)
        if os.path.exists(os.path.join(d, f"{case}.pool1.out")):
            rows.append(check(d, case, 1, base.get("checksum")))
    print("| case | pool | allocations seen / made | kept | leaks reported | extra | state | compute-sanitizer | checksum | result |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cs = r.get("sanitizer")
        cs_text = f"{cs[0]} / {cs[1]} B" if cs else ""
        print(
            "| {case} | {pool} | {a} / {e} | {kept} | {leaks} ({lb} B) | {extra} | {states} | {cs} | {ck} | {res} |".format(
                case=r["case"],
                pool="on" if r["pool"] else "off",
                a=r.get("allocations", "-"),
                e=r.get("expected_allocations") if r.get("expected_allocations") is not None else "n/a",
                kept=r.get("kept", "-"),
                leaks=r.get("leaks", "-"),
                lb=r.get("leaked_bytes", "-"),
                extra=r.get("extra", "-"),
                states=", ".join(r.get("states", [])),
                cs=cs_text,
                ck=r.get("checksum", "-"),
                res="PASS" if r["ok"] else "FAIL: " + "; ".join(r["why"]),
            )
        )
    print()
    print("<details><summary>per-case detail</summary>\n")
    for r in rows:
        r = dict(r)
        r["events"] = dict(r.get("events", {}))
        print(f"- `{json.dumps(r, default=str)}`")
    print("\n</details>")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
