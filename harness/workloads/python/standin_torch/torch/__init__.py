"""A stand-in for PyTorch's CUDA caching allocator as its out-of-memory path shows it, over the
CUDA driver through ctypes (the simulated one in tests), for harness/workloads/python/torch_oom.py.

What it keeps of PyTorch's (c10/cuda/CUDACachingAllocator.cpp), for requests over 1 MiB (the
large pool): a request is rounded up to 2 MiB; the smallest cached free block that holds it is
taken, and split when more than 1 MiB would be left; else a segment of that size is taken from
the driver (``cuMemAlloc_v2``). A freed block stays in its segment, merged with free
neighbours. A segment is refused without asking the driver when PyTorch's per-process memory
fraction would be exceeded; when the fraction or the driver refuses, every segment with no live
block is given back (``cuMemFree_v2``) and the driver asked again; when that fails too, the
out-of-memory observers are called with (device, size asked, the fraction's bytes or the
device's total, the device's free memory) and ``OutOfMemoryError`` is raised.
``torch.cuda.memory_snapshot()`` lists the segments and their blocks in PyTorch's shape, each
live block with its Python frames (innermost first) once ``_record_memory_history`` is on.
Where ``STANDIN_C10_CUDA`` names the C stand-in of ``libc10_cuda.so``
(harness/workloads/c/c10_cuda_stand_in.cc, linked with the stand-in ``libc10.so``), each block
handed out and freed is reported through it to ``c10::reportMemoryUsageToProfiler``, as
PyTorch's allocator reports its blocks (cuguard's hook receives them).
"""

import ctypes
import os
import sys
import time
import types

__version__ = "2.11.0+standin"

_cuda = ctypes.CDLL("libcuda.so.1")
_cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
_cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]
_cuda.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]

_report = None
if os.environ.get("STANDIN_C10_CUDA"):
    _report = ctypes.CDLL(os.environ["STANDIN_C10_CUDA"]).stand_in_report
    _report.argtypes = [ctypes.c_uint64, ctypes.c_longlong]

MiB = 1 << 20
_state = {"init": False, "fraction": None, "history": False, "lazy": [], "observers": []}
_segments = []  # [address, size, [[address, size, live, frames]...]]


class OutOfMemoryError(RuntimeError):
    pass


def _init():
    if _state["init"]:
        return
    assert _cuda.cuInit(0) == 0
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert _cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert _cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert _cuda.cuCtxSetCurrent(ctx) == 0
    _state["init"] = True
    for fn in _state["lazy"]:
        fn()
    _state["lazy"].clear()


def _mem_get_info():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert _cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    return free.value, total.value


def _frames():
    if not _state["history"]:
        return []
    f, out = sys._getframe(2), []
    while f is not None:
        out.append({"filename": f.f_code.co_filename, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return out


def _take_segment(size):
    reserved = sum(s[1] for s in _segments)
    if _state["fraction"] is not None and reserved + size > _state["fraction"] * _mem_get_info()[1]:
        return None
    p = ctypes.c_uint64()
    if _cuda.cuMemAlloc_v2(ctypes.byref(p), size) != 0:  # segment
        return None
    _segments.append([p.value, size, [[p.value, size, False, []]]])
    return _segments[-1]


def _release_cached():
    for s in [s for s in _segments if not any(b[2] for b in s[2])]:
        _cuda.cuMemFree_v2(s[0])
        _segments.remove(s)


def _malloc(nbytes):
    _init()
    size = -(-nbytes // (2 * MiB)) * (2 * MiB)
    fits = [(b[1], s, b) for s in _segments for b in s[2] if not b[2] and b[1] >= size]
    if fits:
        _, seg, block = min(fits, key=lambda t: t[0])
    else:
        seg = _take_segment(size)
        if seg is None:
            # PyTorch synchronizes the device before it gives its cached segments back: on the
            # H100 the observer ran milliseconds after the driver's refusal (run 39); longer
            # here, so that a line said at the driver's refusal would be said before it.
            time.sleep(0.2)
            _release_cached()
            seg = _take_segment(size)
        if seg is None:
            free, total = _mem_get_info()
            limit = int(_state["fraction"] * total) if _state["fraction"] is not None else total
            for obs in _state["observers"]:
                obs(0, size, limit, free)
            raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {size} bytes")
        block = seg[2][0]
    i = seg[2].index(block)
    if block[1] - size > MiB:
        seg[2].insert(i + 1, [block[0] + size, block[1] - size, False, []])
        block[1] = size
    block[2], block[3] = True, _frames()
    if _report is not None:
        _report(block[0], block[1])
    return block[0]


def _free(address):
    for s in _segments:
        for i, b in enumerate(s[2]):
            if b[0] == address and b[2]:
                if _report is not None:
                    _report(address, -b[1])
                b[2], b[3] = False, []
                # Merge with free neighbours.
                j = i
                if j + 1 < len(s[2]) and not s[2][j + 1][2]:
                    b[1] += s[2].pop(j + 1)[1]
                if j > 0 and not s[2][j - 1][2]:
                    s[2][j - 1][1] += s[2].pop(j)[1]
                return


class Tensor:
    def __init__(self, nbytes):
        self._p = _malloc(nbytes)

    def data_ptr(self):
        return self._p

    def __del__(self):
        if hasattr(self, "_p"):
            _free(self._p)


uint8 = "uint8"


def empty(nbytes, dtype=None, device=None):
    return Tensor(int(nbytes))


def _snapshot_segments():
    out = []
    for address, size, blocks in _segments:
        out.append({
            "device": 0, "address": address, "total_size": size, "segment_type": "large",
            "allocated_size": sum(b[1] for b in blocks if b[2]),
            "blocks": [{"address": b[0], "size": b[1], "state": "active_allocated" if b[2] else "inactive",
                        **({"frames": b[3]} if b[2] and b[3] else {})} for b in blocks],
        })
    return out


def _record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=0):
    _state["history"] = bool(enabled)


def _lazy_call(fn):
    if _state["init"]:
        fn()
    else:
        _state["lazy"].append(fn)


class _Props:
    def __init__(self, total):
        self.total_memory = total


cuda = types.ModuleType("torch.cuda")
cuda.OutOfMemoryError = OutOfMemoryError
cuda._lazy_call = _lazy_call
cuda.is_initialized = lambda: _state["init"]
cuda.init = _init
cuda.mem_get_info = lambda device=0: (_init(), _mem_get_info())[1]
cuda.get_device_properties = lambda device=0: (_init(), _Props(_mem_get_info()[1]))[1]
cuda.set_per_process_memory_fraction = lambda f, device=0: _state.update(fraction=f)
cuda.memory_snapshot = _snapshot_segments
cuda.memory_reserved = lambda device=0: sum(s[1] for s in _segments)
cuda.memory = types.ModuleType("torch.cuda.memory")
cuda.memory._record_memory_history = _record_memory_history
cuda.memory._snapshot = lambda device=None: {"segments": _snapshot_segments(), "device_traces": []}
sys.modules["torch.cuda"] = cuda
sys.modules["torch.cuda.memory"] = cuda.memory
_C = types.ModuleType("torch._C")
_C._cuda_attach_out_of_memory_observer = _state["observers"].append
