"""The binding to the shim's in-process C ABI, through ctypes.

The shim (``libcuguard.so``) is loaded into the process by ``LD_PRELOAD`` (``cuguard run -- python
...``); ``ctypes.CDLL(None)`` sees its exported ``cuguard_*`` functions. Nothing here parses the
shim's memory: every answer comes from a call of the ABI, documented in ``docs/python.md`` ("The C
ABI") and ``shim/src/api/mod.rs``.

The package and the shim must be the same version: :func:`lib` refuses a shim of another version
(or another ABI) with :class:`VersionMismatch`, which names both.
"""

import ctypes
import errno as _errno
import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

#: This package's version; the shim's ``cuguard_version()`` must say the same.
VERSION = "0.1.0"
#: The C ABI this package speaks; the shim's ``cuguard_api_version()`` must say the same.
ABI_VERSION = 1

#: How to run a program under the shim, for messages.
HOW_TO_RUN = (
    "run the program under the shim: `cuguard run -- python ...` "
    "(add `--driver sim` to use the simulated driver, without a GPU)"
)


class CuguardError(RuntimeError):
    """A cuguard call could not be answered."""


class NotActive(CuguardError):
    """cuguard is not tracking this process: the shim is not loaded, is turned off, has turned itself
    off after an internal error, or the process is ending."""


class VersionMismatch(CuguardError):
    """The shim loaded in this process and this Python package are of different versions."""


OK = 0
E_INVALID = -1
E_OFF = -2
E_BROKEN = -3
E_ENDING = -4
E_FORKED = -5
E_FULL = -6
E_INTERNAL = -7
E_IO = -8
E_REENTERED = -9
E_NO_HISTORY = -10
E_NOT_FOUND = -11


class DeviceLive(ctypes.Structure):
    """``struct cuguard_device_live`` (48 bytes)."""

    _fields_ = [
        ("device", ctypes.c_int32),
        ("reserved", ctypes.c_uint32),
        ("live_bytes", ctypes.c_uint64),
        ("peak_bytes", ctypes.c_uint64),
        ("pool_reserved_bytes", ctypes.c_uint64),
        ("live_allocations", ctypes.c_uint64),
        ("allocated_bytes", ctypes.c_uint64),
    ]


_lock = threading.Lock()
# (the library or None, why not); computed once per process (the answer survives a fork).
_loaded: Optional[Tuple[Optional[ctypes.CDLL], Optional[CuguardError]]] = None


