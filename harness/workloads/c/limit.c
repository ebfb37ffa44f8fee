/* limit: allocates and asks as its arguments say, one step each, for the tests of CUGUARD_LIMIT.
 * Each step prints one line:
 *
 *   dev D           make device D's primary context current         "dev D"
 *   info            cuMemGetInfo                                    "info FREE TOTAL"
 *   alloc N         cuMemAlloc of N MiB                             "alloc N RESULT"
 *   pitch W H       cuMemAllocPitch of W bytes by H rows (elem 4)   "pitch W H RESULT"
 *   async N         cuMemAllocAsync of N MiB on the null stream     "async N RESULT"
 *   managed N       cuMemAllocManaged of N MiB                      "managed N RESULT"
 *   vmm N           cuMemCreate of N MiB on the current device      "vmm N RESULT"
 *   freeall         frees everything kept, in its own family        "freeall"
 *   freealt         frees every other kept allocation (2nd, 4th, …) "freealt"
 *   freeasync       frees every kept async allocation (cuMemFreeAsync on the null stream),
 *                   then synchronizes the null stream               "freeasync"
 *   release         frees every kept async allocation with cuMemFreeAsync on the null stream,
 *                   without synchronizing                            "release"
 *   sync            cuCtxSynchronize                                 "sync RESULT"
 *   attrs           the device's current memory pool: reserved and used bytes  "attrs R U"
 *   defaultpool     makes the device's default pool its current one  "defaultpool RESULT"
 *   refusals N      N cuMemAlloc calls of 1 TiB, each refused; the first's and the slowest
 *                   of the others' time, and their median, in ns    "refusals FIRST MEDIAN MAX"
 *   threshold T     sets the release threshold of the device's current memory pool: bytes in
 *                   MiB, or "max" for unlimited                     "threshold T RESULT"
 *   newpool         creates a memory pool on the device, release threshold unlimited, and makes
 *                   it the device's current pool (async then allocates from it)  "newpool RESULT"
 *
 * Every successful allocation is kept until freeall (or exit: leaked). */
#include <time.h>

#include "workload.h"

enum kind { K_ALLOC, K_ASYNC, K_MANAGED, K_VMM };

static struct {
    enum kind kind;
    unsigned long long handle;
} kept[MAX_ITEMS];
static int nkept;

static void release(int k) {
    switch (kept[k].kind) {
    case K_ALLOC:
    case K_MANAGED:
        CHECK(cuMemFree(kept[k].handle));
        break;
    case K_ASYNC:
        CHECK(cuMemFreeAsync(kept[k].handle, NULL));
        CHECK(cuStreamSynchronize(NULL));
        break;
    case K_VMM:
        CHECK(cuMemRelease(kept[k].handle));
        break;
    }
    kept[k].handle = 0;
}

