#!/usr/bin/env bash
# Phases and versions on the real driver (issue 55, items 1 and 4), in one call of at most about
# 3 minutes. Run from the repository root on the GPU machine after scripts/gpu/stage.sh (.gpu/):
#   OUT=$OUT bash scripts/gpu/phases.sh
# PARTS=2 runs the versions part only (say, for a call that carries cuDF in parts and has little
# time left); the default runs both. FRAMEWORKS="cudf rmm" limits the versions part to those.
#
# 1. scripts/gpu/phases_torch.py (a small MLP trained 6 steps, each an NVTX range "step" holding
#    "forward", "backward", "optimizer"; step 4 holds a 256 MiB tensor, the line marked HEAVY;
#    one more step under torch.autograd.profiler.emit_nvtx) under `cuguard run`, PyTorch's cache
#    on and off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), cuguard's pool off in both. Then
#    `summary --by phase` (text and JSON) of each, `--at phase:step#4` and
#    `--between phase:step#4` of each, judged by scripts/gpu/phases_check.py against what
#    PyTorch's allocator said (PASS/FAIL lines; the criteria are in that file).
# 2. Tiny programs under `cuguard run` that import torch, cupy, jax, numba, rmm and cudf (when
#    importable; a missing one is said) and allocate one buffer: each report's `versions` line
#    and its `mismatch:` lines beside the frameworks' own __version__ and installed metadata.
#
# Writes to $OUT (5 files): phases_check.txt (the PASS/FAIL lines), phases.txt (the summaries as
# text), phases.json (the program's JSON lines and cuguard's JSON answers, one document),
# versions.txt, phases.tgz (the reports, histories and the programs' output).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=/tmp/cuguard-phases
rm -rf "$B"; mkdir -p "$B"
C=$PWD/.gpu/cuguard
P=$PWD/scripts/gpu/phases_torch.py
export PYTHONUNBUFFERED=1
# PyTorch's allocator as it comes (no expandable segments, no garbage collection threshold).
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_NO_CUDA_MEMORY_CACHING NVTX_INJECTION64_PATH
[ -x "$C" ] && [ -f .gpu/libcuguard.so ] || { echo "no .gpu/cuguard or .gpu/libcuguard.so: run scripts/gpu/stage.sh"; exit 2; }

PARTS=${PARTS:-12}
if [[ $PARTS == *1* ]]; then
echo "== 1. phases (at ${SECONDS}s)"
for mode in on off; do
  nocache=; [ $mode = off ] && nocache=1
  echo "-- cache $mode: training (at ${SECONDS}s)"
  env ${nocache:+PYTORCH_NO_CUDA_MEMORY_CACHING=1} CUGUARD_POOL=0 \
    timeout 120 "$C" run --quiet --report "$B/$mode.json" -- python3 "$P" > "$B/$mode.out" 2> "$B/$mode.err"
  echo $? > "$B/$mode.rc"
  echo "   exit $(cat "$B/$mode.rc"); $(grep -c . "$B/$mode.out") lines out; last of stderr: $(tail -1 "$B/$mode.err")"
  "$C" summary --by phase --top 0 "$B/$mode.json" > "$B/$mode.phases.txt" 2>&1
  "$C" summary --by phase --top 0 --format json "$B/$mode.json" > "$B/$mode.phases.json" 2> "$B/$mode.phases.json.err"
  # The moment last: `--between` takes one or two values and would take an option after it
  # (`--between phase:step#4 --top 0` reads "--top" as its second moment and "0" as a report).
  for q in at between; do
    "$C" summary --top 0 "$B/$mode.json" --$q phase:step#4 > "$B/$mode.$q.txt" 2>&1
    "$C" summary --top 0 --format json "$B/$mode.json" --$q phase:step#4 > "$B/$mode.$q.json" 2> "$B/$mode.$q.json.err"
  done
done
{
  for mode in off on; do
    echo "######## cache $mode: program exit $(cat "$B/$mode.rc")"
    echo "### cuguard summary --by phase --top 0"
    cat "$B/$mode.phases.txt"
    echo "### cuguard summary --at phase:step#4 --top 0"
    cat "$B/$mode.at.txt"
    echo "### cuguard summary --between phase:step#4 --top 0"
    cat "$B/$mode.between.txt"
    echo "### the program's stderr (last 20 lines)"
    tail -20 "$B/$mode.err"
  done
} > "$OUT/phases.txt" 2>&1
python3 scripts/gpu/phases_check.py "$B" "$OUT/phases.json" 2>&1 | tee "$OUT/phases_check.txt"
echo "phases check exit: ${PIPESTATUS[0]}"
fi
[[ $PARTS == *2* ]] || exit 0

echo "== 2. versions (at ${SECONDS}s)"
cat > "$B/ver.py" <<'PY'
import sys
what = sys.argv[1]
try:
    if what == "torch":
        import torch
    elif what == "cupy":
        import cupy
    elif what == "jax":
        import jax, jax.numpy as jnp, jaxlib
    elif what == "numba":
        import numba, numpy as np
        from numba import cuda
    elif what == "rmm":
        import rmm
    elif what == "cudf":
        import cudf, rmm
except ImportError as e:
    print(f"not importable: {e}")
    sys.exit(3)
