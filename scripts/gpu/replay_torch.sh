#!/usr/bin/env bash
# `cuguard replay` against PyTorch's own figures (issue 57 item 1, issue 53 item 4), in one call
# of about 4 minutes. Run from the repository root on the GPU machine after scripts/gpu/stage.sh:
#   OUT=$OUT bash scripts/gpu/replay_torch.sh
#
# 1. For resnet18 and a GPT-2-like transformer (replay_torch.py), trained under `cuguard run`
#    (its defaults: the history holds PyTorch's tensors): `cuguard replay --capacity 100%` under
#    torch, torch-expandable, driver and cuguard, beside PyTorch's max_memory_reserved of the
#    same run (the goal: torch within 2%).
# 2. resnet18: `cuguard replay --find-capacity --allocator torch` beside a bisection of real runs
#    under CUGUARD_LIMIT (the smallest limit, to 32 MiB, at which the run finishes).
# Writes to $OUT: replay_torch.txt (everything), replay_torch.json (JSON lines).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-replay-torch
rm -rf "$B"; mkdir -p "$B"
C=$PWD/.gpu/cuguard
S=scripts/gpu/replay_torch.py
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH} CUGUARD_SHIM=$PWD/.gpu/libcuguard.so
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_NO_CUDA_MEMORY_CACHING
{
  echo "== versions"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  python3 -c 'import torchvision; print("torchvision", torchvision.__version__)' 2>&1 | tail -1
  git log -1 --format='cuguard %h %s' 2>/dev/null | cut -c1-100
  for m in resnet18 gpt2; do
    echo "== 1. $m under cuguard run (at ${SECONDS}s)"
    R=$B/$m; mkdir -p "$R"
    timeout 240 "$C" run --quiet --report "$R/r.json" -- python3 $S $m > "$R/out" 2> "$R/err"
    echo "exit $?"; tail -1 "$R/out"; tail -3 "$R/err"
    "$C" replay "$R/r.json" --capacity 100% --allocator torch,torch-expandable,driver,cuguard
    "$C" replay "$R/r.json" --capacity 100% --allocator torch,torch-expandable,driver,cuguard --format json > "$R/replay.json"
    python3 - "$R" <<'PY' | tee -a "$OUT/replay_torch.json"
import json, sys
r = sys.argv[1]
theirs = json.loads(open(f"{r}/out").read().strip().splitlines()[-1])
ours = json.load(open(f"{r}/replay.json"))
peak = {o["name"]: o["peak_reserved_bytes"] for o in ours["allocators"]}
diff = (peak["torch"] - theirs["max_memory_reserved"]) / theirs["max_memory_reserved"]
print(json.dumps({"check": "replay-torch", "model": theirs["model"],
                  "verdict": "PASS" if abs(diff) <= 0.02 else "FAIL",
                  "max_memory_reserved": theirs["max_memory_reserved"],
                  "replay_torch": peak["torch"], "difference": round(diff, 4),
                  "max_memory_allocated": theirs["max_memory_allocated"],
                  "replay_peak_live": ours["peak_live_bytes"],
                  "requests": ours["requests"], "cache_blocks": ours.get("cache_blocks"),
                  "cache_segments": ours.get("cache_segments"), "peaks": peak}))
PY
  done
  echo "== 2. resnet18: --find-capacity beside a bisection under CUGUARD_LIMIT (at ${SECONDS}s)"
  R=$B/resnet18
  "$C" replay "$R/r.json" --find-capacity --allocator torch,driver | tee "$R/find.txt"
  found=$(sed -n 's/^  torch fits from \([0-9]*\) MiB.*/\1/p' "$R/find.txt")
  runs() {  # the run's exit under a limit of $1 MiB
    timeout 120 "$C" run --quiet --report "$B/bis-$1.json" -- env CUGUARD_LIMIT=$1MiB python3 $S resnet18 > "$B/bis-$1.out" 2>&1
  }
  lo=$(( found * 8 / 10 )); hi=$(( found * 12 / 10 ))
  runs $lo && echo "limit $lo MiB: finished (below the bracket)" || echo "limit $lo MiB: refused"
  runs $hi && echo "limit $hi MiB: finished" || echo "limit $hi MiB: refused (above the bracket!)"
  while (( hi - lo > 32 )); do
    mid=$(( (lo + hi) / 2 ))
    if runs $mid; then hi=$mid; echo "limit $mid MiB: finished"; else lo=$mid; echo "limit $mid MiB: refused"; fi
  done
  echo "bisection: finishes at $hi MiB, refused at $lo MiB; replay's torch: $found MiB"
  python3 -c 'import json,sys; lo,hi,f=map(int,sys.argv[1:]); print(json.dumps({"check":"find-capacity-torch","bisection_finishes_mib":hi,"bisection_refused_mib":lo,"replay_mib":f,"verdict":"PASS" if lo < f <= hi + 2 else "FAIL"}))' "$lo" "$hi" "${found:-0}" | tee -a "$OUT/replay_torch.json"
  echo "== done at ${SECONDS}s"
} 2>&1 | tee "$OUT/replay_torch.txt"
