#!/usr/bin/env bash
# Builds what the GPU machine needs (it has no Rust toolchain) into .gpu/, which .gitignore
# keeps out of the repository and a device run carries: the shim, the command, the cudarc
# workload and the allocation benchmark. RMM's wheels go to .whl/ (../shared/gpu/fetch-wheels.sh).
set -eu
cd "$(git rev-parse --show-toplevel)"
cargo build --release -p cuguard -p cuguard-shim -p cuguard-workloads
mkdir -p .gpu
cp target/release/libcuguard.so target/release/cuguard target/release/cudarc_leaks target/release/alloc_bench .gpu/
if [ ! -d .whl ] && [ -x ../shared/gpu/fetch-wheels.sh ]; then ../shared/gpu/fetch-wheels.sh; fi
ls -la .gpu
