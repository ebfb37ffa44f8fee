"""A stand-in for CuPy 14's memory pool (cupy/cuda/memory.pyx) as its out-of-memory path shows
it, over the CUDA driver through ``runtime`` (ctypes; the simulated driver in tests).

What it keeps of CuPy's ``SingleDeviceMemoryPool``: a request is rounded up to 512 bytes; the
free chunks of the current stream's arena (``_arena(stream)``: bins by ``(size - 1) // 512``,
a set of ``_Chunk`` per bin, ``None`` once emptied) are searched from the request's bin up, so
the smallest free chunk that holds it is taken, and split, the remainder back in the free list.
Else ``_try_malloc``: refused at once, without giving anything back, when the pool's limit
(``set_limit``, or ``CUPY_GPU_MEMORY_LIMIT``: bytes or ``N%`` of the device) would be exceeded;
else the device is asked; when it refuses, every free chunk that is not split is given back
(``free_all_blocks``) and it is asked again, then after ``gc.collect()`` once more; then
``OutOfMemoryError(size, allocated so far, limit)``, raised through the module global. A freed
chunk merges with its free neighbours of the same allocation. Memory hooks are called as CuPy
calls them (memory_hook.py). Only device 0 and stream 0 (the legacy default stream) exist here;
no managed, async or pinned memory.
"""

import atexit
import bisect
import collections
import gc
import os
import threading
import weakref

from cupy.cuda import memory_hook, runtime

ALLOCATION_UNIT_SIZE = 512
_allocation_unit_size = ALLOCATION_UNIT_SIZE


class OutOfMemoryError(MemoryError):
    """Out-of-memory error: size about to be allocated, size allocated so far, the limit."""

    def __init__(self, size, total, limit=0):
        self._size = size
        self._total = total
        self._limit = limit
        if limit == 0:
            msg = "Out of memory allocating {:,} bytes".format(size)
            if total != -1:
                msg += " (allocated so far: {:,} bytes).".format(total)
        else:
            msg = (
                "Out of memory allocating {:,} bytes "
                "(allocated so far: {:,} bytes, "
                "limit set to: {:,} bytes).".format(size, total, limit))
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self._size, self._total, self._limit))


_exit_mode = False


@atexit.register
def _exit():
    global _exit_mode
    _exit_mode = True


class Memory:
    """One allocation from the device (``cuMemAlloc_v2``), given back when dropped."""

    def __init__(self, size):
        self.size = size
        self.device_id = runtime.getDevice()
        self.ptr = runtime.malloc(size) if size > 0 else 0

    def __int__(self):
        return self.ptr

    def _free(self):
        ptr, self.ptr = self.ptr, 0
        if ptr:
            runtime.free(ptr)

    def __del__(self):
        try:
            self._free()
        except Exception:
            pass


class MemoryPointer:
    """A pointer into a memory buffer: ``ptr`` (address) and ``mem`` (the buffer)."""

    def __init__(self, mem, offset):
        self.ptr = mem.ptr + offset
        self.device_id = mem.device_id
        self.mem = mem

    def __int__(self):
        return self.ptr

    def __repr__(self):
        return "<MemoryPointer 0x{:x} device={} mem={!r}>".format(self.ptr, self.device_id, self.mem)


class PooledMemory:
    """A chunk handed out by a pool; returned to the pool by ``free()`` or when dropped."""

    def __init__(self, chunk, pool):
        self.ptr = chunk.ptr()
        self.size = chunk.size
        self.device_id = chunk.mem.device_id
        self.pool = pool  # a weak reference

    def free(self):
        ptr = self.ptr
        if ptr == 0:
            return
        self.ptr = 0
        pool = self.pool()
        if pool is None:
            return
        kw = dict(device_id=self.device_id, mem_size=self.size, mem_ptr=ptr, pmem_id=id(self))
        memory_hook._call("free_preprocess", **kw)
        try:
            pool.free(ptr, self.size)
        finally:
            memory_hook._call("free_postprocess", **kw)

    def __del__(self):
        if _exit_mode:
            return
        self.free()


