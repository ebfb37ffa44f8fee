#!/usr/bin/env bash
# The race detector's run (tests/it/reliability_race.rs, an ignored test: it needs the nightly
# toolchain with rust-src and rebuilds std, the shim and the simulated driver with
# ThreadSanitizer, minutes on 2 cores). Run it on a schedule, or before a release, and put its
# result in docs/reliability.md ("Race detector"):
#
#   scripts/race.sh            # 20 s of stress, pool on and off
#   CUGUARD_TSAN_SECS=5 scripts/race.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
rustup component add rust-src --toolchain nightly >/dev/null
command -v gcc >/dev/null || { echo "race.sh: gcc (with libtsan) is needed" >&2; exit 2; }
echo "race.sh: $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD), $(rustc +nightly --version), $(gcc --version | head -1)"
CUGUARD_TSAN_SECS=${CUGUARD_TSAN_SECS:-20} cargo test --test it reliability_race -- --ignored --nocapture
