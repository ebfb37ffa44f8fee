#!/usr/bin/env bash
# The H200 checks of issues 21 and 22 in one call (few, full runs): the end view and the caches
# (end_check.sh), readable stacks (stacks.sh), growth against warm-up (check.sh attribution with
# the GPT-2 and resnet18 cases), memory given back, IPC and captures (giveback.sh). Each part's
# table is printed last; logs under $OUT. Parts: PARTS="end stacks growth giveback clones peers"
# (default all): clones is growth inside PyTorch's cache by line and os._exit; peers is RMM's and
# CuPy's own suites under the pool (scripts/gpu/peers.sh).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
parts=${PARTS:-end stacks growth giveback clones peers}
for p in $parts; do
  echo "##### $p $(date -u +%H:%M:%S)"
  case $p in
    end) OUT=$OUT/end bash scripts/gpu/end_check.sh > "$OUT/end.txt" 2>&1 ;;
    stacks) [ -f scripts/gpu/stacks.sh ] && OUT=$OUT/stacks bash scripts/gpu/stacks.sh > "$OUT/stacks.txt" 2>&1 ;;
    growth) OUT=$OUT/growth ATTR_CASES="${GROWTH_CASES:-gpt2_train_cached resnet18_train_cached torch_train_growth}" \
        bash scripts/gpu/check.sh attribution > "$OUT/growth.txt" 2>&1 ;;
    giveback) [ -f scripts/gpu/giveback.sh ] && OUT=$OUT/giveback bash scripts/gpu/giveback.sh > "$OUT/giveback.txt" 2>&1 ;;
    clones) # growth inside PyTorch's cache follows the clone line; os._exit still marks the end
      ( mkdir -p "$OUT/clones"; C=$PWD/.gpu/cuguard; export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONPATH=$PWD/src/python
        for how in return os_exit; do
          $C run --report "$OUT/clones/$how.json" -- python3 scripts/gpu/end/torch_clones.py $how; echo "rc=$?"
          $C summary "$OUT/clones/$how.json" | sed -n '1,/^sites/p'
          $C check --max-growth 64MiB "$OUT/clones/$how.json"; echo "check rc=$?"
          grep -n "mark: " scripts/gpu/end/torch_clones.py
        done ) > "$OUT/clones.txt" 2>&1 ;;
    peers) OUT=$OUT/peers bash scripts/gpu/peers.sh > "$OUT/peers.txt" 2>&1 ;;
  esac
  echo "rc=$?"
done
for p in $parts; do echo "===== $p"; tail -n ${TAIL:-40} "$OUT/$p.txt" 2>/dev/null; done
(cd "$OUT/.." && tar czf /tmp/issue21-out.tgz "$(basename "$OUT")" && mv /tmp/issue21-out.tgz "$OUT/all.tgz")
