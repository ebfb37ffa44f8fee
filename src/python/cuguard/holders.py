"""``holders()``: which Python objects hold the process's live GPU allocations, and a path of
references from a name the user knows to each one.

1. The shim lists the live allocations (``cuguard_live_allocations``: address, size, site, owner).
2. Every object the garbage collector tracks is asked, by its type, whether it holds device memory
   and where: PyTorch tensors and storages, CuPy arrays and memory, RMM ``DeviceBuffer``, numba
   device arrays and pointers, anything exposing ``__cuda_array_interface__`` (on its type or its
   instance) and, last, DLPack producers on a CUDA device. Each holder's byte range is matched
   against the allocations by address.
3. A breadth-first walk of references, from the names a user knows (IPython's namespace and its
   ``Out`` cache, ``__main__``'s globals, the live frames' locals, then every module's globals),
   finds the shortest path to each holder, bounded in time and depth. A path is rendered as steps:
   ``df`` → ``['a']`` → ``.data`` → ``rmm.DeviceBuffer (8.0 MiB, made at etl.py:31)``.

Where an allocation was made is named with the line that called its site (the shim's ``callers``)
when that line is the program's own: ``made at etl.py:31 ← etl.py:52``, so that the callers of a
helper that allocates are told apart. The helpers ``CUGUARD_HELPERS`` names are left out:
``made at etl.py:52 (via alloc)`` (:func:`_call_path`; the pytest plugin names sites the same way).

Where several holders of one allocation lie on one path (an array → its memory pointer → its
memory), the deepest is kept. Nothing here trusts the objects it meets: attribute lookups that
raise, proxies and odd containers cost a step of the path, never an exception.
"""

import bisect
import collections
import ctypes
import fnmatch
import functools
import gc
import os
import sys
import sysconfig
import threading
import time
import types
import weakref
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import _abi
from ._units import escaped

#: Seconds the walk of references may take by default.
DEFAULT_TIMEOUT = 10.0
#: The longest path looked for, by default.
DEFAULT_MAX_DEPTH = 32

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
#: This package's name: ``cuguard``, or the one cuguard's bootstrap loads it under beside a
#: program's own ``cuguard`` module.
_OWN = __name__.rpartition(".")[0]

# Objects that are never holders and whose references are not followed.
_ATOMS = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    bytearray,
    range,
    slice,
    type(Ellipsis),
    type(NotImplemented),
)
_OPAQUE = (
    types.ModuleType,
    types.CodeType,
    types.BuiltinFunctionType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    weakref.ref,
    weakref.ProxyType,
    weakref.CallableProxyType,
    property,
)
# Containers and other plain types that hold no device memory themselves.
_PLAIN = set(_ATOMS) | set(_OPAQUE) | {
    dict,
    list,
    tuple,
    set,
    frozenset,
    type,
    types.FunctionType,
    types.MethodType,
    types.FrameType,
    types.TracebackType,
    types.CellType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.SimpleNamespace,
    types.MappingProxyType,
    staticmethod,
    classmethod,
    collections.deque,
    collections.OrderedDict,
    collections.defaultdict,
}


def human_bytes(n: int) -> str:
    """Bytes as the cuguard command writes them: ``512 B``, ``1.5 KiB``, ``8.0 MiB``."""
    if n < 1024:
        return f"{n} B"
    value = n / 1024.0
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024.0:
            return f"{value:.1f} {unit}"
        value /= 1024.0
    return f"{value:.1f} EiB"


def _type_name(tp: type) -> str:
    """``rmm.DeviceBuffer``, ``torch.Tensor``, ``heldmod.Holder``, ``Holder`` (in ``__main__``)."""
    try:
        name = tp.__qualname__
    except Exception:
        name = getattr(tp, "__name__", "?")
    try:
        module = tp.__module__
    except Exception:
        module = None
    if not isinstance(module, str) or module in ("__main__", "builtins", ""):
        return str(name)
    return f"{module.split('.')[0]}.{name}"


def _static_has(tp: type, name: str) -> bool:
    """Whether ``name`` is in the namespace of ``tp`` or a base, without running any code of theirs."""
    try:
        return any(name in vars(c) for c in tp.__mro__)
    except Exception:
        return False


