#!/usr/bin/env bash
# What building the out-of-memory card costs the refused call (issue 53: at most 1 ms beyond the
# refusal): the time of cuMemAlloc calls the simulated driver refuses, bare and under the shim
# (pool off and on), each configuration ROUNDS times, interleaved, in one run.
#
#   scripts/oom-latency.sh [ROUNDS]        (after `cargo build --release --workspace`)
#
# Each line: the configuration, then per round "FIRST MEDIAN MAX" in ns: the first refused
# call (which records the card and asks the cuguard thread to say the line) and the median and
# slowest of the 199 after it (the next 15 are recorded in full too; the rest only counted).
set -eu
cd "$(git rev-parse --show-toplevel)"
ROUNDS=${1:-5}
SIM=$PWD/target/release/cuguard-sim
SHIM=$PWD/target/release/libcuguard.so
[ -e "$SIM/libcuda.so.1" ] || { mkdir -p "$SIM"; ln -sf ../libcuguard_simcuda.so "$SIM/libcuda.so.1"; ln -sf ../libcuguard_simcuda.so "$SIM/libcuda.so"; }
B=$(mktemp -d); trap 'rm -rf "$B"' EXIT
gcc -O2 -g -fno-omit-frame-pointer -I harness/workloads/c -o "$B/limit" harness/workloads/c/limit.c \
  -L"$SIM" -lcuda -lpthread -ldl
declare -A out
for r in $(seq "$ROUNDS"); do
  for c in bare pool-off pool-on; do
    case $c in
      bare) line=$(CUGUARD_SIM_MEMORY=1GiB LD_LIBRARY_PATH=$SIM "$B/limit" alloc 64 refusals 200 | tail -1) ;;
      pool-off) line=$(CUGUARD_POOL=0 CUGUARD_REPORT=$B/r.json CUGUARD_SIM_MEMORY=1GiB LD_LIBRARY_PATH=$SIM LD_PRELOAD=$SHIM "$B/limit" alloc 64 refusals 200 2>/dev/null | tail -1) ;;
      pool-on) line=$(CUGUARD_REPORT=$B/r.json CUGUARD_SIM_MEMORY=1GiB LD_LIBRARY_PATH=$SIM LD_PRELOAD=$SHIM "$B/limit" alloc 64 refusals 200 2>/dev/null | tail -1) ;;
    esac
    out[$c]="${out[$c]:-}  ${line#refusals }"
  done
done
for c in bare pool-off pool-on; do echo "$c:${out[$c]}"; done
