#!/usr/bin/env bash
# Call paths on the GPU (issue 50): PyTorch allocations through one helper called from three
# lines, one of which keeps its tensor, and in the `new` run a second; under the shim with
# PyTorch's cache off (PYTORCH_NO_CUDA_MEMORY_CACHING=1: each tensor is one driver allocation)
# and on (the cache's segments). What summary, check (text, GitHub), diff and suppressions name.
# Run from the repository root on the GPU machine after scripts/gpu/stage.sh (.gpu/).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-call-paths
rm -rf "$B"; mkdir -p "$B"
C=$PWD/.gpu/cuguard
cp scripts/gpu/call_paths_torch.py "$B/"
cd "$B"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
for mode in uncached cached; do
  if [ "$mode" = uncached ]; then export PYTORCH_NO_CUDA_MEMORY_CACHING=1; else unset PYTORCH_NO_CUDA_MEMORY_CACHING; fi
  for run in base new; do
    arg=""; [ "$run" = new ] && arg=new
    echo "== $mode $run"
    timeout 120 "$C" run --report "$mode-$run.json" -- python3 call_paths_torch.py $arg
  done
  {
    echo "### $mode: summary base"; "$C" summary "$mode-base.json"
    echo "### $mode: check new"; "$C" check "$mode-new.json"; echo "exit $?"
    echo "### $mode: check new --format github"; "$C" check "$mode-new.json" --format github --source-root "$B"
    echo "### $mode: diff base new"; "$C" diff "$mode-base.json" "$mode-new.json"
    echo "### $mode: suppressions base"; "$C" suppressions "$mode-base.json" | tee "$mode.supp"
    echo "### $mode: check new --suppressions (from base) --show-suppressed"
    "$C" check "$mode-new.json" --suppressions "$mode.supp" --show-suppressed; echo "exit $?"
  } > "$OUT/$mode.txt" 2>&1
  cat "$OUT/$mode.txt"
done
tar czf "$OUT/reports.tgz" ./*.json ./*.supp 2>/dev/null
