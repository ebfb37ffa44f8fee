#define _GNU_SOURCE
/* driver_facts: measures, on a real GPU, the driver facts the simulated driver must copy:
 * which entries libcuda exports, what cuGetProcAddress answers per version and flag (and whether
 * its pointers are the exported ones), and the error codes of bad calls.
 * Build: gcc -O1 -I/usr/local/cuda/include -o driver_facts driver_facts.c -ldl
 * It dlopens libcuda.so.1 itself, so it runs with or without the shim preloaded. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void *lib;
#define SYM(name) dlsym(lib, name)

static const char *exported[] = {
    "cuInit", "cuDriverGetVersion", "cuGetProcAddress", "cuGetProcAddress_v2",
    "cuMemAlloc", "cuMemAlloc_v2", "cuMemAllocPitch", "cuMemAllocPitch_v2",
    "cuMemFree", "cuMemFree_v2", "cuMemAllocManaged", "cuMemAllocHost", "cuMemAllocHost_v2",
    "cuMemHostAlloc", "cuMemFreeHost", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
    "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", "cuMemFreeAsync",
    "cuMemFreeAsync_ptsz", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
    "cuMemAddressReserve", "cuMemAddressFree", "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3",
    "cuCtxCreate_v4", "cuCtxDestroy", "cuCtxDestroy_v2", "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxReset",
    "cuDevicePrimaryCtxReset_v2", "cuCtxSetCurrent", "cuCtxGetCurrent", "cuCtxPushCurrent",
    "cuCtxPushCurrent_v2", "cuCtxPopCurrent", "cuCtxPopCurrent_v2", "cuMemGetInfo",
    "cuMemGetInfo_v2", "cuMemGetAddressRange", "cuMemGetAddressRange_v2", "cuPointerGetAttribute",
    "cuPointerGetAttributes", "cuIpcGetMemHandle", "cuStreamCreate", "cuStreamDestroy",
    "cuStreamDestroy_v2", "cuEventRecord", "cuEventRecord_ptsz", "cuMemcpyHtoDAsync_v2_ptsz",
    "cuMemcpy_ptds", "cuMemsetD8_v2_ptds", "cuStreamSynchronize_ptsz", "cuCtxSynchronize",
    "cuMemMapArrayAsync", "cuMemMapArrayAsync_ptsz", "cuMemHostRegister", "cuMemHostRegister_v2",
    "cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cuGraphMemFreeNodeGetParams", "cuMemAllocHost_v2_ptsz",
    NULL};

static const char *bases[] = {
    "cuGetProcAddress", "cuMemAlloc", "cuMemAllocPitch", "cuMemFree", "cuMemAllocManaged",
    "cuMemAllocHost", "cuMemHostAlloc", "cuMemFreeHost", "cuMemAllocAsync",
    "cuMemAllocFromPoolAsync", "cuMemFreeAsync", "cuMemCreate", "cuMemRelease", "cuMemMap",
    "cuMemUnmap", "cuMemAddressReserve", "cuMemAddressFree", "cuCtxCreate", "cuCtxDestroy",
    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset",
    "cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent", "cuMemGetInfo",
    "cuMemGetAddressRange", "cuEventRecord", "cuMemcpyHtoDAsync", "cuMemcpyHtoD",
    "cuStreamSynchronize", "cuMemsetD8", "cuNoSuchThing", NULL};

static const char *name_of(void *p) {
    static char buf[64];
    if (!p) return "NULL";
    for (int i = 0; exported[i]; i++)
        if (SYM(exported[i]) == p) return exported[i];
    Dl_info info;
    if (dladdr(p, &info) && info.dli_sname) {
        snprintf(buf, sizeof buf, "other:%s", info.dli_sname);
        return buf;
    }
    snprintf(buf, sizeof buf, "internal:%p", p);
    return buf;
}

typedef CUresult (*gpa2_t)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_t)(const char *, void **, int, cuuint64_t);

#define R(label, expr)                                                  \
    do {                                                                \
        CUresult _r = (expr);                                           \
        printf("err\t%s\t%d\n", label, (int)_r);                       \
    } while (0)

typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*free_t)(CUdeviceptr);

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    Dl_info di;
    dladdr(SYM("cuInit"), &di);
    printf("path\t%s\n", di.dli_fname);
    for (int i = 0; exported[i]; i++) printf("export\t%s\t%s\n", exported[i], SYM(exported[i]) ? "yes" : "no");

    CUresult (*pInit)(unsigned) = SYM("cuInit");
    alloc_t pAlloc = (alloc_t)SYM("cuMemAlloc_v2");
    free_t pFree = (free_t)SYM("cuMemFree_v2");
    CUdeviceptr p = 0;
    R("alloc_before_init", pAlloc(&p, 256));
    R("free_before_init", pFree(0x1000));
    {
        gpa2_t g = (gpa2_t)SYM("cuGetProcAddress_v2");
        void *f = 0; CUdriverProcAddressQueryResult st = 99;
        R("getproc_before_init", g("cuMemAlloc", &f, 12000, 0, &st));
        printf("getproc_before_init_ptr\t%s\t%d\n", name_of(f), (int)st);
    }
    R("cuInit", pInit(0));
    int ver = 0;
    ((CUresult(*)(int *))SYM("cuDriverGetVersion"))(&ver);
    printf("driver_version\t%d\n", ver);

    /* cuGetProcAddress table */
    gpa2_t gpa2 = (gpa2_t)SYM("cuGetProcAddress_v2");
    gpa1_t gpa1 = (gpa1_t)SYM("cuGetProcAddress");
    int versions[] = {2000, 3020, 4000, 11000, 11020, 11040, 12000, 12050, 13000, 0};
    int flags[] = {0, 1, 2};
    for (int b = 0; bases[b]; b++)
        for (int v = 0; versions[v]; v++)
            for (int f = 0; f < 3; f++) {
                void *fn = (void *)0x1; CUdriverProcAddressQueryResult st = 99;
                CUresult r = gpa2(bases[b], &fn, versions[v], flags[f], &st);
                printf("gpa2\t%s\t%d\t%d\t%d\t%d\t%s\n", bases[b], versions[v], flags[f], (int)r, (int)st, fn == (void *)0x1 ? "UNTOUCHED" : name_of(fn));
            }
    {
        void *fn = (void *)0x1;
        R("gpa2_unknown_null_status", gpa2("cuNoSuchThing", &fn, 12000, 0, NULL));
        printf("gpa2_unknown_null_status_ptr\t%s\n", fn == (void *)0x1 ? "UNTOUCHED" : name_of(fn));
        fn = (void *)0x1;
        R("gpa2_old_version_null_status", gpa2("cuMemAllocAsync", &fn, 11000, 0, NULL));
        R("gpa1_unknown", gpa1("cuNoSuchThing", &fn, 12000, 0));
        R("gpa1_old_version", gpa1("cuMemAllocAsync", &fn, 11000, 0));
        R("gpa2_bad_flags", gpa2("cuMemAlloc", &fn, 12000, 8, NULL));
        R("gpa2_v2_name", gpa2("cuMemAlloc_v2", &fn, 12000, 0, NULL));
        printf("gpa2_v2_name_ptr\t%s\n", name_of(fn));
    }
    if (gpa1) {
        void *fn = 0;
        CUresult r = gpa1("cuMemAlloc", &fn, 11000, 0);
        printf("gpa1\tcuMemAlloc\t11000\t0\t%d\t-\t%s\n", (int)r, name_of(fn));
        r = gpa1("cuGetProcAddress", &fn, 12000, 0);
        printf("gpa1\tcuGetProcAddress\t12000\t0\t%d\t-\t%s\n", (int)r, name_of(fn));
    }
    /* the pointer returned for "cuGetProcAddress" through itself */
    {
        void *fn = 0; CUdriverProcAddressQueryResult st;
        gpa2("cuGetProcAddress", &fn, 12000, 0, &st);
        void *fn2 = 0;
        ((gpa2_t)fn)("cuMemAlloc", &fn2, 12000, 0, &st);
        printf("self_lookup\t%s\t%s\n", name_of(fn), name_of(fn2));
    }

    R("alloc_no_context", pAlloc(&p, 256));
    R("free0_no_context", pFree(0));
    R("free_random_no_context", pFree(0x7f0000001000ull));

    CUdevice dev;
    ((CUresult(*)(CUdevice *, int))SYM("cuDeviceGet"))(&dev, 0);
    CUcontext primary = 0;
    CUresult (*retain)(CUcontext *, CUdevice) = SYM("cuDevicePrimaryCtxRetain");
    CUresult (*release)(CUdevice) = SYM("cuDevicePrimaryCtxRelease_v2");
    CUresult (*reset)(CUdevice) = SYM("cuDevicePrimaryCtxReset_v2");
    CUresult (*setcur)(CUcontext) = SYM("cuCtxSetCurrent");
    CUresult (*getcur)(CUcontext *) = SYM("cuCtxGetCurrent");
    R("retain", retain(&primary, dev));
    R("alloc_primary_not_current", pAlloc(&p, 256));
    R("setcur", setcur(primary));
    R("alloc_size0", pAlloc(&p, 0));
    R("alloc_huge", pAlloc(&p, (size_t)1 << 50));
    R("alloc_256", pAlloc(&p, 256));
    printf("align_256\t%llu\n", (unsigned long long)(p % 4096));
    CUdeviceptr p2; pAlloc(&p2, 1);
    printf("gap_after_256_then_1\t%lld\n", (long long)(p2 - p));
    CUdeviceptr base = 0; size_t sz = 0;
    CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr) = SYM("cuMemGetAddressRange_v2");
    R("range_interior", range(&base, &sz, p + 10));
    printf("range_interior_val\t%lld\t%zu\n", (long long)(base - p), sz);
    R("range_unknown", range(&base, &sz, 0x10));
    R("free_interior", pFree(p + 256 > p ? p + 128 : p));
    R("free_ok", pFree(p));
    R("free_double", pFree(p));
    R("free_zero", pFree(0));
    R("free_random", pFree(0x7f0000001000ull));
    pFree(p2);
    {
        CUresult (*pitchf)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) = SYM("cuMemAllocPitch_v2");
        size_t pitch = 0; CUdeviceptr pp = 0;
        R("pitch_1000x10_e4", pitchf(&pp, &pitch, 1000, 10, 4));
        printf("pitch_1000\t%zu\n", pitch);
        R("range_pitch", range(&base, &sz, pp));
        printf("range_pitch_size\t%zu\n", sz);
        pFree(pp);
        R("pitch_1x1_e16", pitchf(&pp, &pitch, 1, 1, 16));
        printf("pitch_1\t%zu\n", pitch);
        pFree(pp);
        R("pitch_e3", pitchf(&pp, &pitch, 100, 10, 3));
        R("pitch_w0", pitchf(&pp, &pitch, 0, 10, 4));
        R("pitch_h0", pitchf(&pp, &pitch, 100, 0, 4));
    }
    {
        CUresult (*hostalloc)(void **, size_t) = SYM("cuMemAllocHost_v2");
        CUresult (*freehost)(void *) = SYM("cuMemFreeHost");
        void *h = 0;
        R("host_size0", hostalloc(&h, 0));
        R("host_alloc", hostalloc(&h, 4096));
        R("freehost_ok", freehost(h));
        R("freehost_double", freehost(h));
        R("freehost_random", freehost((void *)0x7f0000001000ull));
        R("freehost_null", freehost(NULL));
        CUdeviceptr d; pAlloc(&d, 256);
        R("freehost_devptr", freehost((void *)d));
        hostalloc(&h, 4096);
        R("free_hostptr", pFree((CUdeviceptr)h));
        freehost(h);
        pFree(d);
    }
    {
        CUresult (*managed)(CUdeviceptr *, size_t, unsigned) = SYM("cuMemAllocManaged");
        CUdeviceptr m;
        R("managed_size0", managed(&m, 0, 1));
        R("managed", managed(&m, 4096, 1));
        R("free_managed", pFree(m));
    }
    {
        CUresult (*aalloc)(CUdeviceptr *, size_t, CUstream) = SYM("cuMemAllocAsync");
        CUresult (*afree)(CUdeviceptr, CUstream) = SYM("cuMemFreeAsync");
        CUresult (*ssync)(CUstream) = SYM("cuStreamSynchronize");
        CUdeviceptr a;
        R("async_size0", aalloc(&a, 0, 0));
        R("async_alloc", aalloc(&a, 4096, 0));
        R("async_free", afree(a, 0));
        R("async_free_double", afree(a, 0));
        R("async_sync_after_double", ssync(0));
        R("async_free_random", afree(0x7f0000001000ull, 0));
        R("async_sync_after_random", ssync(0));
        CUdeviceptr d; pAlloc(&d, 256);
        R("async_free_of_cuMemAlloc_ptr", afree(d, 0));
        R("async_sync_after_that", ssync(0));
        R("free_after_async_free", pFree(d));
        aalloc(&a, 4096, 0);
        R("free_v2_of_async_ptr", pFree(a));
        ssync(0);
    }
    {
        CUresult (*ctxcreate4)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice) = SYM("cuCtxCreate_v4");
        CUresult (*ctxdestroy)(CUcontext) = SYM("cuCtxDestroy_v2");
        CUcontext c = 0;
        R("ctx_create_v4_null_params", ctxcreate4 ? ctxcreate4(&c, NULL, 0, dev) : -1);
        CUdeviceptr d; R("alloc_in_created", pAlloc(&d, 1 << 20));
        CUcontext cur; getcur(&cur);
        printf("created_is_current\t%d\n", cur == c);
        R("ctx_destroy", ctxdestroy(c));
        getcur(&cur);
        printf("current_after_destroy_is_null\t%d\tis_primary\t%d\n", cur == NULL, cur == primary);
        R("free_after_ctx_destroy", pFree(d));
        R("ctx_destroy_again", ctxdestroy(c));
        setcur(primary);
    }
    {
        CUdeviceptr d; pAlloc(&d, 1 << 20);
        R("reset", reset(dev));
        CUcontext cur; getcur(&cur);
        printf("current_after_reset_same_handle\t%d\n", cur == primary);
        R("alloc_after_reset_no_retain", pAlloc(&p, 256));
        R("free_after_reset", pFree(d));
        CUcontext again; retain(&again, dev);
        printf("primary_handle_stable\t%d\n", again == primary);
        setcur(again);
        R("release_1", release(dev));
        R("release_2", release(dev));
        R("alloc_after_last_release", pAlloc(&p, 256));
        retain(&again, dev);
        setcur(again);
    }
    {
        /* VMM granularity and basic errors */
        CUmemAllocationProp prop = {0};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        size_t gran = 0;
        CUresult (*granf)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags) = SYM("cuMemGetAllocationGranularity");
        R("granularity", granf(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        printf("granularity_val\t%zu\n", gran);
        CUresult (*mcreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) = SYM("cuMemCreate");
        CUresult (*mrelease)(CUmemGenericAllocationHandle) = SYM("cuMemRelease");
        CUresult (*areserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = SYM("cuMemAddressReserve");
        CUresult (*afreeva)(CUdeviceptr, size_t) = SYM("cuMemAddressFree");
        CUresult (*mmapf)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = SYM("cuMemMap");
        CUresult (*munmapf)(CUdeviceptr, size_t) = SYM("cuMemUnmap");
        CUmemGenericAllocationHandle h;
        R("vmm_create_unaligned", mcreate(&h, 1000, &prop, 0));
        R("vmm_create", mcreate(&h, gran, &prop, 0));
        CUdeviceptr va;
        R("vmm_reserve", areserve(&va, gran * 2, 0, 0, 0));
        R("vmm_map", mmapf(va, gran, 0, h, 0));
        R("vmm_release_while_mapped", mrelease(h));
        R("vmm_unmap", munmapf(va, gran));
        R("vmm_unmap_again", munmapf(va, gran));
        R("vmm_release_again", mrelease(h));
        R("vmm_addressfree", afreeva(va, gran * 2));
        R("vmm_addressfree_again", afreeva(va, gran * 2));
        R("range_of_free", range(&base, &sz, va));
    }
    {
        CUresult (*ipc)(CUipcMemHandle *, CUdeviceptr) = SYM("cuIpcGetMemHandle");
        CUipcMemHandle ih; CUdeviceptr d; pAlloc(&d, 1 << 20);
        R("ipc_interior", ipc(&ih, d + 4096));
        R("ipc_base", ipc(&ih, d));
        pFree(d);
    }
    {
        /* free blocking on in-flight work on a non-blocking stream */
        int n = 2000;
        double t0 = now_us();
        for (int i = 0; i < n; i++) { CUdeviceptr d; pAlloc(&d, 1 << 20); pFree(d); }
        printf("pair_1MiB_us\t%.2f\n", (now_us() - t0) / n);
    }
    return 0;
}
