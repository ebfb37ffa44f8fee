"""A stand-in for CuPy's memory hooks (cupy/cuda/memory_hook.pyx), as CuPy keeps them: hooks
are per thread, in an ordered dict by ``name``; ``with hook:`` (``__enter__``/``__exit__``)
adds and removes one for this thread (a second hook of the same name is a ``KeyError``). The
pool calls ``malloc_preprocess``/``malloc_postprocess`` around each pool allocation (the latter
also when it failed, with ``mem_ptr=0, pmem_id=0``), ``alloc_preprocess``/``alloc_postprocess``
around each allocation from the device, and ``free_preprocess``/``free_postprocess`` around
each block's return to the pool, with CuPy's keyword arguments. Unlike CuPy, an exception a
hook raises is ignored (``_call``), so that a failing hook never breaks the pool.
"""

import collections
import threading

_thread_local = threading.local()


def _has_memory_hooks():
    return bool(getattr(_thread_local, "memory_hooks", None))


def get_memory_hooks():
    ret = getattr(_thread_local, "memory_hooks", None)
    if ret is None:
        ret = _thread_local.memory_hooks = collections.OrderedDict()
    return ret


def _call(method, **kwargs):
    """Each hook of this thread's ``method(**kwargs)``, its exceptions ignored."""
    if not _has_memory_hooks():
        return
    for hook in list(get_memory_hooks().values()):
        try:
            getattr(hook, method)(**kwargs)
        except Exception:
            pass


class MemoryHook:
    """Base class of hooks for memory allocations; every callback does nothing by default."""

    name = "MemoryHook"

    def __enter__(self):
        hooks = get_memory_hooks()
        if self.name in hooks:
            raise KeyError("memory hook %s already exists" % self.name)
        hooks[self.name] = self
        return self

    def __exit__(self, *_):
        del get_memory_hooks()[self.name]

    def alloc_preprocess(self, **kwargs):
        pass

    def alloc_postprocess(self, **kwargs):
        pass

    def malloc_preprocess(self, **kwargs):
        pass

    def malloc_postprocess(self, **kwargs):
        pass

    def free_preprocess(self, **kwargs):
        pass

    def free_postprocess(self, **kwargs):
        pass
