#!/usr/bin/env bash
# Run 50 (H200 or H100), about 4 minutes, after stage.sh:
#   OUT=$OUT bash scripts/gpu/expandable.sh
# 1. scripts/gpu/expandable.py with expandable_segments:True under `cuguard run`: at each pause,
#    PyTorch's memory_allocated()/memory_reserved() beside `cuguard summary --at phase:NAME`
#    (PyTorch's caching allocator's bytes, its tensors' and its idle row), pool off and on.
# 2. PyTorch's cache fragmented under CUGUARD_LIMIT=16GiB (torch_oom_probe.py device), plain and
#    with expandable segments: the cards' refused_by/within, their time by part, `--at oom`.
# 3. scripts/gpu/torch_async_oom.sh: the driver's card under PyTorch's cudaMallocAsync backend,
#    with its time by part (NVML's first listing now at the context's creation).
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH}
cards() {  # report
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))
for o in r.get("ooms", []): print(json.dumps({k: o.get(k) for k in ("api","refused_by","within","size","live_bytes","card_ns","framework_ns","card_parts")}))
print(json.dumps({"other_processes_note": [o.get("other_processes_note") for o in r.get("ooms", [])]}))' "$1"
}
for pool in 0 1; do
  echo "== expandable.py, CUGUARD_POOL=$pool"
  R=/tmp/expandable$pool.json
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True CUGUARD_POOL=$pool timeout 200 \
    "$C" run --quiet --report "$R" -- python3 scripts/gpu/expandable.py > /tmp/expandable$pool.lines 2>&1
  cat /tmp/expandable$pool.lines | cut -c1-400
  python3 - "$C" "$R" /tmp/expandable$pool.lines <<'PY'
import json, subprocess, sys
c, report, lines = sys.argv[1:4]
for line in open(lines):
    if not line.startswith("{"):
        continue
    t = json.loads(line)
    a = json.loads(subprocess.run([c, "summary", report, "--at", "phase:" + t["pause"], "--format", "json"],
                                  capture_output=True, text=True).stdout)
    d = a["devices"][0]
    mine = [s for s in d["sites"] if s["owner"] == "pytorch_caching_allocator"]
    tensors = sum(s["bytes"] for s in mine if not s.get("idle"))
    idle = sum(s["bytes"] for s in mine if s.get("idle"))
    owner = {o["owner"]: o["bytes"] for o in d["by_owner"]}
    print(json.dumps({"pause": t["pause"], "torch_allocated": t["allocated"], "cuguard_tensors": tensors,
                      "torch_reserved": t["reserved"], "cuguard_cache": owner.get("pytorch_caching_allocator"),
                      "cuguard_idle": idle, "sites_total": d["sites_total"], "complete": a["span"]["complete"],
                      "equal": tensors == t["allocated"] and owner.get("pytorch_caching_allocator") == t["reserved"]}))
PY
  "$C" summary "$R" --at phase:half_freed 2>&1 | head -14
  cp "$R" "$OUT/"
done > "$OUT/expandable.txt" 2>&1
echo "expandable at ${SECONDS}s"
for conf in "" "expandable_segments:True"; do
  echo "== CUGUARD_LIMIT=16GiB PYTORCH_CUDA_ALLOC_CONF=$conf"
  R=/tmp/limit${conf:+_expandable}.json
  PYTORCH_CUDA_ALLOC_CONF=$conf CUGUARD_LIMIT=16GiB timeout 200 \
    "$C" run --report "$R" -- python3 scripts/gpu/torch_oom_probe.py device 2>&1 | tail -3 | cut -c1-2000
  cards "$R"
  "$C" summary --at oom "$R" 2>&1 | head -24
done > "$OUT/limit.txt" 2>&1
echo "limit at ${SECONDS}s"
OUT=$OUT bash scripts/gpu/torch_async_oom.sh > /dev/null 2>&1
for pool in 0 1; do cards /tmp/torch_async_pool$pool.json; done > "$OUT/async_cards.txt" 2>&1
echo "async at ${SECONDS}s"
