#!/usr/bin/env bash
# Run 39's thin probe of issue 53's PyTorch card (see torch_oom_probe.py), and run 40's lines
# from cuguard's record, after stage.sh:
#   OUT=$OUT bash scripts/gpu/torch_oom_probe.sh
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH}
for mode in fraction device; do
  for pool in 0 1; do
    R=/tmp/torch_oom_$mode$pool.json
    echo "== $mode pool $pool"
    CUGUARD_POOL=$pool timeout 200 "$C" run --report "$R" -- python3 scripts/gpu/torch_oom_probe.py $mode 2>&1 | tail -4
    "$C" summary --at oom "$R" 2>&1 | head -40
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps({"ooms": [{k: o.get(k) for k in ("api","size","refused_by","within","verdict","idle","device_free_bytes","limit","message")} for o in r.get("ooms", [])][:4]})[:4000])' "$R"
  done
  # The verdict checked: PyTorch itself with expandable segments, no cuguard.
  echo "== $mode expandable_segments:True, no cuguard"
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 200 python3 scripts/gpu/torch_oom_probe.py $mode 2>&1 | tail -1 | cut -c1-600
done 2>&1 | tee "$OUT/torch_oom_probe.txt"
# Run 40: the pinning lines and the end's block lines from cuguard's own record of PyTorch's
# blocks (PyTorch's memory history left off), plain and through a helper called from two lines.
{
  for helper in "" 1; do
    R=/tmp/torch_oom_lines${helper}.json
    echo "== fraction, HELPER=${helper:-0}, pool 0"
    HELPER=$helper CUGUARD_POOL=0 timeout 200 "$C" run --quiet --report "$R" -- python3 scripts/gpu/torch_oom_probe.py fraction > /tmp/torch_oom_lines$helper.out 2>&1
    echo "exit $?"; grep -o '"lines": {[^}]*}' /tmp/torch_oom_lines$helper.out
    "$C" summary --at oom "$R" 2>&1 | grep -E "pinned by|verdict" | cut -c1-400
    "$C" summary "$R" 2>&1 | sed -n '/^inside the caches/,/^[a-z]/p' | head -12
    python3 - "$R" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
v = (r.get("python") or {}).get("view") or {}
caches = [{k: c.get(k) for k in ("framework", "source", "live_bytes", "idle_bytes", "note")} for c in v.get("caches", [])]
lines = {}
for a in v.get("allocations", []):
    for b in a.get("blocks") or []:
        if b.get("state") == "live":
            f = (b.get("frames") or [{}])[0]
            key = f"{f.get('file', '?').rsplit('/', 1)[-1]}:{f.get('line')}"
            lines[key] = lines.get(key, 0) + 1
print(json.dumps({"check": "end-lines", "caches": caches, "live_block_lines": lines}))
PY
  done
} 2>&1 | tee -a "$OUT/torch_oom_probe.txt"
