#!/usr/bin/env bash
# Issue 21 item 5 on the real GPU (scripts/gpu/stacks.py says what must hold):
#   1. PyTorch with the cache off and cuguard's origin wrapper: autograd-thread sites name the
#      backward() line; main-thread chains fold ATen and reach the user's lines.
#   2. A library loaded with ctypes after CUDA started, built -O1 without frame pointers
#      (harness/workloads/c/late_lib.c against the real libcuda): every frame of it is in the
#      stack and the chain ends at the Python caller (compare with tests/it/stack.rs).
# Run from the repository root with the release build staged in .gpu/ (scripts/gpu/stage.sh):
#   bash scripts/gpu/stacks.sh        → $OUT/stacks.md (default ./gpu-out/)
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-stacks
rm -rf "$B" && mkdir -p "$B"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH}
{
  echo "## PyTorch (cache off, origin wrapper)"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$C" run --report "$B/torch.exit.json" --quiet -- \
    python3 scripts/gpu/stacks.py torch "$B/torch.json"
  "$C" summary --format json "$B/torch.json" > "$B/torch.summary.json"
  python3 scripts/gpu/stacks.py judge "$B/torch.summary.json"
  echo "torch rc $?"
  echo
  echo "## A library loaded after CUDA started, -O1"
  cc -O1 -fomit-frame-pointer -g -shared -fPIC -o "$B/liblate.so" harness/workloads/c/late_lib.c \
    -I harness/workloads/c -lcuda
  "$C" run --report "$B/late.json" --quiet -- python3 harness/workloads/python/late_lib.py "$B/liblate.so"
  "$C" summary "$B/late.json" | grep -A1 "late_0 (late_lib.c" | head -2
  python3 - "$B/late.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
names = [[f.get("function") for f in s["frames"] if "liblate" in f["module"]] for s in r["stacks"]]
want = ["late_0", "late_1", "late_2", "late_3", "late_entry"]
print("late library frames:", "yes" if want in names else "**NO** " + repr(names))
PY
} 2>&1 | tee "$OUT/stacks.md"
