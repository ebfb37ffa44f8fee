"""Judges scripts/gpu/phases.sh's two runs of phases_torch.py (PyTorch's cache on and off) against
what PyTorch's allocator said: PASS/FAIL lines (INFO lines are figures, not verdicts); exit 1 on
any FAIL.

    python3 phases_check.py DIR OUT_JSON

DIR holds, for MODE in on and off: MODE.json (the report), MODE.rc, MODE.out (the program's JSON
line), MODE.phases.json (`summary --by phase --top 0 --format json`), MODE.at.json and
MODE.between.json (`--at` / `--between phase:step#4 --top 0 --format json`). OUT_JSON gets them
all in one document.

PyTorch's own account of the tensors comes from the cache-on run: with the cache off
(PYTORCH_NO_CUDA_MEMORY_CACHING=1) PyTorch's statistics stay at 0 (c10's uncached path calls
cudaMalloc without them); the program is deterministic (seed, data and batch fixed, a warm-up
step first), so its tensors are the same in both runs. What cuguard counts is live driver memory
(every allocation, whoever made it), so each comparison is of a rise above the step's start, or
of what is outside PyTorch, which must not change from step to step.

The criteria (MiB = 2**20 bytes; TOL = 1 MiB, less than one activation of the program, 8 MiB):

Both runs:
  occurrences  "step" 6 times (step #1..#6), "forward", "backward", "optimizer" 6 times each,
               "warmup" and "emit_nvtx step" once; every one ended.
  pairing      no pop without a push, no end without a start, no range never ended.
  whole        the history lost no events (else any figure may be off).
  floor        every occurrence (of every name) has live-at-start and peak at least the model's
               parameters' bytes (allocated before the warm-up, live to the end: whatever cuguard
               counts, segments or tensors, includes them), and peak >= live-at-start; a range in
               which nothing is allocated still has the memory live when it ran.
  emit_nvtx    at least one phase named "aten::…" (emit_nvtx's range per op), and every one of
               them inside the "emit_nvtx step" occurrence's span (only there are they emitted).
Cache off (each tensor one cudaMalloc of its requested size, one cudaFree when it dies):
  rise         for each step k: cuguard's peak minus its live-at-start equals PyTorch's peak of
               requested bytes minus its requested bytes at the step's start (cache-on run),
               within TOL. Nothing outside PyTorch allocates inside a step after the warm-up.
  outside      cuguard's live at each step's start minus PyTorch's requested bytes then (what
               cuBLAS, the runtime… hold) is >= 0 and the same for the 6 steps within TOL: a free
               missed or an allocation lost would make it drift.
  allocations  each step's allocation count equals PyTorch's count of allocation requests in it,
               and its allocated bytes PyTorch's requested bytes in it (within TOL).
  heavy        step #4's peak minus step #3's is 256 MiB within 10%, and equals PyTorch's
               difference of the two steps' requested peaks within TOL (steps 3 and 4 do the
               same work but for the 256 MiB tensor, live through step 4).
  at           `--at phase:step#4` lists a site naming phases_torch.py:<HEAVY line> holding at
               least 256 MiB.
  between      `--between phase:step#4` does not name the HEAVY line (freed inside the step),
               its bytes equal step #4's stayed bytes of --by phase within TOL, and step #4's
               stayed equals step #3's within TOL.
Cache on (cuguard sees the caching allocator's segments, PyTorch's reserved bytes, not tensors):
  rise         for each step: cuguard's peak minus live-at-start equals PyTorch's
               max_memory_reserved minus its reserved bytes at the step's start, within TOL.
  stayed       for each step: cuguard's stayed bytes equal PyTorch's reserved bytes at the end
               minus at the start (the allocator gives no segment back without empty_cache or an
               out-of-memory retry), within TOL; step #4's is at least 256 MiB: the cache kept
               the segment the HEAVY tensor was cut from, where the cache-off run kept nothing.
  outside      cuguard's live at each step's start minus PyTorch's reserved bytes then is >= 0
               and the same for the 6 steps within TOL.
  at           `--at phase:step#4` lists a site naming the HEAVY line with at least 256 MiB (the
               segment was allocated under torch.empty at that line).
"""

import json
import re
import sys

MIB = 1 << 20
TOL = MIB
STEPS = [f"step #{k}" for k in range(1, 7)]
results = []


def verdict(ok, name, detail):
    word = "PASS" if ok else "FAIL"
    results.append((word, name, detail))
    print(f"{word} {name}: {detail}", flush=True)