static void keep(enum kind k, unsigned long long h) {
    kept[nkept].kind = k;
    kept[nkept].handle = h;
    nkept++;
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Times n refused cuMemAlloc calls (1 TiB each). */
static void refusals(int n) {
    static long long ns[4096];
    if (n < 2) n = 2;
    if (n > 4096) n = 4096;
    for (int i = 0; i < n; i++) {
        CUdeviceptr p = 0;
        long long t0 = now_ns();
        CUresult r = cuMemAlloc(&p, (size_t)1 << 40);
        ns[i] = now_ns() - t0;
        if (r == CUDA_SUCCESS) CHECK(cuMemFree(p));
    }
    long long first = ns[0];
    qsort(ns + 1, n - 1, sizeof ns[0], by_value);
    printf("refusals %lld %lld %lld\n", first, ns[1 + (n - 1) / 2], ns[n - 1]);
}

int main(int argc, char **argv) {
    CHECK(cuInit(0));
    int dev = 0;
    wl_primary(0);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        const char *op = argv[i];
        if (!strcmp(op, "dev")) {
            dev = atoi(argv[++i]);
            wl_primary(dev);
            printf("dev %d\n", dev);
        } else if (!strcmp(op, "info")) {
            size_t free_b = 0, total = 0;
            CHECK(cuMemGetInfo(&free_b, &total));
            printf("info %zu %zu\n", free_b, total);
        } else if (!strcmp(op, "alloc") || !strcmp(op, "async") || !strcmp(op, "managed") ||
                   !strcmp(op, "vmm")) {
            unsigned long long mib = strtoull(argv[++i], NULL, 10);
            size_t bytes = (size_t)mib << 20;
            CUdeviceptr p = 0;
            CUresult r;
            if (!strcmp(op, "alloc")) {
                r = cuMemAlloc(&p, bytes);
                if (r == CUDA_SUCCESS) keep(K_ALLOC, p);
            } else if (!strcmp(op, "async")) {
                r = cuMemAllocAsync(&p, bytes, NULL);
                if (r == CUDA_SUCCESS) keep(K_ASYNC, p);
            } else if (!strcmp(op, "managed")) {
                r = cuMemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL);
                if (r == CUDA_SUCCESS) keep(K_MANAGED, p);
            } else {
                CUmemAllocationProp prop;
                memset(&prop, 0, sizeof prop);
                prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
                prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                prop.location.id = dev;
                CUmemGenericAllocationHandle h = 0;
                r = cuMemCreate(&h, bytes, &prop, 0);
                if (r == CUDA_SUCCESS) keep(K_VMM, h);
            }
            printf("%s %llu %d\n", op, mib, (int)r);
        } else if (!strcmp(op, "pitch")) {
            size_t w = strtoull(argv[++i], NULL, 10);
            size_t h = strtoull(argv[++i], NULL, 10);
            CUdeviceptr p = 0;
            size_t pitch = 0;
            CUresult r = cuMemAllocPitch(&p, &pitch, w, h, 4);
            if (r == CUDA_SUCCESS) keep(K_ALLOC, p);
            printf("pitch %zu %zu %d\n", w, h, (int)r);
        } else if (!strcmp(op, "freeall")) {
            for (int k = 0; k < nkept; k++)
                if (kept[k].handle) release(k);
            nkept = 0;
            printf("freeall\n");
        } else if (!strcmp(op, "freealt")) {
            for (int k = 1; k < nkept; k += 2)
                if (kept[k].handle) release(k);
            printf("freealt\n");
        } else if (!strcmp(op, "freeasync")) {
            for (int k = 0; k < nkept; k++) {
                if (kept[k].handle && kept[k].kind == K_ASYNC) {
                    CHECK(cuMemFreeAsync(kept[k].handle, NULL));
                    kept[k].handle = 0;
                }
            }
            CHECK(cuStreamSynchronize(NULL));
            printf("freeasync\n");
        } else if (!strcmp(op, "refusals")) {
            refusals(atoi(argv[++i]));
        } else if (!strcmp(op, "release")) {
            for (int k = 0; k < nkept; k++) {
                if (kept[k].handle && kept[k].kind == K_ASYNC) {
                    CHECK(cuMemFreeAsync(kept[k].handle, NULL));
                    kept[k].handle = 0;
                }
            }
            printf("release\n");
        } else if (!strcmp(op, "sync")) {
            printf("sync %d\n", (int)cuCtxSynchronize());
        } else if (!strcmp(op, "attrs")) {
            CUmemoryPool pool = NULL;
            cuuint64_t reserved = 0, used = 0;
            CHECK(cuDeviceGetMemPool(&pool, dev));
            CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
            CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
            printf("attrs %llu %llu\n", (unsigned long long)reserved, (unsigned long long)used);
        } else if (!strcmp(op, "defaultpool")) {
            CUmemoryPool pool = NULL;
            CUresult r = cuDeviceGetDefaultMemPool(&pool, dev);
            if (r == CUDA_SUCCESS) r = cuDeviceSetMemPool(dev, pool);
            printf("defaultpool %d\n", (int)r);
        } else if (!strcmp(op, "threshold")) {
            const char *t = argv[++i];
            cuuint64_t v = !strcmp(t, "max") ? ~(cuuint64_t)0 : (cuuint64_t)strtoull(t, NULL, 10) << 20;
            CUmemoryPool pool = NULL;
            CUresult r = cuDeviceGetMemPool(&pool, dev);
            if (r == CUDA_SUCCESS) r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
            printf("threshold %s %d\n", t, (int)r);
        } else if (!strcmp(op, "newpool")) {
            CUmemPoolProps props;
            memset(&props, 0, sizeof props);
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = dev;
            CUmemoryPool pool = NULL;
            CUresult r = cuMemPoolCreate(&pool, &props);
            cuuint64_t v = ~(cuuint64_t)0;
            if (r == CUDA_SUCCESS) r = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v);
            if (r == CUDA_SUCCESS) r = cuDeviceSetMemPool(dev, pool);
            printf("newpool %d\n", (int)r);
        } else {
            fprintf(stderr, "limit: unknown step %s\n", op);
            return 2;
        }
    }
    return 0;
}
