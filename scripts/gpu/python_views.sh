#!/usr/bin/env bash
# What a Python program holds, as the summary and the view say it, on the H200: PyTorch with its
# cache on and off (a dict of 20 clones and a list of two tensors: alike held allocations and
# cache blocks read as one line, `CLONES → [0…19]`), a short CuPy script (whether growth can be
# told), and the view of each (the end of the code marked). Run from the repository root after
# scripts/gpu/stage.sh; writes summaries, views and reports to $OUT.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
E=scripts/gpu/end
run_case() { # name program [env assignments...]
  local name=$1 prog=$2; shift 2
  env "$@" $C run --report "$OUT/$name.json" -- python3 $E/$prog > "$OUT/$name.log" 2>&1
  echo "rc=$?" >> "$OUT/$name.log"
  $C summary "$OUT/$name.json" > "$OUT/$name.summary.txt" 2>&1
  $C summary --format json "$OUT/$name.json" > "$OUT/$name.summary.json" 2>&1
  $C check --max-growth 1MiB "$OUT/$name.json" > "$OUT/$name.check.txt" 2>&1; echo "rc=$?" >> "$OUT/$name.check.txt"
  $C view "$OUT/$name.json" -o "$OUT/$name.html" > /dev/null 2>&1
}
run_case torch_keep torch_keep.py
run_case torch_keep_uncached torch_keep.py PYTORCH_NO_CUDA_MEMORY_CACHING=1
run_case short_cupy short_cupy.py
for name in torch_keep torch_keep_uncached short_cupy; do
  echo "=== $name"
  tail -n 1 "$OUT/$name.log"
  sed -n '/^the end/p; /^held at/,/^sites\|^at the peak\|^lost/p; /^inside the caches/,/^sites/p; /^growing/p' "$OUT/$name.summary.txt" | head -40
  grep -A3 "growth not checked" "$OUT/$name.check.txt"
  python3 - "$OUT/$name.html" <<'PY'
import json, sys
page = open(sys.argv[1]).read()
data = json.loads(page.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0])
for c in data["charts"]:
    print("timeline markers:", [(m["kind"], m["time_ms"], m["live_bytes"]) for m in c["markers"]], "samples", len(c["points"]))
for g in data.get("growth", []):
    print("growth chart end_ms:", g.get("end_ms"), "times", len(g["times"]))
PY
done
(cd "$OUT" && tar czf reports.tgz torch_keep.json torch_keep_uncached.json short_cupy.json && rm -f torch_keep.json torch_keep_uncached.json short_cupy.json)