#: The environment variable that names the program's own allocation helpers: function names,
#: comma-separated, with ``*`` and ``?`` globs (``alloc,make_*``). An allocation made in one is named
#: by the line that called it. The ``cuguard`` command reads it too, where ``none`` turns its own
#: finding of helpers off: no function's name here.
HELPERS = "CUGUARD_HELPERS"


def _helper_patterns() -> List[str]:
    names = (p.strip() for p in os.environ.get(HELPERS, "").split(","))
    return [p for p in names if p and p != "none"]


def _is_helper(function: Any, patterns: List[str]) -> bool:
    """Whether a frame's function is one of the helpers: by its name as the shim gives it
    (``Pool.alloc`` for a method) or its last dotted part (``alloc``)."""
    if not patterns or not isinstance(function, str) or not function:
        return False
    names = {function, function.rpartition(".")[2]}
    return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)


@functools.lru_cache(maxsize=None)
def _stdlib_dirs() -> Tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(p.rstrip(os.sep) + os.sep for p in {paths.get("stdlib"), paths.get("platstdlib")} if p)


def _outside_the_program(file: str) -> bool:
    """Whether ``file`` is an installed package's, the standard library's or no file at all
    (``<string>``): a line that called the program's code, not one of the program's."""
    return "-packages/" in file or file.startswith("<") or file.startswith(_stdlib_dirs())


def _frame(value: Any) -> Optional[Dict[str, Any]]:
    return value if isinstance(value, dict) and value.get("file") else None


def _call_path(site: Any) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]], Optional[str]]:
    """How to name an allocation made at ``site`` (the shim's ``site`` dict, whose ``callers`` are
    the user's frames that called it, innermost first): ``(frame, caller, via)``.

    - When the site's function is a helper (``CUGUARD_HELPERS``) and some caller with a file is
      not: that caller, no caller, and the helper it called (``via``).
    - Else the site itself, and its first caller when that has a file and is the program's own
      (not an installed package's or the standard library's: a test's caller is pytest).
    """
    site = site if isinstance(site, dict) else {}
    raw = site.get("callers")
    callers = [c if isinstance(c, dict) else {} for c in raw] if isinstance(raw, list) else []
    patterns = _helper_patterns()
    if _is_helper(site.get("function"), patterns):
        inner = site
        for c in callers:
            if not _is_helper(c.get("function"), patterns):
                if _frame(c) is None:
                    break
                return c, None, str(inner.get("function"))
            inner = c
    first = _frame(callers[0]) if callers else None
    if first is not None and _outside_the_program(str(first["file"])):
        first = None
    return site, first, None


def _frame_text(frame: Dict[str, Any]) -> str:
    file, line, function = frame.get("file"), frame.get("line"), frame.get("function")
    if file:
        base = os.path.basename(str(file))
        return f"{base}:{line}" if line is not None else base
    if function:
        return str(function)
    if frame.get("module"):
        return os.path.basename(str(frame["module"]))
    return "an unknown site"


def _site_text(site: Optional[Dict[str, Any]]) -> str:
    """``etl.py:31``, ``etl.py:31 ← etl.py:52`` (its caller, see :func:`_call_path`) or
    ``etl.py:52 (via alloc)``; the program's names escaped."""
    frame, caller, via = _call_path(site)
    text = _frame_text(frame)
    if via is not None:
        text += f" (via {via})"
    elif caller is not None:
        text += f" ← {_frame_text(caller)}"
    return escaped(text)


# --- what an object holds -------------------------------------------------------------------------

Range = Tuple[int, int]  # (first address, bytes)


def _cai_range(cai: Any) -> Optional[Range]:
    """The byte range a ``__cuda_array_interface__`` dict describes."""
    if not isinstance(cai, dict):
        return None
    data = cai.get("data")
    ptr = data[0] if isinstance(data, (tuple, list)) and data else data
    if not isinstance(ptr, int) or ptr <= 0:
        return None
    shape = tuple(int(n) for n in cai.get("shape") or ())
    typestr = cai.get("typestr")
    itemsize = int(typestr[2:]) if isinstance(typestr, str) and typestr[2:].isdigit() else 1
    if any(n <= 0 for n in shape):
        return None
    strides = cai.get("strides")
    if strides is None:
        count = 1
        for n in shape:
            count *= n
        return ptr, count * itemsize
    lo = hi = 0
    for n, st in zip(shape, strides):
        step = (n - 1) * int(st)
        lo += min(0, step)
        hi += max(0, step)
    return ptr + lo, hi - lo + itemsize


