/* phase_steps: a training loop whose steps are phases (cuguard_phase_begin/_end, the C ABI that
 * Python's cuguard.phase calls; reached through dlsym, so the program runs without cuguard too),
 * for `cuguard diff` and `cuguard check --max-peak-growth`.
 *
 *   load         64 MiB kept to the end (load_site)
 *   step #1..#6  a 32 MiB temporary (temp_site), 8 MiB kept (keep_site), the temporary freed
 *
 * With the argument `heavy`, step #4 also takes 256 MiB more (heavy_site, the line marked
 * HEAVY), freed before the step ends: its peak is 256 MiB higher, nothing else changes. It
 * prints the HEAVY line's number. Built by the tests with -g -O0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cusim.h"

#define MIB (1ull << 20)

static int (*phase_begin)(const char *);
static int (*phase_end)(void);
static int heavy_line;

static void begin(const char *name) {
    if (phase_begin) phase_begin(name);
}

static void end(void) {
    if (phase_end) phase_end();
}

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

static __attribute__((noinline)) CUdeviceptr heavy_site(size_t bytes) {
    CUdeviceptr p = 0;
    heavy_line = __LINE__ + 1;
    return cuMemAlloc(&p, bytes) == CUDA_SUCCESS ? p : 0; /* HEAVY */
}

int main(int argc, char **argv) {
    int heavy = argc > 1 && strcmp(argv[1], "heavy") == 0;
    phase_begin = (int (*)(const char *))dlsym(RTLD_DEFAULT, "cuguard_phase_begin");
    phase_end = (int (*)(void))dlsym(RTLD_DEFAULT, "cuguard_phase_end");
    CUdevice device;
    CUcontext context;
    if (cuInit(0) || cuDeviceGet(&device, 0) || cuDevicePrimaryCtxRetain(&context, device) ||
        cuCtxSetCurrent(context))
        return 1;
    begin("load");
    if (!load_site(64 * MIB)) return 1;
    end();
    for (int i = 1; i <= 6; i++) {
        begin("step");
        CUdeviceptr temp = temp_site(32 * MIB);
        CUdeviceptr extra = 0;
        if (!temp) return 1;
        if (heavy && i == 4 && !(extra = heavy_site(256 * MIB))) return 1;
        if (!keep_site(8 * MIB)) return 1;
        if (cuMemFree(temp) || (extra && cuMemFree(extra))) return 1;
        end();
    }
    printf("%d\n", heavy_line);
    return 0;
}
