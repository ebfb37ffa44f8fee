#!/usr/bin/env python3
"""Generates shim/src/driver/submit_rows.rs: the `submit` rows of the driver-entry table
(shim/src/driver/entry_table.rs), one per driver entry that submits device work (kernels, copies,
sets, graph launches, stream memory operations, external semaphores, host functions). The shim
counts each call of them for the pool's safe-reuse scheme (see shim/pool/src/reuse.rs).

The list comes mechanically from cudarc's driver bindings for CUDA 13.0 (the version Cargo.lock
pins): every function that takes a CUstream, or whose name says it launches, copies or sets,
minus a short list of entries that enqueue nothing that could touch memory (stream management
and queries, events, the stream-ordered allocator, capture control). Each row also names the
`_ptsz` and `_ptds` forms; the ones the driver lacks are never substituted. Parameter types are
reduced to their C ABI (pointers and handles to `*mut c_void`, enums to `u32`, integers as they
are), so no Rust enum ever receives a foreign value. A struct passed by value needs a mirror
`By<Name>` in shim/src/ffi.rs.

The generator writes rows only; the table's macros make everything else from them.

Usage: python3 shim/tools/gen_entry_rows.py [--check] [path/to/cudarc/src/driver/sys/mod.rs]
  --check: exit 1 (and say so) when the file differs from what would be generated.
"""

import glob
import os
import re
import sys

VERSION_FEATURE = "cuda-13000"

# Entries with a stream parameter that enqueue nothing that reads or writes device memory, or
# that the shim handles elsewhere.
NOT_WORK = {
    "cuStreamCreate", "cuStreamCreateWithPriority", "cuStreamDestroy", "cuStreamDestroy_v2",
    "cuStreamQuery", "cuStreamSynchronize", "cuStreamGetPriority", "cuStreamGetFlags",
    "cuStreamGetCtx", "cuStreamGetCtx_v2", "cuStreamGetId", "cuStreamGetDevice",
    "cuStreamGetCaptureInfo", "cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo_v3",
    "cuStreamIsCapturing", "cuStreamBeginCapture", "cuStreamBeginCapture_v2",
    "cuStreamBeginCaptureToGraph", "cuStreamEndCapture", "cuStreamUpdateCaptureDependencies",
    "cuStreamUpdateCaptureDependencies_v2", "cuStreamCopyAttributes", "cuStreamGetAttribute",
    "cuStreamSetAttribute", "cuStreamGetGreenCtx", "cuGreenCtxStreamCreate", "cuStreamWaitEvent",
    "cuEventRecord", "cuEventRecordWithFlags", "cuMemAllocAsync", "cuMemFreeAsync",
    "cuMemAllocFromPoolAsync", "cuGraphicsMapResources", "cuGraphicsUnmapResources",
    "cuStreamAddCallback", "cuGreenCtxWaitEvent", "cuGreenCtxRecordEvent",
    "cuStreamGetCaptureInfo_v2", "cuCtxRecordEvent", "cuCtxWaitEvent", "cuStreamBeginCaptureToGraph",
}
# Copies that can touch another context's memory: their rows have the role `copy`, whose handler
# (shim/src/hooks/peers.rs) also notes which contexts' memory they reach.
COPIES = {
    "cuMemcpy", "cuMemcpyAsync", "cuMemcpyPeer", "cuMemcpyPeerAsync", "cuMemcpy3DPeer",
    "cuMemcpy3DPeerAsync",
}
NAME_IS_WORK = re.compile(r"^cu(Launch|Memcpy|Memset|GraphLaunch|GraphUpload|MemPrefetch|SignalExternal|WaitExternal|StreamWriteValue|StreamWaitValue|StreamBatchMemOp|MemDiscard|MemMapArrayAsync)")


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DST = os.path.join(ROOT, "shim", "src", "driver", "submit_rows.rs")
FFI = os.path.join(ROOT, "shim", "src", "ffi.rs")


def cudarc_version():
    lock = open(os.path.join(ROOT, "Cargo.lock")).read()
    m = re.search(r'name = "cudarc"\nversion = "([^"]+)"', lock)
    if not m:
        sys.exit("cudarc not found in Cargo.lock")
    return m.group(1)


