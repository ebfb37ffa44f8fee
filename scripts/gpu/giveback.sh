#!/usr/bin/env bash
# Issue 22 on the H200, side by side bare / pool off / pool on (cuguard's default settings):
#   - a 3 GiB cuMemFree, sampled by cuMemGetInfo and NVML every 100 ms for 1 s, with nothing in
#     flight and with ~0.1 s of memsets of the block still queued (giveback.py free3g);
#   - PyTorch's empty_cache() after a 3 GiB temporary: torch.cuda.mem_get_info and nvidia-smi
#     (giveback_torch.py empty_cache);
#   - torch.multiprocessing sharing CUDA tensors of 4 KiB, 4 MiB, 256 MiB, the child's sums
#     checked, the child under cuguard and not (giveback_torch.py ipc [plain]);
#   - cuMemAlloc (and pitch, managed, host allocations, a free) during a capture in each mode,
#     from the capturing thread and another (giveback.py capture);
#   - bare only: which driver calls give back a cuMemAlloc range freed with cuMemFreeAsync
#     (giveback.py held; the simulator's choices, docs/driver-facts.md).
# Logs (every run's JSON, stderr, reports) in $OUT/giveback/; the short table in
# $OUT/giveback.md, printed last. Run from the repository root after scripts/gpu/stage.sh:
#   bash scripts/gpu/giveback.sh
# What it should show: pool on like bare (back_ms within ~100-200 ms of the free, or of the end of
# the queued work; free_call_ms small with work queued, where bare waits for it); empty_cache back
# at once in both; IPC sums right at every size under the pool, child under cuguard or not;
# capture answers identical in the three columns (global/thread_local 900/901, relaxed 0/0).
set -u
OUT=${OUT:-$PWD/gpu-out}
L="$OUT/giveback"
mkdir -p "$L"
S=${CUGUARD_SHIM:-$PWD/.gpu/libcuguard.so}
export PYTHONUNBUFFERED=1

# run NAME VARIANT CMD...: runs CMD bare / pool-off / pool, its stdout to $L/NAME.VARIANT.json
run() {
  local name=$1 v=$2
  shift 2
  local env=()
  case $v in
    bare) env=() ;;
    pool-off) env=(LD_PRELOAD=$S CUGUARD_POOL=0) ;;
    pool) env=(LD_PRELOAD=$S) ;;
  esac
  env "${env[@]}" CUGUARD_QUIET=1 CUGUARD_REPORT=$L/$name.$v.report.json timeout 300 "$@" \
    > "$L/$name.$v.json" 2> "$L/$name.$v.err"
  echo $? > "$L/$name.$v.rc"
}

for v in bare pool-off pool; do
  run free3g $v python3 scripts/gpu/giveback.py free3g
  run free3g_pending $v python3 scripts/gpu/giveback.py free3g pending
  run empty_cache $v python3 scripts/gpu/giveback_torch.py empty_cache
  run ipc $v python3 scripts/gpu/giveback_torch.py ipc
  run ipc_plain $v python3 scripts/gpu/giveback_torch.py ipc plain
  run capture $v python3 scripts/gpu/giveback.py capture
done
run held bare python3 scripts/gpu/giveback.py held
nvidia-smi > "$L/nvidia-smi.txt" 2>&1

python3 - "$L" > "$OUT/giveback.md" <<'EOF'
import json, os, sys
L = sys.argv[1]
V = ["bare", "pool-off", "pool"]

def lines(name, v):
    try:
        return [json.loads(l) for l in open(f"{L}/{name}.{v}.json") if l.strip().startswith("{")]
    except Exception:
        return []

def rc(name, v):
    try:
        return open(f"{L}/{name}.{v}.rc").read().strip()
    except Exception:
        return "?"

def cell(name, v, fmt):
    ls = lines(name, v)
    if not ls:
        return f"no output (rc {rc(name, v)})"
    try:
        return fmt(ls)
    except Exception as e:
        return f"? ({e})"

rows = [
    ("3 GiB free: back after (ms); cuMemFree took (ms)", "free3g",
     lambda ls: f"{ls[0]['back_ms']}; {ls[0]['free_call_ms']}"),
    ("3 GiB free, work queued: back after (ms); cuMemFree took (ms)", "free3g_pending",
     lambda ls: f"{ls[0]['back_ms']}; {ls[0]['free_call_ms']}"),
    ("3 GiB free: cuMemGetInfo used GiB at 0/0.5/1 s", "free3g",
     lambda ls: "/".join(str(ls[0]['info_used_gib'][i]) for i in (0, 5, 10))),
    ("3 GiB free: NVML used GiB at 0/0.5/1 s", "free3g",
     lambda ls: "/".join(str(ls[0]['nvml_used_gib'][i]) for i in (0, 5, 10))),
    ("empty_cache: back after (ms); nvidia-smi MiB at 0/0.5/1 s", "empty_cache",
     lambda ls: f"{ls[0]['back_ms']}; " + "/".join(str(ls[0]['smi_mib'].get(k)) for k in ("0", "500", "1000"))),
]
for what, child in (("child under cuguard", "ipc"), ("child not under cuguard", "ipc_plain")):
    rows.append((f"torch IPC 4K/4M/256M, {what}: sums right, write seen", child,
                 lambda ls: " ".join(
                     (("ok" if l.get("sum_ok") and l.get("child_write_seen") else "WRONG") if "error" not in l
                      else "ERROR " + l["error"][:60]) for l in ls)))
print("| check | " + " | ".join(V) + " |")
print("|---|" + "---|" * len(V))
for what, name, fmt in rows:
    print(f"| {what} | " + " | ".join(cell(name, v, fmt) for v in V) + " |")
cases = [l["case"] for l in lines("capture", "bare")]
for case in cases:
    def fmt(ls, case=case):
        l = next(l for l in ls if l["case"] == case)
        return f"{l['alloc']}/{l['end']} (status {l['status']})"
    print(f"| capture {case}: alloc/end | " + " | ".join(cell("capture", v, fmt) for v in V) + " |")
held = lines("held", "bare")
if held:
    print()
    print("bare, a cuMemAlloc range freed with cuMemFreeAsync, still taken after: " +
          ", ".join(f"{k[len('held_after_'):]}={v}" for k, v in held[0].items() if k.startswith("held_after_")) +
          f"; allocation under pressure: {held[0].get('pressure_alloc_result')}")
EOF
cat "$OUT/giveback.md"