try:
    if what == "torch":
        t = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize()
        print("own: torch", torch.__version__, "torch.version.cuda", torch.version.cuda)
    elif what == "cupy":
        a = cupy.ones(1 << 20); cupy.cuda.Device().synchronize()
        rt = cupy.cuda.runtime
        print("own: cupy", cupy.__version__, "runtime", rt.runtimeGetVersion(), "driver", rt.driverGetVersion())
    elif what == "jax":
        a = jnp.ones(1 << 20); a.block_until_ready()
        print("own: jax", jax.__version__, "jaxlib", jaxlib.__version__, "devices", jax.devices())
    elif what == "numba":
        a = cuda.to_device(np.ones(1 << 20)); cuda.synchronize()
        try:
            import numba_cuda; nc = getattr(numba_cuda, "__version__", "?")
        except ImportError:
            nc = None
        print("own: numba", numba.__version__, "numba_cuda", nc, "runtime", cuda.runtime.get_version())
    elif what == "rmm":
        b = rmm.DeviceBuffer(size=1 << 20)
        print("own: rmm", rmm.__version__)
    elif what == "cudf":
        s = cudf.Series(range(1 << 16)); n = int(s.sum())
        print("own: cudf", cudf.__version__, "rmm", rmm.__version__)
except Exception as e:  # noqa: BLE001 - the report is still written; say what failed
    print(f"own: {what} failed: {type(e).__name__}: {e}"[:400])
# What the installed metadata says (what cuguard reads beside the mapped files).
import importlib.metadata as md, re
want = re.compile(r"^(torch|cupy.*|jax|jaxlib|jax[-_]cuda\d+[-_](plugin|pjrt)|numba|numba[-_]cuda|cuda[-_](bindings|core|python)"
                  r"|(lib)?(cudf|rmm)([-_]cu\d+)?|pylibcudf([-_]cu\d+)?|nvidia[-_]cuda[-_]runtime.*)$", re.I)
dists = sorted({(d.metadata["Name"], d.version) for d in md.distributions()
                if d.metadata["Name"] and want.match(d.metadata["Name"])})
print("metadata:", " · ".join(f"{n} {v}" for n, v in dists))
PY
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  nvidia-smi | grep -m1 -o "CUDA Version: [0-9.]*"
  python3 -c 'import sys; print("python", sys.version.split()[0])'
  echo "Each program below: its own versions (own:), the installed metadata (metadata:), cuguard's"
  echo "versions line and mismatch lines, then per framework it uses whether the line names the"
  echo "installed version (same), another (DIFFERENT) or none (absent)."
} > "$OUT/versions.txt" 2>&1
for fw in ${FRAMEWORKS:-torch cupy jax numba rmm cudf}; do
  echo "-- versions: $fw (at ${SECONDS}s)"
  XLA_PYTHON_CLIENT_PREALLOCATE=false CUGUARD_POOL=0 timeout 90 "$C" run --quiet --report "$B/ver-$fw.json" -- \
    python3 "$B/ver.py" $fw > "$B/ver-$fw.out" 2> "$B/ver-$fw.err"
  rc=$?
  if [ $rc = 3 ] && grep -q "^not importable" "$B/ver-$fw.out"; then
    { echo; echo "## $fw: skipped, $(head -1 "$B/ver-$fw.out")"; } >> "$OUT/versions.txt"
    echo "   $fw not importable: skipped"
    continue
  fi
  "$C" summary "$B/ver-$fw.json" > "$B/ver-$fw.summary" 2>&1
  {
    echo
    echo "## $fw (exit $rc)"
    grep -E "^(own|metadata):" "$B/ver-$fw.out" || { echo "(no output; stderr:)"; tail -5 "$B/ver-$fw.err"; }
    echo "cuguard summary:"
    grep -E "^versions|^[[:space:]]+mismatch:" "$B/ver-$fw.summary" \
      || { echo "(no versions line; the summary's first lines:)"; head -5 "$B/ver-$fw.summary"; }
    python3 - "$fw" "$B/ver-$fw.out" "$B/ver-$fw.summary" <<'PY'
# For the frameworks this program uses: the installed version (metadata) in cuguard's line?
import re, sys
fw, out, summ = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
line = next((l for l in summ.splitlines() if l.startswith("versions")), "")
meta = next((l[len("metadata:"):] for l in out.splitlines() if l.startswith("metadata:")), "")
uses = {"torch": ["torch"], "cupy": ["cupy"], "jax": ["jax", "jaxlib", "jax-cuda-plugin"],
        "numba": ["numba", "numba-cuda"], "rmm": ["rmm", "librmm"],
        "cudf": ["cudf", "libcudf", "pylibcudf", "rmm", "librmm"]}[fw]
def family(dist):
    d = dist.lower().replace("_", "-")
    if re.fullmatch(r"jax-cuda\d+-plugin", d):
        return "jax-cuda-plugin"
    if d.startswith("cupy"):
        return "cupy"
    return re.sub(r"-cu\d+$", "", d)
installed = {}
for item in filter(None, (x.strip() for x in meta.split(" · "))):
    name, ver = item.rsplit(" ", 1)
    installed.setdefault(family(name), []).append((name, ver))
items = [x.strip() for x in line[len("versions"):].split(" · ")]
for fam in uses:
    shown = [i for i in items if i.split(" ")[0] == fam]
    for name, ver in installed.get(fam, []) or [(fam, None)]:
        if ver is None:
            verdict = "not installed" + (f", yet the line says {shown}" if shown else "")
        elif any(i.split(" ")[1:2] == [ver] for i in shown):
            verdict = "same"
        elif shown:
            verdict = f"DIFFERENT: the line says {shown}"
        else:
            verdict = "absent from the line"
        print(f"  {fam}: installed {name} {ver}: {verdict}")
PY
  } >> "$OUT/versions.txt" 2>&1
done
cat "$OUT/versions.txt"
(cd "$B" && tar czf "$OUT/phases.tgz" --exclude='*.import' .)
ls -la "$OUT"
echo "== done at ${SECONDS}s"
