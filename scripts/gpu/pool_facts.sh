#!/usr/bin/env bash
# What the real driver does with its memory pools' idle memory when a plain allocation needs it
# (run from the repository root on the GPU machine; .gpu/ staged by scripts/gpu/stage.sh). One
# line per step of harness/workloads/c/limit.c; sizes are shares of the device, in MiB:
#
# A. threshold unlimited, frees completed (synchronized), then cuMemAlloc of more than is free;
# B. the same with the frees not yet completed (cuMemFreeAsync, no synchronization), then again
#    after a synchronization;
# C. a created pool holds completed frees; cuMemAllocAsync from the default pool asks more than
#    is free;
# D. B under cuguard (pool off): the card at the refusal.
set -u
B=/tmp/poolfacts; mkdir -p "$B"
S=$PWD/.gpu/libcuguard.so; C=$PWD/.gpu/cuguard
gcc -O1 -g -fno-omit-frame-pointer -I harness/workloads/c -o "$B/limit" harness/workloads/c/limit.c \
  -L/usr/local/nvidia/lib64 -lcuda -lpthread -ldl || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/versions.txt"
TOTAL=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
KEEP=$((TOTAL * 60 / 100)); LIVE=$((TOTAL * 10 / 100)); ASK=$((TOTAL * 50 / 100))
run() { echo "== $1"; shift; "$B/limit" "$@" 2>&1; echo "rc=$?"; }
{
  run A info threshold max async $KEEP alloc $LIVE release sync attrs info alloc $ASK attrs info
  run B info threshold max async $KEEP alloc $LIVE release attrs info alloc $ASK attrs info sync attrs info alloc $ASK attrs info
  run B0 info async $KEEP alloc $LIVE release attrs info alloc $ASK attrs info sync attrs info alloc $ASK attrs info
  run C info newpool async $KEEP release sync attrs defaultpool info async $ASK attrs info
} > "$OUT/facts.txt"
CUGUARD_POOL=0 CUGUARD_REPORT=$B/d.json LD_PRELOAD=$S "$B/limit" info threshold max async $KEEP alloc $LIVE release attrs info alloc $ASK attrs info > "$B/d.out" 2> "$B/d.err"
{ cat "$B/d.out"; echo "--- stderr"; cat "$B/d.err"; echo "--- summary --at oom"; "$C" summary "$B/d.json" --at oom; } > "$OUT/card.txt" 2>&1
cat "$OUT/facts.txt"
# E. `cuguard replay` of D's history at the recorded capacity: where each model fails.
"$C" replay "$B/d.json" --capacity 100% > "$OUT/replay.txt" 2>&1
cat "$OUT/card.txt" | sed -n '/--- summary --at oom/,$p' | head -12
cat "$OUT/replay.txt"
