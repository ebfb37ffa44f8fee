#!/usr/bin/env bash
# The pool's cuMemAlloc_v2 + cuMemFree_v2 pair, told from noise (issue 56): untracked, tracked
# with stacks off (`pool`) and on (`pool+stacks`, the default), each with the history off too,
# beside an A/A control (`pool` run twice, as `pool` and `pool@control`) and, with --baseline,
# beside another build's shim (`NAME@baseline`: this build beside the build before).
#
#   scripts/pair-bench.sh [--short] [--baseline OLD.so] [--bin DIR] [--sim] [--rounds N]
#                         [--core N] [--json FILE]
#
#   --short          CI's form: 5 counted rounds of few batches (`alloc_bench --quick`); under a
#                    minute on a 2-core machine. Without it, the full form: 15 rounds.
#   --baseline SO    another build's libcuguard.so, run beside this one.
#   --bin DIR        where alloc_bench and libcuguard.so are (default the checkout's
#                    target/release, or its .gpu on the GPU machine, as scripts/gpu/stage.sh
#                    leaves them).
#   --sim            run on the simulated driver of DIR (libcuguard_simcuda.so); without it the
#                    driver is whatever libcuda.so.1 the loader finds, the real one on a GPU host.
#   --rounds N       counted rounds instead (the full form's at least 9).
#   --core N         the core every child is pinned to (default the last this process may use).
#   --json FILE      every figure and comparison, as JSON.
#
# Every configuration is a child process pinned to one core, the configurations shuffled anew
# every round (fixed seed), one warm-up round discarded (and the first quarter of each child's
# batches), each figure the median over the counted rounds with its interquartile range; every
# A/B difference is shown beside the control's, and one no larger is reported as none
# (harness/workloads/src/pair_stats.rs, docs/benchmarks.md "How to reproduce").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

short=0 rounds= core= json= baseline= sim=0 bin=
while [ $# -gt 0 ]; do
  case $1 in
    --short) short=1 ;;
    --sim) sim=1 ;;
    --baseline|--bin|--rounds|--core|--json)
      [ $# -ge 2 ] || { echo "pair-bench.sh: $1 needs a value" >&2; exit 2; }
      case $1 in
        --baseline) baseline=$2 ;;
        --bin) bin=$2 ;;
        --rounds) rounds=$2 ;;
        --core) core=$2 ;;
        --json) json=$2 ;;
      esac
      shift ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "pair-bench.sh: unknown option $1 (--help says which there are)" >&2; exit 2 ;;
  esac
  shift
done

if [ -z "$bin" ]; then
  bin=$root/target/release
  [ -x "$bin/alloc_bench" ] || [ ! -x "$root/.gpu/alloc_bench" ] || bin=$root/.gpu
fi
for f in alloc_bench libcuguard.so; do
  [ -e "$bin/$f" ] || { echo "pair-bench.sh: no $bin/$f (build it: cargo build --release -p cuguard-workloads -p cuguard-shim)" >&2; exit 1; }
done
bin=$(cd "$bin" && pwd)

args=(--shim "$bin/libcuguard.so" --tests pair
      --variants pool-untracked,pool,pool+stacks,pool-nohistory,pool+stacks-nohistory
      --control pool --warmup 1)
if [ "$short" = 1 ]; then
  args+=(--quick --rounds "${rounds:-5}")
else
  args+=(--rounds "${rounds:-15}")
fi
[ -z "$baseline" ] || args+=(--baseline "$baseline")
[ -z "$core" ] || args+=(--core "$core")
[ -z "$json" ] || args+=(--json "$json")

if [ "$sim" = 1 ]; then
  [ -e "$bin/libcuguard_simcuda.so" ] || { echo "pair-bench.sh: no $bin/libcuguard_simcuda.so for --sim" >&2; exit 1; }
  drv=$(mktemp -d)
  trap 'rm -rf "$drv"' EXIT
  ln -s "$bin/libcuguard_simcuda.so" "$drv/libcuda.so.1"
  export LD_LIBRARY_PATH="$drv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

echo "pair-bench.sh: $(uname -n), $(nproc) cores allowed, $(date -u +%Y-%m-%dT%H:%M:%SZ); driver: ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH=$LD_LIBRARY_PATH, }the libcuda.so.1 the loader finds"
echo "\$ $bin/alloc_bench ${args[*]}"
"$bin/alloc_bench" "${args[@]}"