def _malloc(size):
    """The allocator without a pool: one device allocation per request."""
    return MemoryPointer(Memory(size), 0)


def _round_size(size):
    return (size + ALLOCATION_UNIT_SIZE - 1) // ALLOCATION_UNIT_SIZE * ALLOCATION_UNIT_SIZE


def _bin_index_from_size(size):
    return (size - 1) // ALLOCATION_UNIT_SIZE


class _Chunk:
    """A piece of a device allocation ``mem`` at ``offset``; ``prev``/``next`` link the pieces
    of a split allocation in address order (both ``None``: not split)."""

    __slots__ = ("mem", "offset", "size", "stream_ident", "prev", "next")

    def __init__(self, mem, offset, size, stream_ident):
        self.mem, self.offset, self.size, self.stream_ident = mem, offset, size, stream_ident
        self.prev = self.next = None

    @property
    def stream_ptr(self):
        return self.stream_ident

    def ptr(self):
        return self.mem.ptr + self.offset

    def split(self, size):
        if self.size == size:
            return None
        remaining = _Chunk(self.mem, self.offset + size, self.size - size, self.stream_ident)
        self.size = size
        if self.next is not None:
            remaining.next = self.next
            remaining.next.prev = remaining
        self.next = remaining
        remaining.prev = self
        return remaining

    def merge(self, remaining):
        self.size += remaining.size
        self.next = remaining.next
        if remaining.next is not None:
            self.next.prev = self


class _Arena:
    """A stream's free chunks: ``_index`` the sorted bin numbers, ``_free`` a set of chunks per
    bin (``None`` once emptied). Iterating it gives the sets, as ``_free``."""

    def __init__(self):
        self._free = []
        self._index = []

    def __iter__(self):
        return iter(self._free)

    def __len__(self):
        return len(self._free)

    def append_to_free_list(self, chunk):
        b = _bin_index_from_size(chunk.size)
        i = bisect.bisect_left(self._index, b)
        if i < len(self._index) and self._index[i] == b:
            if self._free[i] is None:
                self._free[i] = set()
        else:
            self._index.insert(i, b)
            self._free.insert(i, set())
        self._free[i].add(chunk)

    def remove_from_free_list(self, chunk):
        b = _bin_index_from_size(chunk.size)
        i = bisect.bisect_left(self._index, b)
        if i == len(self._index) or self._index[i] != b or not self._free[i]:
            return False
        if chunk in self._free[i]:
            self._free[i].remove(chunk)
            if not self._free[i]:
                self._free[i] = None
            return True
        return False


class _LockAndNoGc:
    """The lock held and the garbage collector off (a collection inside would free arrays,
    re-entering the pool), as CuPy's ``LockAndNoGc``."""

    def __init__(self, lock):
        self._lock = lock

    def __enter__(self):
        self._lock.acquire()
        self._gc = gc.isenabled()
        if self._gc:
            gc.disable()

    def __exit__(self, *_):
        if self._gc:
            gc.enable()
        self._lock.release()


def _parse_limit_string(limit=None):
    if limit is None:
        limit = os.environ.get("CUPY_GPU_MEMORY_LIMIT")
    size = fraction = None
    if limit is not None:
        if limit.endswith("%"):
            fraction = float(limit[:-1]) / 100.0
        else:
            size = int(limit)
    return {"size": size, "fraction": fraction}


