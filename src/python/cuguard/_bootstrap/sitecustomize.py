"""cuguard's Python bootstrap: marks where a Python program's code ends, for the shim's report.

`cuguard run` writes this file into a directory of its own, puts that directory first on
``PYTHONPATH`` and names it in ``CUGUARD_PYTHON_BOOTSTRAP``; Python's ``site`` then imports it as
``sitecustomize`` at start-up, before the program's code. It leaves the program as it was:

- the directory is taken off ``sys.path`` again (``PYTHONPATH`` keeps it, so that the Python
  programs this one starts are bootstrapped too);
- the program's own ``sitecustomize``, if there is one further on the path, still runs, once,
  and its errors are reported by ``site`` as usual;
- it registers one ``atexit`` handler, first, so that it runs after every handler of the
  program's; it imports nothing the program would notice (``ctypes`` and ``atexit``), and the
  ``cuguard`` package only when the end comes or a framework it looks into is imported;
- it loads the ``cuguard`` package from its own path (``CUGUARD_PYTHON_PACKAGE``, which
  ``cuguard run`` and the package's launcher set), never through the program's ``sys.path``: a
  user's script named ``cuguard.py``, or a ``cuguard/`` in the current directory, is never run
  by it, and a ``cuguard`` module of the program's stays the program's (cuguard's package is then
  loaded under a name of its own, ``_cuguard_installed``). When the package is not where that
  says, one line says so and the program runs on, its end marked but not classified;
- ``os._exit`` is wrapped (same name, same status, same effect) so that a program leaving
  through it, as multiprocessing's forked children do, still has its end marked first.

At the end (after ``__main__`` returned, raised, exited or was interrupted, and after the
program's ``atexit`` handlers, before the interpreter tears modules down) it asks the shim to mark
the moment (``cuguard_end_begin``) and has ``cuguard._end`` find what held each allocation then.
``CUGUARD_PYTHON_END=0`` turns it off.

**Without** ``cuguard run`` (the shim loaded by ``LD_PRELOAD`` alone, or ``python -I``, ``-E``,
``-S``, where no ``sitecustomize`` is imported), the shim runs this same file itself
(``shim/src/lifecycle/python_bootstrap.rs``): at its first use in the process it hands the
interpreter a pending call (``Py_AddPendingCall``), which the main thread runs between two
bytecodes, with the GIL. The shim defines ``_CUGUARD_BY_SHIM`` (its own path) in the module's
namespace, so the file then defines its functions and runs :func:`_cuguard_by_shim` instead of
:func:`_cuguard_start`: the same ``atexit`` handler, import hook and ``os._exit`` wrapper, armed
from that moment on (handlers the program registered before then run after the end is marked),
with cuguard's package found beside the shim (a wheel's ``cuguard/_bin/``, a checkout's
``target/<profile>/``). Nothing is added to ``sys.path``, and the program's own
``sitecustomize`` is left as it ran (or did not).
"""


def _cuguard_start():
    import os
    import sys

    here = os.environ.get("CUGUARD_PYTHON_BOOTSTRAP", "")

    def same(entry):
        try:
            return bool(here) and os.path.abspath(entry) == os.path.abspath(here)
        except (TypeError, ValueError):
            return False

    sys.path[:] = [p for p in sys.path if not same(p)]
    # The interpreter's own path, before the program's directory (or, for `-c` and `-m`, the
    # current one) goes first on it: where an installed cuguard is looked for when
    # CUGUARD_PYTHON_PACKAGE does not say.
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    _cuguard_state["path"] = [
        p for p in sys.path if isinstance(p, str) and os.path.isabs(p) and p != cwd
    ]

    def chain():
        # The program's own sitecustomize, found further on the path; ours leaves sys.modules.
        ours = sys.modules.pop("sitecustomize", None)
        try:
            import importlib

            importlib.import_module("sitecustomize")
        except ImportError as e:
            if getattr(e, "name", None) != "sitecustomize":
                raise
            if ours is not None:
                sys.modules["sitecustomize"] = ours

    setting = os.environ.get("CUGUARD_PYTHON_END", "1").strip().lower()
    if setting not in ("0", "off", "false", "no"):
        try:
            _cuguard_arm(sys)
        except Exception as e:  # never stop the program for cuguard's sake
            try:
                sys.stderr.write(f"cuguard: the Python bootstrap is off in this process: {e!r}\n")
            except Exception:
                pass
    chain()


