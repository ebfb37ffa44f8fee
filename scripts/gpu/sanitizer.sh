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
#         (cuguard run --sanitizer memcheck):      both reported, sizes 1000, the correct write not,
#                                                  and no "Call to nvtx… failed" line;
#      d. the same with CUGUARD_NVTX_TRACE=1 CUGUARD_LOG=1: every NVTX call the shim makes, with
#         its arguments and result, on stderr (what the tool accepted, and the last call before
#         any crash);
#   3. scripts/gpu/nvtx_sequence.cu, the shim's sequence for one chunk made with NVIDIA's own
#      nvtx3 headers (no shim), under compute-sanitizer, one run per mode: "free" (the shim's
#      order now: region unregistered, heap unregistered, cuMemFree) and "null" (the default
#      domain) should pass with the one-past-the-region write reported; "live" (heap unregistered
#      with its region registered) tells whether the tool takes a heap's regions with it; "late"
#      (the heap unregistered after cuMemFree, the old shim's order when a context went) should be
#      refused as on the H200. If "free" fails too, the sequence is at fault, not the protocol;
#   2. RMM's default resource (cudaMalloc) and PyTorch with its cache off
#      (PYTORCH_NO_CUDA_MEMORY_CACHING=1), each a 1,024-byte buffer written one byte past its end
#      by a CuPy kernel, under the pool and compute-sanitizer: reported (the byte is in the pool's
#      256-byte red zone; without it, it would be the next block's first byte).
#
# Needs nvcc and compute-sanitizer (CUDA 13.0's; NVCC= and CS= override), python3 with cupy and
# torch for part 2, and RMM's wheels in .whl/ (../shared/gpu/fetch-wheels.sh, installed into
# /tmp/site as scripts/gpu/peers.sh does; the RMM case is skipped with a line when .whl/ is
# absent). Raw logs go into $OUT/sanitizer-logs.tgz, the table to stdout and
# $OUT/sanitizer-table.md (two files). About 2-4 minutes.
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
CUDA_INC=${CUDA_INC:-$(dirname "$(dirname "$NVCC")")/include}
"$NVCC" -O2 -lineinfo -I"$CUDA_INC" -o "$L/nvtx_sequence" scripts/gpu/nvtx_sequence.cu -lcuda \
  >> "$L/nvcc.log" 2>&1 || echo "nvcc failed (nvtx_sequence)" >> "$L/nvcc.log"
ls "$CUDA_INC/nvtx3/" > "$L/nvtx3-headers.txt" 2>&1
grep -h "define NVTX_EXT_COMPATID_MEM\|NVTX3EXT_CBID_nvtxMem" "$CUDA_INC/nvtx3/nvToolsExtMem.h" \
  >> "$L/nvtx3-headers.txt" 2>&1

run_case() { # NAME CMD...: stdout+stderr to $L/NAME.log, status to $L/NAME.rc
  local name=$1; shift
  SECONDS=0
  timeout 120 "$@" > "$L/$name.log" 2>&1
  echo $? > "$L/$name.rc"
  echo "$SECONDS" > "$L/$name.secs"
}

run_case bare "$CS" --tool memcheck "${OPTS[@]}" "$L/planted"
# The pool without registration: compute-sanitizer with its NVTX support off, the shim put in
# the program as cuguard run --sanitizer does.
run_case pool_unregistered env CUGUARD_POOL=1 CUGUARD_REPORT="$L/pool_unregistered.json" \
  "$CS" --tool memcheck --nvtx no "${OPTS[@]}" "$C" run --exec -- "$L/planted"
# The documented command, as a user types it (registration is on by default).
run_case pool_registered env -u CUGUARD_NVTX \
  "$C" run --sanitizer memcheck --report "$L/pool_registered.json" \
  --sanitizer-arg=--destroy-on-device-error=kernel --sanitizer-arg=--show-backtrace=no \
  -- "$L/planted"
# The same, every NVTX call the shim makes traced on stderr.
run_case pool_traced env -u CUGUARD_NVTX CUGUARD_NVTX_TRACE=1 CUGUARD_LOG=1 \
  "$C" run --sanitizer memcheck --report "$L/pool_traced.json" \
  --sanitizer-arg=--destroy-on-device-error=kernel --sanitizer-arg=--show-backtrace=no \
  -- "$L/planted"
# NVIDIA's headers doing the shim's sequence, no shim.
for mode in free null live late; do
  run_case "sequence_$mode" "$CS" --tool memcheck "${OPTS[@]}" "$L/nvtx_sequence" "$mode"
