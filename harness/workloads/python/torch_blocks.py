"""torch_blocks.py: tensors of a stand-in for PyTorch's CUDA caching allocator
(harness/workloads/c/c10_cuda_stand_in.cc, which reports its blocks to c10_stand_in.cc's
c10::reportMemoryUsageToProfiler as PyTorch does), loaded through ctypes in a library scope of
its own, as Python loads PyTorch's. For tests/it/torch_blocks.rs.

    python3 torch_blocks.py LIBC10_CUDA LIBC10

Weights (1 MiB) before a step; in the step, activations (3 MiB) kept and a temporary (4 MiB)
freed (or refused, under a limit: printed as 0x0), then a "pause" phase (a moment after the
free); at the end every block but the weights and the activations is freed, and nothing is
given back to the driver. Prints one line each:

    weights 0x<address>
    activations 0x<address>
    temporary 0x<address>
    reserved <bytes in segments>
    calls <calls c10's own function received>
"""

import ctypes
import sys

import cuguard

torch_cuda = ctypes.CDLL(sys.argv[1])
c10 = ctypes.CDLL(sys.argv[2])
torch_cuda.stand_in_alloc.restype = ctypes.c_ulonglong
torch_cuda.stand_in_alloc.argtypes = [ctypes.c_size_t]
torch_cuda.stand_in_free.argtypes = [ctypes.c_ulonglong]
torch_cuda.stand_in_reserved.restype = ctypes.c_ulonglong
c10.c10_stand_in_calls.restype = ctypes.c_long

MiB = 1 << 20


def empty(size):
    """torch.empty: a block of the cache."""
    p = torch_cuda.stand_in_alloc(size)
    if p == 0:
        raise MemoryError(size)
    return p


weights = empty(1 * MiB)  # weights
with cuguard.phase("step"):
    activations = empty(3 * MiB)  # activations
    try:
        temporary = empty(4 * MiB)  # temporary
        torch_cuda.stand_in_free(temporary)
    except MemoryError:
        temporary = 0  # refused (a limit)
with cuguard.phase("pause"):
    pass
print("weights", hex(weights))
print("activations", hex(activations))
print("temporary", hex(temporary))
print("reserved", torch_cuda.stand_in_reserved())
print("calls", c10.c10_stand_in_calls())
