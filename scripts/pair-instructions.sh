#!/usr/bin/env bash
# Instructions per cuMemAlloc_v2 + cuMemFree_v2 pair (4 KiB) through the shim on the simulated
# driver, counted by callgrind: deterministic, so it shows what a change to the allocation path
# adds or removes where the clock (alloc_bench) moves by ±10% between runs.
#
#   scripts/pair-instructions.sh [SHIM.so ...]      (default: target/release/libcuguard.so)
#
# For each shim: a C loop of 1,000 pairs (warm-up) then 20,000, collected only inside the loop
# (`--toggle-collect`), with stacks off (CUGUARD_STACK_DEPTH=0) and on (the default), and
# untracked (CUGUARD_TEST_NO_TRACKING=1). The environment passes through: with the history on (the
# default), a full ring can make the allocating thread wait for the history's thread, which valgrind
# schedules as it likes, so compare builds with CUGUARD_HISTORY=0 set for counts that repeat.
# Needs gcc, valgrind and a release build
# (cargo build --release --workspace: the shim and target/release/libcuguard_simcuda.so).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
shims=("$@")
[ ${#shims[@]} -gt 0 ] || shims=(target/release/libcuguard.so)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/drv"
ln -s "$PWD/target/release/libcuguard_simcuda.so" "$work/drv/libcuda.so.1"
cat > "$work/loop.c" <<'C'
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
typedef int (*alloc_t)(uint64_t *, size_t);
typedef int (*free_t)(uint64_t);
__attribute__((noinline)) void pairs(alloc_t a, free_t f, int n) {
  for (int i = 0; i < n; i++) { uint64_t p; a(&p, 4096); f(p); }
}
int main(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  int (*dev)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
  int (*retain)(void **, int) = (int (*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain");
  int (*set)(void *) = (int (*)(void *))dlsym(h, "cuCtxSetCurrent");
  alloc_t a = (alloc_t)dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  free_t f = (free_t)dlsym(RTLD_DEFAULT, "cuMemFree_v2");
  int d; void *c;
  if (!init || !dev || !retain || !set || !a || !f || init(0) || dev(&d, 0) || retain(&c, d) || set(c))
    return 1;
  pairs(a, f, 1000);
  pairs(a, f, 20000);
  return 0;
}
C
gcc -O1 -o "$work/loop" "$work/loop.c" -ldl
count() { # SHIM, then environment assignments
  local shim=$1; shift
  env "$@" CUGUARD_QUIET=1 CUGUARD_REPORT="$work/r.json" LD_LIBRARY_PATH="$work/drv" LD_PRELOAD="$(realpath "$shim")" \
    valgrind --tool=callgrind --toggle-collect=pairs --callgrind-out-file="$work/out" "$work/loop" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
  rm -f "$work"/r.json* "$work"/*.history*
}
printf '| shim | untracked | stacks off | stacks on (the default) |\n|---|---:|---:|---:|\n'
for shim in "${shims[@]}"; do
  u=$(count "$shim" CUGUARD_TEST_NO_TRACKING=1)
  off=$(count "$shim" CUGUARD_STACK_DEPTH=0)
  on=$(count "$shim" X=1)
  printf '| %s | %d | %d | %d |\n' "$shim" $((u / 21000)) $((off / 21000)) $((on / 21000))
done
echo "(instructions per pair: collected over 21,000 pairs, divided)"
