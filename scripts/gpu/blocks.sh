#!/usr/bin/env bash
# PyTorch's blocks (issue 54, item 1: which hook) and tags on PyTorch (issue 55, item 2), in one
# call of about 2 minutes. Run from the repository root on the GPU machine after
# scripts/gpu/stage.sh (.gpu/):
#   OUT=$OUT bash scripts/gpu/blocks.sh
#
# 1. scripts/gpu/blocks_probe.c, preloaded, in front of c10::reportMemoryUsageToProfiler:
#    whether libc10 exports it, whether a preloaded library sees PyTorch's every block (the
#    `check` mode compares its events with PyTorch's own _record_memory_history trace over three
#    training steps), and the cost of a tensor's allocate-and-free pair (torch.empty(1000) and
#    del) with no probe, with it, with it reading the Python line, and with PyTorch's recorder
#    (no stacks, Python stacks): five modes, each its own process, run twice, interleaved.
# 2. scripts/gpu/tags_torch.py under `cuguard run` (pool off): the report's leaks and their tags
#    beside PyTorch's segments; `summary --by tag`.
# Writes to $OUT: blocks.txt (everything, in order), blocks.json (the JSON lines), sequences.json
# (the check's two sequences of events), tags.json (the report). ROUNDS="1" runs the cost once.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-blocks
rm -rf "$B"; mkdir -p "$B"
C=$PWD/.gpu/cuguard
export PYTHONUNBUFFERED=1
# The package `cuguard` (tags_torch.py imports it) from this checkout; the shim the command runs.
export PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH} CUGUARD_SHIM=$PWD/.gpu/libcuguard.so
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_NO_CUDA_MEMORY_CACHING
{
  echo "== versions"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  lib=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
  echo "== 1. the hook: exported by"
  for so in "$lib"/libc10.so "$lib"/libc10_cuda.so; do
    echo "$(basename "$so"): $(nm -D "$so" 2>/dev/null | grep -c ' [TU] _ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE') ($(nm -D "$so" | grep ' _ZN3c1027reportMemoryUsageToProfiler' | awk '{print $(NF-1)}' | tr '\n' ' '))"
  done
  cc -O2 -shared -fPIC -o "$B/blocks_probe.so" scripts/gpu/blocks_probe.c -ldl || echo "cc failed"
  for round in ${ROUNDS:-1 2}; do
    for mode in none probe line history history-python; do
      pre=; [ "$mode" = probe ] || [ "$mode" = line ] && pre="$B/blocks_probe.so"
      env ${pre:+LD_PRELOAD=$pre} PROBE="$B/blocks_probe.so" timeout 120 python3 scripts/gpu/blocks_probe.py $mode 2>&1 | tail -1 | tee -a "$OUT/blocks.json"
    done
  done
  SEQUENCES="$OUT/sequences.json" LD_PRELOAD="$B/blocks_probe.so" PROBE="$B/blocks_probe.so" timeout 120 python3 scripts/gpu/blocks_probe.py check 2>&1 | tail -3 | tee -a "$OUT/blocks.json"
  echo "== 2. tags on PyTorch (at ${SECONDS}s)"
  if [ -x "$C" ]; then
    CUGUARD_POOL=0 timeout 120 "$C" run --quiet --report "$B/tags.json" -- python3 scripts/gpu/tags_torch.py > "$B/tags.out" 2> "$B/tags.err"
    echo "exit $?"; cat "$B/tags.out"; tail -5 "$B/tags.err"
    python3 - "$B/tags.json" "$B/tags.out" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
program = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
leaks = [(int(l["address"], 16), l["size"], l.get("tag")) for l in report["leaks"] if l["memory"] == "device"]
print("leaks (address, size, tag):", [(hex(a), s, t) for a, s, t in leaks])
for name, t in program["tensors"].items():
    holder = [(a, s, tag) for a, s, tag in leaks if a <= t["address"] < a + s]
    verdict = "PASS" if len(holder) == 1 and holder[0][2] == name else "FAIL"
    print(f"{verdict} {name}: tensor at {t['address']:#x} ({t['bytes']} bytes) in {[(hex(a), s, tag) for a, s, tag in holder]}")
PY
    cp "$B/tags.json" "$OUT/tags.json"
    "$C" summary --by tag "$B/tags.json" 2>&1 | head -40
  else
    echo "no .gpu/cuguard: tags not run"
  fi
} 2>&1 | tee "$OUT/blocks.txt"
