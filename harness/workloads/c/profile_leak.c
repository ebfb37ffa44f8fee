/* profile_leak: a program that leaks a number of device blocks at one line and churns (allocates
 * and frees) at another, for `cuguard export --format pprof`:
 *
 *   profile_leak N    keeps N blocks of 1 MiB made in leak_blocks, and makes and frees 3
 *                     blocks of 2 MiB in churn
 *
 * It prints the lines of the two allocations: `leak <line>` and `churn <line>`. Built by the
 * tests with -g -O0. */
#include <stdio.h>
#include <stdlib.h>

#include "cusim.h"

static int leak_line, churn_line;

static __attribute__((noinline)) void leak_blocks(int n) {
    for (int i = 0; i < n; i++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 1 << 20) == CUDA_SUCCESS) leak_line = __LINE__; else exit(1);
    }
}

static __attribute__((noinline)) void churn(void) {
    for (int i = 0; i < 3; i++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 2 << 20) == CUDA_SUCCESS) churn_line = __LINE__; else exit(1);
        if (cuMemFree(p) != CUDA_SUCCESS) exit(1);
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2;
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    churn();
    leak_blocks(n);
    printf("leak %d\nchurn %d\n", leak_line, churn_line);
    return 0;
}
