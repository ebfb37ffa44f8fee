#!/usr/bin/env bash
# The whole real-GPU check in one call: every client under the shim, pool off and on, compared
# with what each case says it did (and, for the planted-leak program, with compute-sanitizer).
#
# Run from the repository root on the GPU machine, after `scripts/gpu/stage.sh` has put the
# release build in .gpu/ here (and ../shared/gpu/fetch-wheels.sh the RMM wheels in .whl/):
#   bash scripts/gpu/check.sh [compat] [bench] [e2e] [owners] [attribution] [live] [python]   (default: compat bench e2e)
# Narrower runs: CASES="planted torch" (compat cases), E2E=resnet-only, BENCH_ROUNDS=N,
# BENCH_ARGS="--tests pair,threads --variants pool,pool+stacks". With .gpu/baseline/libcuguard.so
# (another build, say the one before a change), the bench runs it side by side (--baseline).
# owners: frameworks' own memory recorded under the shim (scripts/gpu/owners.py), and Ctrl-C.
# attribution: the reports name the right line and owner (attribution.py, judged by
# attribution_check.py with the cuguard command); cuDF's loop when cuDF is importable.
# python: holders() on PyTorch, CuPy and RMM; pytest --cuguard over scripts/gpu/pytest_gpu (python_check.py).
# live: PyTorch training watched with `cuguard top --once` and the exporter, stopped with SIGINT
# (judged by live_check.py).
# Writes the table to $OUT/compat.md (or ./gpu-out/) and logs next to it.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-check
rm -rf "$B"
mkdir -p "$B"
S=$PWD/.gpu/libcuguard.so
export PYTHONUNBUFFERED=1
what=${*:-compat bench e2e}

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  /usr/local/cuda/bin/nvcc --version | tail -1
  python3 -c 'import sys; print("python", sys.version.split()[0])'
  for m in torch cupy jax jaxlib numba numba_cuda rmm; do
    python3 -c "import $m; print('$m', getattr($m, '__version__', '?'))" 2>/dev/null || echo "$m missing"
  done
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

gcc -O1 -g -I/usr/local/cuda/include -o $B/doors scripts/gpu/doors.c -L/usr/local/nvidia/lib64 -lcuda -ldl || exit 1
/usr/local/cuda/bin/nvcc -g -O1 -o $B/planted scripts/gpu/planted_leaks.cu || exit 1

# case name -> command
declare -A CMD=(
  [doors-linked]="$B/doors linked"
  [doors-dlsym]="$B/doors dlsym"
  [doors-getproc]="$B/doors getproc"
  [planted]="$B/planted"
  [cudarc]="$PWD/.gpu/cudarc_leaks"
  [torch]="env PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 scripts/gpu/clients.py torch"
  [torch_sites]="env PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 scripts/gpu/clients.py torch_sites"
  [cupy]="python3 scripts/gpu/clients.py cupy"
  [rmm]="python3 scripts/gpu/clients.py rmm"
  [jax]="python3 scripts/gpu/clients.py jax"
  [numba]="python3 scripts/gpu/clients.py numba"
)

if [[ " $what " == *" compat "* ]]; then
  for case in ${CASES:-"${!CMD[@]}"}; do
    for pool in 0 1; do
      CUGUARD_POOL=$pool CUGUARD_REPORT=$B/$case.pool$pool.json LD_PRELOAD=$S \
        timeout 300 ${CMD[$case]} > $B/$case.pool$pool.out 2> $B/$case.pool$pool.err
      echo $? > $B/$case.pool$pool.rc
    done
  done
  timeout 300 /usr/local/cuda/bin/compute-sanitizer --leak-check full $B/planted > $B/cs.txt 2>&1
  python3 scripts/gpu/compare.py $B > "$OUT/compat.md"
  echo "compare exit: $?"
  (cd $B && tar czf "$OUT/reports.tgz" *.json *.out *.err *.rc cs.txt)
fi

