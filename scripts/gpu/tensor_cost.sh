#!/usr/bin/env bash
# What cuguard adds to a PyTorch tensor's allocate-and-free pair (issue 54: at most 1 us) and to
# a training step (at most 1%), this build beside the build before, with an A/A control, in one
# call of about 5 minutes. After scripts/gpu/stage.sh with BASELINE= (.gpu/baseline/):
#   OUT=$OUT bash scripts/gpu/tensor_cost.sh
#
# Variants, each its own process pinned to one core (torch_blocks.py pairs: the median of 40
# batches of 5,000 pairs), interleaved over ROUNDS rounds (6): none (no cuguard), cuguard (this
# build, its defaults), before (the baseline build, its defaults), none-again (the A/A control).
# Then a training step (torch_blocks.py steps) with none, cuguard and before, in the first two
# rounds (STEP_ROUNDS of them, 2 unless said). Writes $OUT/tensor_cost.txt and $OUT/tensor_cost.json (JSON lines).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-tensor-cost
rm -rf "$B"; mkdir -p "$B"
C=$PWD/.gpu/cuguard
S=scripts/gpu/torch_blocks.py
PIN=""
if command -v taskset >/dev/null; then PIN="taskset -c $(( $(nproc) - 1 ))"; fi
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH}
NOW=$PWD/.gpu/libcuguard.so BEFORE=$PWD/.gpu/baseline/libcuguard.so
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_NO_CUDA_MEMORY_CACHING
run() {  # variant mode
  case $1 in
    none|none-again) timeout 120 $PIN python3 $S "$2" ;;
    cuguard) CUGUARD_SHIM=$NOW timeout 120 $PIN "$C" run --quiet --report "$B/c.json" -- python3 $S "$2" ;;
    before) CUGUARD_SHIM=$BEFORE timeout 120 $PIN "$C" run --quiet --report "$B/b.json" -- python3 $S "$2" ;;
  esac 2>/dev/null | tail -1
}
{
  echo "== versions"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  sha256sum "$NOW" "$BEFORE" | cut -c1-16
  for round in $(seq 1 "${ROUNDS:-6}"); do
    echo "== round $round (at ${SECONDS}s)"
    for m in none cuguard before none-again; do
      run $m pairs | sed "s/^{/{\"variant\": \"$m\", \"mode\": \"pairs\", \"round\": $round, /" | tee -a "$OUT/tensor_cost.json"
    done
    if [ "$round" -le "${STEP_ROUNDS:-2}" ]; then
      for m in none cuguard before; do
        run $m steps | sed "s/^{/{\"variant\": \"$m\", \"mode\": \"steps\", \"round\": $round, /" | tee -a "$OUT/tensor_cost.json"
      done
    fi
  done
  echo "== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/tensor_cost.txt"
