/* stack_named: allocations whose sites the test knows by name and line. It keeps one device block
 * from each of:
 *
 *   static    a static function called by main
 *   thread    a thread's start routine
 *   inlined   a function inlined (always_inline) into its caller, via_inline
 *   pool      my_pool_grow, a wrapper the test declares plumbing (CUGUARD_PLUMBING), called
 *             from user_code
 *
 * and prints one line per block: its kind, its address and the source line of the call that
 * made it (for `pool`, also the line in user_code that called my_pool_grow; for `inlined`, the
 * line in via_inline where the inlined function was called):
 *
 *   static 0x<addr> <line>
 *   thread 0x<addr> <line>
 *   inlined 0x<addr> <line> <caller line>
 *   pool 0x<addr> <line> <caller line>
 *
 * Built by the tests with -g -O0 (always_inline inlines even at -O0). */
#include <pthread.h>
#include <stdio.h>

#include "cusim.h"

struct block {
    CUdeviceptr ptr;
    int line;
    int caller_line;
};

static struct block static_block, thread_block, inlined_block, pool_block;

static __attribute__((noinline)) void static_site(void) {
    if (cuMemAlloc(&static_block.ptr, 4096) == CUDA_SUCCESS) static_block.line = __LINE__;
}

static void *thread_start(void *arg) {
    if (cuCtxSetCurrent((CUcontext)arg) != CUDA_SUCCESS) return NULL;
    if (cuMemAlloc(&thread_block.ptr, 8192) == CUDA_SUCCESS) thread_block.line = __LINE__;
    return NULL;
}

static inline __attribute__((always_inline)) void inlined_alloc(void) {
    if (cuMemAlloc(&inlined_block.ptr, 12288) == CUDA_SUCCESS) inlined_block.line = __LINE__;
}

__attribute__((noinline)) void via_inline(void) {
    inlined_alloc(); inlined_block.caller_line = __LINE__;
}

__attribute__((noinline)) CUdeviceptr my_pool_grow(size_t bytes) {
    CUdeviceptr p = 0;
    if (cuMemAlloc(&p, bytes) == CUDA_SUCCESS) pool_block.line = __LINE__;
    return p;
}

__attribute__((noinline)) void user_code(void) {
    pool_block.ptr = my_pool_grow(16384); pool_block.caller_line = __LINE__;
}

int main(void) {
    if (cuInit(0) != CUDA_SUCCESS) return 1;
    CUdevice dev;
    CUcontext ctx;
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    static_site();
    pthread_t t;
    pthread_create(&t, NULL, thread_start, ctx);
    pthread_join(t, NULL);
    via_inline();
    user_code();
    if (!static_block.ptr || !thread_block.ptr || !inlined_block.ptr || !pool_block.ptr) return 1;
    printf("static 0x%llx %d\n", (unsigned long long)static_block.ptr, static_block.line);
    printf("thread 0x%llx %d\n", (unsigned long long)thread_block.ptr, thread_block.line);
    printf("inlined 0x%llx %d %d\n", (unsigned long long)inlined_block.ptr, inlined_block.line,
           inlined_block.caller_line);
    printf("pool 0x%llx %d %d\n", (unsigned long long)pool_block.ptr, pool_block.line, pool_block.caller_line);
    return 0;
}
