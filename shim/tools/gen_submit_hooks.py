#!/usr/bin/env python3
"""Generates shim/src/hooks/submit.rs: a counting wrapper for every driver entry that submits
device work (kernels, copies, sets, graph launches, stream memory operations, external
semaphores, host functions), for the pool's safe-reuse scheme (see shim/pool/src/fence.rs).

The list comes mechanically from cudarc's driver bindings for CUDA 13.0: every function that
takes a CUstream, or whose name says it launches, copies or sets, minus a short list of entries
that enqueue nothing that could touch memory (stream management and queries, events, the
stream-ordered allocator, capture control). Each also gets `_ptsz` and `_ptds` twins; the ones
the driver lacks are never substituted. Parameter types are reduced to their C ABI (pointers and
handles to `*mut c_void`, enums to `u32`, integers as they are), so no Rust enum ever receives a
foreign value.

Usage: python3 shim/tools/gen_submit_hooks.py [path/to/cudarc/src/driver/sys/mod.rs]
"""

import glob
import os
import re
import subprocess
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
NAME_IS_WORK = re.compile(r"^cu(Launch|Memcpy|Memset|GraphLaunch|GraphUpload|MemPrefetch|SignalExternal|WaitExternal|StreamWriteValue|StreamWaitValue|StreamBatchMemOp|MemDiscard|MemMapArrayAsync)")


def find_bindings():
    if len(sys.argv) > 1:
        return sys.argv[1]
    hits = sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/cudarc-0.19.*/src/driver/sys/mod.rs")))
    if not hits:
        sys.exit("cudarc's driver bindings not found; run `cargo fetch` first or pass the path")
    return hits[-1]


def main():
    src = open(find_bindings()).read()
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
    names = []
    for name, sig in fns:
        for suffix in ("", "_ptsz", "_ptds"):
            names.append((name + suffix, sig))

    out = []
    w = out.append
    w("//! Counting wrappers for every driver entry that submits device work. GENERATED by")
    w("//! `shim/tools/gen_submit_hooks.py` from cudarc's CUDA 13.0 bindings; do not edit by hand.")
    w("//!")
    w("//! Each wrapper forwards to the real entry and then counts one submission")
    w("//! ([`crate::pool::fence::submitted`]), which is how the pool knows whether any work issued")
    w("//! before a free could still touch the freed block.")
    w("")
    w("#![allow(non_snake_case, clippy::too_many_arguments)]")
    w("")
    w("use std::ffi::{CStr, c_void};")
    w("use std::sync::atomic::{AtomicUsize, Ordering};")
    w("")
    w("use crate::ffi::{CUDA_ERROR_NOT_FOUND, CUresult};")
    w("")
    for t, fields in sorted(mirrors.items()):
        w(f"/// `{t}` passed by value, with its fields reduced to their C ABI.")
        w("#[repr(C)]")
        w("#[derive(Clone, Copy)]")
        w(f"pub struct By{t} {{")
        for fname, ftype in fields:
            w(f"    pub {fname}: {ftype},")
        w("}")
        w("")
    w(f"/// Number of wrapped entries.")
    w(f"pub const COUNT: usize = {len(names)};")
    w("")
    w("/// The wrapped entries' names.")
    w("pub static NAMES: [&CStr; COUNT] = [")
    for n, _ in names:
        w(f'    c"{n}",')
    w("];")
    w("")
    w("/// The real entries, resolved on first use (0: not yet, or the driver lacks it).")
    w("pub static REAL: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];")
    w("")
    w("/// Our wrappers, in the order of [`NAMES`].")
    w("pub fn hooks() -> [*mut c_void; COUNT] {")
    w("    [")
    for n, _ in names:
        w(f"        {n} as *mut c_void,")
    w("    ]")
    w("}")
    w("")
    w("/// Our wrapper for the real entry at `addr`, if `addr` is one of the wrapped entries.")
    w("pub fn hook_for_real(addr: usize) -> Option<*mut c_void> {")
    w("    if addr == 0 {")
    w("        return None;")
    w("    }")
    w("    static RESOLVED: std::sync::Once = std::sync::Once::new();")
    w("    RESOLVED.call_once(|| {")
    w("        for i in 0..COUNT {")
    w("            real(i);")
    w("        }")
    w("    });")
    w("    let i = REAL.iter().position(|p| p.load(Ordering::Relaxed) == addr)?;")
    w("    Some(hooks()[i])")
    w("}")
    w("")
    w("#[inline]")
    w("fn real(i: usize) -> usize {")
    w("    let p = REAL[i].load(Ordering::Relaxed);")
    w("    if p != 0 {")
    w("        return p;")
    w("    }")
    w("    let p = crate::driver::resolve(NAMES[i]);")
    w("    REAL[i].store(p, Ordering::Relaxed);")
    w("    p")
    w("}")
    w("")
    for i, (n, sig) in enumerate(names):
        params = ", ".join(f"{a}: {t}" for a, t in sig)
        types = ", ".join(t for _, t in sig)
        call = ", ".join(a for a, _ in sig)
        w("#[unsafe(no_mangle)]")
        w(f"pub unsafe extern \"C\" fn {n}({params}) -> CUresult {{")
        w(f"    let real_addr__ = real({i});")
        w("    if real_addr__ == 0 {")
        w("        return CUDA_ERROR_NOT_FOUND;")
        w("    }")
        w(f"    // SAFETY: the address is the driver's export named {n}, whose C signature this wrapper copies.")
        w(f"    let real_fn__: unsafe extern \"C\" fn({types}) -> CUresult = unsafe {{ std::mem::transmute(real_addr__) }};")
        w(f"    // SAFETY: the program's own arguments, forwarded unchanged.")
        w(f"    let result__ = unsafe {{ real_fn__({call}) }};")
        w("    crate::pool::fence::submitted();")
        w("    result__")
        w("}")
        w("")
    dst = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "hooks", "submit.rs")
    open(dst, "w").write("\n".join(out))
    subprocess.run(["rustfmt", "--edition", "2024", dst], check=False)
    print(f"{len(fns)} entries ({len(names)} with _ptsz/_ptds twins) -> {os.path.normpath(dst)}")


if __name__ == "__main__":
    main()
