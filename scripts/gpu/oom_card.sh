#!/usr/bin/env bash
# The out-of-memory card on the real driver (issue 53's thin run; run from the repository root on
# the GPU machine, after scripts/gpu/stage.sh built .gpu/ here):
#
# 1. The default memory pool holds blocks freed with cuMemFreeAsync and not yet synchronized
#    (release threshold unlimited), and a plain cuMemAlloc needs them: refused bare (run 29);
#    under cuguard (pool off and on), the card's idle bytes for the pool against what the
#    program freed, the verdict (a synchronization), and the reconciliation's "unexplained".
# 2. The same with a created pool made the device's current one.
# 3. CUGUARD_LIMIT=8GiB with cuguard's pool: 4,000 blocks of 1 MiB, every other one freed, then
#    6 GiB asked: the pool's peak reserved against the limit, and the card.
# 4. `cuguard replay` of run 1's history at the recorded capacity, and --find-capacity.
# 5. PyTorch: a cache fragmented by live tensors, then a request that fails; PyTorch's own
#    message beside cuguard's card (what the card does not read yet: the cache's idle pieces).
#
# Writes to $OUT; prints a short table last.
set -u
B=/tmp/oomcard; mkdir -p "$B"
S=$PWD/.gpu/libcuguard.so; C=$PWD/.gpu/cuguard
gcc -O1 -g -fno-omit-frame-pointer -I harness/workloads/c -o "$B/limit" harness/workloads/c/limit.c \
  -L/usr/local/nvidia/lib64 -lcuda -lpthread -ldl || exit 1
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
} > "$OUT/versions.txt"

# Sizes in MiB, for the whole device: the pool keeps 60% of it, 10% live, then 50% asked.
TOTAL=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
KEEP=$((TOTAL * 60 / 100)); LIVE=$((TOTAL * 10 / 100)); ASK=$((TOTAL * 50 / 100))
STEPS_MAX="info threshold max async $KEEP alloc $LIVE release info alloc $ASK info sync alloc $ASK info"
STEPS_NEW="info newpool async $KEEP alloc $LIVE release info alloc $ASK info sync alloc $ASK info"

{ echo "== max"; "$B/limit" $STEPS_MAX; echo "== new"; "$B/limit" $STEPS_NEW; } > "$OUT/bare.txt" 2>&1
for pool in 0 1; do
  for kind in max new; do
    steps=STEPS_${kind^^}
    r=$B/${kind}_pool$pool.json
    CUGUARD_POOL=$pool CUGUARD_REPORT=$r LD_PRELOAD=$S "$B/limit" ${!steps} > "$B/${kind}_pool$pool.out" 2> "$B/${kind}_pool$pool.err"
    { echo "==== $kind pool=$pool"; cat "$B/${kind}_pool$pool.out"; echo "--- stderr"; cat "$B/${kind}_pool$pool.err";
      echo "--- summary"; "$C" summary "$r"; echo "--- summary --at oom"; "$C" summary "$r" --at oom; } \
      >> "$OUT/cards.txt" 2>&1
  done
done

# 3. The limit counts the pool's chunks whole.
steps="info"; for i in $(seq 1 4000); do steps="$steps alloc 1"; done
steps="$steps info freealt info alloc 6144 info"
CUGUARD_POOL=1 CUGUARD_LIMIT=8GiB CUGUARD_REPORT=$B/limit.json LD_PRELOAD=$S "$B/limit" $steps 2> "$B/limit.err" | grep -v '^alloc 1 0$' > "$B/limit.out"
{ cat "$B/limit.out"; echo "--- stderr"; cat "$B/limit.err"; echo "--- summary"; "$C" summary "$B/limit.json"; } > "$OUT/limit.txt" 2>&1

# 4. Replay, when the command has it.
{ "$C" replay "$B/max_pool0.json" --capacity 100%;
  "$C" replay "$B/max_pool0.json" --find-capacity --allocator async,driver; } > "$OUT/replay.txt" 2>&1

# 5. PyTorch: 30 tensors of 100 MiB kept between freed ones, then 2.5 GiB asked under a 8 GiB
#    share of the device (torch's own per-process fraction), pool off.
cat > "$B/torch_frag.py" <<'PY'
import json, torch
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(8 * 2**30 / total)
keep, drop = [], []
for i in range(60):
    t = torch.empty(100 * 2**20, dtype=torch.uint8, device="cuda")
    (keep if i % 2 else drop).append(t)
del drop
try:
    big = torch.empty(int(2.5 * 2**30), dtype=torch.uint8, device="cuda")
    print(json.dumps({"result": "served"}))
except torch.cuda.OutOfMemoryError as e:
    s = torch.cuda.memory_stats()
    print(json.dumps({"result": "refused", "message": str(e).splitlines()[0][:400],
                      "reserved": torch.cuda.memory_reserved(), "allocated": torch.cuda.memory_allocated(),
                      "inactive_split": s.get("inactive_split_bytes.all.current")}))
PY
CUGUARD_POOL=0 CUGUARD_REPORT=$B/torch.json LD_PRELOAD=$S python3 "$B/torch_frag.py" > "$B/torch.out" 2> "$B/torch.err"
{ cat "$B/torch.out"; echo "--- stderr"; cat "$B/torch.err"; echo "--- summary"; "$C" summary "$B/torch.json"; } > "$OUT/torch.txt" 2>&1

python3 - <<'PY'
import json, os
out = os.environ["OUT"]
def card(name):
    try:
        r = json.load(open(f"/tmp/oomcard/{name}.json"))
    except Exception as e:
        return f"{name}: no report ({e})"
    o = (r.get("ooms") or [{}])[0]
    rec = (r.get("reconciliation") or [{}])[0]
    idle = [(h["holder"], h["idle_bytes"] >> 20) for h in o.get("idle", [])]
    pool = (r["stats"]["devices"][0].get("pool") or {})
    return (f"{name}: refused_by={o.get('refused_by')} idle_MiB={idle} "
            f"verdict={o.get('verdict', {}).get('action')} fits={o.get('verdict', {}).get('fits')} "
            f"unexplained_MiB={(rec.get('unexplained_bytes') or 0) >> 20} "
            f"pool_peak_reserved_MiB={pool.get('peak_reserved_bytes', 0) >> 20}")
print(open(f"{out}/bare.txt").read())
for n in ["max_pool0", "max_pool1", "new_pool0", "new_pool1", "limit", "torch"]:
    print(card(n))
PY