def _cuguard_arm(sys):
    import ctypes

    try:
        shim = ctypes.CDLL(None)
        expect = shim.cuguard_end_expect
    except (OSError, AttributeError):
        return  # not under the shim: nothing to mark
    expect.restype = ctypes.c_int32
    if expect() != 0:
        return  # the shim is off (CUGUARD_DISABLE) or of another kind
    _cuguard_hooks(sys)


def _cuguard_hooks(sys):
    """The ``atexit`` handler, the import hook, the ``os._exit`` and exit finalizers' wrappers."""
    import atexit

    atexit.register(_cuguard_at_end)
    sys.meta_path.insert(0, _CuguardWatcher())
    _cuguard_wrap_os_exit()
    _cuguard_wrap_finalizers(sys)


def _cuguard_wrap_finalizers(sys):
    """``weakref.finalize`` runs every pending finalizer at exit, from an ``atexit`` handler it
    registers when the program makes its first one: later than ours, so before ours. Frameworks
    free the program's memory there (numba's arrays queue their frees, CuPy's and cuda.core's
    buffers free theirs), so the end of the program's code is marked first: its wrapper calls
    the end, then the finalizers, as before and in the same order."""
    weakref = sys.modules.get("weakref")  # already imported by every interpreter that runs site
    finalize = getattr(weakref, "finalize", None)
    if finalize is None or "_exitfunc" not in vars(finalize) or finalize._registered_with_atexit:
        return
    exitfunc = vars(finalize)["_exitfunc"]
    if not isinstance(exitfunc, classmethod):
        return
    original = exitfunc.__func__

    def _exitfunc(cls):
        try:
            _cuguard_at_end()
        except BaseException:  # never keep the finalizers from running
            pass
        return original(cls)

    _exitfunc.__name__ = original.__name__
    _exitfunc.__qualname__ = original.__qualname__
    _exitfunc.__doc__ = original.__doc__
    _exitfunc.__wrapped__ = original
    finalize._exitfunc = classmethod(_exitfunc)


def _cuguard_by_shim():
    """Run by the shim in a pending call (see the module's documentation): arms the end from now
    on. Returns ``""`` when armed, else why not, in one line (the report's ``python.end.why``).
    Arming uses no ``ctypes`` (the call may come in the middle of an import; the shim marks the
    promise itself); cuguard's package is loaded now only for a framework it looks into that was
    imported already."""
    import os
    import sys

    try:
        _cuguard_state["shim"] = _CUGUARD_BY_SHIM  # noqa: F821 (defined by the shim)
        _cuguard_state["path"] = _cuguard_path_now(os, sys)
        _cuguard_hooks(sys)
    except Exception as e:
        return f"{type(e).__name__}: {e}".replace("\n", " ")[:200]
    try:
        _cuguard_seen_already(sys)
    except Exception:
        pass
    return ""


def _cuguard_path_now(os, sys):
    """The interpreter's path, less what the program put first on it: the script's directory
    (``sys.path[0]`` unless ``-P`` or ``-I``), the directory of ``sys.argv[0]`` and the current
    directory: where an installed cuguard is looked for when neither ``CUGUARD_PYTHON_PACKAGE``
    nor the shim's place says."""
    path = [p for p in sys.path if isinstance(p, str)]
    flags = sys.flags
    if path and not (getattr(flags, "safe_path", False) or getattr(flags, "isolated", 0)):
        path = path[1:]
    skip = set()
    try:
        skip.add(os.getcwd())
    except OSError:
        pass
    argv0 = (getattr(sys, "argv", None) or [""])[0]
    if isinstance(argv0, str) and argv0 not in ("", "-c", "-m"):
        skip.add(os.path.dirname(os.path.abspath(argv0)))
    return [p for p in path if os.path.isabs(p) and p not in skip]


