/* sim_held_free: a cuMemAlloc'd range freed with cuMemFreeAsync is dead to the program at once,
 * but its memory stays taken until a synchronizing call, as measured on the H200 (3 GiB freed on
 * the legacy stream stayed taken in every 100 ms sample for a second, and came back at
 * cuCtxSynchronize). Prints "key<TAB>value" lines:
 *
 *   held.samples_taken   how many of 5 samples, 60 ms apart, still saw the range taken, through
 *                        cuMemGetInfo, cusimGetUsage and NVML (when libnvidia-ml.so.1 is found)
 *   <how>.back           whether the range is free again right after <how> (1 or 0)
 *   ...
 *
 * Run bare on the simulated driver (the tests put a libnvidia-ml.so.1 link to it on the path). */
#include <dlfcn.h>
#include <time.h>

#include "workload.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
static int (*nvml_handle)(unsigned int, nvmlDevice_t *);
static int (*nvml_memory)(nvmlDevice_t, nvmlMemory_t *);
static nvmlDevice_t nvml_dev;

static void nvml_open(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) return;
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    nvml_handle = (int (*)(unsigned int, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nvml_memory = (int (*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    if (!init || !nvml_handle || !nvml_memory || init() != 0 || nvml_handle(0, &nvml_dev) != 0) nvml_memory = NULL;
}

/* Bytes taken on device 0, three ways; -1 where a way is missing. */
typedef struct {
    long long info, live, nvml;
} Taken;

static Taken taken(void) {
    Taken t = {-1, -1, -1};
    size_t free_b, total;
    if (cuMemGetInfo(&free_b, &total) == CUDA_SUCCESS) t.info = (long long)(total - free_b);
    size_t live, n;
    if (cusimGetUsage(0, &live, &n) == CUDA_SUCCESS) t.live = (long long)live;
    nvmlMemory_t m;
    if (nvml_memory && nvml_memory(nvml_dev, &m) == 0) t.nvml = (long long)m.used;
    return t;
}

/* Whether every way sees at least `bytes` more taken than `base` (or, with `back`, no more). */
static int holds(Taken now, Taken base, unsigned long long bytes) {
    int all = now.info - base.info >= (long long)bytes && now.live - base.live >= (long long)bytes;
    if (now.nvml >= 0) all = all && now.nvml - base.nvml >= (long long)bytes;
    return all;
}
static int back(Taken now, Taken base) {
    int all = now.info == base.info && now.live == base.live;
    if (now.nvml >= 0) all = all && now.nvml == base.nvml;
    return all;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Allocates `bytes` with cuMemAlloc, frees it with cuMemFreeAsync on `s`, waits until the
 * stream has reached the free without synchronizing (an event polled with cuEventQuery), and
 * returns its address. */
static CUdeviceptr freed_async(unsigned long long bytes, CUstream s) {
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, bytes));
    CHECK(cuMemFreeAsync(p, s));
    CUevent e;
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(e, s));
    while (cuEventQuery(e) == CUDA_ERROR_NOT_READY) {
    }
    CHECK(cuEventDestroy(e));
    return p;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(cuInit(0));
    nvml_open();
    printf("nvml\t%d\n", nvml_memory != NULL);
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    Taken base = taken();

    /* 3 GiB on the legacy stream, sampled without any synchronizing call. */
    CUdeviceptr p = freed_async(3 * GiB, 0);
    int held = 0;
    for (int i = 0; i < 5; i++) {
        sleep_ms(60);
        held += holds(taken(), base, 3 * GiB);
    }
    printf("held.samples_taken\t%d\n", held);
    CUdeviceptr b;
    size_t sz;
    printf("held.address_dead\t%d\n", cuMemGetAddressRange(&b, &sz, p));
    printf("held.free_again\t%d\n", cuMemFreeAsync(p, 0));
    /* Not released under pressure: 16 GiB minus what is taken does not fit 14 GiB. */
    CUdeviceptr big;
    printf("held.alloc_under_pressure\t%d\n", cuMemAlloc(&big, 14 * GiB));
    /* A query or an event record is no synchronization. */
    CUevent e;
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventRecord(e, 0));
    while (cuEventQuery(e) == CUDA_ERROR_NOT_READY) {
    }
    CHECK(cuStreamQuery(0));
    printf("query.back\t%d\n", back(taken(), base));
    CHECK(cuCtxSynchronize());
    printf("ctx_synchronize.back\t%d\n", back(taken(), base));

    /* The other synchronizing calls, each as measured on the H200
     * (docs/gpu-runs/2026-12-02-run1/giveback.md) where it was. */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    freed_async(64 * MiB, s);
    printf("stream.held\t%d\n", holds(taken(), base, 64 * MiB));
    CHECK(cuStreamSynchronize(s));
    printf("stream_synchronize.back\t%d\n", back(taken(), base));

    /* Freed on the legacy stream: synchronizing another, non-blocking stream releases nothing
     * (H200: still taken), */
    freed_async(64 * MiB, 0);
    CHECK(cuStreamSynchronize(s));
    printf("other_stream_synchronize.held\t%d\n", holds(taken(), base, 64 * MiB));
    /* nor does a cuMemFree of another allocation, though it waits for the device's work (H200:
     * still taken); */
    CUdeviceptr other;
    CHECK(cuMemAlloc(&other, 1 * MiB));
    CHECK(cuMemFree(other));
    printf("mem_free.held\t%d\n", holds(taken(), base, 64 * MiB));
    /* the legacy stream's synchronize does (H200: back). */
    CHECK(cuStreamSynchronize(0));
    printf("legacy_stream_synchronize.back\t%d\n", back(taken(), base));

    /* An event recorded on the legacy stream after the free, synchronized (H200: back). */
    freed_async(64 * MiB, 0);
    CHECK(cuEventRecord(e, 0));
    CHECK(cuEventSynchronize(e));
    printf("event_synchronize.back\t%d\n", back(taken(), base));

    /* Freed before the stream's work reached the free: held only once it does. */
    CUdeviceptr late;
    CHECK(cuMemAlloc(&late, 64 * MiB));
    CHECK(cusimEnqueueFill(s, late, 4096, 1, 100000));
    CHECK(cuMemFreeAsync(late, s));
    CHECK(cuEventRecord(e, 0)); /* legacy stream: does not wait for a non-blocking one */
    CHECK(cuEventSynchronize(e));
    printf("before_the_stream.held\t%d\n", holds(taken(), base, 64 * MiB));
    CHECK(cuStreamSynchronize(s));
    printf("after_the_stream.back\t%d\n", back(taken(), base));

    /* A pool's async allocation goes back to its pool as before (and the pool to the device at
     * the next synchronization). */
    CUdeviceptr a;
    CHECK(cuMemAllocAsync(&a, 64 * MiB, s));
    CHECK(cuMemFreeAsync(a, s));
    CHECK(cuStreamSynchronize(s));
    printf("async_alloc.back\t%d\n", back(taken(), base));

    /* A context destroyed with a held range gives it back. */
    CUcontext mine;
    CHECK(cuCtxCreate(&mine, NULL, 0, dev));
    freed_async(256 * MiB, 0);
    printf("created_context.held\t%d\n", holds(taken(), base, 256 * MiB));
    CHECK(cuCtxDestroy(mine));
    CHECK(cuCtxSetCurrent(ctx));
    printf("context_destroy.back\t%d\n", back(taken(), base));

    CHECK(cuEventDestroy(e));
    CHECK(cuStreamDestroy(s));
    return 0;
}
