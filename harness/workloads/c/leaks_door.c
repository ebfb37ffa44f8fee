/* leaks_door: the same leaks reached through another door.
 *   dlsym        -- dlopen("libcuda.so.1") + dlsym of the versioned names (cudarc, numba, XLA)
 *   getproc      -- dlsym("cuGetProcAddress_v2"), then "cuGetProcAddress" through itself, then
 *                   every entry through that (the CUDA runtime's path)
 *   getproc_ptds -- the same, asking for per-thread default stream entries (the _ptsz forms)
 * Three cuMemAlloc (one freed, then freed again), two stream-ordered (one freed). */
#include <dlfcn.h>

#include "workload.h"

typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*free_t)(CUdeviceptr);
typedef CUresult (*aalloc_t)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*afree_t)(CUdeviceptr, CUstream);
typedef CUresult (*sync_t)(CUstream);
typedef CUresult (*gpa_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "dlsym";
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) return 2;
    alloc_t alloc;
    free_t mfree;
    aalloc_t aalloc;
    afree_t afree;
    sync_t ssync;
    const char *aalloc_name = "cuMemAllocAsync", *afree_name = "cuMemFreeAsync";
    if (!strcmp(mode, "dlsym")) {
        alloc = (alloc_t)dlsym(h, "cuMemAlloc_v2");
        mfree = (free_t)dlsym(h, "cuMemFree_v2");
        aalloc = (aalloc_t)dlsym(h, "cuMemAllocAsync");
        afree = (afree_t)dlsym(h, "cuMemFreeAsync");
        ssync = (sync_t)dlsym(h, "cuStreamSynchronize");
    } else {
        cuuint64_t flags = !strcmp(mode, "getproc_ptds") ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
        if (flags) {
            aalloc_name = "cuMemAllocAsync_ptsz";
            afree_name = "cuMemFreeAsync_ptsz";
        }
        gpa_t first = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
        gpa_t gpa = NULL;
        CUdriverProcAddressQueryResult st;
        CHECK(first("cuGetProcAddress", (void **)&gpa, 12000, 0, &st));
        CHECK(gpa("cuMemAlloc", (void **)&alloc, 12000, flags, &st));
        CHECK(gpa("cuMemFree", (void **)&mfree, 12000, flags, &st));
        CHECK(gpa("cuMemAllocAsync", (void **)&aalloc, 12000, flags, &st));
        CHECK(gpa("cuMemFreeAsync", (void **)&afree, 12000, flags, &st));
        CHECK(gpa("cuStreamSynchronize", (void **)&ssync, 12000, flags, &st));
    }
    /* RTLD_NEXT keeps its meaning for callers (the shim's dlsym must not shift it). */
    int rtld_next_ok = dlsym(RTLD_NEXT, "malloc") == dlsym(RTLD_DEFAULT, "malloc");

    CHECK(cuInit(0));
    CUcontext ctx = wl_primary(0);
    unsigned tid = wl_tid();
    CUdeviceptr d[3];
    for (int i = 0; i < 3; i++) {
        CHECK(alloc(&d[i], (size_t)(i + 1) << 20));
        wl_allocated();
    }
    CHECK(mfree(d[1]));
    CUresult r = mfree(d[1]);
    wl_event("double_free", d[1], "cuMemFree_v2", r);
    wl_keep(d[0], 1 << 20, 1 << 20, "cuMemAlloc_v2", "device", ctx, tid, "live_at_exit");
    wl_keep(d[2], 3 << 20, 3 << 20, "cuMemAlloc_v2", "device", ctx, tid, "live_at_exit");
    CUdeviceptr a[2];
    for (int i = 0; i < 2; i++) {
        CHECK(aalloc(&a[i], 4096 * (i + 1), 0));
        wl_allocated();
    }
    CHECK(afree(a[1], 0));
    CHECK(ssync(0));
    wl_keep(a[0], 4096, 4096, aalloc_name, "async", ctx, tid, "live_at_exit");
    (void)afree_name;
    if (!rtld_next_ok) {
        fprintf(stderr, "dlsym(RTLD_NEXT) changed meaning\n");
        return 3;
    }
    wl_print();
    return 0;
}