def _probe_cai(obj: Any) -> Optional[Range]:
    return _cai_range(getattr(obj, "__cuda_array_interface__"))


def _probe_instance_cai(obj: Any) -> Optional[Range]:
    d = _instance_dict(obj)
    if d is None:
        return None
    return _cai_range(dict.get(d, "__cuda_array_interface__"))


def _probe_torch_tensor(obj: Any) -> Optional[Range]:
    if not obj.is_cuda:
        return None
    try:
        storage = obj.untyped_storage()
    except AttributeError:  # before PyTorch 2.0
        storage = obj.storage()
    return int(storage.data_ptr()), int(storage.nbytes())


def _probe_torch_storage(obj: Any) -> Optional[Range]:
    if getattr(obj.device, "type", None) != "cuda":
        return None
    return int(obj.data_ptr()), int(obj.nbytes())


def _probe_ptr_size(obj: Any) -> Optional[Range]:
    return int(obj.ptr), int(obj.size)


def _probe_cupy_memory_pointer(obj: Any) -> Optional[Range]:
    mem = obj.mem
    if mem is not None and int(getattr(mem, "size", 0)) > 0:
        return int(mem.ptr), int(mem.size)
    return int(obj.ptr), 1


def _probe_numba_pointer(obj: Any) -> Optional[Range]:
    ptr = obj.device_pointer_value
    return (int(ptr), max(1, int(obj.size))) if ptr else None


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


# kDLCUDA, kDLCUDAHost, kDLCUDAManaged
_DLPACK_CUDA = (2, 3, 13)


