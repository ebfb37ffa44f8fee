#!/usr/bin/env bash
# Issue 22, items 4-7 on the H200, after scripts/gpu/stage.sh (uses .gpu/cuguard, .gpu/libcuguard.so,
# .gpu/cudarc_leaks). Logs and reports in $OUT/answers/; a short table last.
#   - item 6: CUGUARD_POOL_LIMIT=1GiB: torch.cuda.mem_get_info and NVML say total 1 GiB (was
#     138.9 GiB free), the 2 GiB tensor is refused;
#   - item 4: PyTorch's empty_cache() after a 3 GiB temporary, and CuPy: every reconciliation
#     figure >= 0, no ~3 GiB "unexplained" (given back memory named), the contexts' estimate said
#     when it is over what NVML says is used;
#   - item 5: the README demo (cudarc_leaks) run twice with --report demo.json: one file, and
#     `cuguard summary demo.json` shows the second run's pid;
#   - item 7: the bill of each report (the demo, GPT-2, the cases above): stacks + Python frames
#     <= hooks, in all, in the first calls and after them; the summary's cost line.
set -u
cd "$(git rev-parse --show-toplevel)"
OUT=${OUT:-$PWD/gpu-out}
L="$OUT/answers"
mkdir -p "$L"
C=$PWD/.gpu/cuguard
DEMO=$PWD/.gpu/cudarc_leaks
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONUNBUFFERED=1

case_run() { # NAME ENV... -- CMD...: runs CMD under cuguard run, report $L/NAME.json
  local name=$1; shift
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  env "${env[@]}" timeout 600 "$C" run --quiet --report "$L/$name.json" -- "$@" \
    > "$L/$name.out" 2> "$L/$name.err"
  echo $? > "$L/$name.rc"
}

case_run pool_limit CUGUARD_POOL_LIMIT=1GiB -- python3 scripts/gpu/answers.py torch_limit
case_run empty_cache -- python3 scripts/gpu/answers.py empty_cache
case_run cupy -- python3 scripts/gpu/answers.py cupy
case_run gpt2 -- python3 scripts/gpu/answers.py gpt2
rm -f "$L"/demo*.json
for i in 1 2; do
  (cd "$L" && "$C" run --report demo.json -- "$DEMO" > "demo.$i.out" 2> "demo.$i.err")
  cp "$L/demo.json" "$L/demo.run$i.report" 2>/dev/null
done
"$C" summary "$L/demo.json" > "$L/demo.summary.txt" 2>&1

python3 - "$L" <<'PY'
import json, os, sys, re
L = sys.argv[1]
def report(name):
    try:
        return json.load(open(os.path.join(L, name)))
    except Exception as e:
        return None
print("| check | result |")
print("|---|---|")
try:
    pl = json.loads(open(os.path.join(L, "pool_limit.out")).read().strip().splitlines()[-1])
    nv = pl.get("nvml") or {}
    print(f"| item 6: mem_get_info total under CUGUARD_POOL_LIMIT=1GiB | {pl['total']} (want {1<<30}) free {pl['free']} |")
    print(f"| item 6: NVML total | {nv.get('total')} (want {1<<30}) |")
    print(f"| item 6: 2 GiB tensor | {'refused' if pl['oom'] else 'NOT refused'} |")
except Exception as e:
    print(f"| item 6 | no result ({e}) |")
for name in ["empty_cache.json", "cupy.json", "gpt2.json"]:
    r = report(name)
    if not r:
        print(f"| item 4: {name} | no report |"); continue
    for rec in r.get("reconciliation", []):
        neg = [k for k, v in list(rec.get("explained", {}).items()) + [("unexplained_bytes", rec.get("unexplained_bytes"))] if isinstance(v, int) and v < 0]
        print(f"| item 4: {name} device {rec['device']} | used {rec.get('process_used_bytes') or rec.get('device_used_bytes')}, unexplained {rec.get('unexplained_bytes')}, given back {rec['explained'].get('given_back_bytes')} of {rec.get('given_back_pending_bytes')}, contexts {rec['explained'].get('context_overhead_bytes')} (estimate {rec.get('context_overhead_estimate_bytes')}, excess {rec.get('excess_bytes')}); negative: {neg or 'none'} |")
r1, r2 = report("demo.run1.report"), report("demo.run2.report")
files = sorted(f for f in os.listdir(L) if f.startswith("demo") and f.endswith(".json"))
summ = open(os.path.join(L, "demo.summary.txt")).read()
if r1 and r2:
    p2 = r2["process"]["pid"]
    print(f"| item 5: files after two runs | {files} (want ['demo.json']) |")
    print(f"| item 5: summary shows the second run (pid {p2}) | {'yes' if f'pid {p2} ' in summ else 'NO'} |")
else:
    print("| item 5 | no reports |")
for name in ["demo.json", "gpt2.json", "empty_cache.json", "cupy.json", "pool_limit.json"]:
    r = report(name)
    if not r or "cost" not in r:
        print(f"| item 7: {name} | no cost |"); continue
    c = r["cost"]
    t = lambda k, f: (c.get(k) or {}).get(f, 0)
    ok = (t("stacks", "ns") + t("python", "ns") <= t("hooks", "ns")
          and t("stacks", "first_ns") + t("python", "first_ns") <= t("hooks", "first_ns"))
    print(f"| item 7: {name} parts within the whole | {'yes' if ok else 'NO'}: hooks {t('hooks','ns')} ns, stacks {t('stacks','ns')}, python {t('python','ns')}, one-time {t('one_time','ns')} |")
PY
for n in demo gpt2; do echo "--- $n"; "$C" summary "$L/$n.json" 2>&1 | grep "cuguard's cost"; done
