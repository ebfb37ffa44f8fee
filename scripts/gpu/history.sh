#!/usr/bin/env bash
# The history on the H200, in one call (the H200 issue): PyTorch resnet18 training under the
# shim with PyTorch's own memory history on, a 4 GiB spike in the middle; `summary --at` inside,
# before and after it, at the end and at PyTorch's own peaks; the memory-viz export read by
# torch.cuda._memory_viz beside PyTorch's own snapshot (and a GPT-2 run's); by LD_PRELOAD alone,
# the list that grows (run 7's case); pprof beside JAX's own; the step time with the history on,
# off and without cuguard, interleaved; the pool pair beside the build before.
# Run from the repository root on the GPU machine after scripts/gpu/stage.sh (.gpu/). A call
# lasts at most 10 minutes: each section says how long it may take, and one that would end past
# BUDGET seconds is skipped (and said), most important first.
set -u
BUDGET=${BUDGET:-560}
section() {  # section NAME MAX_SECONDS: whether to run it
  if [ $((SECONDS + $2)) -gt "$BUDGET" ]; then
    echo "== $1: SKIPPED (at ${SECONDS}s, it may take $2 s; budget $BUDGET s)" | tee -a "$OUT/skipped.txt"
    return 1
  fi
  echo "== $1 (at ${SECONDS}s)"
}
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-history
rm -rf "$B"; mkdir -p "$B"
C=$PWD/.gpu/cuguard
S=$PWD/.gpu/libcuguard.so
P=$PWD/scripts/gpu/history_torch.py
export PYTHONUNBUFFERED=1
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

section "1. training with a spike, PyTorch's history on" 200 || exit 1
TORCH_HISTORY=1 TORCH_SNAPSHOT=$B/torch.pickle timeout 200 "$C" run --report "$B/train.json" -- python3 "$P" train 30 spike | tee "$B/train.out"
ls -la "$B"
python3 - "$B/train.out" "$B/train.json" > "$B/moments.txt" <<'PY'
import json, sys
said = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
start = json.load(open(sys.argv[2]))["process"]["start_unix_ms"]
a, b = said["spike_unix_ms"]
print(f"{a - start + 150}ms {a - start - 300}ms {b - start + 300}ms")
PY
read INSIDE BEFORE AFTER < "$B/moments.txt"
echo "inside=$INSIDE before=$BEFORE after=$AFTER"
{
  for t in "$INSIDE" "$BEFORE" "$AFTER" peak end; do
    echo "### summary --at $t"
    "$C" summary "$B/train.json" --at "$t" --top 12
  done
  echo "### summary --between $BEFORE $AFTER"
  "$C" summary "$B/train.json" --between "$BEFORE" "$AFTER" --top 12
} > "$OUT/at.txt" 2>&1
cat "$OUT/at.txt"
"$C" summary "$B/train.json" --at end --format json > "$OUT/at_end.json" 2>&1
"$C" summary "$B/train.json" --at peak --format json > "$OUT/at_peak.json" 2>&1
"$C" summary "$B/train.json" > "$OUT/summary.txt" 2>&1
"$C" view "$B/train.json" -o "$OUT/view.html" > "$OUT/view.txt" 2>&1

section "1b. PyTorch's own peaks (its trace), and cuguard --at the same moments" 30
python3 "$P" peaks "$B/torch.pickle" | tee "$OUT/torch_peaks.json"
python3 - "$OUT/torch_peaks.json" "$B/train.json" > "$B/tpeaks.txt" <<'PY'
import json, math, sys
p = json.load(open(sys.argv[1])); start = json.load(open(sys.argv[2]))["process"]["start_unix_ms"]
# Rounded up, as cuguard prints moments: rounded to the nearest, a moment 0.44 ms into the
# millisecond asked before the segment PyTorch's peak made (run 27).
print(f"{math.ceil(p['peak_reserved_unix_ms'] - start)}ms {math.ceil(p['peak_active_unix_ms'] - start)}ms")
PY
read TRES TACT < "$B/tpeaks.txt"
echo "torch's reserved peak at $TRES, active peak at $TACT (from cuguard's start)"
"$C" summary "$B/train.json" --at "$TRES" --format json > "$OUT/at_torch_reserved_peak.json" 2>&1
"$C" summary "$B/train.json" --at "$TRES" --top 12 > "$OUT/at_torch_reserved_peak.txt" 2>&1
"$C" summary "$B/train.json" --at "$TACT" --top 12 > "$OUT/at_torch_active_peak.txt" 2>&1
head -3 "$OUT/at_torch_reserved_peak.txt"

