/* nvml_limit: asks NVML and the driver about device memory as its arguments say, one step each,
 * for the tests of CUGUARD_LIMIT as NVML shows it. NVML's entries are bound by the linker, as in a
 * program linked with -lnvidia-ml (against the simulated driver, which carries the simulated
 * NVML), or looked up with dlsym(RTLD_DEFAULT, ...). Each step prints one line:
 *
 *   cuinit          cuInit, device 0's primary context current      "cuinit"
 *   dev D           make device D's primary context current         "dev D"
 *   info            cuMemGetInfo                                    "info FREE TOTAL"
 *   alloc N         cuMemAlloc of N MiB                             "alloc N RESULT"
 *   freeall         frees every allocation kept                     "freeall"
 *   nvmlinit        nvmlInit_v2                                     "nvmlinit RESULT"
 *   nvml I          NVML device I's memory, v1 then v2              "nvml I R TOTAL FREE USED R2 TOTAL RESERVED FREE USED"
 *   nvmlsym I       the same through dlsym(RTLD_DEFAULT, ...)       "nvmlsym I ..." ("nvmlsym I absent" if not found)
 *
 * Sizes are bytes. Every successful allocation is kept until freeall. */
#include <dlfcn.h>

#include "workload.h"

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2 << 24)))

int nvmlInit_v2(void);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
int nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);

typedef int (*memory_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef int (*memory_v2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);

static CUdeviceptr kept[MAX_ITEMS];
static int nkept;

static void memory(const char *step, unsigned int index, memory_fn v1, memory_v2_fn v2) {
    nvmlDevice_t d = NULL;
    if (nvmlDeviceGetHandleByIndex_v2(index, &d) != 0) {
        fprintf(stderr, "nvml_limit: no NVML device %u\n", index);
        exit(2);
    }
    nvmlMemory_t m;
    memset(&m, 0, sizeof m);
    nvmlMemory_v2_t m2;
    memset(&m2, 0, sizeof m2);
    m2.version = NVML_MEMORY_V2;
    int r = v1(d, &m);
    int r2 = v2(d, &m2);
    printf("%s %u %d %llu %llu %llu %d %llu %llu %llu %llu\n", step, index, r, m.total, m.free,
           m.used, r2, m2.total, m2.reserved, m2.free, m2.used);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        const char *op = argv[i];
        if (!strcmp(op, "cuinit")) {
            CHECK(cuInit(0));
            wl_primary(0);
            printf("cuinit\n");
        } else if (!strcmp(op, "dev")) {
            int dev = atoi(argv[++i]);
            wl_primary(dev);
            printf("dev %d\n", dev);
        } else if (!strcmp(op, "info")) {
            size_t free_b = 0, total = 0;
            CHECK(cuMemGetInfo(&free_b, &total));
            printf("info %zu %zu\n", free_b, total);
        } else if (!strcmp(op, "alloc")) {
            unsigned long long mib = strtoull(argv[++i], NULL, 10);
            CUdeviceptr p = 0;
            CUresult r = cuMemAlloc(&p, (size_t)mib << 20);
            if (r == CUDA_SUCCESS) kept[nkept++] = p;
            printf("alloc %llu %d\n", mib, (int)r);
        } else if (!strcmp(op, "freeall")) {
            for (int k = 0; k < nkept; k++) CHECK(cuMemFree(kept[k]));
            nkept = 0;
            printf("freeall\n");
        } else if (!strcmp(op, "nvmlinit")) {
            printf("nvmlinit %d\n", nvmlInit_v2());
        } else if (!strcmp(op, "nvml")) {
            memory("nvml", (unsigned int)atoi(argv[++i]), nvmlDeviceGetMemoryInfo,
                   nvmlDeviceGetMemoryInfo_v2);
        } else if (!strcmp(op, "nvmlsym")) {
            unsigned int index = (unsigned int)atoi(argv[++i]);
            memory_fn v1 = (memory_fn)dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo");
            memory_v2_fn v2 = (memory_v2_fn)dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo_v2");
            if (!v1 || !v2) {
                printf("nvmlsym %u absent\n", index);
                continue;
            }
            memory("nvmlsym", index, v1, v2);
        } else {
            fprintf(stderr, "nvml_limit: unknown step %s\n", op);
            return 2;
        }
    }
    return 0;
}