class SingleDeviceMemoryPool:
    """Memory pool of one device: best fit among the cached chunks, split when larger; else
    cudaMalloc; when that fails, the non-split free chunks given back and cudaMalloc again."""

    def __init__(self, allocator=None):
        self._allocator = allocator if allocator is not None else _malloc
        self._in_use = {}  # address -> _Chunk handed out
        self._arenas = {}  # stream -> _Arena
        self._total_bytes = 0
        self._total_bytes_limit = 0
        self._weakref = weakref.ref(self)
        self._device_id = runtime.getDevice()
        self._free_lock = threading.RLock()
        self._in_use_lock = threading.RLock()
        self._total_bytes_lock = threading.RLock()
        self.set_limit(**_parse_limit_string())

    def _arena(self, stream_ident):
        ret = self._arenas.get(stream_ident)
        if ret is None:
            self._arenas[stream_ident] = ret = _Arena()
        return ret

    def _alloc(self, rounded_size):
        memory_hook._call("alloc_preprocess", device_id=self._device_id, mem_size=rounded_size)
        memptr = None
        try:
            memptr = self._allocator(rounded_size)
        finally:
            memory_hook._call("alloc_postprocess", device_id=self._device_id, mem_size=rounded_size,
                              mem_ptr=memptr.ptr if memptr is not None else 0)
        return memptr

    def malloc(self, size):
        rounded_size = _round_size(size)
        memory_hook._call("malloc_preprocess", device_id=self._device_id, size=size, mem_size=rounded_size)
        memptr = None
        try:
            memptr = self._malloc(rounded_size)
        finally:
            memory_hook._call("malloc_postprocess", device_id=self._device_id, size=size,
                              mem_size=rounded_size,
                              mem_ptr=memptr.ptr if memptr is not None else 0,
                              pmem_id=id(memptr.mem) if memptr is not None else 0)
        return memptr

    def _malloc(self, size):
        if size == 0:
            return MemoryPointer(Memory(0), 0)
        stream_ident = 0  # the current stream: always the legacy default stream here
        with _LockAndNoGc(self._free_lock):
            chunk = self._get_chunk(size, stream_ident)
        if chunk is None:
            mem = self._try_malloc(size)
            chunk = _Chunk(mem, 0, size, stream_ident)
        with self._in_use_lock:
            self._in_use[chunk.ptr()] = chunk
        return MemoryPointer(PooledMemory(chunk, self._weakref), 0)

    def free(self, ptr, size):
        with self._in_use_lock:
            chunk = self._in_use.pop(ptr, None)
        if chunk is None:
            raise RuntimeError("Cannot free out-of-pool memory")
        with _LockAndNoGc(self._free_lock):
            arena = self._arena(chunk.stream_ident)
            c = chunk.next
            if c is not None and arena.remove_from_free_list(c):
                chunk.merge(c)
            c = chunk.prev
            if c is not None and arena.remove_from_free_list(c):
                c.merge(chunk)
                chunk = c
            arena.append_to_free_list(chunk)

    def free_all_blocks(self, stream=None):
        """Gives back every free chunk that is not split."""
        with _LockAndNoGc(self._free_lock):
            if stream is None:
                for stream_ident in list(self._arenas):
                    self._compact_index(stream_ident, True)
            else:
                self._compact_index(stream.ptr, True)

    def n_free_blocks(self):
        with self._free_lock:
            return sum(len(s) for a in self._arenas.values() for s in a._free if s is not None)

    def used_bytes(self):
        with self._in_use_lock:
            return sum(c.size for c in self._in_use.values())

    def free_bytes(self):
        with self._free_lock:
            return sum(c.size for a in self._arenas.values() for s in a._free if s for c in s)

    def total_bytes(self):
        with self._total_bytes_lock:
            return self._total_bytes

    def set_limit(self, size=None, fraction=None):
        if size is None:
            if fraction is None:
                size = 0
            else:
                if not 0 <= fraction <= 1:
                    raise ValueError("memory limit fraction out of range: {}".format(fraction))
                _, total = runtime.memGetInfo()
                size = fraction * total
            self.set_limit(size=size)
            return
        if fraction is not None:
            raise ValueError("size and fraction cannot be specified at one time")
        if size < 0:
            raise ValueError("memory limit size out of range: {}".format(size))
        with self._total_bytes_lock:
            self._total_bytes_limit = int(size)

    def get_limit(self):
        with self._total_bytes_lock:
            return self._total_bytes_limit

    def _compact_index(self, stream_ident, free):
        """Drops the arena's empty bins; with ``free``, gives back its non-split chunks."""
        arena = self._arenas.get(stream_ident)
        if arena is None:
            return
        new_index, new_free, size_to_free = [], [], 0
        for b, free_list in zip(arena._index, arena._free):
            if not free_list:
                continue
            if free:
                keep = set()
                for chunk in free_list:
                    if chunk.prev is not None or chunk.next is not None:
                        keep.add(chunk)
                    else:
                        size_to_free += chunk.size
                        chunk.mem._free()
                if not keep:
                    continue
                free_list = keep
            new_index.append(b)
            new_free.append(free_list)
        if free and not new_free:
            del self._arenas[stream_ident]
        else:
            arena._index, arena._free = new_index, new_free
        if size_to_free > 0:
            with self._total_bytes_lock:
                self._total_bytes -= size_to_free

    def _get_chunk(self, size, stream_ident):
        a = self._arena(stream_ident)
        start = bisect.bisect_left(a._index, _bin_index_from_size(size))
        for i in range(start, len(a._index)):
            free_list = a._free[i]
            if not free_list:
                continue
            chunk = free_list.pop()
            if not free_list:
                a._free[i] = None
            remaining = chunk.split(size)
            if remaining is not None:
                a.append_to_free_list(remaining)
            return chunk
        return None

    def _try_malloc(self, size):
        with _LockAndNoGc(self._total_bytes_lock):
            limit = self._total_bytes_limit
            total = self._total_bytes + size
            if limit != 0 and limit < total:
                raise OutOfMemoryError(size, total - size, limit)
            self._total_bytes = total
        mem = None
        oom_error = False
        try:
            mem = self._alloc(size).mem
        except runtime.CUDARuntimeError as e:
            if e.status != runtime.errorMemoryAllocation:
                raise
            self.free_all_blocks()
            try:
                mem = self._alloc(size).mem
            except runtime.CUDARuntimeError as e:
                if e.status != runtime.errorMemoryAllocation:
                    raise
                gc.collect()
                self.free_all_blocks()
                try:
                    mem = self._alloc(size).mem
                except runtime.CUDARuntimeError as e:
                    if e.status != runtime.errorMemoryAllocation:
                        raise
                    oom_error = True
        finally:
            if mem is None:
                with _LockAndNoGc(self._total_bytes_lock):
                    self._total_bytes -= size
                if oom_error:
                    raise OutOfMemoryError(size, total - size, limit)
        return mem


