#!/usr/bin/env bash
# Issue 53's CuPy and JAX cards and the refused call's time inside PyTorch, after stage.sh:
#   OUT=$OUT bash scripts/gpu/framework_oom.sh
# 1. CuPy and JAX, plain and under cuguard (framework_oom_probe.py): whether their
#    out-of-memory errors can be seen where they are made, what each tells of its memory, and
#    cuguard's card then.
# 2. PyTorch's refusal against the whole device (torch_oom_probe.py device), three ways in
#    turn, two rounds: no cuguard; cuguard; cuguard with its PyTorch card skipped (the
#    observer's Python part), to tell the shim's share from the observer's.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python${PYTHONPATH:+:$PYTHONPATH}
{
  # SKIP_FRAMEWORKS=1: the refused call's time inside PyTorch only (part 2).
  [ "${SKIP_FRAMEWORKS:-0}" = 1 ] || for fw in cupy jax rmm; do
    if [ "$fw" != cupy ]; then
      echo "== $fw plain"
      timeout 100 python3 scripts/gpu/framework_oom_probe.py $fw 2>&1 | tail -1 | cut -c1-6000
    fi
    [ "$fw" = rmm ] && continue
    for pool in 1; do
      R=/tmp/fw_oom_$fw$pool.json
      echo "== $fw under cuguard, pool $pool"
      CUGUARD_POOL=$pool timeout 200 "$C" run --report "$R" -- python3 scripts/gpu/framework_oom_probe.py $fw 2>&1 | tail -3 | cut -c1-6000
      "$C" summary --at oom "$R" 2>&1 | head -30
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps([{k: o.get(k) for k in ("api","refused_by","within","card_ns","framework_ns","verdict")} for o in r.get("ooms", [])])[:3000])' "$R"
      cp "$R" "$OUT/" 2>/dev/null
    done
  done
} 2>&1 | tee "$OUT/framework_oom.txt"
cat > /tmp/skip_card.py <<'PY'
import runpy, sys
import cuguard._oom as o
o.card = lambda *a, **k: None
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
PY
{
  for round in 1 2; do
    echo "== round $round plain"
    timeout 200 python3 scripts/gpu/torch_oom_probe.py device 2>/dev/null | grep -o '"refusal_ms": [0-9.]*'
    echo "== round $round cuguard"
    timeout 200 "$C" run --quiet --report /tmp/t_oom_c.json -- python3 scripts/gpu/torch_oom_probe.py device 2>/dev/null | grep -o '"refusal_ms": [0-9.]*'
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(json.dumps([{k: o.get(k) for k in ("api","refused_by","within","card_ns","framework_ns")} for o in r.get("ooms", [])]))' /tmp/t_oom_c.json
    echo "== round $round cuguard, card skipped"
    timeout 200 "$C" run --quiet --report /tmp/t_oom_s.json -- python3 /tmp/skip_card.py scripts/gpu/torch_oom_probe.py device 2>/dev/null | grep -o '"refusal_ms": [0-9.]*'
  done

} 2>&1 | tee "$OUT/torch_refusal_time.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/versions.txt"
python3 -c 'import torch, cupy, jax; print("torch", torch.__version__, "cupy", cupy.__version__, "jax", jax.__version__)' >> "$OUT/versions.txt" 2>&1