def info(name, detail):
    print(f"INFO {name}: {detail}", flush=True)


def mib(n):
    return "?" if n is None else f"{n / MIB:.3f} MiB"


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f), None
    except Exception as e:  # noqa: BLE001 - said in the verdict
        return None, f"{path}: {type(e).__name__}: {e}"[:300]


def program_line(path):
    try:
        with open(path) as f:
            for line in reversed(f.read().splitlines()):
                if line.startswith("{") and '"program": "phases_torch"' in line:
                    return json.loads(line)
    except Exception:  # noqa: BLE001
        pass
    return None


def names_heavy(obj, line):
    """Whether a site (its label, location, stack) names phases_torch.py:<line>."""
    return re.search(rf"phases_torch\.py:{line}(?!\d)", json.dumps(obj)) is not None


def sites(moment):
    return [s for d in (moment or {}).get("devices", []) for s in d.get("sites", [])]


def moment_bytes(moment):
    return sum(d.get("bytes", 0) for d in (moment or {}).get("devices", []))


def main(d, out_json):
    doc = {}
    runs = {}
    for mode in ("on", "off"):
        rc = open(f"{d}/{mode}.rc").read().strip() if _exists(f"{d}/{mode}.rc") else "?"
        prog = program_line(f"{d}/{mode}.out")
        phases, perr = load_json(f"{d}/{mode}.phases.json")
        at, aerr = load_json(f"{d}/{mode}.at.json")
        between, berr = load_json(f"{d}/{mode}.between.json")
        doc[f"cache_{mode}"] = {"rc": rc, "program": prog, "by_phase": phases, "at_step4": at,
                                "between_step4": between, "errors": [e for e in (perr, aerr, berr) if e]}
        ok = rc == "0" and prog is not None and phases is not None
        verdict(ok, f"cache {mode}: program and report",
                f"exit {rc}, program line {'found' if prog else 'MISSING'}, "
                f"--by phase {'read' if phases else perr}")
        if ok:
            runs[mode] = (prog, phases, at, between)
    with open(out_json, "w") as f:
        json.dump(doc, f, indent=1)

    for mode, (prog, phases, at, between) in runs.items():
        both(mode, prog, phases)
    if "on" not in runs:
        verdict(False, "reference", "no cache-on run: PyTorch's own account of the tensors is missing")
    else:
        ref = {s["label"]: s for s in runs["on"][0]["steps"]}
        if "off" in runs:
            off(runs["off"], ref)
        on(runs["on"])
    fails = sum(1 for r in results if r[0] == "FAIL")
    print(f"{len(results) - fails} PASS, {fails} FAIL", flush=True)
    return 1 if fails else 0


def _exists(path):
    try:
        open(path).close()
        return True
    except OSError:
        return False


def occurrences(phases):
    """label -> occurrence row, name -> name row."""
    by_label, by_name = {}, {}
    for n in phases.get("names", []):
        by_name[n["name"]] = n
        for o in n.get("list", []):
            by_label[o["label"]] = o
    return by_label, by_name


def both(mode, prog, phases):
    by_label, by_name = occurrences(phases)
    want = {"step": 6, "forward": 6, "backward": 6, "optimizer": 6, "warmup": 1, "emit_nvtx step": 1}
    got = {n: by_name.get(n, {}).get("occurrences", 0) for n in want}
    labels = [l for l in STEPS if l in by_label]
    unended = [l for l, o in by_label.items() if o.get("end_ms") is None]
    verdict(got == want and len(labels) == 6 and not unended, f"cache {mode}: occurrences",
            f"{got} (want {want}); step labels found {len(labels)} of 6; never ended {unended[:5]}")
    odd = phases.get("odd", {})
    verdict(odd.get("pops_without_push", 1) == 0 and odd.get("ends_without_start", 1) == 0
            and odd.get("never_ended", 1) == 0, f"cache {mode}: pairing", json.dumps(odd))
    span = phases.get("span", {})
    verdict(bool(span.get("whole")) and bool(span.get("complete")) and not span.get("lost_events")
            and not span.get("begins_ms"), f"cache {mode}: whole",
            f"whole={span.get('whole')} complete={span.get('complete')} lost_events={span.get('lost_events')} "
            f"begins_ms={span.get('begins_ms')}")
    floor = prog.get("parameters_bytes", 1)
    low = [o["label"] for o in by_label.values()
           if min(o["peak_bytes"], o["live_at_start_bytes"]) < floor or o["peak_bytes"] < o["live_at_start_bytes"]]
    verdict(not low, f"cache {mode}: floor",
            f"every occurrence's live-at-start and peak >= the model's parameters ({mib(floor)}, live throughout), "
            f"peak >= live-at-start; not so in {len(low)}: {low[:8]}")
    aten = [n for n in by_name if n.startswith("aten::")]
    emit = by_label.get("emit_nvtx step #1")
    outside = []
    if emit and emit.get("end_ms") is not None:
        lo, hi = emit["start_ms"] - 0.01, emit["end_ms"] + 0.01
        for n in aten:
            for o in by_name[n].get("list", []):
                if o["start_ms"] < lo or (o.get("end_ms") or 1e18) > hi:
                    outside.append(o["label"])
    verdict(bool(aten) and emit is not None and not outside, f"cache {mode}: emit_nvtx",
            f"{len(aten)} aten:: names ({', '.join(aten[:4])}…), "
            f"{sum(by_name[n]['occurrences'] for n in aten)} occurrences; outside 'emit_nvtx step #1': {outside[:5]}")
    other = sorted(set(by_name) - set(want) - set(aten))
    info(f"cache {mode}: names", f"{len(by_name)} names; besides those above and aten::: {len(other)} ({', '.join(other[:6])}…)")