def _bind(dll: ctypes.CDLL) -> ctypes.CDLL:
    """Gives the ABI's functions their C signatures."""
    c_char_pp = ctypes.POINTER(ctypes.c_void_p)
    sigs = {
        "cuguard_api_version": ([], ctypes.c_uint32),
        "cuguard_version": ([], ctypes.c_char_p),
        "cuguard_status": ([], ctypes.c_int32),
        "cuguard_error_name": ([ctypes.c_int32], ctypes.c_char_p),
        "cuguard_live": (
            [ctypes.POINTER(DeviceLive), ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32)],
            ctypes.c_int32,
        ),
        "cuguard_snapshot": ([ctypes.c_char_p, c_char_pp], ctypes.c_int32),
        "cuguard_track_begin": ([ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int32),
        "cuguard_track_end": ([ctypes.c_uint64, c_char_pp], ctypes.c_int32),
        "cuguard_live_allocations": ([ctypes.c_uint64, c_char_pp], ctypes.c_int32),
        "cuguard_label": ([ctypes.c_char_p, ctypes.c_char_p], ctypes.c_int32),
        "cuguard_end_expect": ([], ctypes.c_int32),
        "cuguard_end_begin": ([ctypes.c_char_p, ctypes.c_char_p, c_char_pp], ctypes.c_int32),
        "cuguard_end_classify": ([ctypes.c_char_p], ctypes.c_int32),
        "cuguard_origin_begin": ([ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int32),
        "cuguard_origin_end": ([ctypes.c_uint64], ctypes.c_int32),
        "cuguard_file_alias": ([ctypes.c_char_p, ctypes.c_char_p], ctypes.c_int32),
        "cuguard_phase_begin": ([ctypes.c_char_p], ctypes.c_int32),
        "cuguard_phase_end": ([], ctypes.c_int32),
        "cuguard_tag_push": ([ctypes.c_char_p], ctypes.c_int32),
        "cuguard_tag_pop": ([], ctypes.c_int32),
        "cuguard_annotate": ([ctypes.c_uint64, ctypes.c_char_p], ctypes.c_int32),
        "cuguard_framework_oom": ([ctypes.c_char_p], ctypes.c_int32),
        "cuguard_framework_watch": ([ctypes.c_char_p], ctypes.c_int32),
        "cuguard_cache_blocks": ([ctypes.c_char_p], ctypes.c_int32),
        "cuguard_cache_block_frames": ([ctypes.c_char_p, c_char_pp], ctypes.c_int32),
        "cuguard_free": ([ctypes.c_void_p], None),
    }
    for name, (args, res) in sigs.items():
        f = getattr(dll, name)
        f.argtypes = args
        f.restype = res
    return dll


def _load() -> Tuple[Optional[ctypes.CDLL], Optional[CuguardError]]:
    try:
        dll = ctypes.CDLL(None, use_errno=True)
    except OSError as e:  # no dynamic loader to ask: not under the shim either
        return None, NotActive(f"cuguard is not active in this process ({e}); {HOW_TO_RUN}")
    try:
        dll.cuguard_api_version
    except AttributeError:
        return None, NotActive(
            "cuguard is not active in this process: the shim (libcuguard.so) is not loaded; " + HOW_TO_RUN
        )
    try:
        dll = _bind(dll)
    except AttributeError as e:
        return None, VersionMismatch(
            f"the shim loaded in this process lacks a function this cuguard package {VERSION} needs ({e}); "
            "install the package and the shim of one version"
        )
    abi = int(dll.cuguard_api_version())
    raw = dll.cuguard_version()
    shim_version = raw.decode("utf-8", "replace") if raw else "unknown"
    if abi != ABI_VERSION or shim_version != VERSION:
        return None, VersionMismatch(
            f"the cuguard shim loaded in this process is version {shim_version} (C ABI {abi}), "
            f"but this cuguard Python package is version {VERSION} (C ABI {ABI_VERSION}): they refuse "
            "to talk. Run the program with the `cuguard` command of this package "
            f"(`cuguard run -- python ...`), or install the package of the shim's version, "
            f"{shim_version}: its wheel (`pip install dist/cuguard-{shim_version}-*manylinux*.whl`, "
            "made by scripts/release-wheel.sh) or its checkout (`pip install .`)"
        )
    return dll, None


def _state() -> Tuple[Optional[ctypes.CDLL], Optional[CuguardError]]:
    global _loaded
    loaded = _loaded
    if loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load()
            loaded = _loaded
    return loaded


def reset() -> None:
    """Forgets what :func:`lib` found (for tests that change :data:`VERSION`)."""
    global _loaded
    with _lock:
        _loaded = None


def lib() -> ctypes.CDLL:
    """The shim's ABI, bound; raises :class:`NotActive` or :class:`VersionMismatch`."""
    dll, error = _state()
    if dll is None:
        assert error is not None
        raise error
    return dll


def inactive_reason() -> Optional[str]:
    """``None`` while the shim tracks this process and speaks this package's version; else why not."""
    try:
        dll = lib()
    except CuguardError as e:
        return str(e)
    code = int(dll.cuguard_status())
    return None if code == OK else _message(dll, code, "status")


def _message(dll: ctypes.CDLL, code: int, what: str) -> str:
    name = dll.cuguard_error_name(code)
    name = name.decode("utf-8", "replace") if name else f"error {code}"
    if code == E_OFF:
        return f"cuguard is not active: the shim is loaded but turned off (CUGUARD_DISABLE=1) [{what}: {name}]"
    if code == E_BROKEN:
        return (
            "cuguard is not active: the shim turned itself off after an internal error "
            f"(its line on stderr says which) [{what}: {name}]"
        )
    if code == E_ENDING:
        return f"cuguard is not active: the process is ending and its final report is being written [{what}: {name}]"
    return f"cuguard {what} failed: {name}"


def check(dll: ctypes.CDLL, code: int, what: str, path: Optional[str] = None) -> None:
    """Raises the exception a non-zero code of the ABI stands for."""
    if code == OK:
        return
    message = _message(dll, code, what)
    if code in (E_OFF, E_BROKEN, E_ENDING):
        raise NotActive(message)
    if code == E_IO:
        err = ctypes.get_errno() or _errno.EIO
        raise OSError(err, f"cuguard {what}: {os.strerror(err)}", path)
    if code == E_INVALID:
        raise ValueError(message)
    raise CuguardError(message)


def take_json(dll: ctypes.CDLL, p: ctypes.c_void_p) -> Any:
    """Reads the JSON string the ABI returned at ``p`` and frees it."""
    if not p.value:
        raise CuguardError("cuguard returned no answer")
    try:
        text = ctypes.string_at(p.value)
    finally:
        dll.cuguard_free(p.value)
    return json.loads(text)


# --- the calls ------------------------------------------------------------------------------------


def status() -> int:
    return int(lib().cuguard_status())


def live() -> List[DeviceLive]:
    dll = lib()
    cap = 16
    while True:
        out = (DeviceLive * cap)()
        count = ctypes.c_uint32(0)
        check(dll, dll.cuguard_live(out, cap, ctypes.byref(count)), "live()")
        if count.value <= cap:
            return list(out[: count.value])
        cap = count.value


def snapshot(path: Optional[str]) -> Dict[str, Any]:
    dll = lib()
    out = ctypes.c_void_p()
    raw = None if path is None else os.fsencode(path)
    check(dll, dll.cuguard_snapshot(raw, ctypes.byref(out)), "snapshot()", path)
    return take_json(dll, out)


def track_begin() -> int:
    dll = lib()
    token = ctypes.c_uint64(0)
    check(dll, dll.cuguard_track_begin(ctypes.byref(token)), "track()")
    return token.value


def track_end(token: int) -> Dict[str, Any]:
    dll = lib()
    out = ctypes.c_void_p()
    check(dll, dll.cuguard_track_end(token, ctypes.byref(out)), "track()")
    return take_json(dll, out)


def live_allocations(min_bytes: int) -> List[Dict[str, Any]]:
    dll = lib()
    out = ctypes.c_void_p()
    check(dll, dll.cuguard_live_allocations(min_bytes, ctypes.byref(out)), "holders()")
    return take_json(dll, out)["allocations"]


def label(key: bytes, value: bytes) -> None:
    dll = lib()
    check(dll, dll.cuguard_label(key, value), "label()")


def end_begin(how: str, exception: Optional[str]) -> Tuple[List[Dict[str, Any]], Optional[float]]:
    """Marks the end of the program's code now; the allocations live then, and when the process
    started by the shim's clock (Unix milliseconds; ``None`` from a shim that does not say)."""
    dll = lib()
    out = ctypes.c_void_p()
    raw = None if exception is None else exception.encode("utf-8", "replace")[:256]
    check(dll, dll.cuguard_end_begin(how.encode(), raw, ctypes.byref(out)), "end")
    listed = take_json(dll, out)
    now_ms = listed.get("now_ms")
    start = None if now_ms is None else time.time() * 1000 - float(now_ms)
    return listed["allocations"], start


def end_classify(classification: Dict[str, Any]) -> None:
    """Sends what holds each allocation live at the end."""
    dll = lib()
    check(dll, dll.cuguard_end_classify(json.dumps(classification).encode()), "end")
def framework_oom(card: Dict[str, Any]) -> None:
    """Tells the shim a framework's allocator refused a request (``cuguard_framework_oom``)."""
    dll = lib()
    check(dll, dll.cuguard_framework_oom(json.dumps(card).encode()), "framework out of memory")


def framework_watch(framework: str) -> None:
    """Tells the shim a framework's out-of-memory observer is registered
    (``cuguard_framework_watch``)."""
    dll = lib()
    check(dll, dll.cuguard_framework_watch(framework.encode()), "framework watch")


def cache_blocks(framework: str) -> bool:
    """Whether the shim records ``framework``'s (``pytorch``) cache blocks with their stacks
    (``cuguard_cache_blocks``)."""
    dll = lib()
    return dll.cuguard_cache_blocks(framework.encode()) == 0


def cache_block_frames(addresses: List[int]) -> List[Optional[List[Dict[str, Any]]]]:
    """The Python frames (innermost first: ``file``, ``line``, ``function``) of the stack that
    made the live cache block cuguard recorded at each address, in order; ``None`` where it
    recorded none (``cuguard_cache_block_frames``). Blocks of one stack share one list: each
    distinct stack is asked once (``shared``)."""
    dll = lib()
    out = ctypes.c_void_p()
    doc = json.dumps({"addresses": [int(a) for a in addresses], "shared": True}).encode()
    check(dll, dll.cuguard_cache_block_frames(doc, ctypes.byref(out)), "cache block frames")
    answer = take_json(dll, out)
    if "of" not in answer:  # a shim that answers each block (none recorded, or an older one)
        return answer.get("frames") or [None] * len(addresses)
    stacks = answer.get("stacks") or []
    return [stacks[i] if i is not None else None for i in answer["of"]]


def file_alias(file: str, display: str) -> None:
    """Names source file ``file`` ``display`` in the reports written from now on."""
    dll = lib()
    check(dll, dll.cuguard_file_alias(os.fsencode(file), display.encode("utf-8")), "file alias")


def phase_dll() -> Optional[ctypes.CDLL]:
    """The shim's ABI where phases can be recorded (the shim tracks, speaks this package's
    version); ``None`` where they cannot. Never raises."""
    dll, _error = _state()
    return dll