def _cuguard_seen_already(sys):
    """Frameworks imported before the shim armed the end: looked into now (those being imported
    at this moment are not)."""
    for name in _CuguardWatcher.WATCHED:
        module = sys.modules.get(name)
        spec = getattr(module, "__spec__", None)
        if module is None or getattr(spec, "_initializing", False):
            continue
        end = _cuguard_package()
        if end is None:
            return
        end.imported(name, module)


def _cuguard_wrap_os_exit():
    """``os._exit`` leaves without ``atexit`` handlers (multiprocessing's forked children do):
    its wrapper marks the end first, then calls the real one with the same status."""
    import os

    real = os._exit

    def _exit(status):
        try:
            _cuguard_at_end("os_exit")
        except BaseException:  # never keep the program from leaving
            pass
        real(status)

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(_exit, name, getattr(real, name))
        except (AttributeError, TypeError):
            pass
    _exit.__wrapped__ = real
    os._exit = _exit


#: The name cuguard's package is loaded under when the program's own ``import cuguard`` would
#: load something else (the user's ``cuguard.py``, a ``cuguard/`` in the current directory):
#: that name stays the program's.
_CUGUARD_OWN_NAME = "_cuguard_installed"

#: What the bootstrap found: the interpreter's path at start-up, and ``cuguard._end`` once loaded
#: (or why it could not be).
_cuguard_state = {"path": None, "end": None, "failed": False, "shim": None}


def _cuguard_package():
    """``cuguard._end`` of cuguard's own package, loaded on first use; None when it cannot be
    (said once, in one line, when ``CUGUARD_PYTHON_PACKAGE`` names no usable package)."""
    end = _cuguard_state["end"]
    if end is not None or _cuguard_state["failed"]:
        return end
    try:
        end = _cuguard_load()
    except Exception as e:
        end = None
        _cuguard_say(f"cuguard's Python package could not be loaded ({type(e).__name__}: {e})")
    if end is None:
        _cuguard_state["failed"] = True
    _cuguard_state["end"] = end
    return end


def _cuguard_say(what):
    import sys

    try:
        sys.stderr.write(
            f"cuguard: {what}; the end of this program's code is marked but what held each "
            "allocation is not told\n"
        )
    except Exception:
        pass


def _cuguard_load():
    """Loads the package from its own path, never through the program's ``sys.path``: the
    directory ``CUGUARD_PYTHON_PACKAGE`` names (``cuguard run`` and the package's launcher set
    it), else the ``cuguard`` package found on the interpreter's path as it stood at start-up
    (before the program's directory or the current directory was put first on it).

    The package is loaded under its own name, ``cuguard``, only when that is what the program's
    own ``import cuguard`` gives or would give (one copy of the package, whoever imports it
    first); otherwise under :data:`_CUGUARD_OWN_NAME`, so that a ``cuguard`` of the program's stays
    the program's and is never run by cuguard."""
    import importlib
    import importlib.util
    import os
    import sys

    where = os.environ.get("CUGUARD_PYTHON_PACKAGE", "")
    if where:
        init = os.path.join(where, "__init__.py")
        if not os.path.isfile(init) or not os.path.isfile(os.path.join(where, "_end.py")):
            _cuguard_say(f"CUGUARD_PYTHON_PACKAGE={where!r} holds no cuguard package")
            return None
    else:
        where = _cuguard_beside_shim() or _cuguard_installed_at()
        if where is None:
            return None  # the report's note says the package is not importable here
        init = os.path.join(where, "__init__.py")
    real = os.path.realpath(init)

    def ours(module):
        try:  # sys.modules may hold objects that are not modules, and lazy ones that raise
            file = getattr(module, "__file__", None)
            return isinstance(file, str) and os.path.realpath(file) == real
        except Exception:
            return False

    name = _CUGUARD_OWN_NAME
    theirs = sys.modules.get("cuguard")
    if theirs is not None:
        if ours(theirs):
            return importlib.import_module("cuguard._end")
    else:
        try:
            # Finds, never runs: what the program's own `import cuguard` would load now.
            spec = importlib.util.find_spec("cuguard")
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None)
        if isinstance(origin, str) and os.path.realpath(origin) == real:
            name = "cuguard"
    loaded = sys.modules.get(name)
    if loaded is not None and ours(loaded):
        return importlib.import_module(name + "._end")
    if loaded is not None:
        _cuguard_say(f"the module name {name} is taken by another module")
        return None
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[where])
    if spec is None or spec.loader is None:
        _cuguard_say(f"cuguard's Python package at {where} cannot be loaded")
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        return importlib.import_module(name + "._end")
    except BaseException:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            sys.modules.pop(key, None)
        raise


