#!/usr/bin/env bash
# What the hook on PyTorch's tensor blocks (c10::reportMemoryUsageToProfiler,
# shim/src/hooks/torch_blocks.rs) adds to a tensor's allocate-and-free pair (issue 54: at most
# 1 us), told from noise: a Python loop of stand_in_alloc + stand_in_free through ctypes on the
# stand-in caching allocator (harness/workloads/c/c10_cuda_stand_in.cc), untracked, under this
# build's shim (`after`) run twice (the A/A control, `after@control`) and, with --baseline,
# under another build's (`before`). scripts/tensor_pair_bench.py says how the figures are made.
#
#   scripts/tensor-pair-bench.sh [--baseline OLD.so] [--bin DIR] [--rounds N] [--pairs N]
#                                [--batches N] [--core N] [--json FILE]
#
#   --baseline SO    another build's libcuguard.so, run beside this one.
#   --bin DIR        where libcuguard.so and libcuguard_simcuda.so are (default the checkout's
#                    target/release).
#   --rounds N       counted rounds (default 9; one warm-up round more).
#   --pairs N        pairs a batch (default 20000); --batches N: batches a child (default 12).
#   --core N         the core every child is pinned to (default the last this process may use).
#   --json FILE      every figure, as JSON.
#
# On the simulated driver (the stand-in takes its segments with cuMemAlloc); needs c++ and
# python3. Build first: cargo build --release -p cuguard-shim -p cuguard-simcuda.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

bin= py_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --baseline|--bin|--rounds|--pairs|--batches|--core|--json)
      [ $# -ge 2 ] || { echo "tensor-pair-bench.sh: $1 needs a value" >&2; exit 2; }
      case $1 in
        --baseline) py_args+=(--before "$(cd "$(dirname "$2")" && pwd)/$(basename "$2")") ;;
        --bin) bin=$2 ;;
        *) py_args+=("$1" "$2") ;;
      esac
      shift ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "tensor-pair-bench.sh: unknown option $1 (--help says which there are)" >&2; exit 2 ;;
  esac
  shift
done

bin=${bin:-$root/target/release}
for f in libcuguard.so libcuguard_simcuda.so; do
  [ -e "$bin/$f" ] || { echo "tensor-pair-bench.sh: no $bin/$f (build it: cargo build --release -p cuguard-shim -p cuguard-simcuda)" >&2; exit 1; }
done
bin=$(cd "$bin" && pwd)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sim"
ln -s "$bin/libcuguard_simcuda.so" "$work/sim/libcuda.so.1"
ln -s "$bin/libcuguard_simcuda.so" "$work/sim/libcuda.so"
# The stand-ins as tests/it/torch_blocks.rs builds them (stand_ins()).
src=$root/harness/workloads/c
cxx=${CXX:-c++}
"$cxx" -O0 -g -shared -fPIC -Wall -Wl,-soname,libc10.so -o "$work/libc10.so" "$src/c10_stand_in.cc"
"$cxx" -O0 -g -shared -fPIC -Wall -o "$work/libc10_cuda.so" "$src/c10_cuda_stand_in.cc" -I "$src" \
  -L "$work" -lc10 -Wl,-rpath,'$ORIGIN' -L "$work/sim" -lcuda

echo "tensor-pair-bench.sh: $(uname -n), $(nproc) cores allowed, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
python3 "$root/scripts/tensor_pair_bench.py" --cuda-so "$work/libc10_cuda.so" \
  --sim-dir "$work/sim" --after "$bin/libcuguard.so" "${py_args[@]}"
