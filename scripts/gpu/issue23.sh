#!/usr/bin/env bash
# Issue 23 on the H200 in one call: the seed's cuDF loop from a cold start (e2e.py cold), the
# capture's bill on resnet18 (e2e.py resnet-only), the pool pair against cuMemAllocAsync
# (alloc_bench), the warm capture (capture_bench), the cuDF loop and ETL checksums (e2e.py all's
# cuDF rows) and the late-write check. With .gpu/baseline/libcuguard.so (another build: the one
# before the change) every part runs it side by side.
#
# Run from the repository root on the GPU machine after scripts/gpu/stage.sh (carry .gpu, .whl),
# with cuDF carried in parts into /tmp/cudf (../shared/gpu/fetch-cudf.sh says how):
#   bash scripts/gpu/issue23.sh [cold] [resnet] [bench] [capture] [cudf] [late]   (default: all)
# COLD_ROUNDS (3), RESNET_ROUNDS (1), BENCH_ROUNDS (3), CUDF_ROUNDS (1). Writes $OUT/*.md, *.json.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
S=$PWD/.gpu/libcuguard.so
export PYTHONUNBUFFERED=1
what=${*:-cold resnet bench capture cudf late}

if [ -d /tmp/cudf ] && ls /tmp/cudf/libcudf.part.* >/dev/null 2>&1; then
  (cd /tmp/cudf && cat libcudf.part.* > libcudf_cu13-26.10.2-py3-none-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl && rm libcudf.part.*)
fi
# Installed once per machine (a later call on the same warm machine finds it).
[ -d /tmp/site/cudf ] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl /tmp/cudf/*.whl > "$OUT/pip.log" 2>&1
# numpy 2.5 there no longer has row_stack, which this cuDF still imports.
printf 'import numpy\nif not hasattr(numpy, "row_stack"): numpy.row_stack = numpy.vstack\n' > /tmp/site/sitecustomize.py
export PYTHONPATH=/tmp/site
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys; print("python", sys.version.split()[0])'
  for m in torch torchvision rmm cudf; do
    python3 -c "import $m; print('$m', getattr($m, '__version__', '?'))" 2>&1 | tail -1
  done
  ls .gpu .gpu/baseline 2>/dev/null | tr '\n' ' '; echo
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

step() { echo "== $1 $(date -u +%T)"; }
if [[ " $what " == *" cold "* ]]; then
  step cold
  E2E_ROUNDS=${COLD_ROUNDS:-3} python3 scripts/gpu/e2e.py cold "$S" "$OUT/cold.json" > "$OUT/cold.md" 2> "$OUT/cold.log"
  cat "$OUT/cold.md"
fi
if [[ " $what " == *" resnet "* ]]; then
  step resnet
  E2E_ROUNDS=${RESNET_ROUNDS:-1} python3 scripts/gpu/e2e.py resnet-only "$S" "$OUT/resnet.json" > "$OUT/resnet.md" 2> "$OUT/resnet.log"
  cat "$OUT/resnet.md"
fi
if [[ " $what " == *" bench "* ]]; then
  step bench
  base=()
  [ -f .gpu/baseline/libcuguard.so ] && base=(--baseline "$PWD/.gpu/baseline/libcuguard.so")
  .gpu/alloc_bench --shim "$S" "${base[@]}" --rounds "${BENCH_ROUNDS:-3}" --tests pair,async \
    --variants bare,pool,pool+stacks,pool-untracked --json "$OUT/bench.json" > "$OUT/bench.md" 2> "$OUT/bench.log"
  cat "$OUT/bench.md"
fi
if [[ " $what " == *" capture "* ]]; then
  step capture
  .gpu/capture_bench --shim "$S" --python-script harness/workloads/python/alloc_bench.py > "$OUT/capture.md" 2> "$OUT/capture.log"
  cat "$OUT/capture.md"
fi
if [[ " $what " == *" cudf "* ]]; then
  step cudf
  E2E_ROUNDS=${CUDF_ROUNDS:-1} python3 scripts/gpu/e2e.py cudf-only "$S" "$OUT/cudf.json" > "$OUT/cudf.md" 2> "$OUT/cudf.log"
  cat "$OUT/cudf.md"
fi
if [[ " $what " == *" late "* ]]; then
  step late
  bash scripts/gpu/late_write.sh 24 > /dev/null 2>&1
  cat "$OUT/late_write.md"
fi
step done
(cd /tmp && tar czf "$OUT/reports.tgz" cuguard-e2e 2>/dev/null)
