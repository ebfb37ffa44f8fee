#!/usr/bin/env bash
# Reliability on the real GPU (issue 6), under 2 minutes. Run from the repository root on the GPU
# machine after scripts/gpu/stage.sh has put the release build in .gpu/ (libcuguard.so, cuguard):
#   bash scripts/gpu/reliability.sh
# Cases:
#   torch-sigkill   PyTorch training, CUGUARD_CHECKPOINT_SECS=2, SIGKILL after ~5 s: a readable
#                   checkpoint must be left (reason checkpoint, complete false, leaks listed).
#   torch-snapshot  the same job asked with `cuguard snapshot PID` (reason request), then SIGTERM:
#                   the final report (reason signal) replaces it; the job dies of SIGTERM.
#   cupy-segv       CuPy segfaults on purpose: a complete report (reason signal, SIGSEGV) with its
#                   4 arrays, and the process still dies of SIGSEGV.
# Prints a table (also to $OUT/reliability.md) and keeps reports and logs in $OUT.
set -u
OUT=${OUT:-$PWD/gpu-out}/reliability
mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.log
S=$PWD/.gpu/libcuguard.so
CG=$PWD/.gpu/cuguard
PY="python3 scripts/gpu/reliability.py"
export PYTHONUNBUFFERED=1

# Starts a case in the background; waits (up to 60 s) for its "ready" line.
start() { # name env...
  local name=$1; shift
  env "$@" LD_PRELOAD=$S CUGUARD_REPORT=$OUT/$name.json $PY ${name%%-*} > "$OUT/$name.log" 2> "$OUT/$name.err" &
  PID=$!
  for _ in $(seq 600); do grep -q ready "$OUT/$name.log" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

summ() { # report -> "reason complete signal leaks bytes"
  python3 - "$1" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    print("unreadable", "-", "-", "-", "-"); sys.exit()
sig = (r.get("signal") or {}).get("name", "-")
print(r["reason"], str(r["complete"]).lower(), sig, len(r["leaks"]), sum(l["size"] for l in r["leaks"]))
PY
}

declare -a ROWS
row() { ROWS+=("| $1 | $2 | $3 | $4 |"); }

# 1. PyTorch, SIGKILL mid-run, checkpoints every 2 s.
if start torch_train-sigkill PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUGUARD_CHECKPOINT_SECS=2; then
  sleep 5; kill -KILL $PID; wait $PID; rc=$?
  s=$(summ "$OUT/torch_train-sigkill.json"); set -- $s
  ok=$([ "$1" = checkpoint ] && [ "$2" = false ] && [ "$4" -ge 3 ] && echo PASS || echo FAIL)
  row torch-sigkill "exit $rc (137 = SIGKILL)" "$s" $ok
else row torch-sigkill "did not start" "$(tail -1 "$OUT/torch_train-sigkill.err")" FAIL; kill -KILL $PID 2>/dev/null; fi

# 2. PyTorch, snapshot on request, then SIGTERM.
if start torch_sigterm-snap PYTORCH_NO_CUDA_MEMORY_CACHING=1; then
  sleep 1; p=$("$CG" snapshot --wait 20 $PID 2>&1); src=$?
  s1=$(summ "$OUT/torch_sigterm-snap.json")
  kill -TERM $PID; wait $PID; rc=$?
  s2=$(summ "$OUT/torch_sigterm-snap.json"); set -- $s2
  ok=$([ $src -eq 0 ] && [[ "$s1" == request* ]] && [ "$1" = signal ] && [ "$3" = SIGTERM ] && [ $rc -eq 143 ] && echo PASS || echo FAIL)
  row torch-snapshot "snapshot rc $src; exit $rc (143 = SIGTERM)" "snapshot: $s1 / final: $s2" $ok
else row torch-snapshot "did not start" "$(tail -1 "$OUT/torch_sigterm-snap.err")" FAIL; kill -KILL $PID 2>/dev/null; fi

# 3. CuPy segfault.
env LD_PRELOAD=$S CUGUARD_REPORT=$OUT/cupy_segv.json timeout 90 $PY cupy_segv > "$OUT/cupy_segv.log" 2> "$OUT/cupy_segv.err"
rc=$?
s=$(summ "$OUT/cupy_segv.json"); set -- $s
ok=$([ "$1" = signal ] && [ "$2" = true ] && [ "$3" = SIGSEGV ] && [ "$4" -ge 4 ] && [ $rc -eq 139 ] && echo PASS || echo FAIL)
row cupy-segv "exit $rc (139 = SIGSEGV)" "$s" $ok

{
  echo "| case | process | report: reason complete signal leaks bytes | verdict |"
  echo "|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/reliability.md"
grep -h "cuguard:" "$OUT"/*.err | head -10
