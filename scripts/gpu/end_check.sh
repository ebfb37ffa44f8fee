#!/usr/bin/env bash
# Issue 21 on the H200: the end of a Python program's code and the view inside the frameworks'
# caches (PyTorch's caching allocator, CuPy's pool), all with the caches on, and the view's cost
# on resnet18 (CUGUARD_CACHE_VIEW=1 against =0, interleaved in one run).
# Run from the repository root after scripts/gpu/stage.sh; writes logs and reports to $OUT.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
E=scripts/gpu/end
for case in ${CASES:-torch_keep cupy_keep}; do
  $C run --report "$OUT/$case.json" -- python3 $E/$case.py > "$OUT/$case.log" 2>&1
  echo "rc=$?" >> "$OUT/$case.log"
  $C summary "$OUT/$case.json" > "$OUT/$case.summary.txt" 2>&1
  $C check "$OUT/$case.json" > "$OUT/$case.check.txt" 2>&1; echo "rc=$?" >> "$OUT/$case.check.txt"
  $C check --held "$OUT/$case.json" > "$OUT/$case.check-held.txt" 2>&1; echo "rc=$?" >> "$OUT/$case.check-held.txt"
done
# pytest --cuguard with the caches on (no --cuguard-uncached): the tests that keep a tensor or an
# array fail, naming their lines.
if [ -z "${NO_PYTEST:-}" ]; then
  (cd scripts/gpu/pytest_gpu && CUGUARD_REPORT=$OUT/pytest.%p.json timeout 600 \
    $C run -- python3 -m pytest -p cuguard.pytest_plugin -p no:cacheprovider --cuguard test_frameworks.py) \
    > "$OUT/pytest-cached.txt" 2>&1
  echo "rc=$?" >> "$OUT/pytest-cached.txt"
fi
# dask-cuda: two snapshots around releasing a future that holds a 512 MiB CuPy array.
if [ -z "${NO_DASK:-}" ] && [ -d .whl ]; then
  [ -d /tmp/site/dask_cuda ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  PYTHONPATH=$PYTHONPATH:/tmp/site PATH=$PWD/.gpu:$PATH timeout 300 python3 $E/dask_future.py "$OUT" > "$OUT/dask.log" 2>&1
  echo "rc=$?" >> "$OUT/dask.log"
  for s in before after; do $C summary "$OUT/dask-$s.json" > "$OUT/dask-$s.summary.txt" 2>&1; done
fi
if [ -z "${NO_COST:-}" ]; then
  for round in 1 2 3; do
    for view in 1 0; do
      ms=$(CUGUARD_CACHE_VIEW=$view $C run --quiet --report /tmp/cost.json -- python3 $E/resnet_cost.py 60 2>&1 | grep step_ms | cut -d' ' -f2)
      echo "round $round view $view step_ms $ms" | tee -a "$OUT/cost.txt"
    done
    ms=$(python3 $E/resnet_cost.py 60 2>&1 | grep step_ms | cut -d' ' -f2)
    echo "round $round bare step_ms $ms" | tee -a "$OUT/cost.txt"
  done
fi
for s in before after; do [ -f "$OUT/dask-$s.summary.txt" ] && { echo "=== dask $s"; grep -A4 "inside the caches" "$OUT/dask-$s.summary.txt"; grep "the end" "$OUT/dask-$s.summary.txt"; }; done
tail -n 5 "$OUT/dask.log" 2>/dev/null
[ -f "$OUT/pytest-cached.txt" ] && grep -E "^(FAILED|PASSED)|cuguard: this test|  [0-9.]+ [KMG]iB  |passed|failed|rc=" "$OUT/pytest-cached.txt"
for case in ${CASES:-torch_keep cupy_keep}; do echo "=== $case"; sed -n '1,/^sites/p' "$OUT/$case.summary.txt"; tail -n 4 "$OUT/$case.check.txt" "$OUT/$case.check-held.txt"; done
(cd "$OUT" && tar czf reports.tgz *.json && rm -f *.json)
