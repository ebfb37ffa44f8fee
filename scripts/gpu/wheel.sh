#!/usr/bin/env bash
# Issue 25 on the H200: the release wheel alone, installed offline into a fresh virtual environment
# that sees the machine's PyTorch, and used there without the source tree.
#
# Here first: scripts/release-wheel.sh (writes dist/). A device run then carries `dist` (the
# one file used is dist/cuguard-*-manylinux*.whl) and runs `bash scripts/gpu/wheel.sh`.
#
# It copies the wheel into a directory of its own outside the checkout and works only there:
#  1. `python3 -m venv --system-site-packages`; where python3 is itself a virtual environment
#     (the machine's is /opt/torch/.venv), that flag gives the base Python's packages, not the
#     environment's, so a .pth file adds python3's own site-packages when `import torch` fails
#     without it; then `pip install --no-index --no-deps` of the wheel (the wheel has no
#     dependencies; pytest and torch come from the machine);
#  2. the installed command: `cuguard --version`; `cuguard run --driver sim -- python -m
#     cuguard.examples.leaks`;
#  3. `cuguard run -- python torch_wheel.py` (a tensor kept in a global list, a temporary freed):
#     the report's `cuguard summary` names the kept tensor's line;
#  4. `pytest --cuguard --cuguard-uncached` on test_wheel_gpu.py: exactly test_keeps_a_tensor
#     fails (limit_gpu_leaks("1 MiB")), naming its line;
#  5. `cuguard run -- python -c 'import cuguard; print(cuguard.holders(...))'`: the tensor in the
#     global dict W is reached as W → ['w'].
# Logs: $OUT/wheel.tar.gz (every command's output, reports, the environment); the table is
# printed and written to $OUT/wheel-table.md.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT"
wheels=("$root"/dist/cuguard-*-manylinux*.whl)
[ -f "${wheels[0]}" ] || { echo "no dist/cuguard-*-manylinux*.whl: run scripts/release-wheel.sh and carry dist"; exit 1; }
work=$(mktemp -d /tmp/cuguard-wheel.XXXXXX)
L=$work/logs
mkdir -p "$L"
cp "${wheels[0]}" "$work/"
wheel=$work/$(basename "${wheels[0]}")
cd "$work"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

step() { # NAME CMD...: runs CMD with a time limit, output in $L/NAME.out/.err, status in $L/NAME.rc
  local name=$1
  shift
  timeout 600 "$@" >"$L/$name.out" 2>"$L/$name.err"
  echo $? >"$L/$name.rc"
}

{
  echo "wheel: $(basename "$wheel") ($(stat -c %s "$wheel") bytes)"
  ldd --version 2>&1 | head -1
  uname -a
  command -v python3 && python3 -VV
  python3 -c 'import sys; print("python3 is a virtual environment:", sys.prefix != sys.base_prefix, sys.prefix)'
  command -v cargo || echo "no cargo on PATH"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
} >"$L/environment.txt" 2>&1

# 1. The environment, offline.
venv=$work/venv
if python3 -m venv --system-site-packages "$venv" >"$L/venv.out" 2>&1; then
  pip=("$venv/bin/python" -m pip)
else
  # No ensurepip for the base Python: an environment without pip, filled by python3's pip.
  rm -rf "$venv"
  python3 -m venv --system-site-packages --without-pip "$venv" >>"$L/venv.out" 2>&1
  pip=(python3 -m pip --python "$venv/bin/python")
fi
if ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -c 'import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); print(p["platlib"])' \
    | sort -u >"$site/machine-python.pth"
  echo "added $site/machine-python.pth: $(tr '\n' ' ' <"$site/machine-python.pth")" >>"$L/venv.out"
fi
step install "${pip[@]}" install --no-index --no-deps --no-cache-dir --disable-pip-version-check "$wheel"
export PATH=$venv/bin:$PATH
step imports python -c 'import cuguard, torch, pytest, sys; print(cuguard.__file__); print(cuguard.__version__, torch.__version__, pytest.__version__, torch.cuda.is_available()); print(sys.prefix)'

# 2. The installed command.
step version cuguard --version
step demo_sim cuguard run --driver sim --report "$L/demo_sim.json" -- python -m cuguard.examples.leaks

# 3. A PyTorch program under the shim.
cat >torch_wheel.py <<'EOF'
"""Keeps one tensor in a global list (held at the end), frees a temporary."""
import torch

MIB = 1 << 20
KEPT = [torch.ones(4 * MIB, device="cuda")]  # mark: kept
x = torch.randn(2048, 2048, device="cuda")
y = x @ x
del x, y
torch.cuda.synchronize()
print("allocated", torch.cuda.memory_allocated())
EOF
step torch cuguard run --report "$L/torch.json" -- python torch_wheel.py
step torch_summary cuguard summary "$L/torch.json"

