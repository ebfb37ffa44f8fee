#!/usr/bin/env bash
# Issue 56 (the pair at the floor, stacks in PyTorch), issue 57 item 4 and issue 53's card cost,
# in one call of about 8 minutes, after stage.sh with BASELINE= (the build before in
# .gpu/baseline/):
#   OUT=$OUT bash scripts/gpu/floor.sh
# 1. scripts/gpu/card_parts.c: what the calls the shim makes at a driver's refusal cost here
#    (NVML's device by UUID and its compute processes; the default pool's attributes).
# 2. scripts/pair-bench.sh, the full form, beside the build before (A/A control).
# 3. scripts/gpu/tensor_cost.sh (ROUNDS, default 4): the tensor pair beside the build before.
# 4. scripts/gpu/e2e.py resnet-only: resnet18 with PyTorch's cache, and with its cache off on
#    cuguard's pool (stacks off and on), this build and the one before; then one run with its
#    cache off and stacks on under `cuguard run`, for its bill (the stacks' cost per allocation).
# 5. PyTorch's cache fragmented by live tensors under CUGUARD_LIMIT=16GiB (torch_oom_probe.py
#    device: PyTorch sees the limit as the device), refused: cuguard's card beside PyTorch's
#    own figures, then the same with expandable_segments:True (the verdict checked).
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
gcc -O2 -I harness/workloads/c -o /tmp/card_parts scripts/gpu/card_parts.c -L/usr/local/nvidia/lib64 -lcuda -ldl \
  && /tmp/card_parts > "$OUT/card_parts.txt" 2>&1
echo "card_parts $?"
bash scripts/pair-bench.sh --bin .gpu --baseline .gpu/baseline/libcuguard.so --json "$OUT/pair.json" > "$OUT/pair.txt" 2>&1
echo "pair-bench $? at ${SECONDS}s"
ROUNDS=${ROUNDS:-4} OUT=$OUT bash scripts/gpu/tensor_cost.sh > /dev/null 2>&1
echo "tensor_cost $? at ${SECONDS}s"
python3 scripts/gpu/e2e.py resnet-only "$PWD/.gpu/libcuguard.so" "$OUT/e2e.json" > "$OUT/e2e.md" 2> "$OUT/e2e.log"
echo "e2e $? at ${SECONDS}s"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 CUGUARD_SHIM=$PWD/.gpu/libcuguard.so \
  timeout 200 "$C" run --quiet --report /tmp/floor_resnet.json -- python3 scripts/gpu/e2e.py resnet 20 > "$OUT/resnet_bill.txt" 2>&1
"$C" summary --cost /tmp/floor_resnet.json 2>&1 | tail -45 >> "$OUT/resnet_bill.txt"
echo "bill $? at ${SECONDS}s"
for conf in "" "expandable_segments:True"; do
  echo "== CUGUARD_LIMIT=16GiB PYTORCH_CUDA_ALLOC_CONF=$conf"
  R=/tmp/floor_limit${conf:+_expandable}.json
  PYTORCH_CUDA_ALLOC_CONF=$conf CUGUARD_LIMIT=16GiB CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python \
    timeout 200 "$C" run --report "$R" -- python3 scripts/gpu/torch_oom_probe.py device 2>&1 | tail -3 | cut -c1-3000
  "$C" summary --at oom "$R" 2>&1 | head -30
done > "$OUT/torch_limit.txt" 2>&1
echo "limit at ${SECONDS}s"
