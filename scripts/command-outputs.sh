#!/bin/bash
# Every output of `cuguard summary` and `cuguard check`, hashed, on report directories and on
# each fixture alone: compare two builds' lists byte for byte without keeping the outputs (some
# are hundreds of MiB).
#
#   scripts/command-outputs.sh CUGUARD OUT DIR...    # writes OUT: "sha256  name" per output
#   diff <(sort -k2 before.sums) <(sort -k2 after.sums) && echo same
#
# Each DIR (and tests/fixtures as a whole) gets summary text, json and markdown with no option,
# --top 0, --top 3, --by rank, --by host, --by process; check text, json and junit with no option,
# --top 0, --owners all, --baseline DIR, --max-leaked-bytes 1GiB, --fail-on-events all
# --require-complete, a suppressions file, --max-growth 1MiB --owners all. Each fixture alone gets
# every format of both, summary --by rank, check --owners all. Each output is hashed with its
# stderr and exit status.
set -u
B=$1; OUT=$2; shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
FIX=$ROOT/tests/fixtures
# A fixed name: the outputs name the suppressions file.
SUPP=${TMPDIR:-/tmp}/cuguard-command-outputs.supp; trap 'rm -f "$SUPP"' EXIT
printf 'leak:layer_1\napi:cuMemAllocAsync memory:async\nevent:double_free frame:step_3\n' > "$SUPP"
: > "$OUT"
hash() { # NAME CMD...
  local name=$1; shift
  { "$@" 2>&1; echo "rc $?"; } | sha256sum | sed "s|-|$name|" >> "$OUT"
}
for d in "$@" "$FIX"; do
  n=$(basename "$d")
  for f in text json markdown; do
    hash "$n.summary.$f" "$B" summary --format $f "$d"
    for o in "--top 0" "--top 3" "--by rank" "--by host" "--by process"; do
      # shellcheck disable=SC2086
      hash "$n.summary.$f.${o// /}" "$B" summary --format $f $o "$d"
    done
  done
  for f in text json junit; do
    hash "$n.check.$f" "$B" check --format $f "$d"
    for o in "--top 0" "--owners all" "--max-leaked-bytes 1GiB" "--fail-on-events all --require-complete" "--max-growth 1MiB --owners all"; do
      # shellcheck disable=SC2086
      hash "$n.check.$f.${o// /}" "$B" check --format $f $o "$d"
    done
    hash "$n.check.$f.baseline" "$B" check --format $f --baseline "$d" "$d"
    hash "$n.check.$f.suppressions" "$B" check --format $f --suppressions "$SUPP" "$d"
  done
done
for fx in "$FIX"/*.json; do
  n=fixture.$(basename "$fx" .json)
  for f in text json markdown; do hash "$n.summary.$f" "$B" summary --format $f "$fx"; done
  for f in text json junit; do hash "$n.check.$f" "$B" check --format $f "$fx"; done
  hash "$n.summary.byrank" "$B" summary --by rank --format json "$fx"
  hash "$n.check.ownersall" "$B" check --owners all --format json "$fx"
done
