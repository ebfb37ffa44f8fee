/* sim_procaddr: asks cuGetProcAddress_v2 and the 4-argument cuGetProcAddress for symbols, before
 * cuInit (both must answer then), and names what they return by its exported symbol (dladdr).
 *
 * Usage: sim_procaddr BASE:VERSION:FLAGS...
 * Prints, per query:  BASE VERSION FLAGS rc_v2 status_v2 name_v2 rc_v1 name_v1   (tab-separated;
 * a name is NULL for a NULL pointer). Then:
 *   self      the entry returned for "cuGetProcAddress" at 12000 and what it returns for "cuMemAlloc"
 *   callable  whether cuMemAlloc fetched at 13000 allocates and cuMemFree fetched frees
 *   bad_flags the code for flags 8
 *   own_entries  whether the answers are the driver's own exports (dlsym on the driver's handle),
 *             also when a preloaded library exports the same names */
#define _GNU_SOURCE
#include "cusim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *name_of(void *p) {
    Dl_info info;
    if (!p) return "NULL";
    if (dladdr(p, &info) && info.dli_sname && info.dli_saddr == p) return info.dli_sname;
    return "UNNAMED";
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    PFN_cuGetProcAddress_v11030 gpa1 = (PFN_cuGetProcAddress_v11030)dlsym(RTLD_DEFAULT, "cuGetProcAddress");
    for (int i = 1; i < argc; i++) {
        char base[128];
        int version = 0;
        unsigned long long flags = 0;
        if (sscanf(argv[i], "%127[^:]:%d:%llu", base, &version, &flags) != 3) {
            fprintf(stderr, "bad query %s\n", argv[i]);
            return 1;
        }
        void *f2 = (void *)0x1, *f1 = (void *)0x1;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)99;
        CUresult r2 = cuGetProcAddress_v2(base, &f2, version, flags, &st);
        CUresult r1 = gpa1(base, &f1, version, flags);
        printf("%s\t%d\t%llu\t%d\t%d\t%s\t%d\t%s\n", base, version, flags, (int)r2, (int)st,
               f2 == (void *)0x1 ? "UNTOUCHED" : name_of(f2), (int)r1,
               f1 == (void *)0x1 ? "UNTOUCHED" : name_of(f1));
    }

    void *self = NULL, *alloc_fn = NULL;
    CUdriverProcAddressQueryResult st;
    cuGetProcAddress_v2("cuGetProcAddress", &self, 12000, 0, &st);
    ((PFN_cuGetProcAddress_v12000)self)("cuMemAlloc", &alloc_fn, 12000, 0, &st);
    printf("self\t%s\t%s\n", name_of(self), name_of(alloc_fn));

    void *free_fn = NULL;
    cuGetProcAddress_v2("cuMemAlloc", &alloc_fn, 13000, 0, &st);
    cuGetProcAddress_v2("cuMemFree", &free_fn, 13000, 0, &st);
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p = 0;
    cuInit(0);
    cuDeviceGet(&dev, 0);
    cuDevicePrimaryCtxRetain(&ctx, dev);
    cuCtxSetCurrent(ctx);
    CUresult ra = ((PFN_cuMemAlloc_v3020)alloc_fn)(&p, 1 << 20);
    CUresult rf = ((PFN_cuMemFree_v3020)free_fn)(p);
    printf("callable\t%d\t%d\t%d\n", (int)ra, p != 0, (int)rf);

    void *f = NULL;
    printf("bad_flags\t%d\n", (int)cuGetProcAddress_v2("cuMemAlloc", &f, 12000, 8, &st));

    /* The driver's own entry points are found through its handle; ask the driver's
     * cuGetProcAddress_v2 through that handle too, past any preloaded namesake. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    PFN_cuGetProcAddress_v12000 own_gpa = (PFN_cuGetProcAddress_v12000)dlsym(lib, "cuGetProcAddress_v2");
    static const struct { const char *base; unsigned long long flags; const char *symbol; } own[] = {
        {"cuMemAlloc", 0, "cuMemAlloc_v2"},
        {"cuMemAllocAsync", 2, "cuMemAllocAsync_ptsz"},
        {"cuGetProcAddress", 0, "cuGetProcAddress_v2"},
        {"cuMemFree", 0, "cuMemFree_v2"},
    };
    int all = lib && own_gpa;
    for (size_t i = 0; all && i < sizeof own / sizeof own[0]; i++) {
        f = NULL;
        all = own_gpa(own[i].base, &f, 13000, own[i].flags, &st) == CUDA_SUCCESS && f == dlsym(lib, own[i].symbol);
    }
    printf("own_entries\t%d\n", all);
    return 0;
}