if [[ " $what " == *" bench "* ]] && [ -x .gpu/alloc_bench ]; then
  base=()
  [ -f .gpu/baseline/libcuguard.so ] && base=(--baseline "$PWD/.gpu/baseline/libcuguard.so")
  .gpu/alloc_bench --shim "$S" "${base[@]}" --rounds "${BENCH_ROUNDS:-3}" ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.md" 2> "$OUT/bench.log"
  echo "bench exit: $?"
  if [ -x .gpu/capture_bench ]; then
    .gpu/capture_bench --shim "$S" --python-script harness/workloads/python/alloc_bench.py > "$OUT/capture.md" 2> "$OUT/capture.log"
    echo "capture bench exit: $?"
  fi
fi

if [[ " $what " == *" e2e "* ]]; then
  python3 scripts/gpu/e2e.py "${E2E:-all}" "$S" "$OUT/e2e.json" > "$OUT/e2e.md" 2> "$OUT/e2e.log"
  echo "e2e exit: $?"
fi

if [[ " $what " == *" owners "* ]]; then
  for case in ${OWNER_CASES:-torch_cached torch_autograd cupy_pool rmm_pool jax_bfc torch_sigint}; do
    CUGUARD_REPORT=$B/owners-$case.json LD_PRELOAD=$S timeout 300 python3 scripts/gpu/owners.py $case \
      > $B/owners-$case.out 2> $B/owners-$case.err
    echo $? > $B/owners-$case.rc
  done
  python3 - "$B" > "$OUT/owners.md" <<'PY'
import glob, json, os, sys
b = sys.argv[1]
print("| case | exit | report | leaks | leaked bytes | stacks | threads without Python frames |")
print("|---|---|---|---|---|---|---|")
for rc in sorted(glob.glob(f"{b}/owners-*.rc")):
    case = os.path.basename(rc)[7:-3]
    code = open(rc).read().strip()
    try:
        r = json.load(open(f"{b}/owners-{case}.json"))
    except Exception as e:
        print(f"| {case} | {code} | none ({e.__class__.__name__}) | | | | |")
        continue
    leaks = r["leaks"]
    no_py = {s["id"] for s in r["stacks"] if not s.get("python")}
    nopy_threads = len({l["thread"] for l in leaks if l.get("stack") in no_py})
    sig = (r.get("signal") or {}).get("name")
    what = f'{r["reason"]}{"/" + sig if sig else ""}, complete={r["complete"]}'
    print(f"| {case} | {code} | {what} | {len(leaks)} | {sum(l['size'] for l in leaks)} | {len(r['stacks'])} | {nopy_threads} |")
PY
  (cd $B && tar czf "$OUT/owners.tgz" owners-*)
fi

if [[ " $what " == *" attribution "* ]]; then
  A=$B/attr
  mkdir -p $A
  declare -A ACMD=(
    [torch_train_cached]="python3 scripts/gpu/attribution.py torch_train_cached"
    [torch_train_growth]="env PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 scripts/gpu/attribution.py torch_train_growth"
    [torch_train_autograd]="env PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 scripts/gpu/attribution.py torch_train_autograd"
    [torch_oom]="env CUGUARD_POOL=1 CUGUARD_POOL_LIMIT=1GiB python3 scripts/gpu/attribution.py torch_oom"
    [cupy_pool]="python3 scripts/gpu/owners.py cupy_pool"
    [rmm_pool]="python3 scripts/gpu/owners.py rmm_pool"
    [jax_bfc]="python3 scripts/gpu/owners.py jax_bfc"
  )
  python3 -c "import cudf" > $A/cudf-import.txt 2>&1 && ACMD[cudf_loop]="python3 scripts/gpu/attribution.py cudf_loop"
  python3 -c "import transformers" > $A/transformers-import.txt 2>&1 \
    && ACMD[gpt2_train_cached]="python3 scripts/gpu/attribution.py gpt2_train_cached"
  python3 -c "import torchvision" > $A/torchvision-import.txt 2>&1 \
    && ACMD[resnet18_train_cached]="python3 scripts/gpu/attribution.py resnet18_train_cached"
  for case in ${ATTR_CASES:-"${!ACMD[@]}"}; do
    CUGUARD_REPORT=$A/$case.json LD_PRELOAD=$S timeout 300 ${ACMD[$case]} > $A/$case.out 2> $A/$case.err
    echo $? > $A/$case.rc
  done
  python3 scripts/gpu/attribution_check.py $A "$PWD/.gpu/cuguard" > "$OUT/attribution.md"
  echo "attribution exit: $?"
  (cd $A && tar czf "$OUT/attribution.tgz" --exclude='*.html' .)
