#!/usr/bin/env bash
# Issue 24 on the H200, after scripts/gpu/stage.sh (uses .gpu/cuguard and .gpu/libcuguard.so):
# compute-sanitizer's memcheck under cuguard's pool, with and without NVTX registration.
#
#   1. scripts/gpu/sanitizer_planted.cu (one element past a 1,000-byte cudaMalloc allocation,
#      written by a kernel; a kernel writing a freed 1,000-byte allocation; one correct write):
#      a. bare:                                   both errors reported, sizes 1000;
#      b. under the pool, registration off
#         (compute-sanitizer --nvtx no):           neither reported (one chunk per allocation);
#      c. under the pool with registration
#         (cuguard run --sanitizer memcheck):      both reported, sizes 1000, the correct write not;
#   2. RMM's default resource (cudaMalloc) and PyTorch with its cache off
#      (PYTORCH_NO_CUDA_MEMORY_CACHING=1), each a 1,024-byte buffer written one byte past its end
#      by a CuPy kernel, under the pool and compute-sanitizer: reported (the byte is in the pool's
#      256-byte red zone; without it, it would be the next block's first byte).
#
# Needs nvcc and compute-sanitizer (CUDA 13.0's; NVCC= and CS= override), python3 with rmm,
# cupy and torch for part 2. Raw logs go into $OUT/sanitizer-logs.tgz, the table to stdout and
# $OUT/sanitizer-table.md. About 2-4 minutes.
set -u
cd "$(git rev-parse --show-toplevel)"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
L=$(mktemp -d)/sanitizer
mkdir -p "$L"
C=$PWD/.gpu/cuguard
export CUGUARD_SHIM=$PWD/.gpu/libcuguard.so PYTHONUNBUFFERED=1
CS=${CS:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
export CUGUARD_COMPUTE_SANITIZER=$CS
# Go on after a reported error (both errors are in one run), no host backtraces (shorter logs).
OPTS=(--destroy-on-device-error=kernel --show-backtrace=no)

{ "$CS" --version; "$NVCC" --version; nvidia-smi --query-gpu=name,driver_version --format=csv; } \
  > "$L/versions.txt" 2>&1
"$NVCC" -O2 -lineinfo -o "$L/planted" scripts/gpu/sanitizer_planted.cu > "$L/nvcc.log" 2>&1 \
  || echo "nvcc failed" >> "$L/nvcc.log"

run_case() { # NAME CMD...: stdout+stderr to $L/NAME.log, status to $L/NAME.rc
  local name=$1; shift
  SECONDS=0
  timeout 150 "$@" > "$L/$name.log" 2>&1
  echo $? > "$L/$name.rc"
  echo "$SECONDS" > "$L/$name.secs"
}

run_case bare "$CS" --tool memcheck "${OPTS[@]}" "$L/planted"
# The pool without registration: compute-sanitizer with its NVTX support off, the shim put in
# the program as cuguard run --sanitizer does.
run_case pool_unregistered env CUGUARD_POOL=1 CUGUARD_REPORT="$L/pool_unregistered.json" \
  "$CS" --tool memcheck --nvtx no "${OPTS[@]}" "$C" run --exec -- "$L/planted"
# The documented command.
run_case pool_registered "$C" run --sanitizer memcheck --report "$L/pool_registered.json" \
  --sanitizer-arg=--destroy-on-device-error=kernel --sanitizer-arg=--show-backtrace=no \
  -- "$L/planted"

cat > "$L/planted.py" <<'PY'
# A 1,024-byte buffer of RMM's default resource or of PyTorch (cache off), written one byte past
# its end by a CuPy kernel, then a correct write of its last byte.
import sys
import cupy
which = sys.argv[1]
n = 1024
if which == "rmm":
    import rmm
    buf = rmm.DeviceBuffer(size=n)
    ptr, owner = buf.ptr, buf
    print("resource", type(rmm.mr.get_current_device_resource()).__name__)
else:
    import torch
    t = torch.zeros(n, dtype=torch.uint8, device="cuda")
    ptr, owner = t.data_ptr(), t
mem = cupy.cuda.UnownedMemory(ptr, n, owner)
arr = cupy.ndarray((n,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))
poke = cupy.RawKernel(r'''
extern "C" __global__ void poke(unsigned char* p, unsigned long long i) { p[i] = 7; }
''', "poke")
print(f"oob_target {hex(ptr + n)} (buffer {hex(ptr)}, {n} bytes)", flush=True)
poke((1,), (1,), (arr, cupy.uint64(n)))
try:
    cupy.cuda.runtime.deviceSynchronize()
    print("sync ok")
except Exception as e:
    print("sync error", e)
poke((1,), (1,), (arr, cupy.uint64(n - 1)))
cupy.cuda.runtime.deviceSynchronize()
print("done", flush=True)
PY
run_case rmm "$C" run --sanitizer memcheck --report "$L/rmm.json" \
  --sanitizer-arg=--destroy-on-device-error=kernel --sanitizer-arg=--show-backtrace=no \
  -- python3 "$L/planted.py" rmm
run_case torch env PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  "$C" run --sanitizer memcheck --report "$L/torch.json" \
  --sanitizer-arg=--destroy-on-device-error=kernel --sanitizer-arg=--show-backtrace=no \
  -- python3 "$L/planted.py" torch

python3 - "$L" > "$L/table.md" <<'PY'
import os, re, sys
L = sys.argv[1]
def read(name):
    try:
        return open(os.path.join(L, name)).read()
    except OSError:
        return ""
def reports(log):
    """Each memcheck error: (kind line, address, the nearest allocation's size if said)."""
    out = []
    blocks = re.split(r"(?m)^========= (?=Invalid|Program hit|Malloc|Cuda)", log)
    for b in blocks[1:]:
        first = b.splitlines()[0].strip()
        addr = re.search(r"Address (0x[0-9a-fA-F]+)", b)
        size = re.search(r"allocation at 0x[0-9a-fA-F]+ of size ([\d,]+) bytes", b)
        out.append((first, int(addr.group(1), 16) if addr else None,
                    size.group(1).replace(",", "") if size else None))
    return out
def target(log, key):
    m = re.search(key + r" (0x[0-9a-fA-F]+)", log)
    return int(m.group(1), 16) if m else None
def found(errs, addr):
    hit = [e for e in errs if addr is not None and e[1] == addr]
    if not hit:
        return "not reported"
    return "reported" + (f" (nearest allocation: {hit[0][2]} bytes)" if hit[0][2] else "")
summary = re.compile(r"ERROR SUMMARY: (\d+) error")
print("| run | one past the end | use after free | errors | exit | s |")
print("|---|---|---|---|---|---|")
want = {"bare": "both", "pool_unregistered": "neither", "pool_registered": "both"}
for name in ["bare", "pool_unregistered", "pool_registered"]:
    log = read(name + ".log")
    errs = reports(log)
    s = summary.search(log)
    print(f"| {name} (want {want[name]}) | {found(errs, target(log, 'oob_target'))} | "
          f"{found(errs, target(log, 'uaf_target'))} | {s.group(1) if s else '?'} | "
          f"{read(name + '.rc').strip()} | {read(name + '.secs').strip()} |")
for name in ["rmm", "torch"]:
    log = read(name + ".log")
    errs = reports(log)
    s = summary.search(log)
    print(f"| {name} under the pool + memcheck (want reported) | {found(errs, target(log, 'oob_target'))} | - | "
          f"{s.group(1) if s else '?'} | {read(name + '.rc').strip()} | {read(name + '.secs').strip()} |")
for name in ["pool_unregistered", "pool_registered", "rmm", "torch"]:
    log = read(name + ".log")
    lines = [l for l in log.splitlines() if l.startswith("cuguard:")]
    print(f"\n{name}: cuguard's lines: {lines[-2:] if lines else 'none'}")
PY
cat "$L/table.md"
cp "$L/table.md" "$OUT/sanitizer-table.md"
tar czf "$OUT/sanitizer-logs.tgz" -C "$(dirname "$L")" sanitizer
