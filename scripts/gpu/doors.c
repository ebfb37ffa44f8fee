/* doors: one program per door, on the real driver. Each mode allocates 1, 2 and 3 MiB with
 * cuMemAlloc_v2, frees the 2 MiB block, and exits: 3 allocations, 2 kept (4 MiB).
 *   linked   -- calls the exported entries directly (built with -lcuda)
 *   dlsym    -- dlopen("libcuda.so.1") + dlsym of versioned names, like cudarc
 *   getproc  -- dlsym("cuGetProcAddress_v2"), then "cuGetProcAddress" through itself, then
 *               "cuMemAlloc"/"cuMemFree" through that, like the CUDA runtime
 * Build: gcc -O1 -I/usr/local/cuda/include -o doors doors.c -L/usr/local/nvidia/lib64 -lcuda -ldl */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*free_t)(CUdeviceptr);
typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

#define CHECK(x)                                                              \
    do {                                                                      \
        CUresult r_ = (x);                                                    \
        if (r_ != CUDA_SUCCESS) {                                             \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, r_); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static const char *mode = "linked";

static void run(alloc_t a, free_t f) {
    CUdeviceptr p[3];
    for (int i = 0; i < 3; i++) CHECK(a(&p[i], (size_t)(i + 1) << 20));
    CHECK(f(p[1]));
    printf("{\"case\":\"doors-%s\",\"allocated\":3,\"kept\":2,\"kept_sizes\":[%d,%d],\"checksum\":0}\n",
           mode, 1 << 20, 3 << 20);
}

int main(int argc, char **argv) {
    if (argc > 1) mode = argv[1];
    CHECK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    if (!strcmp(mode, "linked")) {
        run(cuMemAlloc, cuMemFree); /* cuda.h maps these to the _v2 exports */
    } else if (!strcmp(mode, "dlsym")) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        run((alloc_t)dlsym(h, "cuMemAlloc_v2"), (free_t)dlsym(h, "cuMemFree_v2"));
    } else if (!strcmp(mode, "getproc")) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        gpa_t gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
        void *self = NULL, *a = NULL, *f = NULL;
        CUdriverProcAddressQueryResult st;
        CHECK(gpa("cuGetProcAddress", &self, 12000, 0, &st));
        CHECK(((gpa_t)self)("cuMemAlloc", &a, 12000, 0, &st));
        CHECK(((gpa_t)self)("cuMemFree", &f, 12000, 0, &st));
        run((alloc_t)a, (free_t)f);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    return 0;
}
