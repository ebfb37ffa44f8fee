#!/usr/bin/env bash
# Builds what the GPU machine needs (it has no Rust toolchain) into .gpu/, which .gitignore
# keeps out of the repository and a device run carries: the shim, the command, the cudarc
# workload and the allocation benchmark. RMM's wheels go to .whl/ (../shared/gpu/fetch-wheels.sh).
set -eu
cd "$(git rev-parse --show-toplevel)"
cargo build --release -p cuguard -p cuguard-shim -p cuguard-workloads
mkdir -p .gpu
cp target/release/libcuguard.so target/release/cuguard target/release/cudarc_leaks target/release/alloc_bench target/release/capture_bench .gpu/
# The command and the benchmark need no debug information there (a run carries 64 MiB at most).
strip --strip-debug .gpu/cuguard .gpu/alloc_bench .gpu/capture_bench
# BASELINE=path/to/libcuguard.so: another build to benchmark side by side (check.sh bench).
if [ -n "${BASELINE:-}" ]; then
  mkdir -p .gpu/baseline && cp "$BASELINE" .gpu/baseline/libcuguard.so && strip --strip-debug .gpu/baseline/libcuguard.so
fi
if [ ! -d .whl ] && [ -x ../shared/gpu/fetch-wheels.sh ]; then ../shared/gpu/fetch-wheels.sh; fi
ls -la .gpu
