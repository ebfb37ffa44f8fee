// What the parts of the driver's out-of-memory card cost on the real GPU (issue 53's 1 ms): the
// NVML calls the shim makes at a refusal (a device by UUID, its compute processes) and the
// default memory pool's attributes, each timed five times after NVML and CUDA are up.
//   cc -O2 -I harness/workloads/c -o card_parts scripts/gpu/card_parts.c -L/usr/local/nvidia/lib64 -lcuda -ldl && ./card_parts
#include "cusim.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

typedef struct { unsigned pid; unsigned long long used; unsigned gi, ci; } info_t;

int main(void) {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) return 1;
    int (*init)(void) = dlsym(h, "nvmlInit_v2");
    int (*by_uuid)(const char*, void**) = dlsym(h, "nvmlDeviceGetHandleByUUID");
    int (*procs)(void*, unsigned*, info_t*) = dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
    double t0 = now_us();
    init();
    printf("nvmlInit_v2 %.1f us\n", now_us() - t0);
    CUdevice dev; CUcontext ctx; CUuuid u;
    cuInit(0); cuDeviceGet(&dev, 0); cuDevicePrimaryCtxRetain(&ctx, dev); cuCtxSetCurrent(ctx);
    cuDeviceGetUuid(&u, dev);
    char text[64]; int n = sprintf(text, "GPU-");
    for (int i = 0; i < 16; i++) {
        n += sprintf(text + n, "%02x", (unsigned char)u.bytes[i]);
        if (i == 3 || i == 5 || i == 7 || i == 9) n += sprintf(text + n, "-");
    }
    CUdeviceptr p; cuMemAlloc(&p, 1 << 30);
    CUmemoryPool pool; cuDeviceGetDefaultMemPool(&pool, dev);
    for (int round = 0; round < 5; round++) {
        void* d = 0; info_t infos[64]; unsigned count = 64; cuuint64_t v;
        double a = now_us(); int r1 = by_uuid(text, &d);
        double b = now_us(); int r2 = procs(d, &count, infos);
        double c = now_us();
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v);
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v);
        cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
        double e = now_us(); size_t fr, to; cuMemGetInfo(&fr, &to);
        double f = now_us();
        printf("round %d: by_uuid %.1f us (rc %d), processes %.1f us (rc %d, %u listed), pool attributes x3 %.1f us, cuMemGetInfo %.1f us\n",
               round, b - a, r1, c - b, r2, count, e - c, f - e);
    }
    return 0;
}
