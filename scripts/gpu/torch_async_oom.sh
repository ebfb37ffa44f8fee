#!/usr/bin/env bash
# The driver's default memory pool under PyTorch (issue 57 item 1), after stage.sh:
#   OUT=$OUT bash scripts/gpu/torch_async_oom.sh
# scripts/gpu/torch_async_oom.py with PyTorch's cudaMallocAsync backend: no cuguard, then under
# `cuguard run` with cuguard's pool off and on (the pool serves cuMemAlloc only: PyTorch's
# cuMemAllocAsync goes to the driver's pool either way). For each: what PyTorch did with each
# request, then cuguard's cards (the default pool's idle bytes, its threshold, the verdict)
# and the summary's out-of-memory section. Writes $OUT/torch_async_oom.txt and the reports.
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH}
export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
P=scripts/gpu/torch_async_oom.py
{
  echo "== no cuguard"
  timeout 200 python3 "$P" 2>&1 | tail -1
  for pool in 0 1; do
    echo "== under cuguard, CUGUARD_POOL=$pool"
    R=/tmp/torch_async_pool$pool.json
    CUGUARD_POOL=$pool timeout 200 "$C" run --report "$R" -- python3 "$P" 2>&1 | tail -4
    "$C" summary "$R" 2>&1 | sed -n '/out of memory/,$p' | head -50
    "$C" summary --at oom "$R" 2>&1 | head -30
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps([{k: o.get(k) for k in ("api","refused_by","within","size","device_free","card_ns","verdict","holders")} for o in r.get("ooms", [])])[:6000])' "$R"
    cp "$R" "$OUT/"
  done
} 2>&1 | tee "$OUT/torch_async_oom.txt"
