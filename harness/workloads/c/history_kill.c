/* history_kill: a program killed while it churns (issue 51). Four threads make 4 KiB
 * cuMemAlloc + cuMemFree pairs without pause; the main thread keeps one 1 MiB block every
 * 10 ms and prints, for each, `kept N BEFORE AFTER`: how many it holds and the Unix time in ns
 * (CLOCK_REALTIME) just before and just after the call, flushed at once. It runs until it is
 * killed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cusim.h"

static CUcontext ctx;

static unsigned long long unix_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void *churn(void *arg) {
    (void)arg;
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) exit(2);
    for (;;) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 4096) != CUDA_SUCCESS || cuMemFree(p) != CUDA_SUCCESS) exit(3);
    }
    return NULL;
}

int main(void) {
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 1;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, churn, NULL)) return 5;
    struct timespec pause = {0, 10 * 1000 * 1000};
    for (int n = 1;; n++) {
        CUdeviceptr p;
        unsigned long long before = unix_ns();
        if (cuMemAlloc(&p, 1 << 20) != CUDA_SUCCESS) return 4;
        unsigned long long after = unix_ns();
        printf("kept %d %llu %llu\n", n, before, after);
        fflush(stdout);
        nanosleep(&pause, NULL);
    }
}
