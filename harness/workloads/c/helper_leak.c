/* helper_leak: every allocation goes through one helper, alloc(), called from three lines; what
 * the program keeps is the caller's doing, not the helper's (issue 50).
 *
 *   helper_leak         main keeps a 4 MiB buffer (the old leak); load and step free theirs
 *   helper_leak new     the same, and step also forgets its 16 MiB temporary (the new leak)
 *
 * It prints the lines: `alloc <line>` (the helper's call of the driver), `keep <line>`,
 * `load <line>`, `step <line>` (the callers'). Built by the tests with -g -O0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusim.h"

static int alloc_line, keep_line, load_line, step_line;

static __attribute__((noinline)) CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr p;
    alloc_line = __LINE__ + 1;
    if (cuMemAlloc(&p, bytes) != CUDA_SUCCESS) exit(1);
    return p;
}

static __attribute__((noinline)) void load(void) {
    load_line = __LINE__ + 1;
    CUdeviceptr weights = alloc(1 << 20);
    if (cuMemFree(weights) != CUDA_SUCCESS) exit(1);
}

static __attribute__((noinline)) void step(int forget) {
    step_line = __LINE__ + 1;
    CUdeviceptr temporary = alloc(16 << 20);
    if (!forget && cuMemFree(temporary) != CUDA_SUCCESS) exit(1);
}

int main(int argc, char **argv) {
    int forget = argc > 1 && !strcmp(argv[1], "new");
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    keep_line = __LINE__ + 1;
    CUdeviceptr kept = alloc(4 << 20);
    (void)kept;
    load();
    step(forget);
    printf("alloc %d\nkeep %d\nload %d\nstep %d\n", alloc_line, keep_line, load_line, step_line);
    return 0;
}
