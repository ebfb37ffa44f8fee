#!/usr/bin/env bash
# What an NVTX range pair costs the program under `cuguard run` (issue 55: "a range pair at most
# 200 ns, measured"): scripts/nvtx_cost.c, built with NVIDIA's nvtx3 headers, run with no tool
# (NVTX_INJECTION64_PATH unset: the headers' no-op) and under `cuguard run --driver sim` (the
# shim as NVTX's tool, the history on), interleaved over ROUNDS rounds, in one run.
#
#   scripts/nvtx-cost.sh [ROUNDS [PAIRS]]     (5 and 1000000 unless given; after
#                                              cargo build --release -p cuguard -p cuguard-shim -p cuguard-simcuda)
#
# NVTX_INCLUDE: the directory holding nvtx3/ (the `nvidia-nvtx` wheel's nvidia/<cu>/include);
# else it is looked for in python3's site-packages. BEFORE=/path/libcuguard.so: another shim (a
# build before) measured beside this build's, as `before`.
#
# Each line: the configuration and kind, ns per pair in each round, then the median. Kinds
# (see scripts/nvtx_cost.c): `pushA` and `registered`, PAIRS pairs back to back (under the shim,
# the pace of the history's writer: two records a pair), and the same `-bursts`, 100 bursts of
# 2,000 pairs 10 ms apart, the median burst's (what the program's thread pays itself). Then each configuration's
# median minus no tool's, and the events the last round's history lost (0: every range
# recorded).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
ROUNDS=${1:-5}
PAIRS=${2:-1000000}
CUGUARD=$PWD/target/release/cuguard
SHIM=$PWD/target/release/libcuguard.so
SIM=$PWD/target/release/cuguard-sim
for f in "$CUGUARD" "$SHIM" "$PWD/target/release/libcuguard_simcuda.so"; do
  [ -e "$f" ] || { echo "nvtx-cost: $f is missing: cargo build --release -p cuguard -p cuguard-shim -p cuguard-simcuda" >&2; exit 2; }
done
[ -e "$SIM/libcuda.so.1" ] || { mkdir -p "$SIM"; ln -sf ../libcuguard_simcuda.so "$SIM/libcuda.so.1"; ln -sf ../libcuguard_simcuda.so "$SIM/libcuda.so"; }
INC=${NVTX_INCLUDE:-}
if [ -z "$INC" ]; then
  INC=$(python3 - <<'PY' 2>/dev/null || true
import glob, site, sys
dirs = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for d in dirs:
    for h in sorted(glob.glob(d + "/nvidia/*/include/nvtx3/nvToolsExt.h")):
        print(h[: -len("/nvtx3/nvToolsExt.h")])
        raise SystemExit
PY
)
fi
[ -n "$INC" ] && [ -e "$INC/nvtx3/nvToolsExt.h" ] || {
  echo "nvtx-cost: no nvtx3 headers: set NVTX_INCLUDE to the directory holding nvtx3/ (pip install nvidia-nvtx: nvidia/<cu>/include)" >&2
  exit 2
}
B=$(mktemp -d); trap 'rm -rf "$B"' EXIT
cc -O2 -g -Wall -I"$INC" -o "$B/nvtx_cost" scripts/nvtx_cost.c -ldl

configs=(none)
[ -n "${BEFORE:-}" ] && configs+=(before)
configs+=(cuguard)
kinds=(pushA registered pushA-bursts registered-bursts)
declare -A out
for r in $(seq "$ROUNDS"); do
  for c in "${configs[@]}"; do
    case $c in
      none) lines=$(env -u NVTX_INJECTION64_PATH LD_LIBRARY_PATH="$SIM" "$B/nvtx_cost" "$PAIRS") ;;
      before) lines=$(CUGUARD_SHIM=$BEFORE "$CUGUARD" run --driver sim --report "$B/before.json" -- "$B/nvtx_cost" "$PAIRS" 2>/dev/null) ;;
      cuguard) lines=$(CUGUARD_SHIM=$SHIM "$CUGUARD" run --driver sim --report "$B/r.json" -- "$B/nvtx_cost" "$PAIRS" 2>/dev/null) ;;
    esac
    while read -r kind ns; do out[$c.$kind]="${out[$c.$kind]:-} $ns"; done <<<"$lines"
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
declare -A med
for c in "${configs[@]}"; do
  for k in "${kinds[@]}"; do
    med[$c.$k]=$(echo "${out[$c.$k]}" | median)
    printf '%-8s %-18s ns/pair:%s  median %s\n' "$c" "$k" "${out[$c.$k]}" "${med[$c.$k]}"
  done
done
for c in "${configs[@]}"; do
  [ "$c" = none ] && continue
  for k in "${kinds[@]}"; do
    printf '%-8s %-18s %+.1f ns a pair over no tool\n' "$c" "$k" "$(echo "${med[$c.$k]} - ${med[none.$k]}" | bc -l)"
  done
done
lost=$("$CUGUARD" summary --by phase --format json "$B/r.json" | python3 -c 'import json, sys; print(json.load(sys.stdin)["span"]["lost_events"])')
echo "events lost by the last round's history: $lost"
