"""Where PyTorch's backward pass was started, for the allocations its autograd threads make.

PyTorch runs a backward pass on the autograd engine's own threads, which have no Python frames,
while the thread that called ``backward()`` waits in it. :func:`install_torch` wraps
``torch.autograd._engine_run_backward`` (PyTorch 2.1 and later; what ``Tensor.backward``,
``torch.autograd.backward`` and ``torch.autograd.grad`` all call) so that each run opens an
*origin* through the shim's C ABI (``cuguard_origin_begin``: the calling thread's stack, Python
lines included) and closes it when the run returns or raises (``cuguard_origin_end``). The shim
gives the allocations made meanwhile on threads without Python frames that origin, and
``cuguard`` then names their sites ``on the autograd thread: AddmmBackward0::apply (…), backward
from train.py:42``.

Nothing else changes: the wrapper passes every argument through and returns or raises what the
engine does, and a failure of the ABI leaves the backward pass as it was. It is not installed on
import: the caller (a post-import hook for ``torch``) calls :func:`install_torch`.
"""

import ctypes
import functools
from typing import Any

from . import _abi

#: Set on the wrapper, so that a second install sees it.
_WRAPPED = "__cuguard_origin__"


def install_torch(torch_module: Any) -> bool:
    """Wraps ``torch_module.autograd._engine_run_backward`` to open an origin around each run.

    Returns True when the wrapper is in place (now or from an earlier call); False, changing
    nothing, when the module has no such function or cuguard's shim is not tracking this process.
    """
    autograd = getattr(torch_module, "autograd", None)
    run = getattr(autograd, "_engine_run_backward", None)
    if autograd is None or not callable(run):
        return False
    if getattr(run, _WRAPPED, False):
        return True
    if _abi.inactive_reason() is not None:
        return False
    dll = _abi.lib()
    # Called with the GIL held, so that the origin's Python frames are read whatever
    # CUGUARD_PYTHON says (with `gil`, only a thread holding it has them read).
    begin = ctypes.PyDLL(None).cuguard_origin_begin
    begin.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    begin.restype = ctypes.c_int32
    end = dll.cuguard_origin_end

    @functools.wraps(run)
    def _engine_run_backward(*args: Any, **kwargs: Any) -> Any:
        token = ctypes.c_uint64(0)
        try:
            opened = begin(ctypes.byref(token)) == _abi.OK
        except Exception:  # the ABI must never break a backward pass
            opened = False
        try:
            return run(*args, **kwargs)
        finally:
            if opened:
                try:
                    end(token.value)
                except Exception:
                    pass

    setattr(_engine_run_backward, _WRAPPED, True)
    autograd._engine_run_backward = _engine_run_backward
    return True
