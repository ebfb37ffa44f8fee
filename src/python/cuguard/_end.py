"""The end of a Python program's code, for the shim's report (the report's ``python`` section).

cuguard's bootstrap (``cuguard/_bootstrap/sitecustomize.py``, which ``cuguard run`` puts on
``PYTHONPATH``) calls :func:`at_end` from an ``atexit`` handler registered before the program's
code ran, so after ``__main__`` finished, raised, exited or was interrupted and after the program's
own ``atexit`` handlers, and before the interpreter tears modules down. In IPython (and a Jupyter
kernel) the end comes earlier: IPython's own exit handler clears the user's namespace, so
:func:`at_end` runs just before it.

:func:`at_end` marks the moment through the shim (``cuguard_end_begin``), collects garbage, asks
``cuguard._inventory`` what holds each allocation live then, and sends that
(``cuguard_end_classify``). ``CUGUARD_END_SECS`` bounds that look, its walk of references taking
what the collection of objects left (10 s by default; at a Jupyter kernel's shutdown at most
:data:`KERNEL_SHUTDOWN_SECS`).
A signal during it leaves the mark with what is unclassified.

:func:`imported` is called by the bootstrap when a framework it looks into has been imported.
"""

import functools
import gc
import os
import sys
from typing import Any, List, Optional, Tuple

from . import _abi, _caches

_done = False


#: The walk's bound at a Jupyter kernel's shutdown: jupyter_client sends SIGTERM half way
#: through its shutdown wait (2.5 s of 5 s by default), and a kernel killed then has its report
#: written unclassified, or none at all. Measured (docs/reliability.md) with four busy loops in
#: the kernel's session: a bare ipykernel left in 1.2-1.4 s; under the shim with the walk's
#: 10 s bound, jupyter_client sent SIGTERM every time; bounded here, the kernel left in 1.3-2.1 s,
#: the end's look taking 0.5-0.7 s (the collection 0.15 s, the walk 0.2 s). A notebook's own
#: names are walked first, so the holders it can name are found within the bound.
KERNEL_SHUTDOWN_SECS = 0.2


def _timeout(how: Optional[str] = None) -> float:
    try:
        secs = max(0.0, float(os.environ.get("CUGUARD_END_SECS", "10")))
    except ValueError:
        secs = 10.0
    return min(secs, KERNEL_SHUTDOWN_SECS) if how == "kernel_shutdown" else secs


def _how() -> Tuple[str, Optional[str]]:
    """How the code ended: an uncaught exception leaves itself in ``sys.last_value``."""
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if exc is None or isinstance(exc, SystemExit):
        return "finished", None
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", None
    tp = type(exc)
    module = getattr(tp, "__module__", "")
    name = tp.__qualname__ if module in ("builtins", "__main__", "") else f"{module}.{tp.__qualname__}"
    return "raised", name


def at_end(how: Optional[str] = None) -> None:
    """Marks the end of the program's code and sends what held each allocation then (once)."""
    global _done
    if _done:
        return
    _done = True
    if _abi.inactive_reason() is not None:
        return
    found_how, exception = _how()
    how = how or found_how
    try:
        gc.collect()
    except Exception:
        pass
    try:
        allocations, start_unix_ms = _abi.end_begin(how, exception)
    except Exception:
        return
    classification = {"complete": False, "notes": ["the look at what held each allocation failed"]}
    try:
        from . import _inventory

        classification = _inventory.classify(allocations, timeout=_timeout(how), start_unix_ms=start_unix_ms)
    except BaseException as e:  # a signal (KeyboardInterrupt) while looking: keep the mark
        where = ""
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None:
            where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        classification = {
            "complete": False,
            "notes": [
                f"the look at what held each allocation was cut short ({type(e).__name__}: {e}{where})"
            ],
        }
    classification["framework_files"] = framework_files()
    try:
        _abi.end_classify(classification)
    except Exception:
        pass


#: The frameworks whose versions the report names, by their top-level modules: a pure-Python
#: package (cuDF's own ``cudf``) maps no file the shim could find it by, so their files are sent.
FRAMEWORK_MODULES = (
    "torch", "cupy", "cudf", "pylibcudf", "rmm", "jax", "jaxlib", "numba", "numba_cuda",
    "cuda.bindings", "cuda.core",
)


def framework_files() -> List[str]:
    """The ``__file__`` of each imported module of :data:`FRAMEWORK_MODULES`, absolute."""
    out = []
    for name in FRAMEWORK_MODULES:
        module = sys.modules.get(name)
        f = getattr(module, "__file__", None) if module is not None else None
        if isinstance(f, str) and f:
            out.append(os.path.abspath(f))
    return out


def imported(name: str, module: Any) -> None:
    """A module the bootstrap watches was imported: turn on what it offers."""
    if name == "torch":
        _caches.watch_torch(module)
        try:
            from . import _oom  # PyTorch's out-of-memory errors as cards

            _oom.watch_torch(module)
        except Exception:
            pass
        try:
            from . import _origin  # the line that started a backward pass

            _origin.install_torch(module)
        except Exception:
            pass
    elif name == "cupy":
        _caches.watch_cupy(module)
        try:
            from . import _oom  # CuPy's out-of-memory errors as cards

            _oom.watch_cupy(module)
        except Exception:
            pass
    elif name == "jax":
        try:
            from . import _oom  # JAX's out-of-memory errors as cards

            _oom.watch_jax(module)
        except Exception:
            pass
    elif name == "IPython.core.interactiveshell":
        _watch_ipython(module)


def _watch_ipython(module: Any) -> None:
    """IPython's exit handler clears the user's namespace: mark the end just before it."""
    shell = getattr(module, "InteractiveShell", None)
    original = getattr(shell, "atexit_operations", None)
    if shell is None or original is None or getattr(original, "_cuguard", False):
        return

    @functools.wraps(original)
    def atexit_operations(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            at_end("kernel_shutdown" if "ipykernel" in sys.modules else None)
        except Exception:
            pass
        return original(self, *args, **kwargs)

    atexit_operations._cuguard = True  # type: ignore[attr-defined]
    shell.atexit_operations = atexit_operations

    # Cells named as IPython names them (`Cell In[2], line 5`) in every report, without
    # `%load_ext cuguard`.
    init = shell.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            from . import _cells

            _cells.install(self)
        except Exception:
            pass

    shell.__init__ = __init__