fi

if [[ " $what " == *" live "* ]]; then
  L=$B/live
  mkdir -p $L
  export CUGUARD_RUNTIME_DIR=$L/pages
  timeout 120 python3 scripts/gpu/owners.py torch_sigint > $L/bare-sigint.out 2> $L/bare-sigint.err
  bare_rc=$?   # Ctrl-C without the shim: the status Python itself gives
  # Job control on: a background job of a shell without it starts with SIGINT ignored, and a
  # Python that starts so never raises KeyboardInterrupt (a terminal's Ctrl-C is not ignored).
  set -m
  CUGUARD_REPORT=$L/watched.json LD_PRELOAD=$S python3 scripts/gpu/attribution.py torch_train_until_stopped \
    > $L/watched.out 2> $L/watched.err &
  wpid=$!
  set +m
  echo $wpid > $L/watched.pid
  sleep 20
  .gpu/cuguard top --once > $L/top1.txt 2> $L/top1.err
  .gpu/cuguard exporter --listen 127.0.0.1:9464 > $L/exporter.log 2>&1 &
  epid=$!
  sleep 2
  scrape() { python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())"; }
  scrape > $L/metrics1.txt 2>&1
  sleep 8
  .gpu/cuguard top --once > $L/top2.txt 2> $L/top2.err
  scrape > $L/metrics2.txt 2>&1
  kill -INT $wpid
  # At most 60 s to end; then it is killed (and the check says it did not stop on SIGINT).
  ( sleep 60; kill -KILL $wpid 2>/dev/null ) &
  killer=$!
  wait $wpid
  echo $? > $L/watched.rc
  kill $killer 2>/dev/null
  kill $epid
  ls -la $L/pages > $L/pages-after.txt 2>&1
  python3 scripts/gpu/live_check.py $L $bare_rc > "$OUT/live.md"
  echo "live exit: $?"
  (cd $L && tar czf "$OUT/live.tgz" --exclude=pages .)
  unset CUGUARD_RUNTIME_DIR
fi

if [[ " $what " == *" python "* ]]; then
  # The Python package from the checkout (the cuguard command and the shim from .gpu/ on PATH),
  # pytest from the carried wheels (.whl).
  P=$B/python
  mkdir -p $P
  export PATH=$PWD/.gpu:$PATH
  export PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH}
  for pool in 0 1; do
    CUGUARD_POOL=$pool CUGUARD_REPORT=$P/holders.pool$pool.report.json LD_PRELOAD=$S timeout 300 \
      python3 scripts/gpu/holders.py $P/holders.pool$pool.json > $P/holders.pool$pool.txt 2>&1
  done
  for mode in uncached cached; do
    flag=; [ $mode = uncached ] && flag=--cuguard-uncached
    (cd scripts/gpu/pytest_gpu && CUGUARD_REPORT=$P/pytest-$mode.%p.json timeout 600 \
      python3 -m pytest -p cuguard.pytest_plugin -p no:cacheprovider --cuguard $flag test_frameworks.py) \
      > $P/pytest-$mode.txt 2>&1
    echo $? > $P/pytest-$mode.rc
  done
  python3 scripts/gpu/python_check.py $P > "$OUT/python.md"
  echo "python exit: $?"
  (cd $P && tar czf "$OUT/python.tgz" .)
fi

cat "$OUT/compat.md" 2>/dev/null | head -40
cat "$OUT/bench.md" "$OUT/capture.md" 2>/dev/null
cat "$OUT/e2e.md" 2>/dev/null
cat "$OUT/owners.md" 2>/dev/null
cat "$OUT/attribution.md" "$OUT/live.md" "$OUT/python.md" 2>/dev/null
# The parts not asked for have no file: that is not a failure (runs 33 and 49 exited 1 so).
true
