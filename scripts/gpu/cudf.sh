#!/usr/bin/env bash
# RMM's pool under cuDF (issue 57 item 1, issue 53 items 1 and 4), after stage.sh and cuDF
# carried and installed as ../shared/gpu/fetch-cudf.sh says (PYTHONPATH=/tmp/site):
#   OUT=$OUT bash scripts/gpu/cudf.sh
# One deterministic cuDF job (scripts/gpu/cudf_job.py: a join, a group-by and a sort over ROWS
# rows), each run its own process:
# 1. With an RMM pool of INITIAL bytes and no maximum, no cuguard: RMM's pool_size() at the end
#    (the pool never shrinks: its largest). Then RMM's default resource (each buffer its own
#    cudaMalloc) under `cuguard run`, and `cuguard replay --allocator rmm-pool --initial-pool
#    INITIAL` of that history at the device's capacity: its peak reserved against the pool's
#    size. The other allocators beside it, and the same pool run under cuguard.
# 2. The pool with a maximum (MAX) too small for the job, under cuguard: RMM's refusals as
#    cards (refused_by rmm, the pool's figures, the verdict), `summary --at oom`; and without
#    cuguard (the job's own MemoryError, unchanged).
# 3. The versions line of cuDF and RMM processes (phases.sh part 2).
# Writes $OUT/cudf.txt (everything), $OUT/cudf.jsonl (the job's JSON lines), the reports.
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH}
ROWS=${ROWS:-100000000}
INITIAL=${INITIAL:-268435456}
MAX=${MAX:-4294967296}
J=scripts/gpu/cudf_job.py
B=/tmp/cudf-run; rm -rf "$B"; mkdir -p "$B"
job() { timeout 300 "$@" 2> >(tail -5 >&2) | tail -1 | tee -a "$OUT/cudf.jsonl"; }
{
  echo "== 1. pool of $INITIAL bytes, no maximum, no cuguard"
  job python3 "$J" pool "$ROWS" "$INITIAL"
  echo "== 1. RMM's default resource, no cuguard"
  job python3 "$J" plain "$ROWS"
  echo "== 1. RMM's default resource under cuguard"
  job "$C" run --report "$B/plain.json" -- python3 "$J" plain "$ROWS"
  "$C" summary "$B/plain.json" 2>&1 | head -40
  echo "== 1. replay of that history"
  "$C" replay "$B/plain.json" --capacity 100% --allocator rmm-pool,driver,async,cuguard \
    --initial-pool "$INITIAL" 2>&1
  "$C" replay "$B/plain.json" --capacity 100% --allocator rmm-pool --initial-pool "$INITIAL" \
    --format json 2>&1 | head -c 4000; echo
  echo "== 1. the pool run under cuguard"
  job "$C" run --report "$B/pool.json" -- python3 "$J" pool "$ROWS" "$INITIAL"
  "$C" summary "$B/pool.json" 2>&1 | head -40
  echo "== 2. the pool with maximum $MAX, under cuguard"
  job "$C" run --report "$B/oom.json" -- python3 "$J" oom "$ROWS" "$INITIAL" "$MAX"
  "$C" summary "$B/oom.json" 2>&1 | head -70
  "$C" summary --at oom "$B/oom.json" 2>&1 | head -40
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps([{k: o.get(k) for k in ("api","refused_by","within","size","card_ns","verdict")} for o in r.get("ooms", [])])[:4000])' "$B/oom.json"
  echo "== 2. the same, no cuguard"
  job python3 "$J" oom "$ROWS" "$INITIAL" "$MAX"
} 2>&1 | tee "$OUT/cudf.txt"
cp "$B"/*.json "$OUT/" 2>/dev/null
PARTS=2 FRAMEWORKS="cudf rmm" OUT=$OUT bash scripts/gpu/phases.sh > /dev/null 2>&1
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import cudf, rmm, cupy; print("cudf", cudf.__version__, "rmm", rmm.__version__, "cupy", cupy.__version__)' 2>&1 | tail -1
} > "$OUT/cudf_versions.txt"
