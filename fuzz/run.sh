#!/usr/bin/env bash
# Runs the report fuzz target for SECONDS (default 60), seeded with the test fixtures.
# Needs a nightly toolchain and cargo-fuzz; without them it prints a notice and exits 0,
# so CI may call it unconditionally. Crashes are left in fuzz/artifacts/report/.
set -euo pipefail
seconds=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: skipped: no nightly toolchain (rustup toolchain install nightly)"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz/run.sh: skipped: cargo-fuzz is not installed (cargo install cargo-fuzz)"
  exit 0
fi
corpus="$here/corpus/report"
mkdir -p "$corpus"
cp "$here"/../tests/fixtures/*.json "$here"/../tests/fixtures/hostile/*.bad "$corpus"/ 2>/dev/null || true
cd "$here"
exec cargo +nightly fuzz run report "$corpus" -- -max_total_time="$seconds" -max_len=262144