def find_bindings(args):
    if args:
        return args[0]
    home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
    version = cudarc_version()
    hits = sorted(glob.glob(os.path.join(home, "registry", "src", "*", f"cudarc-{version}", "src", "driver", "sys", "mod.rs")))
    if not hits:
        sys.exit(f"cudarc {version}'s driver bindings not found under {home}; run `cargo fetch` first or pass the path")
    return hits[-1]


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    src = open(find_bindings(args)).read()
    aliases = dict(re.findall(r"^pub type (\w+) = ([^;]+);", src, re.M))
    aliases.update({b: a for a, b in re.findall(r"^pub use self::(\w+) as (\w+);", src, re.M)})
    enums = set(re.findall(r"^pub enum (\w+)", src, re.M))
    structs = set(re.findall(r"^pub struct (\w+)", src, re.M)) | set(re.findall(r"^pub union (\w+)", src, re.M))

    def abi(t):
        t = t.strip()
        seen = 0
        while True:
            if t.startswith("*"):
                return "*mut c_void"
            if t.startswith("::core::ffi::c_") or t in ("usize", "u64", "i64", "u32", "i32", "u8", "i8", "u16", "i16"):
                prim = t.replace("::core::ffi::", "")
                return {"c_uint": "u32", "c_int": "i32", "c_ulonglong": "u64", "c_longlong": "i64",
                        "c_ulong": "u64", "c_long": "i64", "c_uchar": "u8", "c_char": "i8",
                        "c_ushort": "u16", "c_short": "i16", "c_float": "f32", "c_double": "f64"}.get(prim, prim)
            if t in enums:
                return "u32"
            if t in aliases and seen < 20:
                t = aliases[t].strip()
                seen += 1
                continue
            if t in structs:
                mirrors[t] = struct_fields(t)
                return "By" + t
            if t.startswith("Option<") or t.startswith("::core::option::Option<"):
                return "*mut c_void"  # function pointers
            raise ValueError(f"unknown type {t}")

    mirrors = {}

    def struct_fields(t):
        m = re.search(r"^pub struct " + re.escape(t) + r" \{([^}]*)\}", src, re.M)
        if not m:
            raise ValueError(f"struct {t} not found")
        fields = []
        for line in m.group(1).split(","):
            line = line.strip()
            if not line:
                continue
            fname, ftype = line.replace("pub ", "").split(":", 1)
            fields.append((fname.strip(), abi(ftype)))
        return fields

    fns = []
    pat = re.compile(r"^(#\[cfg\(([^\n]*)\)\]\n)?pub unsafe fn (cu\w+)\(([^)]*)\) -> CUresult \{", re.M)
    for m in pat.finditer(src):
        cfg, name, params = m.group(2), m.group(3), m.group(4)
        if cfg and f'"{VERSION_FEATURE}"' not in cfg:
            continue
        args = []
        for p in [p.strip() for p in params.split(",") if p.strip()]:
            pname, ptype = p.split(":", 1)
            args.append((pname.strip(), ptype.strip()))
        takes_stream = any(t.strip() in ("CUstream", "CUstream_st") for _, t in args)
        if name in NOT_WORK or not (takes_stream or NAME_IS_WORK.match(name)):
            continue
        try:
            sig = [(n, abi(t)) for n, t in args]
        except ValueError as e:
            sys.exit(f"{name}: {e}")
        fns.append((name, sig))
    fns.sort()
    ffi = open(FFI).read()
    for t in sorted(mirrors):
        if f"pub struct By{t} " not in ffi:
            sys.exit(f"{t} is passed by value: add `#[repr(C)] pub struct By{t}` with fields {mirrors[t]} to shim/src/ffi.rs")

    out = []
    w = out.append
    w(f"//! The `submit` rows of the driver-entry table ([`super::entry_table`]): every entry that submits")
    w(f"//! device work, in its plain, `_ptsz` and `_ptds` forms; those that may copy to or from another")
    w(f"//! context's memory have the role `copy`. GENERATED by")
    w(f"//! `shim/tools/gen_entry_rows.py` from cudarc {cudarc_version()}'s bindings for CUDA 13.0; do not edit")
    w(f"//! by hand ({len(fns)} rows, {3 * len(fns)} entries).")
    w("")
    w("/// Feeds `$callback` the rows it is given (the table's hand-written ones), then these.")
    w("macro_rules! submit_rows {")
    w("    ($callback:ident ($($arg:tt)*) $($rows:tt)*) => {")
    w("        $callback! { ($($arg)*) $($rows)*")
    for name, sig in fns:
        params = ", ".join(f"{a}: {t}" for a, t in sig)
        role = "copy" if name in COPIES else "submit"
        w(f"            {role} [{name}, {name}_ptsz, {name}_ptds] fn({params});")
    w("        }")
    w("    };")
    w("}")
    w("pub(crate) use submit_rows;")
    text = "\n".join(out) + "\n"
    if check:
        current = open(DST).read() if os.path.exists(DST) else ""
        if current != text:
            print(f"{os.path.relpath(DST, ROOT)} is out of date: run python3 shim/tools/gen_entry_rows.py")
            sys.exit(1)
        print(f"{os.path.relpath(DST, ROOT)} is current ({len(fns)} rows)")
        return
    open(DST, "w").write(text)
    print(f"{len(fns)} rows ({3 * len(fns)} entries) -> {os.path.relpath(DST, ROOT)}")


if __name__ == "__main__":
    main()