done

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
if [ -d .whl ]; then
  [ -d /tmp/site/rmm ] || python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --target /tmp/site .whl/*rmm*.whl .whl/rapids_logger*.whl > "$L/pip.log" 2>&1
  run_case rmm env -u CUGUARD_NVTX PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} \
    "$C" run --sanitizer memcheck --report "$L/rmm.json" \
    --sanitizer-arg=--destroy-on-device-error=kernel --sanitizer-arg=--show-backtrace=no \
    -- python3 "$L/planted.py" rmm
else
  echo "skipped: no .whl/ (RMM's wheels: ../shared/gpu/fetch-wheels.sh, then stage again)" \
    > "$L/rmm.log"
  echo skipped > "$L/rmm.rc"
fi
run_case torch env -u CUGUARD_NVTX PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
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
    """Each memcheck error: (kind line, address, the nearest allocation's size if said).

    A report starts at a line '========= Invalid ...' (or 'Program hit', 'Malloc', 'Cuda', 'Leaked');
    its details are the following '=========     ' lines (five or more spaces after the marks):
    'Access to 0x... is out of bounds' (older tools: 'Address 0x...'), 'and is N bytes after the nearest allocation at 0x... of
    size 1,000 bytes'. Sizes may have thousands separators."""
    out, cur = [], None
    for line in log.splitlines():
        m = re.match(r"^========= (\S.*)$", line)
        if m and re.match(r"(Invalid|Program hit|Malloc|Cuda|Leaked|Uninitialized)", m.group(1)):
            cur = [m.group(1).strip(), None, None]
            out.append(cur)
            continue
        if cur is None or not line.startswith("=========  "):
            if not line.startswith("========="):
                cur = None
            continue
        a = re.search(r"(?:Address|Access to) (0x[0-9a-fA-F]+)", line)
        if a and cur[1] is None:
            cur[1] = int(a.group(1), 16)
        z = re.search(r"allocation at 0x[0-9a-fA-F]+ of size ([\d,]+) bytes", line)
        if z and cur[2] is None:
            cur[2] = z.group(1).replace(",", "")
    return [tuple(e) for e in out]
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
want = {"bare": "both", "pool_unregistered": "neither", "pool_registered": "both",
        "pool_traced": "both"}
for name in ["bare", "pool_unregistered", "pool_registered", "pool_traced"]:
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
def sequence_target(log):
    m = re.search(r"chunk (0x[0-9a-fA-F]+)", log)
    return int(m.group(1), 16) + 1000 if m else None
want_seq = {"free": "reported, no refusal", "null": "reported, no refusal",
            "live": "tells", "late": "refused"}
print("\n| NVIDIA's headers, the shim's sequence | one past the region | NVTX refusals | errors | last step | exit |")
print("|---|---|---|---|---|---|")
for mode in ["free", "null", "live", "late"]:
    log = read(f"sequence_{mode}.log")
    errs = reports(log)
    s = summary.search(log)
    refused = [l.strip("= ") for l in log.splitlines() if "Call to nvtx" in l]
    steps = [l for l in log.splitlines() if l and not l.startswith("=")]
    print(f"| {mode} (want {want_seq[mode]}) | {found(errs, sequence_target(log))} | "
          f"{'; '.join(refused) or 'none'} | {s.group(1) if s else '?'} | "
          f"{steps[-1] if steps else '-'} | {read(f'sequence_{mode}.rc').strip()} |")
for name in ["pool_unregistered", "pool_registered", "pool_traced", "rmm", "torch"]:
    log = read(name + ".log")
    lines = [l for l in log.splitlines() if l.startswith("cuguard:") and "nvtx:" not in l]
    refused = [l.strip("= ") for l in log.splitlines() if "Call to nvtx" in l]
    print(f"\n{name}: cuguard's lines: {lines[-2:] if lines else 'none'}; "
          f"NVTX refusals: {refused[:3] if refused else 'none'}")
trace = [l for l in read("pool_traced.log").splitlines() if "nvtx:" in l]
print(f"\npool_traced: {len(trace)} NVTX calls traced; the first 6 and the last 4:")
for l in trace[:6] + ["..."] + trace[-4:]:
    print("    " + l)
PY
cat "$L/table.md"
cp "$L/table.md" "$OUT/sanitizer-table.md"
tar czf "$OUT/sanitizer-logs.tgz" -C "$(dirname "$L")" sanitizer
