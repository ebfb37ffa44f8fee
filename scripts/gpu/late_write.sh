#!/usr/bin/env bash
# The cross-stream late-write check (late_write.cu), for an 8 MiB block and a 256 KiB one (which
# the per-thread cache holds), bare, on the pool (as shipped: stream-aware reuse on), with the
# fence rule alone (stream-aware reuse off), pool off and with the per-thread cache off; a table in $OUT/late_write.md. Run from the repository root on the GPU
# machine after scripts/gpu/stage.sh: bash scripts/gpu/late_write.sh [TRIALS]
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
S=$PWD/.gpu/libcuguard.so
N=${1:-24}
B=/tmp/cuguard-late
mkdir -p $B
/usr/local/cuda/bin/nvcc -O1 -o $B/late_write scripts/gpu/late_write.cu || exit 1
{
  echo "| run | block | result |"
  echo "|---|---|---|"
  for size in 8388608 262144; do
  for v in bare pool pool-fence-only pool-no-thread-cache pool-off; do
    case $v in
      bare) env=() ;;
      pool) env=(LD_PRELOAD=$S) ;;
      pool-fence-only) env=(LD_PRELOAD=$S CUGUARD_POOL_STREAM_REUSE=0) ;;
      pool-no-thread-cache) env=(LD_PRELOAD=$S CUGUARD_POOL_THREAD_CACHE=0) ;;
      pool-off) env=(LD_PRELOAD=$S CUGUARD_POOL=0) ;;
    esac
    line=$(env "${env[@]}" CUGUARD_QUIET=1 CUGUARD_REPORT=$B/$v.$size.json timeout 120 $B/late_write $N $size 2> $B/$v.err | tail -1)
    echo "| $v | $size B | \`${line:-no output: $(tail -1 $B/$v.err)}\` |"
  done
  done
  # Y filled on the late kernel's own stream: what stream-aware reuse hands out at once.
  for v in bare pool pool-fence-only; do
    case $v in
      bare) env=() ;;
      pool) env=(LD_PRELOAD=$S) ;;
      pool-fence-only) env=(LD_PRELOAD=$S CUGUARD_POOL_STREAM_REUSE=0) ;;
    esac
    line=$(env "${env[@]}" CUGUARD_QUIET=1 CUGUARD_REPORT=$B/$v.same.json timeout 120 $B/late_write $N 8388608 same 2> $B/$v.err | tail -1)
    echo "| $v, same stream | 8388608 B | \`${line:-no output: $(tail -1 $B/$v.err)}\` |"
  done
} > "$OUT/late_write.md"
cat "$OUT/late_write.md"
