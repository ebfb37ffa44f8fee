/* history_fork: a parent and a forked child, each with its own allocations, for "the child's
 * history is its own". The parent makes 1 MiB, forks, and after the child ends makes 3 MiB;
 * the child makes and frees 2 MiB, then exits. Both keep what they made to the end (the 1 MiB
 * is the parent's: the child inherits the pointer, not the tracking). Prints the child's pid. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cusim.h"

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr a, b, c;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    if (cuMemAlloc(&a, 1 << 20) != CUDA_SUCCESS) return 1;
    usleep(100 * 1000);
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        if (cuMemAlloc(&b, 2 << 20) != CUDA_SUCCESS) exit(2);
        usleep(100 * 1000);
        if (cuMemFree(b) != CUDA_SUCCESS) exit(3);
        exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
    if (cuMemAlloc(&c, 3 << 20) != CUDA_SUCCESS) return 1;
    printf("{\"child\": %d}\n", (int)child);
    return 0;
}