def _cuguard_beside_shim():
    """The package that came with the shim that ran this file (:func:`_cuguard_by_shim`): a
    wheel's ``cuguard/_bin/libcuguard*.so`` is inside it, a checkout's
    ``target/<profile>/libcuguard.so`` two levels below ``src/python/cuguard``. None otherwise."""
    import os

    shim = _cuguard_state.get("shim")
    if not isinstance(shim, str) or not shim:
        return None
    here = os.path.dirname(os.path.realpath(shim))
    for where in (os.path.dirname(here), os.path.join(here, "..", "..", "src", "python", "cuguard")):
        where = os.path.normpath(where)
        if os.path.isfile(os.path.join(where, "__init__.py")) and os.path.isfile(os.path.join(where, "_end.py")):
            return where
    return None


def _cuguard_installed_at():
    """The directory of the ``cuguard`` package on the interpreter's path as it stood at
    start-up (site-packages, ``.pth`` entries, ``PYTHONPATH``), less the directory the
    interpreter started in; None if there is none."""
    import importlib.machinery
    import os

    path = _cuguard_state["path"] or []
    try:
        spec = importlib.machinery.PathFinder.find_spec("cuguard", path)
    except (ImportError, ValueError, OSError):
        return None
    places = getattr(spec, "submodule_search_locations", None)
    if spec is None or not places or not isinstance(spec.origin, str):
        return None
    where = os.path.dirname(spec.origin)
    if not os.path.isfile(os.path.join(where, "_end.py")):
        return None
    return where


def _cuguard_at_end(how=None):
    end = _cuguard_package()
    if end is not None:
        end.at_end(how)
        return
    # Without the package the end is still marked, unclassified.
    import ctypes

    try:
        shim = ctypes.CDLL(None)
        begin, classify, free = shim.cuguard_end_begin, shim.cuguard_end_classify, shim.cuguard_free
    except (OSError, AttributeError):
        return
    begin.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    begin.restype = ctypes.c_int32
    classify.argtypes = [ctypes.c_char_p]
    free.argtypes = [ctypes.c_void_p]
    out = ctypes.c_void_p()
    if begin((how or "finished").encode(), None, ctypes.byref(out)) == 0:
        free(out.value)
        classify(
            b'{"complete": false, "notes": ["cuguard\'s Python package is not importable in this '
            b'interpreter: held and lost are not told apart"]}'
        )


class _CuguardWatcher:
    """A finder that never finds anything itself: when a module cuguard looks into (PyTorch, CuPy,
    JAX, IPython) has been imported, it tells `cuguard._end`, which turns on what that framework
    offers (PyTorch's memory history once CUDA starts; CuPy's memory hook; the frameworks'
    out-of-memory errors as cards; IPython's cell names)."""

    WATCHED = ("torch", "cupy", "jax", "IPython.core.interactiveshell")

    def find_spec(self, name, path=None, target=None):
        if name not in self.WATCHED:
            return None
        import sys

        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            loader = spec.loader
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            spec.loader = _CuguardLoader(loader, name)
            return spec
        return None

    def invalidate_caches(self):
        pass


class _CuguardLoader:
    """The module's own loader, with cuguard told once the module has run."""

    def __init__(self, loader, name):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # The module sees its own loader, as without cuguard.
        module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self._loader
        self._loader.exec_module(module)
        try:
            end = _cuguard_package()
            if end is not None:
                end.imported(self._name, module)
        except Exception:
            pass

    def __getattr__(self, name):
        return getattr(self._loader, name)


if "_CUGUARD_BY_SHIM" not in globals():  # imported as sitecustomize (cuguard run)
    _cuguard_start()
