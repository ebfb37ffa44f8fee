#!/usr/bin/env bash
# The H200 checks of issues 21 and 22 in one call (few, full runs): the end view and the caches
# (end_check.sh), readable stacks (stacks.sh), growth against warm-up (check.sh attribution with
# the GPT-2 and resnet18 cases), memory given back, IPC and captures (giveback.sh). Each part's
# table is printed last; logs under $OUT. Parts: PARTS="end stacks growth giveback" (default all).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
parts=${PARTS:-end stacks growth giveback}
for p in $parts; do
  echo "##### $p $(date -u +%H:%M:%S)"
  case $p in
    end) OUT=$OUT/end bash scripts/gpu/end_check.sh > "$OUT/end.txt" 2>&1 ;;
    stacks) [ -f scripts/gpu/stacks.sh ] && OUT=$OUT/stacks bash scripts/gpu/stacks.sh > "$OUT/stacks.txt" 2>&1 ;;
    growth) OUT=$OUT/growth ATTR_CASES="${GROWTH_CASES:-gpt2_train_cached resnet18_train_cached torch_train_growth}" \
        bash scripts/gpu/check.sh attribution > "$OUT/growth.txt" 2>&1 ;;
    giveback) [ -f scripts/gpu/giveback.sh ] && OUT=$OUT/giveback bash scripts/gpu/giveback.sh > "$OUT/giveback.txt" 2>&1 ;;
  esac
  echo "rc=$?"
done
for p in $parts; do echo "===== $p"; tail -n ${TAIL:-40} "$OUT/$p.txt" 2>/dev/null; done
(cd "$OUT/.." && tar czf /tmp/issue21-out.tgz "$(basename "$OUT")" && mv /tmp/issue21-out.tgz "$OUT/all.tgz")
