#!/usr/bin/env bash
# The peers' own suites under cuguard's pool on the H200 (issue 22): RMM's Python tests and CuPy's
# memory and stream tests, each run bare and under `cuguard run` with its defaults (the pool on),
# outcome by outcome. Needs .whl/ (RMM 26.10 wheels: ../shared/gpu/fetch-wheels.sh) and .peers/
# (the suites' files: rmm's python/rmm/rmm/tests, cupy's tests/cupy_tests/cuda_tests/test_memory.py
# and test_stream.py). Run from the repository root after scripts/gpu/stage.sh.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONUNBUFFERED=1
# RMM's wheels, for its suite only.
if [[ " ${SUITES:-rmm cupy} " == *" rmm "* ]] && [ ! -d /tmp/site/rmm ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*rmm*.whl .whl/rapids_logger*.whl
fi
export PYTHONPATH=/tmp/site
for suite in ${SUITES:-rmm cupy}; do
  dir=$PWD/.peers/${suite}_tests
  for how in bare pool; do
    cmd=(python3 -m pytest -q -p no:cacheprovider -o addopts= ${PYTEST_ARGS:--n 4} --junitxml="$OUT/$suite-$how.xml" .)
    [ $how = pool ] && cmd=("$C" run --quiet --report "$OUT/$suite-pool.%p.json" -- "${cmd[@]}")
    (cd "$dir" && timeout ${SUITE_SECS:-300} "${cmd[@]}") > "$OUT/$suite-$how.txt" 2>&1
    echo "rc=$?" >> "$OUT/$suite-$how.txt"
    tail -n 2 "$OUT/$suite-$how.txt"
  done
done
python3 - "$OUT" ${SUITES:-rmm cupy} <<'PY'
import sys, xml.etree.ElementTree as ET
out = sys.argv[1]
def outcomes(path):
    got = {}
    try:
        root = ET.parse(path).getroot()
    except Exception as e:
        return None
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kind = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                kind = child.tag
        got[name] = kind
    return got
print("| suite | bare: passed / failed / errors / skipped | pool: passed / failed / errors / skipped | tests whose outcome differs |")
print("|---|---|---|---|")
for suite in sys.argv[2:]:
    b, p = outcomes(f"{out}/{suite}-bare.xml"), outcomes(f"{out}/{suite}-pool.xml")
    if b is None or p is None:
        print(f"| {suite} | {'no junit' if b is None else len(b)} | {'no junit' if p is None else len(p)} | |")
        continue
    count = lambda d: " / ".join(str(sum(1 for v in d.values() if v == k)) for k in ("passed", "failure", "error", "skipped"))
    diff = sorted(n for n in set(b) | set(p) if b.get(n) != p.get(n))
    print(f"| {suite} | {count(b)} | {count(p)} | {len(diff)}: {', '.join(f'{n} ({b.get(n)} → {p.get(n)})' for n in diff[:10])} |")
PY
