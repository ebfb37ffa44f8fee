"""Issue 22 on the real driver, through ctypes: memory given back, and allocations during a capture.

Usage (run bare, or with LD_PRELOAD=.gpu/libcuguard.so and CUGUARD_POOL=0/1; scripts/gpu/giveback.sh
runs every case side by side):
  python3 giveback.py free3g [pending]
      cuMemAlloc 3 GiB, cuMemFree it (with `pending`: after queueing ~0.3 s of memsets of the whole
      block on a non-blocking stream), then, without any synchronizing call, samples every 100 ms
      for 1 s how much the device holds (cuMemGetInfo, and NVML's used bytes when pynvml is there).
      One JSON line: {"free_call_ms", "info_used_gib": [...], "nvml_used_gib": [...], "back_ms"}.
      back_ms: the first sample (ms after the free) where both are back to the level before the
      allocation (within 64 MiB), or null.
  python3 giveback.py held
      Bare driver facts behind the simulator's choices: a 1 GiB cuMemAlloc range freed with
      cuMemFreeAsync on the legacy stream; which calls give it back. One JSON line:
      {"held_after_<call>": true when still taken after that call, ...}.
  python3 giveback.py capture
      cuMemAlloc (and pitch, managed, host allocations, and a free) during a capture in each mode,
      from the capturing thread and another one, after warming the pool. One JSON line per case:
      {"case", "alloc", "status", "end"} (status: cuStreamIsCapturing before the end, 0 none,
      1 active, 2 invalidated; end: cuStreamEndCapture's result).
"""

import ctypes
import json
import sys
import threading
import time

GiB = 1 << 30
MiB = 1 << 20

cu = ctypes.CDLL("libcuda.so.1")
ptr = ctypes.c_uint64


def check(r, what):
    if r != 0:
        raise SystemExit(f"{what} -> {r}")


def up():
    check(cu.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "retain")
    check(cu.cuCtxSetCurrent(ctx), "set current")
    return ctx


def alloc(n):
    p = ptr()
    r = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n))
    return r, p.value


def used_info():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    return total.value - free.value


def nvml_used():
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used
    except Exception:
        return None


