/* history_phases: a training loop marked in phases through the shim's C ABI
 * (cuguard_phase_begin / cuguard_phase_end, found with dlsym(RTLD_DEFAULT, ...): they record a
 * phase exactly as an NVTX push and pop do), for the phases drawn by `cuguard view`. The same
 * loop as tests/python/native/nvtx_phases.c, without NVIDIA's headers:
 *
 *   load          64 MiB kept to the end (load_site), then 20 ms
 *   step #1..#3   a temporary of 32 MiB x i (temp_site), inside it "forward" with 16 MiB made
 *                 and freed (20 ms), then 8 MiB kept (keep_site), then the temporary freed;
 *                 20 ms between steps
 *
 * So step #i begins with 64 + 8(i-1) MiB live and peaks at 64 + 8(i-1) + 32i + 16 MiB (112,
 * 152, 192 MiB). It exits 2 when the shim's ABI is missing and 3 when it refuses a phase (the
 * history off). Built by the tests with -g -O0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

#include "cusim.h"

#define MIB ((size_t)1 << 20)

static int (*phase_begin)(const char *);
static int (*phase_end)(void);

static __attribute__((noinline)) CUdeviceptr load_site(size_t bytes) {
    CUdeviceptr p = 0;
    return cuMemAlloc(&p, bytes) == CUDA_SUCCESS ? p : 0;
}

static __attribute__((noinline)) CUdeviceptr temp_site(size_t bytes) {
    CUdeviceptr p = 0;
    return cuMemAlloc(&p, bytes) == CUDA_SUCCESS ? p : 0;
}

static __attribute__((noinline)) CUdeviceptr keep_site(size_t bytes) {
    CUdeviceptr p = 0;
    return cuMemAlloc(&p, bytes) == CUDA_SUCCESS ? p : 0;
}

#define PHASE(call)                                                         \
    do {                                                                    \
        int r_ = (call);                                                    \
        if (r_ != 0) {                                                      \
            fprintf(stderr, "history_phases: %s -> %d\n", #call, r_);       \
            return 3;                                                       \
        }                                                                   \
    } while (0)

int main(void) {
    phase_begin = (int (*)(const char *))dlsym(RTLD_DEFAULT, "cuguard_phase_begin");
    phase_end = (int (*)(void))dlsym(RTLD_DEFAULT, "cuguard_phase_end");
    if (!phase_begin || !phase_end) {
        fprintf(stderr, "history_phases: the shim's cuguard_phase_begin is not loaded\n");
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return 1;

    PHASE(phase_begin("load"));
    CUdeviceptr loaded = load_site(64 * MIB);
    if (!loaded) return 1;
    PHASE(phase_end());
    usleep(20 * 1000);

    CUdeviceptr kept[3];
    for (int i = 1; i <= 3; i++) {
        PHASE(phase_begin("step"));
        CUdeviceptr temp = temp_site((size_t)i * 32 * MIB);
        if (!temp) return 1;
        PHASE(phase_begin("forward"));
        CUdeviceptr act = temp_site(16 * MIB);
        if (!act) return 1;
        usleep(20 * 1000);
        if (cuMemFree(act)) return 1;
        PHASE(phase_end());
        kept[i - 1] = keep_site(8 * MIB);
        if (!kept[i - 1] || cuMemFree(temp)) return 1;
        PHASE(phase_end());
        usleep(20 * 1000);
    }
    for (int i = 0; i < 3; i++)
        if (cuMemFree(kept[i])) return 1;
    if (cuMemFree(loaded) || cuDevicePrimaryCtxRelease(dev)) return 1;
    return 0;
}
