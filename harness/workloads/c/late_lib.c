/* late_lib: a shared library that a program loads after CUDA started (ctypes.CDLL, dlopen), built
 * without frame pointers (-O1), whose allocation goes through a chain of functions: what the
 * shim must unwind through from its first allocation on (tests/it/stack.rs).
 *
 *     int late_entry(CUdeviceptr *out, size_t bytes);   // cuMemAlloc through late_3 … late_0
 *
 * Each late_K is its own frame: not inlined, and not a tail call (the result is used after the
 * call returns). Build: cc -O1 -g -shared -fPIC late_lib.c -lcuda. */
#include "cusim.h"

volatile int late_sink;

__attribute__((noinline)) int late_0(CUdeviceptr *out, size_t bytes) {
    int r = cuMemAlloc(out, bytes);
    late_sink += r;
    return r;
}

__attribute__((noinline)) int late_1(CUdeviceptr *out, size_t bytes) {
    int r = late_0(out, bytes + 0);
    late_sink += 1;
    return r;
}

__attribute__((noinline)) int late_2(CUdeviceptr *out, size_t bytes) {
    int r = late_1(out, bytes);
    late_sink += 2;
    return r;
}

__attribute__((noinline)) int late_3(CUdeviceptr *out, size_t bytes) {
    int r = late_2(out, bytes);
    late_sink += 3;
    return r;
}

int late_entry(CUdeviceptr *out, size_t bytes) {
    int r = late_3(out, bytes);
    late_sink += 5;
    return r;
}
