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
 *
 * Every successful allocation is kept until freeall (or exit: leaked). */
#include "workload.h"

enum kind { K_ALLOC, K_ASYNC, K_MANAGED, K_VMM };

static struct {
    enum kind kind;
    unsigned long long handle;
} kept[MAX_ITEMS];
static int nkept;

static void keep(enum kind k, unsigned long long h) {
    kept[nkept].kind = k;
    kept[nkept].handle = h;
    nkept++;
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
            for (int k = 0; k < nkept; k++) {
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
            }
            nkept = 0;
            printf("freeall\n");
        } else {
            fprintf(stderr, "limit: unknown step %s\n", op);
            return 2;
        }
    }
    return 0;
}