def off(run, ref):
    prog, phases, at, between = run
    by_label, _ = occurrences(phases)
    own = {s["label"]: s for s in prog["steps"]}
    info("cache off: PyTorch's own statistics",
         "max_memory_allocated per step " + str([own[l]["max_memory_allocated"] for l in STEPS if l in own])
         + " (0 expected: the uncached path bypasses them; the cache-on run's are used)")
    if not all(l in by_label and l in ref for l in STEPS):
        verdict(False, "cache off: steps", "a step is missing from cuguard's answer or the cache-on program's")
        return
    use_req = all(ref[l].get("peak_requested") is not None and ref[l]["start"].get("requested") is not None for l in STEPS)
    tol = TOL if use_req else 4 * MIB
    if not use_req:
        info("cache off", "this PyTorch has no requested_bytes statistics: block sizes (allocated) used, tolerance 4 MiB")
    bad_rise, bad_count, outs = [], [], []
    for l in STEPS:
        o, r = by_label[l], ref[l]
        cg_rise = o["peak_bytes"] - o["live_at_start_bytes"]
        if use_req:
            pt_peak, pt_start = r["peak_requested"], r["start"]["requested"]
            pt_bytes = r["end"]["requested_bytes_total"] - r["start"]["requested_bytes_total"]
        else:
            pt_peak, pt_start = r["max_memory_allocated"], r["start"]["allocated"]
            pt_bytes = r["end"]["allocated_bytes_total"] - r["start"]["allocated_bytes_total"]
        pt_rise = pt_peak - pt_start
        pt_count = r["end"]["allocations_total"] - r["start"]["allocations_total"]
        outs.append(o["live_at_start_bytes"] - pt_start)
        if abs(cg_rise - pt_rise) > tol:
            bad_rise.append(l)
        if o["allocations"] != pt_count or abs(o["allocated_bytes"] - pt_bytes) > tol:
            bad_count.append(l)
        info("cache off", f"{l} | cuguard peak {mib(o['peak_bytes'])} at start {mib(o['live_at_start_bytes'])} "
             f"rise {mib(cg_rise)} allocated {mib(o['allocated_bytes'])} ({o['allocations']}) stayed {mib(o['stayed_bytes'])} "
             f"| PyTorch peak {mib(pt_peak)} at start {mib(pt_start)} rise {mib(pt_rise)} allocated {mib(pt_bytes)} ({pt_count}) "
             f"max_memory_allocated {mib(r['max_memory_allocated'])} | outside {mib(outs[-1])}")
    verdict(not bad_rise, "cache off: rise", f"cuguard's rise within each step = PyTorch's (±{mib(tol)}); off in {bad_rise}")
    verdict(min(outs) >= 0 and max(outs) - min(outs) <= TOL, "cache off: outside",
            f"live at start minus PyTorch's tensors: {[mib(x) for x in outs]}")
    verdict(not bad_count, "cache off: allocations",
            f"each step's allocations and bytes = PyTorch's requests in it; off in {bad_count}")
    heavy, line = prog["heavy_bytes"], prog["heavy_line"]
    d_cg = by_label["step #4"]["peak_bytes"] - by_label["step #3"]["peak_bytes"]
    key = "peak_requested" if use_req else "max_memory_allocated"
    d_pt = ref["step #4"][key] - ref["step #3"][key]
    verdict(abs(d_cg - heavy) <= heavy / 10 and abs(d_cg - d_pt) <= tol, "cache off: heavy",
            f"step #4 peak - step #3 peak = {mib(d_cg)} (256 MiB ±10%); PyTorch's ({key}) {mib(d_pt)}")
    hs = [s for s in sites(at) if names_heavy(s, line)]
    verdict(bool(hs) and max(s.get("bytes", 0) for s in hs) >= heavy, "cache off: at",
            f"--at phase:step#4 (at {at and at.get('at_ms')} ms; step #4's peak at {by_label['step #4']['peak_ms']} ms): "
            f"{len(sites(at))} sites, naming phases_torch.py:{line}: {[(s.get('label'), mib(s.get('bytes'))) for s in hs]}")
    hb = [s for s in sites(between) if names_heavy(s, line)]
    kept, st4, st3 = moment_bytes(between), by_label["step #4"]["stayed_bytes"], by_label["step #3"]["stayed_bytes"]
    verdict(between is not None and not hb and abs(kept - st4) <= TOL and abs(st4 - st3) <= TOL, "cache off: between",
            f"--between phase:step#4 kept {mib(kept)} in {len(sites(between))} sites, HEAVY line among them: {bool(hb)}; "
            f"stayed step #4 {mib(st4)}, step #3 {mib(st3)}")


