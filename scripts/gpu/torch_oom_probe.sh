#!/usr/bin/env bash
# Run 39's thin probe of issue 53's PyTorch card (see torch_oom_probe.py), after stage.sh:
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