class MemoryPool:
    """Memory pool for all devices: one ``SingleDeviceMemoryPool`` per device in ``_pools``."""

    def __init__(self, allocator=None):
        if allocator is None:
            allocator = _malloc
        self._pools = collections.defaultdict(lambda: SingleDeviceMemoryPool(allocator))

    def malloc(self, size):
        return self._pools[runtime.getDevice()].malloc(size)

    def free_all_blocks(self, stream=None):
        self._pools[runtime.getDevice()].free_all_blocks(stream=stream)

    def n_free_blocks(self):
        return self._pools[runtime.getDevice()].n_free_blocks()

    def used_bytes(self):
        return self._pools[runtime.getDevice()].used_bytes()

    def free_bytes(self):
        return self._pools[runtime.getDevice()].free_bytes()

    def total_bytes(self):
        return self._pools[runtime.getDevice()].total_bytes()

    def set_limit(self, size=None, fraction=None):
        self._pools[runtime.getDevice()].set_limit(size, fraction)

    def get_limit(self):
        return self._pools[runtime.getDevice()].get_limit()


_current_allocator = _malloc


def set_allocator(allocator=None):
    """The allocator every array takes its memory from (``None``: no pool)."""
    global _current_allocator
    _current_allocator = allocator if allocator is not None else _malloc


def get_allocator():
    return _current_allocator


def alloc(size):
    return get_allocator()(size)
