#!/usr/bin/env bash
# Issue 53, RMM's out of memory and JAX's card again, after stage.sh (carry .gpu and .whl):
#   OUT=$OUT bash scripts/gpu/rmm_oom.sh
# 1. RMM (wheels in .whl): what a preloaded __cxa_throw sees thrown (cxa_throw_probe.c), then
#    RMM's card under cuguard (the shim's own __cxa_throw), plain and with CUGUARD_RMM_OOM=0.
# 2. JAX's card under cuguard (the size parser and the room mended after run 46).
# 3. The refused call's time inside PyTorch (framework_oom.sh's part 2).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH}
gcc -O2 -shared -fPIC -o /tmp/cxa_throw_probe.so scripts/gpu/cxa_throw_probe.c -ldl
{
  echo "== rmm, probe alone"
  LD_PRELOAD=/tmp/cxa_throw_probe.so timeout 100 python3 scripts/gpu/framework_oom_probe.py rmm 2>&1 | cut -c1-1500
  echo "== rmm under cuguard"
  timeout 200 "$C" run --report /tmp/rmm.json -- python3 scripts/gpu/framework_oom_probe.py rmm 2>&1 | cut -c1-3000
  "$C" summary /tmp/rmm.json 2>&1 | head -60
  "$C" summary --at oom /tmp/rmm.json 2>&1 | head -30
  cp /tmp/rmm.json "$OUT/" 2>/dev/null
  echo "== rmm under cuguard, CUGUARD_RMM_OOM=0"
  CUGUARD_RMM_OOM=0 timeout 200 "$C" run --report /tmp/rmm0.json -- python3 scripts/gpu/framework_oom_probe.py rmm 2>&1 | tail -2 | cut -c1-600
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("ooms", [(o["api"], o.get("refused_by")) for o in r.get("ooms", [])])' /tmp/rmm0.json
  echo "== jax under cuguard"
  R=/tmp/fw_oom_jax.json
  timeout 200 "$C" run --report "$R" -- python3 scripts/gpu/framework_oom_probe.py jax 2>&1 | tail -3 | cut -c1-6000
  "$C" summary --at oom "$R" 2>&1 | head -30
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps([{k: o.get(k) for k in ("api","refused_by","within","size","card_ns","framework_ns","verdict")} for o in r.get("ooms", [])])[:3000])' "$R"
  cp "$R" "$OUT/" 2>/dev/null
} 2>&1 | tee "$OUT/rmm_oom.txt"
SKIP_FRAMEWORKS=1 OUT=$OUT bash scripts/gpu/framework_oom.sh > /dev/null 2>&1
cat "$OUT/torch_refusal_time.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/versions.txt"
python3 -c 'import torch, rmm, jax; print("torch", torch.__version__, "rmm", rmm.__version__, "jax", jax.__version__)' >> "$OUT/versions.txt" 2>&1
gcc --version | head -1 >> "$OUT/versions.txt"
