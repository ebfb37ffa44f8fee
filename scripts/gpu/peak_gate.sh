#!/usr/bin/env bash
# A change that makes one step need more memory, caught on the real driver (issue 55 item 3,
# issue 57 item 3): scripts/gpu/phases_torch.py run twice under `cuguard run`, PyTorch's cache off
# (each tensor a driver allocation): the baseline with PHASES_HEAVY=0, then as written (step 4
# holds 256 MiB more, the line marked HEAVY). Then `cuguard diff` (text and markdown) and
# `cuguard check --baseline --max-peak-growth 5% --by phase` (text, SARIF, github), and the
# baseline against itself. Run from the repository root on the GPU machine after
# scripts/gpu/stage.sh:
#   OUT=$OUT bash scripts/gpu/peak_gate.sh
# Writes $OUT/peak_gate.txt (everything said, with each command's exit status).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-peak-gate
rm -rf "$B"; mkdir -p "$B"
C=$PWD/.gpu/cuguard
P=$PWD/scripts/gpu/phases_torch.py
unset PYTORCH_CUDA_ALLOC_CONF NVTX_INJECTION64_PATH
export PYTHONUNBUFFERED=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUGUARD_POOL=0
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  for side in base new; do
    heavy=1; [ $side = base ] && heavy=0
    PHASES_HEAVY=$heavy timeout 120 "$C" run --quiet --report "$B/$side.json" -- python3 "$P" > "$B/$side.out" 2> "$B/$side.err"
    echo "## $side (PHASES_HEAVY=$heavy): exit $?; HEAVY line $(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])['heavy_line'])" "$B/$side.out" 2>/dev/null)"
  done
  cd "$B"
  run() { echo "\$ cuguard $*"; "$C" "$@"; echo "(exit $?)"; }
  run diff base.json new.json
  run diff --format markdown base.json new.json
  run check --baseline base.json --max-peak-growth 5% --by phase new.json
  run check --baseline base.json --max-peak-growth 5% --by phase --format github --source-root "$OLDPWD" new.json
  echo "\$ cuguard check … --format sarif … new.json > gate.sarif"
  "$C" check --baseline base.json --max-peak-growth 5% --by phase --format sarif --source-root "$OLDPWD" new.json > "$B/gate.sarif"
  echo "(exit $?)"
  python3 -c "import json; d=json.load(open('$B/gate.sarif')); [print(r['ruleId'], r['message']['text'], r.get('locations', [{}])[0].get('physicalLocation')) for r in d['runs'][0]['results']]"
  run check --baseline base.json --max-peak-growth 5% --by phase base.json
} > "$OUT/peak_gate.txt" 2>&1
tail -40 "$OUT/peak_gate.txt"