cp "$B/train.json" "$OUT/train.json"
cp "$B"/train*.history "$OUT/" 2>/dev/null
if section "2. the export, read by PyTorch's own viewer code" 120; then
timeout 60 "$C" export --format memory-viz "$B/train.json" -o "$B/cuguard.pickle" 2>&1 | tee "$OUT/export.txt"
{
  echo "cuguard: $(timeout 60 python3 "$P" viz "$B/cuguard.pickle")"
  echo "torch:   $(timeout 60 python3 "$P" viz "$B/torch.pickle")"
} | tee "$OUT/viz.txt"
python3 scripts/memory_viz_check.py "$B/cuguard.pickle" > /dev/null && echo "memory_viz_check: ok" | tee -a "$OUT/viz.txt"
python3 - "$B/cuguard.pickle" "$B/torch.pickle" <<'PY' | tee "$OUT/compare.txt"
import pickle, sys
c = pickle.load(open(sys.argv[1], "rb")); t = pickle.load(open(sys.argv[2], "rb"))
def active(s): return sum(b["size"] for g in s["segments"] for b in g["blocks"] if b["state"] == "active_allocated")
def reserved(s): return sum(g["total_size"] for g in s["segments"])
print("at the end: cuguard segments", len(c["segments"]), "reserved", reserved(c), "active", active(c))
print("at the end: torch   segments", len(t["segments"]), "reserved", reserved(t), "active", active(t))
ct = [e for tr in c["device_traces"] for e in tr]; tt = [e for tr in t["device_traces"] for e in tr]
print("trace entries: cuguard", len(ct), "torch", len(tt))
print("cuguard actions:", {a: sum(1 for e in ct if e["action"] == a) for a in sorted({e["action"] for e in ct})})
print("torch actions:  ", {a: sum(1 for e in tt if e["action"] == a) for a in sorted({e["action"] for e in tt})})
PY
cp "$B/cuguard.pickle" "$OUT/" 2>/dev/null
fi

if section "6. by LD_PRELOAD alone: a list gaining a tensor every step (run 7's case)" 90; then
  CUGUARD_REPORT=$B/hand.json LD_PRELOAD=$S timeout 90 python3 scripts/gpu/attribution.py torch_train_growth > "$OUT/hand.out" 2>&1
  echo "exit: $?" >> "$OUT/hand.out"
  {
    "$C" summary "$B/hand.json"
    echo "### check --max-growth 16MiB"
    "$C" check --max-growth 16MiB "$B/hand.json"; echo "check exit: $?"
  } > "$OUT/hand.txt" 2>&1
  grep -E "^the end|grow|check exit|attribution.py" "$OUT/hand.txt" | head -12
  cp "$B/hand.json" "$OUT/" 2>/dev/null
fi

if section "3. step time: history on, off, no cuguard (3 rounds, interleaved)" 170; then
for r in 1 2 3; do
  on=$(timeout 60 "$C" run --quiet --report "$B/t$r.json" -- python3 "$P" time 60)
  off=$(CUGUARD_HISTORY=0 timeout 60 "$C" run --quiet --report "$B/o$r.json" -- python3 "$P" time 60)
  none=$(timeout 60 python3 "$P" time 60)
  echo "round $r: history-on $on history-off $off no-cuguard $none"
done | tee "$OUT/cost.txt"
fi

if section "4. the pool pair: history on and off; beside the build before (.gpu/baseline)" 150; then
base=()
[ -f .gpu/baseline/libcuguard.so ] && base=(--baseline "$PWD/.gpu/baseline/libcuguard.so")
timeout 150 .gpu/alloc_bench --shim "$S" "${base[@]}" --tests pair,async \
  --variants bare,pool,pool+stacks,pool-untracked,pool-nohistory,pool+stacks-nohistory --rounds 3 \
  --json "$OUT/pair.json" 2>&1 | tee "$OUT/pair.md"
fi

if "$C" export --help 2>/dev/null | grep -q pprof && section "5. pprof beside JAX's own device memory profile" 90; then
  JAX_PROFILE=$B/jax.prof timeout 90 "$C" run --report "$B/jax.json" -- python3 scripts/gpu/pprof_jax.py > "$OUT/jax.out" 2>&1
  echo "exit: $?" >> "$OUT/jax.out"
  timeout 30 "$C" export --format pprof "$B/jax.json" -o "$B/cuguard.pb.gz" > "$OUT/pprof_export.txt" 2>&1
  {
    echo "### JAX: pprof -top -sample_index=inuse_space"
    timeout 30 .gpu/pprof -top -sample_index=inuse_space "$B/jax.prof" 2>&1 | head -40
    echo "### cuguard: pprof -top -sample_index=inuse_space"
    timeout 30 .gpu/pprof -top -sample_index=inuse_space "$B/cuguard.pb.gz" 2>&1 | head -40
    echo "### cuguard: pprof -traces"
    timeout 30 .gpu/pprof -traces "$B/cuguard.pb.gz" 2>&1 | head -60
  } > "$OUT/pprof.txt"
  cat "$OUT/pprof.txt" | head -60
  cp "$B/jax.prof" "$B/cuguard.pb.gz" "$B/jax.json" "$OUT/" 2>/dev/null
fi

if section "2b. a transformers GPT-2 run, exported" 150; then
timeout 180 "$C" run --quiet --report "$B/gpt2.json" -- python3 "$P" gpt2 20 > "$OUT/gpt2.out" 2>&1
echo "gpt2 exit: $?"; cat "$OUT/gpt2.out"
"$C" export --format memory-viz "$B/gpt2.json" -o "$B/gpt2.pickle" 2>&1 | tee -a "$OUT/export.txt"
echo "gpt2 cuguard: $(python3 "$P" viz "$B/gpt2.pickle")" | tee -a "$OUT/viz.txt"
python3 scripts/memory_viz_check.py "$B/gpt2.pickle" > /dev/null && echo "memory_viz_check gpt2: ok" | tee -a "$OUT/viz.txt"
ls -la "$B"/gpt2* > "$OUT/gpt2_files.txt"
fi
echo "== done at ${SECONDS}s"