# 4. pytest --cuguard.
cat >test_wheel_gpu.py <<'EOF'
"""Two tests under `pytest --cuguard --cuguard-uncached`: the first keeps a tensor and fails."""
import pytest
import torch

KEPT = []


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_keeps_a_tensor():
    KEPT.append(torch.ones(1024, 1024, 4, device="cuda"))  # mark: kept


@pytest.mark.limit_gpu_leaks("1 MiB")
def test_frees_its_tensor():
    t = torch.ones(1024, 1024, 4, device="cuda")
    assert t.sum().item() == 4 * 1024 * 1024
EOF
step pytest python -m pytest --cuguard --cuguard-uncached -p no:cacheprovider test_wheel_gpu.py

# 5. holders().
step holders cuguard run --quiet -- python -c '
import torch, cuguard
W = {"w": torch.ones(1 << 22, device="cuda")}
torch.cuda.synchronize()
print(cuguard.holders(min_bytes=1 << 20))'

python3 - "$L" "$work" >"$L/table.md" <<'PY'
import json, os, re, sys

L, work = sys.argv[1], sys.argv[2]
rows = []


def text(name):
    try:
        return open(os.path.join(L, name)).read()
    except OSError:
        return ""


def rc(name):
    t = text(name + ".rc").strip()
    return int(t) if t else None


def row(what, ok, detail):
    rows.append((what, "yes" if ok else "**NO**", " ".join(detail.split()).replace("|", "\\|")[:200]))


def line_of(path, marker):
    for n, l in enumerate(open(path).read().splitlines(), 1):
        if l.rstrip().endswith(f"# mark: {marker}"):
            return n


row("installed offline (--no-index --no-deps)", rc("install") == 0, (text("install.err") or text("install.out"))[-150:])
imports = text("imports.out").splitlines()
row("cuguard imported from the new environment, torch and pytest seen, CUDA available",
    rc("imports") == 0 and len(imports) >= 3 and imports[0].startswith(work) and imports[1].endswith("True"),
    " / ".join(imports) or text("imports.err")[-150:])
row("`cuguard --version`", rc("version") == 0, text("version.out") + text("version.err")[-100:])
demo = text("demo_sim.out").splitlines()
row("`cuguard run --driver sim -- python -m cuguard.examples.leaks`",
    rc("demo_sim") == 0 and demo[:1] == ["leaked in the block: 2 allocations"]
    and re.search(r"^cuguard: 2 leaks \(3\.0 MiB\)", text("demo_sim.err"), re.M) is not None,
    (demo[:1] or [""])[0] + " / " + text("demo_sim.err")[-120:])
kept = line_of(os.path.join(work, "torch_wheel.py"), "kept")
try:
    report = json.load(open(os.path.join(L, "torch.json")))
    leaks = len(report.get("leaks", []))
except Exception as e:
    report, leaks = None, repr(e)
summary = text("torch_summary.out")
row("`cuguard run -- python torch_wheel.py`: exit 0, a report", rc("torch") == 0 and report is not None,
    f"exit {rc('torch')}; leaks in the report: {leaks}; " + text("torch.err")[-120:])
named = [l.strip() for l in summary.splitlines() if f"torch_wheel.py:{kept}" in l]
row(f"its summary names the kept tensor's line torch_wheel.py:{kept}", bool(named),
    named[0] if named else summary[-200:] + text("torch_summary.err")[-100:])
out = text("pytest.out")
failed = re.findall(r"^FAILED (\S+)", out, re.M)
last = next((l.strip("= ") for l in reversed(out.splitlines()) if re.match(r"^=+ .*(passed|failed)", l)), "")
row("`pytest --cuguard --cuguard-uncached`: exit 1, exactly test_keeps_a_tensor fails",
    rc("pytest") == 1 and failed == ["test_wheel_gpu.py::test_keeps_a_tensor"], f"exit {rc('pytest')}; FAILED {failed}; {last}")
pline = line_of(os.path.join(work, "test_wheel_gpu.py"), "kept")
hit = [l.strip() for l in out.splitlines() if f"test_wheel_gpu.py:{pline}" in l]
row(f"its failure names test_wheel_gpu.py:{pline}", bool(hit), hit[0] if hit else out[-200:])
h = text("holders.out")
hit = [l.strip() for l in h.splitlines() if "W → ['w']" in l]
row("`cuguard.holders()` reaches the tensor as W → ['w']", rc("holders") == 0 and bool(hit),
    hit[0] if hit else h[-150:] + text("holders.err")[-150:])
print("| check | holds | what it showed |")
print("|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]} |")
PY
cp torch_wheel.py test_wheel_gpu.py "$L/"
cat "$L/table.md"
cp "$L/table.md" "$OUT/wheel-table.md"
tar -czf "$OUT/wheel.tar.gz" -C "$work" logs
grep -q '\*\*NO\*\*' "$L/table.md" && exit 1
exit 0
