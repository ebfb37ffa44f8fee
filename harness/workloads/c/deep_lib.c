/* deep_lib: a library of the user's own that allocates 11 calls deep, built as users build
 * theirs (-O1, no frame pointers) and loaded with ctypes after CUDA started
 * (harness/workloads/python/deep_lib.py): its sites' one-line stacks must still reach the Python
 * line that called it (tests/it/stack.rs).
 *
 *     int deep_10(CUdeviceptr *out, size_t bytes);   // cuMemAlloc through deep_9 … deep_0
 *
 * Each deep_K is its own frame: not inlined, and not a tail call (the result is used after the
 * call returns). Build: cc -O1 -fomit-frame-pointer -g -shared -fPIC deep_lib.c -lcuda. */
#include "cusim.h"

volatile int deep_sink;

__attribute__((noinline)) int deep_0(CUdeviceptr *out, size_t bytes) {
    int r = cuMemAlloc(out, bytes);
    deep_sink += r;
    return r;
}

#define DEEP(K, NEXT)                                                  \
    __attribute__((noinline)) int deep_##K(CUdeviceptr *out, size_t bytes) { \
        int r = deep_##NEXT(out, bytes);                               \
        deep_sink += K;                                                \
        return r;                                                      \
    }

DEEP(1, 0)
DEEP(2, 1)
DEEP(3, 2)
DEEP(4, 3)
DEEP(5, 4)
DEEP(6, 5)
DEEP(7, 6)
DEEP(8, 7)
DEEP(9, 8)
DEEP(10, 9)