def free3g(pending):
    up()
    base_info, base_nvml = used_info(), nvml_used()
    r, p = alloc(3 * GiB)
    check(r, "cuMemAlloc 3 GiB")
    if pending:
        s = ctypes.c_void_p()
        check(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
        for _ in range(100):
            check(cu.cuMemsetD32Async(ptr(p), 0x5A5A5A5A, ctypes.c_size_t(3 * GiB // 4), s), "memset")
    t0 = time.perf_counter()
    check(cu.cuMemFree_v2(ptr(p)), "cuMemFree")
    free_call_ms = (time.perf_counter() - t0) * 1e3
    info, nvml, back = [], [], None
    for i in range(11):
        target = t0 + i * 0.1
        time.sleep(max(0.0, target - time.perf_counter()))
        ms = (time.perf_counter() - t0) * 1e3
        u, n = used_info(), nvml_used()
        info.append(round(u / GiB, 3))
        nvml.append(None if n is None else round(n / GiB, 3))
        ok = u - base_info < 64 * MiB and (n is None or base_nvml is None or n - base_nvml < 64 * MiB)
        if ok and back is None:
            back = round(ms)
    print(json.dumps({"free_call_ms": round(free_call_ms, 2), "info_used_gib": info,
                      "nvml_used_gib": nvml, "back_ms": back}))


def held():
    up()
    out = {}
    size = 1 * GiB

    def freed_async(stream=None):
        r, p = alloc(size)
        check(r, "alloc")
        check(cu.cuMemFreeAsync(ptr(p), stream), "cuMemFreeAsync")
        ev = ctypes.c_void_p()
        check(cu.cuEventCreate(ctypes.byref(ev), 2), "event")
        check(cu.cuEventRecord(ev, stream), "record")
        while cu.cuEventQuery(ev) == 600:
            pass
        cu.cuEventDestroy_v2(ev)

    def taken(base):
        return used_info() - base >= size - 64 * MiB

    base = used_info()
    other = ctypes.c_void_p()
    check(cu.cuStreamCreate(ctypes.byref(other), 1), "stream")
    ev = ctypes.c_void_p()
    check(cu.cuEventCreate(ctypes.byref(ev), 2), "event")
    freed_async()
    time.sleep(0.3)
    out["held_after_300ms"] = taken(base)
    cu.cuStreamQuery(None)
    out["held_after_stream_query"] = taken(base)
    check(cu.cuEventRecord(ev, None), "record")
    cu.cuEventQuery(ev)
    out["held_after_event_query"] = taken(base)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    r, big = alloc(free.value + 512 * MiB)
    out["pressure_alloc_result"] = r
    if r == 0:
        cu.cuMemFree_v2(ptr(big))
    out["held_after_pressure_alloc"] = taken(base)
    check(cu.cuStreamSynchronize(other), "sync other")
    out["held_after_other_stream_synchronize"] = taken(base)
    check(cu.cuStreamSynchronize(None), "sync legacy")
    out["held_after_legacy_stream_synchronize"] = taken(base)
    check(cu.cuCtxSynchronize(), "ctx sync")
    freed_async()
    check(cu.cuEventRecord(ev, None), "record")
    check(cu.cuEventSynchronize(ev), "event sync")
    out["held_after_event_synchronize"] = taken(base)
    check(cu.cuCtxSynchronize(), "ctx sync")
    freed_async()
    r, q = alloc(MiB)
    check(r, "alloc")
    check(cu.cuMemFree_v2(ptr(q)), "free")
    out["held_after_mem_free_of_another"] = taken(base)
    check(cu.cuCtxSynchronize(), "ctx sync")
    out["held_after_ctx_synchronize"] = taken(base)
    print(json.dumps(out))


MODES = {"global": 0, "thread_local": 1, "relaxed": 2}


def capture():
    ctx = up()
    for n in (MiB, 64 * MiB):  # a warm pool: blocks of these sizes freed and cached
        r, p = alloc(n)
        check(r, "warm")
        check(cu.cuMemFree_v2(ptr(p)), "warm free")

    def attempt(kind):
        if kind == "alloc":
            r, p = alloc(MiB)
            return r, (lambda: cu.cuMemFree_v2(ptr(p))) if r == 0 else None
        if kind == "alloc64":
            r, p = alloc(64 * MiB)
            return r, (lambda: cu.cuMemFree_v2(ptr(p))) if r == 0 else None
        if kind == "pitch":
            p, pitch = ptr(), ctypes.c_size_t()
            r = cu.cuMemAllocPitch_v2(ctypes.byref(p), ctypes.byref(pitch), ctypes.c_size_t(1000),
                                      ctypes.c_size_t(100), 4)
            return r, (lambda: cu.cuMemFree_v2(p)) if r == 0 else None
        if kind == "managed":
            p = ptr()
            r = cu.cuMemAllocManaged(ctypes.byref(p), ctypes.c_size_t(MiB), 1)
            return r, (lambda: cu.cuMemFree_v2(p)) if r == 0 else None
        if kind == "host":
            h = ctypes.c_void_p()
            r = cu.cuMemAllocHost_v2(ctypes.byref(h), ctypes.c_size_t(MiB))
            return r, (lambda: cu.cuMemFreeHost(h)) if r == 0 else None
        raise ValueError(kind)

    def one(case, mode, kind, other=None):
        pre = None
        if kind == "free":  # allocated before the capture begins
            r0, p = alloc(MiB)
            check(r0, "alloc before")
            pre = p
        s = ctypes.c_void_p()
        check(cu.cuStreamCreate(ctypes.byref(s), 1), "stream")
        check(cu.cuStreamBeginCapture_v2(s, MODES[mode]), "begin")
        res = {}
        if other is not None:
            def run():
                cu.cuCtxSetCurrent(ctx)
                m = ctypes.c_int(MODES[other])
                cu.cuThreadExchangeStreamCaptureMode(ctypes.byref(m))
                res["r"], res["undo"] = attempt("alloc")
            t = threading.Thread(target=run)
            t.start()
            t.join()
        elif kind == "free":
            res["r"], res["undo"] = cu.cuMemFree_v2(ptr(pre)), None
        else:
            res["r"], res["undo"] = attempt(kind)
        status = ctypes.c_int(-1)
        cu.cuStreamIsCapturing(s, ctypes.byref(status))
        g = ctypes.c_void_p()
        end = cu.cuStreamEndCapture(s, ctypes.byref(g))
        if g.value:
            cu.cuGraphDestroy(g)
        if res.get("undo"):
            res["undo"]()
        cu.cuStreamDestroy_v2(s)
        print(json.dumps({"case": case, "alloc": res["r"], "status": status.value, "end": end}))

    for mode in MODES:
        one(mode, mode, "alloc")
        one(mode + "_64MiB", mode, "alloc64")
    one("global_pitch", "global", "pitch")
    one("global_managed", "global", "managed")
    one("global_host", "global", "host")
    one("global_free", "global", "free")
    one("relaxed_free", "relaxed", "free")
    one("global_other_thread", "global", "alloc", other="global")
    one("global_other_thread_relaxed", "global", "alloc", other="relaxed")
    one("thread_local_other_thread", "thread_local", "alloc", other="global")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "free3g"
    if what == "free3g":
        free3g(len(sys.argv) > 2 and sys.argv[2] == "pending")
    elif what == "held":
        held()
    elif what == "capture":
        capture()
    else:
        raise SystemExit(__doc__)