def _probe_dlpack(obj: Any) -> Optional[Range]:
    device = obj.__dlpack_device__()
    if int(device[0]) not in _DLPACK_CUDA:
        return None
    try:
        capsule = obj.__dlpack__(stream=None)
    except TypeError:
        capsule = obj.__dlpack__()
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    p = get(capsule, b"dltensor")
    if not p:
        return None
    t = _DLTensor.from_address(p)
    if not t.data or t.ndim < 0 or t.ndim > 64:
        return None
    itemsize = max(1, t.dtype.bits * max(1, t.dtype.lanes) // 8)
    shape = [int(t.shape[i]) for i in range(t.ndim)]
    if any(n <= 0 for n in shape):
        return None
    start = int(t.data) + int(t.byte_offset)
    if not t.strides:
        count = 1
        for n in shape:
            count *= n
        return start, count * itemsize
    lo = hi = 0
    for i, n in enumerate(shape):
        step = (n - 1) * int(t.strides[i]) * itemsize
        lo += min(0, step)
        hi += max(0, step)
    return start + lo, hi - lo + itemsize


Probe = Callable[[Any], Optional[Range]]


def _probe_for(tp: type) -> Optional[Tuple[Probe, str]]:
    """How to ask objects of type ``tp`` what they hold, and the kind of holder they are."""
    if tp in _PLAIN:
        return None
    try:
        mro = tp.__mro__
    except Exception:
        return None
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if issubclass(tp, torch.Tensor):
                return _probe_torch_tensor, "torch"
            for name in ("UntypedStorage", "TypedStorage"):
                storage = getattr(torch, name, None)
                if isinstance(storage, type) and issubclass(tp, storage):
                    return _probe_torch_storage, "torch"
        except Exception:
            pass
    module = getattr(tp, "__module__", None)
    top = module.split(".")[0] if isinstance(module, str) else ""
    names = {getattr(c, "__name__", "") for c in mro}
    if top == "cupy" and "MemoryPointer" in names:
        return _probe_cupy_memory_pointer, "cupy"
    if top == "cupy" and names & {"BaseMemory", "Memory", "PooledMemory", "ManagedMemory"}:
        return _probe_ptr_size, "cupy"
    if top == "rmm" and "DeviceBuffer" in names:
        return _probe_ptr_size, "rmm"
    if _static_has(tp, "__cuda_array_interface__"):
        return _probe_cai, "cuda_array_interface"
    if top.startswith("numba") and _static_has(tp, "device_pointer_value"):
        return _probe_numba_pointer, "numba"
    if _static_has(tp, "__dlpack__") and _static_has(tp, "__dlpack_device__"):
        return _probe_dlpack, "dlpack"
    if getattr(tp, "__dictoffset__", 0):
        return _probe_instance_cai, "cuda_array_interface"
    return None


def _is(obj: Any, cls: Any) -> bool:
    """`isinstance` by the object's type alone. `isinstance` also reads `obj.__class__` when the
    type does not match, which runs the class's `__getattribute__`: some warn on every read
    (`torch.distributed.reduce_op`'s FutureWarning), and looking at what holds memory must read
    nothing of the program's objects."""
    return issubclass(type(obj), cls)


def _instance_dict(obj: Any) -> Optional[dict]:
    try:
        if not type(obj).__dictoffset__:
            return None
        d = object.__getattribute__(obj, "__dict__")
    except Exception:
        return None
    return d if isinstance(d, dict) else None


class _Holder:
    __slots__ = ("obj", "start", "nbytes", "kind", "allocation")

    def __init__(self, obj: Any, start: int, nbytes: int, kind: str, allocation: int) -> None:
        self.obj = obj
        self.start = start
        self.nbytes = nbytes
        self.kind = kind
        self.allocation = allocation


def _find_holders(allocations: List[Dict[str, Any]]) -> List[_Holder]:
    """Every tracked object that holds memory inside one of ``allocations``."""
    order = sorted(range(len(allocations)), key=lambda i: int(allocations[i]["address"]))
    starts = [int(allocations[i]["address"]) for i in order]
    probes: Dict[type, Optional[Tuple[Probe, str]]] = {}
    found: List[_Holder] = []
    objects = gc.get_objects()
    try:
        for obj in objects:
            tp = type(obj)
            try:
                probe = probes[tp]
            except KeyError:
                probe = probes[tp] = _probe_for(tp)
            except TypeError:  # an unhashable type object
                continue
            if probe is None:
                continue
            try:
                r = probe[0](obj)
            except Exception:
                continue
            if not r:
                continue
            start, nbytes = r
            k = bisect.bisect_right(starts, start) - 1
            if k < 0:
                continue
            a = allocations[order[k]]
            if start < int(a["address"]) + int(a["size"]):
                found.append(_Holder(obj, start, nbytes, probe[1], order[k]))
    finally:
        del objects
    return found


# --- the walk of references -----------------------------------------------------------------------


def _key_text(k: Any) -> str:
    if _is(k, (str, bytes, int, float, bool)) or k is None:
        text = repr(k)
        return text if len(text) <= 80 else text[:77] + "..."
    return f"<{_type_name(type(k))}>"


def _children(obj: Any) -> Iterator[Tuple[Any, Optional[str]]]:
    """What ``obj`` refers to, each with the step that names it (``None``: no name for it)."""
    tp = type(obj)
    if issubclass(tp, dict):
        for k, v in list(dict.items(obj)):
            yield v, f"[{_key_text(k)}]"
        if tp is dict:
            return
    elif issubclass(tp, (list, tuple, collections.deque)):
        fields = getattr(tp, "_fields", None) if issubclass(tp, tuple) else None
        base = list if issubclass(tp, list) else tuple if issubclass(tp, tuple) else collections.deque
        items = list(base.__iter__(obj))
        for i, v in enumerate(items):
            if isinstance(fields, tuple) and i < len(fields) and isinstance(fields[i], str):
                yield v, f".{fields[i]}"
            else:
                yield v, f"[{i}]"
        if tp in (list, tuple, collections.deque):
            return
    elif issubclass(tp, (set, frozenset)):
        base = set if issubclass(tp, set) else frozenset
        for v in list(base.__iter__(obj)):
            yield v, "{...}"
        if tp in (set, frozenset):
            return
    elif tp is types.FunctionType:
        cells = obj.__closure__ or ()
        for name, cell in zip(obj.__code__.co_freevars, cells):
            try:
                yield cell.cell_contents, f" (closure variable {name!r})"
            except ValueError:  # an empty cell
                pass
        for i, v in enumerate(obj.__defaults__ or ()):
            yield v, f".__defaults__[{i}]"
        for k, v in (obj.__kwdefaults__ or {}).items():
            yield v, f".__kwdefaults__[{_key_text(k)}]"
        return
    elif tp is types.MethodType:
        yield obj.__self__, ".__self__"
        return
    elif tp is types.CellType:
        try:
            yield obj.cell_contents, None
        except ValueError:
            pass
        return
    elif tp is types.FrameType:
        if obj.f_code.co_filename.startswith(_PACKAGE_DIR):
            return
        f_locals = obj.f_locals
        if f_locals is obj.f_globals:
            return
        where = f"{obj.f_code.co_name} at {os.path.basename(obj.f_code.co_filename)}:{obj.f_lineno}"
        for k, v in list(f_locals.items()):
            yield v, f" (local {k!r} of {where})"
        return
    elif tp is types.TracebackType:
        yield obj.tb_frame, ".tb_frame"
        if obj.tb_next is not None:
            yield obj.tb_next, ".tb_next"
        return
    elif _is(obj, type):
        for k, v in list(vars(obj).items()):
            if not (k.startswith("__") and k.endswith("__")):
                yield v, f".{k}"
        return
    d = _instance_dict(obj)
    if d is not None:
        for k, v in list(dict.items(d)):
            yield v, f".{k}" if _is(k, str) else f".__dict__[{_key_text(k)}]"
    for klass in tp.__mro__:
        slots = vars(klass).get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        for name in slots if isinstance(slots, (tuple, list)) else ():
            descriptor = vars(klass).get(name)
            if isinstance(descriptor, types.MemberDescriptorType):
                try:
                    yield descriptor.__get__(obj, tp), f".{name}"
                except AttributeError:
                    pass
    for v in gc.get_referents(obj):
        if v is not d and v is not tp:
            yield v, None


def _roots() -> List[Tuple[str, Any]]:
    """The names a user knows, in the order a path's first step is preferred: IPython's namespace
    and its ``Out`` cache, ``__main__``'s globals, the live frames' locals (innermost first), then
    every module's globals."""
    roots: List[Tuple[str, Any]] = []
    seen_dicts = set()

    def names(namespace: Any, prefix: str) -> None:
        if not isinstance(namespace, dict) or id(namespace) in seen_dicts:
            return
        seen_dicts.add(id(namespace))
        later = []
        try:
            items = list(dict.items(namespace))
        except Exception:  # changed while read
            return
        for k, v in items:
            if not _is(k, str) or _is(v, types.ModuleType):
                continue
            if k.startswith("__") and k.endswith("__"):
                continue
            (later if k.startswith("_") else roots).append((prefix + k, v))
        roots.extend(later)

    ipython = sys.modules.get("IPython")
    get = getattr(ipython, "get_ipython", None) if ipython is not None else None
    shell = None
    if callable(get):
        try:
            shell = get()
        except Exception:
            shell = None
    user_ns = getattr(shell, "user_ns", None) if shell is not None else None
    if isinstance(user_ns, dict):
        out = user_ns.get("Out")
        hidden = getattr(shell, "user_ns_hidden", {}) or {}
        for k, v in list(user_ns.items()):
            if _is(k, str) and not k.startswith("_") and k not in hidden and k not in ("In", "Out"):
                if not _is(v, types.ModuleType):
                    roots.append((k, v))
        if isinstance(out, dict):
            seen_dicts.add(id(out))
            for k, v in list(out.items()):
                roots.append((f"Out[{_key_text(k)}]", v))
        names(user_ns, "")
    main = sys.modules.get("__main__")
    if main is not None:
        names(getattr(main, "__dict__", None), "")
    me = threading.get_ident()
    try:
        frames = sys._current_frames()
    except Exception:
        frames = {}
    for ident, frame in frames.items():
        f = frame
        depth = 0
        while f is not None and depth < 256:
            depth += 1
            code = f.f_code
            if not code.co_filename.startswith(_PACKAGE_DIR) and not (ident == me and f is frame):
                try:
                    f_locals = f.f_locals
                except Exception:
                    f_locals = None
                # A dict, or (Python 3.13+) a write-through proxy of the frame's variables.
                if f_locals is not None and f_locals is not f.f_globals and hasattr(f_locals, "items"):
                    where = f"{code.co_name} at {os.path.basename(code.co_filename)}:{f.f_lineno}"
                    for k, v in list(f_locals.items()):
                        if _is(k, str) and not _is(v, types.ModuleType):
                            roots.append((f"{k} (local of {where})", v))
            f = f.f_back
    del frames
    for name, module in sorted(list(sys.modules.items()), key=lambda kv: str(kv[0])):
        if not _is(name, str) or name == _OWN or name.startswith(_OWN + "."):
            continue
        try:  # sys.modules may hold objects that are not modules, and lazy ones that raise
            namespace = object.__getattribute__(module, "__dict__")
        except Exception:
            continue
        # Another copy of this package (loaded under another name) is not the program's either;
        # a `cuguard` module of the program's own is.
        file = namespace.get("__file__") if _is(namespace, dict) else None
        if _is(file, str) and file.startswith(_PACKAGE_DIR + os.sep):
            continue
        names(namespace, f"{name}.")
    return roots


def _reachable_targets(targets: Dict[int, Any], ours: List[Any]) -> Dict[int, Any]:
    """The targets some Python object refers to (one scan of the collector's objects, in C). A
    holder nothing in Python refers to is held from native code only (PyTorch keeps the Python
    object of a tensor its autograd graph holds): no name can reach it, so the walk need not
    look for it, which would otherwise cost a walk of every object the interpreter has. `ours`
    are the containers of this package that refer to the targets."""
    if not targets:
        return {}
    objs = list(targets.values())
    skip = {id(x) for x in ours}
    skip.add(id(objs))
    seen = set()
    try:
        referrers = gc.get_referrers(*objs)
    except Exception:
        return dict(targets)
    skip.add(id(referrers))
    for r in referrers:
        if id(r) in skip or _is(r, _Holder):
            continue
        if _is(r, types.FrameType) and r.f_code.co_filename.startswith(_PACKAGE_DIR):
            continue
        try:
            for x in gc.get_referents(r):
                if id(x) in targets:
                    seen.add(id(x))
        except Exception:
            continue
    del referrers
    return {i: o for i, o in targets.items() if i in seen}


#: NVIDIA's driver bindings (cuda-bindings' ``cuda.bindings.driver``, and cuda-python before 12.6
#: as ``cuda.cuda``): the types whose value is a device address, read as the bindings document
#: it, ``int(ptr)``. Their objects are not tracked by the garbage collector: the walk meets them
#: as values of names, lists and attributes.
_BINDING_POINTERS = {
    ("cuda.bindings.driver", "CUdeviceptr"),
    ("cuda.bindings.driver", "CUdeviceptr_v2"),
    ("cuda.cuda", "CUdeviceptr"),
    ("cuda.cuda", "CUdeviceptr_v2"),
}


def _is_binding_pointer(tp: type) -> bool:
    """Whether ``tp`` is one of NVIDIA's bindings' device pointer types (by its module and name
    alone: nothing of the object is read to tell)."""
    try:
        return (type.__getattribute__(tp, "__module__"), type.__getattribute__(tp, "__name__")) in _BINDING_POINTERS
    except Exception:
        return False


def _is_ctypes_number(tp: type) -> bool:
    """Whether ``tp`` is a ctypes scalar type (``c_uint64``, ``c_void_p``, ``c_size_t``…)."""
    try:
        return issubclass(tp, ctypes._SimpleCData)  # type: ignore[attr-defined]
    except Exception:
        return False


class WeakSearch:
    """What a walk looks for besides its target objects: numbers (``int``, or a ctypes integer or
    pointer) whose value lies inside one of some allocations, as LeakSanitizer counts a
    pointer-sized value found in memory. This is how ctypes, cuda-python and home-made bindings
    keep device memory: an object with an integer attribute.

    ``allocations`` are ``(index, first address, bytes)``; ``pending`` the indices still without
    a holder (the walk may stop once none is left); at most ``per_allocation`` matches are kept
    for each, the first found (the shortest paths) first."""

    def __init__(self, allocations: List[Tuple[int, int, int]], per_allocation: int = 4) -> None:
        ordered = sorted(allocations, key=lambda a: a[1])
        self.starts = [a[1] for a in ordered]
        self.ends = [a[1] + a[2] for a in ordered]
        self.indices = [a[0] for a in ordered]
        self.lo = self.starts[0] if ordered else 0
        self.hi = max(self.ends) if ordered else 0
        self.pending = {a[0] for a in ordered}
        self.per_allocation = per_allocation
        # (allocation index, parent's id or None, step, value, kind)
        self.found: List[Tuple[int, Optional[int], str, int, str]] = []
        self._counts: Dict[int, int] = collections.defaultdict(int)
        # type → "ctypes", "cuda-bindings" or "" (no number)
        self._ctypes: Dict[type, str] = {}

    def check(self, obj: Any, parent: Optional[int], step: Optional[str]) -> None:
        tp = type(obj)
        if tp is int:
            value, kind = obj, "int"
        else:
            known = self._ctypes.get(tp)
            if known is None:
                known = self._ctypes[tp] = (
                    "ctypes" if _is_ctypes_number(tp) else "cuda-bindings" if _is_binding_pointer(tp) else ""
                )
            if not known:
                return
            try:
                value = obj.value if known == "ctypes" else int(obj)
            except Exception:
                return
            if type(value) is not int:
                return
            kind = known
        if value < self.lo or value >= self.hi:
            return
        k = bisect.bisect_right(self.starts, value) - 1
        if k < 0 or value >= self.ends[k]:
            return
        index = self.indices[k]
        if self._counts[index] >= self.per_allocation:
            return
        self._counts[index] += 1
        self.pending.discard(index)
        self.found.append((index, parent, step if step is not None else _type_name(tp), value, kind))


class _Walk:
    """A breadth-first walk from the roots, remembering how each object was first reached; with a
    :class:`WeakSearch`, it also looks at the numbers it meets."""

    def __init__(
        self, targets: Dict[int, Any], timeout: float, max_depth: int, weak: Optional[WeakSearch] = None
    ) -> None:
        # id → (parent's id or None, the step, the object: kept alive while the walk runs)
        self.parents: Dict[int, Tuple[Optional[int], Optional[str], Any]] = {}
        self.targets = targets
        self.deadline = time.monotonic() + timeout
        self.max_depth = max_depth
        self.complete = True
        self.weak = weak

    def run(self, roots: List[Tuple[str, Any]]) -> None:
        remaining = set(self.targets)
        weak = self.weak
        queue: "collections.deque[Tuple[Any, int]]" = collections.deque()
        for label, obj in roots:
            if weak is not None:
                weak.check(obj, None, label)
            if _is(obj, _ATOMS) or _is(obj, _OPAQUE):
                continue
            i = id(obj)
            if i in self.parents:
                continue
            self.parents[i] = (None, label, obj)
            remaining.discard(i)
            queue.append((obj, 0))
        steps = 0
        while queue and (remaining or (weak is not None and weak.pending)):
            obj, depth = queue.popleft()
            steps += 1
            if steps % 1024 == 0 and time.monotonic() > self.deadline:
                self.complete = False
                return
            if depth >= self.max_depth:
                self.complete = False
                continue
            try:
                children = list(_children(obj))
            except Exception:
                continue
            parent = id(obj)
            for child, step in children:
                if weak is not None:
                    weak.check(child, parent, step)
                if _is(child, _ATOMS) or _is(child, _OPAQUE):
                    continue
                i = id(child)
                if i in self.parents:
                    continue
                self.parents[i] = (parent, step, child)
                remaining.discard(i)
                queue.append((child, depth + 1))
        if remaining:
            self.complete = False

    def path(self, target: int) -> Optional[List[Tuple[int, Optional[str], Any]]]:
        """The nodes from a root to ``target``: (id, step, object), root first."""
        if target not in self.parents:
            return None
        out = []
        i: Optional[int] = target
        while i is not None:
            parent, step, obj = self.parents[i]
            out.append((i, step, obj))
            i = parent
        out.reverse()
        return out


class Holders(list):
    """What :func:`holders` found: a list of dicts, largest allocation first; printing it gives a
    summary (:func:`format_holders`). ``complete`` is False when the walk stopped at its time or depth
    bound before reaching every holder."""

    complete: bool = True
    elapsed_s: float = 0.0

    def __str__(self) -> str:
        return format_holders(self)


def holders(
    min_bytes: int = 0, *, timeout: float = DEFAULT_TIMEOUT, max_depth: int = DEFAULT_MAX_DEPTH
) -> Holders:
    """For each live allocation of at least ``min_bytes``, the Python objects that hold it and a path
    of references from a name the user knows to each. Returns a :class:`Holders` list of dicts::

        {"path": ["df", "['a']", ".data", "rmm.DeviceBuffer (8.0 MiB, made at etl.py:31 ← etl.py:52)"],
         "size": 8388608,            # the allocation's bytes
         "holder": "rmm.DeviceBuffer",
         "made_at": "etl.py:31 ← etl.py:52",   # the site ← its caller (see _call_path)
         "address": 139..., "device": 0, "api": "cuMemAlloc_v2", "owner": "program",
         "site": {"file": ..., "line": 31, "function": ..., "module": None,
                  "callers": [{"file": ..., "line": 52, "function": ..., "module": None}, ...]},
         "holder_kind": "rmm", "holder_address": 139..., "holder_bytes": 8388608}

    ``path`` is None when no name reaches the holder within the bounds; an allocation no Python
    object was found to hold has ``holder`` None. Raises :class:`cuguard.NotActive` outside the
    shim."""
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
        raise ValueError(f"cuguard.holders: min_bytes must be a count of bytes, not {min_bytes!r}")
    started = time.monotonic()
    allocations = _abi.live_allocations(min_bytes)
    found = _find_holders(allocations)
    targets = {id(h.obj): h.obj for h in found}
    targets = _reachable_targets(targets, [found, targets])
    walk = _Walk(targets, max(0.0, float(timeout)), max(1, int(max_depth)))
    try:
        if targets:
            walk.run(_roots())
        paths = {id(h.obj): walk.path(id(h.obj)) for h in found}
    finally:
        walk.parents = {}
    by_allocation: Dict[int, List[_Holder]] = collections.defaultdict(list)
    for h in found:
        by_allocation[h.allocation].append(h)

    result = Holders()
    result.complete = walk.complete
    for index, a in enumerate(allocations):
        size = int(a["size"])
        made_at = _site_text(a.get("site"))
        base = {
            "path": None,
            "size": size,
            "holder": None,
            "made_at": made_at,
            "address": int(a["address"]),
            "device": a.get("device"),
            "api": a.get("api"),
            "owner": a.get("owner"),
            "site": a.get("site"),
        }
        held = by_allocation.get(index, [])
        # Keep the deepest holder of each path: drop one that lies on another's path.
        on_paths = set()
        for h in held:
            p = paths.get(id(h.obj))
            if p:
                on_paths.update(i for i, _, _ in p[:-1])
        kept = [h for h in held if id(h.obj) not in on_paths]
        if not kept:
            result.append(base)
            continue
        kept.sort(key=lambda h: len(paths.get(id(h.obj)) or ()) or 1 << 30)
        for h in kept:
            name = _type_name(type(h.obj))
            if h.nbytes >= size:
                what = f"{name} ({human_bytes(size)}, made at {made_at})"
            else:
                what = f"{name} ({human_bytes(h.nbytes)} of a {human_bytes(size)} allocation made at {made_at})"
            entry = dict(base)
            entry["holder"] = name
            entry["holder_kind"] = h.kind
            entry["holder_address"] = h.start
            entry["holder_bytes"] = h.nbytes
            p = paths.get(id(h.obj))
            if p:
                steps = [p[0][1] or "?"]
                for _, step, obj in p[1:]:
                    steps.append(step if step is not None else _type_name(type(obj)))
                steps.append(what)
                entry["path"] = steps
            else:
                entry["path"] = None
                entry["unreached"] = what
            result.append(entry)
    result.elapsed_s = time.monotonic() - started
    return result


def format_holders(found: List[Dict[str, Any]], top: Optional[int] = None) -> str:
    """A summary of :func:`holders`' answer, one line per holder, largest first."""
    rows = list(found)
    allocations = {r.get("address") for r in rows}
    total = sum(int(r.get("size") or 0) for r in {r.get("address"): r for r in rows}.values())
    named = sum(1 for r in rows if r.get("path"))
    lines = [
        f"cuguard holders: {len(allocations)} live allocation{'s' if len(allocations) != 1 else ''} "
        f"({human_bytes(total)}); {named} reached from a name"
    ]
    if getattr(found, "complete", True) is False:
        lines[0] += " (the walk stopped at its time or depth bound: some paths may be missing)"
    for r in rows[:top] if top else rows:
        size = human_bytes(int(r.get("size") or 0)).rjust(10)
        if r.get("path"):
            lines.append(f"{size}  " + " → ".join(str(s) for s in r["path"]))
        elif r.get("holder"):
            lines.append(f"{size}  {r.get('unreached')}: no name reaches it")
        else:
            lines.append(
                f"{size}  no Python object found holding it ({r.get('api')}, made at {r.get('made_at')}, "
                f"owner {r.get('owner')})"
            )
    return "\n".join(lines)
