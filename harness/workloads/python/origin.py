"""origin.py: `cuguard._origin.install_torch` on a stand-in for PyTorch: a fake `torch` module
whose `autograd._engine_run_backward` runs a "backward node" that allocates on a native thread
without Python frames (`harness/workloads/c/autograd_stand_in.cc`), as PyTorch's autograd engine
does. The allocation made inside the wrapped function must name the Python line that started the
pass; one made outside it must not.

    python3 origin.py LIBRARY

Prints what install_torch answered, then one line per kept block:

    missing False            (a module without _engine_run_backward)
    installed True|False     (False when the shim is not tracking this process)
    again True|False
    wrapped NAME MODULE      (what the wrapper says it is)
    raised ValueError        (an exception from the engine passes through unchanged)
    backward 0x<address>     (made inside the wrapped run)
    outside 0x<address>      (made by the same node, no backward pass open)
    refused -1 -1            (cuguard_origin_end of a token that names nothing, and
                              cuguard_file_alias of NULL: CUGUARD_E_INVALID; `- -` without the shim)

The line that starts the pass carries the marker `# origin: backward`.
"""

import ctypes
import sys
import types

from cuguard import _abi, _origin

cuda = ctypes.CDLL("libcuda.so.1")
engine = ctypes.CDLL(sys.argv[1])
engine.run_backward.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
engine.run_backward.restype = ctypes.c_int


def check(result):
    if result != 0:
        raise SystemExit(f"CUDA error {result}")


def _engine_run_backward(ptr, size):
    """The engine's run: the node allocates on the engine's thread while this one waits."""
    check(engine.run_backward(ctypes.byref(ptr), size))


def _failing_run(*args):
    raise ValueError("the engine refused")


torch = types.SimpleNamespace(
    autograd=types.SimpleNamespace(_engine_run_backward=_engine_run_backward)
)
failing = types.SimpleNamespace(autograd=types.SimpleNamespace(_engine_run_backward=_failing_run))


def backward(size):
    ptr = ctypes.c_uint64()
    torch.autograd._engine_run_backward(ptr, size)  # origin: backward
    return ptr.value


def main():
    check(cuda.cuInit(0))
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check(cuda.cuCtxSetCurrent(ctx))
    print("missing", _origin.install_torch(types.SimpleNamespace(autograd=types.SimpleNamespace())))
    print("installed", _origin.install_torch(torch))
    print("again", _origin.install_torch(torch))
    run = torch.autograd._engine_run_backward
    print("wrapped", run.__name__, run.__module__)
    _origin.install_torch(failing)
    try:
        failing.autograd._engine_run_backward(1, 2)
    except ValueError as e:
        print("raised", type(e).__name__)
    kept = [backward(1 << 20)]
    outside = ctypes.c_uint64()
    check(engine.run_backward(ctypes.byref(outside), 2 << 20))
    kept.append(outside.value)
    print(f"backward {kept[0]:#x}")
    print(f"outside {kept[1]:#x}")
    # The ABI refuses what names nothing.
    try:
        dll = _abi.lib()
        refused = (dll.cuguard_origin_end(1 << 60), dll.cuguard_file_alias(None, b"x"))
        print("refused", *refused)
    except _abi.NotActive:
        print("refused - -")


main()
