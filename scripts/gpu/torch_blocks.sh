#!/usr/bin/env bash
# PyTorch's tensors in cuguard's history (issue 54, on the GPU: issue 57), in one call of about
# 5 minutes. Run from the repository root on the GPU machine after scripts/gpu/stage.sh (.gpu/):
#   OUT=$OUT bash scripts/gpu/torch_blocks.sh
#
# 1. torch_blocks.py check under `cuguard run` (pool off, then on): at four moments PyTorch's own
#    snapshot beside `cuguard export --between phase:NAME` of the same run: every PyTorch
#    segment's blocks (address, size, state) must be the export's (pool off: the same segments,
#    tiled the same; pool on: the same live tensors, the segments being the pool's chunks).
# 2. `cuguard summary --at phase:inside` (inside a step): the tensors by line, the cache's idle.
# 3. The cost: a tensor's allocate-and-free pair with no cuguard (twice: the A/A control), under
#    cuguard (cache blocks on, stacks on: the default; since run 40 PyTorch's memory history
#    stays off there), under cuguard with CUGUARD_CACHE_VIEW=history (the default before run 40:
#    PyTorch's memory history on too), under cuguard with CUGUARD_CACHE_BLOCKS=0 (PyTorch's
#    memory history on, cuguard's hook not recording),
#    and with PyTorch's own recorder (no stacks, Python stacks), no cuguard, each the median of 40
#    batches in its process, pinned to one core; a training step with no cuguard and under
#    cuguard with and without cache blocks. Each its own process, ROUNDS rounds (2), interleaved.
# Writes to $OUT: torch_blocks.txt (everything, in order), torch_blocks.json (JSON lines).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-torch-blocks
rm -rf "$B"; mkdir -p "$B"
C=$PWD/.gpu/cuguard
S=scripts/gpu/torch_blocks.py
# The cost's processes each on one core (the last), where taskset is there.
PIN=""
if command -v taskset >/dev/null; then PIN="taskset -c $(( $(nproc) - 1 ))"; fi
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH} CUGUARD_SHIM=$PWD/.gpu/libcuguard.so
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_NO_CUDA_MEMORY_CACHING
{
  echo "== versions"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  for pool in 0 1; do
    echo "== 1. blocks beside PyTorch's snapshot, pool $pool (at ${SECONDS}s)"
    R=$B/pool$pool
    mkdir -p "$R"
    CUGUARD_POOL=$pool SNAPS=$R/snaps.json timeout 180 "$C" run --quiet --report "$R/r.json" -- python3 $S check > "$R/out" 2> "$R/err"
    echo "exit $?"; tail -1 "$R/out" | tee -a "$OUT/torch_blocks.json"; tail -3 "$R/err"
    # The hook reached: the report says nothing is missing (history.cache_blocks_unrecorded absent).
    python3 -c 'import json,sys; h=json.load(open(sys.argv[1]))["history"]; print(json.dumps({"check": "hook-reached", "pool": sys.argv[2], "verdict": "FAIL" if h.get("cache_blocks_unrecorded") else "PASS", "unrecorded": h.get("cache_blocks_unrecorded")}))' "$R/r.json" "$pool" | tee -a "$OUT/torch_blocks.json"
    for name in inside after freed final; do
      "$C" export --between "phase:$name" -o "$R/$name.pickle" "$R/r.json" 2>&1 | tail -1
    done
    python3 - "$R" "$pool" <<'PY' | tee -a "$OUT/torch_blocks.json"
import json, pickle, sys
r, pool = sys.argv[1], sys.argv[2] == "1"
for snap in json.load(open(f"{r}/snaps.json")):
    name = snap["name"]
    viz = pickle.load(open(f"{r}/{name}.pickle", "rb"))
    ours = {g["address"]: [[b["address"], b["size"], b["state"]] for b in g["blocks"]] for g in viz["segments"]}
    theirs = {a: blocks for a, total, blocks in snap["segments"]}
    if not pool:
        bad = [hex(a) for a, blocks in theirs.items() if ours.get(a) != blocks]
        ok = not bad
        detail = {"segments": len(theirs), "blocks": sum(len(b) for b in theirs.values()), "differ": bad[:5]}
        if bad:
            a = int(bad[0], 16)
            detail["first"] = {"torch": theirs[a][:8], "cuguard": (ours.get(a) or [])[:8]}
    else:
        live = lambda segs: sorted((b[0], b[1]) for blocks in segs.values() for b in blocks if b[2] == "active_allocated")
        t, o = live(theirs), [x for x in live(ours) if any(a <= x[0] < a + total for a, total, _ in snap["segments"])]
        ok = t == o
        detail = {"tensors": len(t), "missing": [hex(a) for a, _ in sorted(set(t) - set(o))][:5], "extra": [hex(a) for a, _ in sorted(set(o) - set(t))][:5]}
    print(json.dumps({"check": "blocks", "pool": pool, "moment": name, "verdict": "PASS" if ok else "FAIL", **detail}))
PY
  done
  echo "== 2. --at inside a step (at ${SECONDS}s)"
  "$C" summary --at phase:inside "$B/pool0/r.json" 2>&1 | head -30
  "$C" summary --at phase:inside --format json "$B/pool0/r.json" > "$B/at.json" 2>/dev/null
  python3 - "$B/at.json" <<'PY' | tee -a "$OUT/torch_blocks.json"
import json, sys
a = json.load(open(sys.argv[1]))
rows = [s for d in a["devices"] for s in d["sites"]]
lines = sorted({s["location"] for s in rows if not s.get("idle") and "torch_blocks.py" in (s.get("location") or "")})
idle = sum(s["bytes"] for s in rows if s.get("idle"))
print(json.dumps({"check": "at-inside", "verdict": "PASS" if lines else "FAIL", "script_lines": lines, "idle_bytes": idle, "rows": len(rows)}))
PY
  echo "== 3. cost (at ${SECONDS}s)"
  for round in $(seq 1 "${ROUNDS:-2}"); do
    # none-again: the A/A control (the same variant twice a round); each process on one core.
    for m in none cuguard cuguard-history cuguard-off history-plain history-python none-again; do
      case $m in
        none|none-again) timeout 120 $PIN python3 $S pairs ;;
        cuguard) timeout 120 $PIN "$C" run --quiet --report "$B/c.json" -- python3 $S pairs ;;
        cuguard-history) CUGUARD_CACHE_VIEW=history timeout 120 $PIN "$C" run --quiet --report "$B/c.json" -- python3 $S pairs ;;
        cuguard-off) CUGUARD_CACHE_BLOCKS=0 timeout 120 $PIN "$C" run --quiet --report "$B/c.json" -- python3 $S pairs ;;
        history-plain) HISTORY=plain timeout 120 $PIN python3 $S pairs ;;
        history-python) HISTORY=python timeout 120 $PIN python3 $S pairs ;;
      esac 2>/dev/null | tail -1 | sed "s/^{/{\"variant\": \"$m\", \"round\": $round, /" | tee -a "$OUT/torch_blocks.json"
    done
    for m in none cuguard cuguard-off; do
      case $m in
        none) timeout 120 python3 $S steps ;;
        cuguard) timeout 120 "$C" run --quiet --report "$B/c.json" -- python3 $S steps ;;
        cuguard-off) CUGUARD_CACHE_BLOCKS=0 timeout 120 "$C" run --quiet --report "$B/c.json" -- python3 $S steps ;;
      esac 2>/dev/null | tail -1 | sed "s/^{/{\"variant\": \"$m\", \"round\": $round, /" | tee -a "$OUT/torch_blocks.json"
    done
  done
  echo "== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/torch_blocks.txt"
