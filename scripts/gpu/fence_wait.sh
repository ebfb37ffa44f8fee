#!/usr/bin/env bash
# The pool's wait for the oldest fence on the real driver (fence_wait.cu): bare, on the pool (as
# shipped), with the fence rule alone, and the pool's counters from each report; a table in
# $OUT/fence_wait.md. Run from the repository root on the GPU machine after scripts/gpu/stage.sh:
#   bash scripts/gpu/fence_wait.sh [TRIALS]
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
S=$PWD/.gpu/libcuguard.so
N=${1:-8}
B=/tmp/cuguard-fence-wait
mkdir -p $B
/usr/local/cuda/bin/nvcc -O1 -o $B/fence_wait scripts/gpu/fence_wait.cu || exit 1
{
  echo "| run | result | pool counters |"
  echo "|---|---|---|"
  for v in bare pool pool-fence-only; do
    case $v in
      bare) env=() ;;
      pool) env=(LD_PRELOAD=$S) ;;
      pool-fence-only) env=(LD_PRELOAD=$S CUGUARD_POOL_STREAM_REUSE=0) ;;
    esac
    rm -f $B/$v.json
    line=$(env "${env[@]}" CUGUARD_QUIET=1 CUGUARD_REPORT=$B/$v.json timeout 120 $B/fence_wait $N 2> $B/$v.err | tail -1)
    counters=$(python3 -c "
import json, sys
try:
    p = json.load(open('$B/$v.json'))['stats']['devices'][0]['pool']
    print(', '.join(f'{k} {p.get(k)}' for k in ('fences', 'fence_waits', 'syncs', 'stream_reuses')))
except Exception:
    print('-')
")
    echo "| $v | \`${line:-no output: $(tail -1 $B/$v.err)}\` | $counters |"
  done
} > "$OUT/fence_wait.md"
cat "$OUT/fence_wait.md"
