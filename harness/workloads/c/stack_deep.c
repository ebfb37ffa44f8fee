/* stack_deep: allocations from deep native recursion, for measuring what stack capture costs in
 * deep stacks (the report's `cost`).
 *
 *     stack_deep [DEPTH] [PAIRS] [LEAKS]
 *
 * Recurses DEPTH frames deep (default 60), then makes PAIRS cuMemAlloc/cuMemFree pairs of 256
 * bytes (default 1,000) and leaves LEAKS blocks allocated (default 3). Prints
 * `allocations N` (pairs plus leaks), or exits 1 if any call failed. */
#include <stdio.h>
#include <stdlib.h>

#include "cusim.h"

static int failures;

static __attribute__((noinline)) void allocate(int pairs, int leaks) {
    for (int i = 0; i < pairs; i++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 256) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) failures++;
    }
    for (int i = 0; i < leaks; i++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 256) != CUDA_SUCCESS) failures++;
    }
}

/* Not a tail call: the volatile result is used after the recursive call returns. */
static __attribute__((noinline)) int recurse(int depth, int pairs, int leaks) {
    volatile int here = depth;
    if (depth <= 1)
        allocate(pairs, leaks);
    else
        here += recurse(depth - 1, pairs, leaks);
    return here;
}

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 60;
    int pairs = argc > 2 ? atoi(argv[2]) : 1000;
    int leaks = argc > 3 ? atoi(argv[3]) : 3;
    if (cuInit(0) != CUDA_SUCCESS) return 1;
    CUdevice dev;
    CUcontext ctx;
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    recurse(depth, pairs, leaks);
    printf("allocations %d\n", pairs + leaks);
    return failures != 0;
}