def on(run):
    prog, phases, at, between = run
    by_label, _ = occurrences(phases)
    own = {s["label"]: s for s in prog["steps"]}
    if not all(l in by_label and l in own for l in STEPS):
        verdict(False, "cache on: steps", "a step is missing from cuguard's answer or the program's")
        return
    bad_rise, bad_stay, outs = [], [], []
    for l in STEPS:
        o, r = by_label[l], own[l]
        cg_rise = o["peak_bytes"] - o["live_at_start_bytes"]
        pt_rise = r["max_memory_reserved"] - r["start"]["reserved"]
        pt_grew = r["end"]["reserved"] - r["start"]["reserved"]
        outs.append(o["live_at_start_bytes"] - r["start"]["reserved"])
        if abs(cg_rise - pt_rise) > TOL:
            bad_rise.append(l)
        if abs(o["stayed_bytes"] - pt_grew) > TOL:
            bad_stay.append(l)
        info("cache on", f"{l} | cuguard peak {mib(o['peak_bytes'])} at start {mib(o['live_at_start_bytes'])} "
             f"rise {mib(cg_rise)} allocated {mib(o['allocated_bytes'])} ({o['allocations']}) stayed {mib(o['stayed_bytes'])} "
             f"| PyTorch max_reserved {mib(r['max_memory_reserved'])} reserved at start {mib(r['start']['reserved'])} "
             f"at end {mib(r['memory_reserved_end'])} segments made {r['end']['segments_total'] - r['start']['segments_total']} "
             f"max_memory_allocated {mib(r['max_memory_allocated'])} | outside {mib(outs[-1])}")
    verdict(not bad_rise, "cache on: rise", f"cuguard's rise within each step = PyTorch's reserved rise (±1 MiB); off in {bad_rise}")
    st4 = by_label["step #4"]["stayed_bytes"]
    verdict(not bad_stay and st4 >= prog["heavy_bytes"], "cache on: stayed",
            f"stayed = PyTorch's reserved growth in each step (±1 MiB), off in {bad_stay}; step #4 stayed {mib(st4)} (>= 256 MiB)")
    verdict(min(outs) >= 0 and max(outs) - min(outs) <= TOL, "cache on: outside",
            f"live at start minus PyTorch's reserved: {[mib(x) for x in outs]}")
    line = prog["heavy_line"]
    hs = [s for s in sites(at) if names_heavy(s, line)]
    verdict(bool(hs) and max(s.get("bytes", 0) for s in hs) >= prog["heavy_bytes"], "cache on: at",
            f"--at phase:step#4: {len(sites(at))} sites, naming phases_torch.py:{line}: "
            f"{[(s.get('label'), mib(s.get('bytes'))) for s in hs]}")
    info("cache on: peaks are segments, not tensors",
         "step peaks " + str([mib(by_label[l]['peak_bytes']) for l in STEPS])
         + " vs PyTorch's max_memory_allocated " + str([mib(own[l]['max_memory_allocated']) for l in STEPS]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
