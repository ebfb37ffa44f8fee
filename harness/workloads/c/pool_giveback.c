/* pool_giveback: memory the program frees reaches the device without the program synchronizing,
 * and its thread is not held up by GPU work while it frees. Run under the shim with the pool on
 * (the tests put a libnvidia-ml.so.1 link to the simulated driver on the path).
 *
 * usage: pool_giveback MODE
 *   now      3 GiB allocated and freed with nothing in flight
 *   pending  3 GiB freed while work that uses it is still queued (a 100 ms stall on a stream,
 *            then a memset of the block behind it)
 *   keep     256 MiB freed (run with CUGUARD_POOL_KEEP=100%: the pool keeps it)
 *   exit     as pending, then the program returns at once (the give-back is still waiting)
 *   fork     as pending, then forks at once; the child allocates and frees, then exits
 *   destroy  256 MiB of a created context freed while pending, then the context destroyed at
 *            once (back_ms: until its memory is off the device); new allocations follow and
 *            must stay intact (the pool may keep them once freed: CUGUARD_POOL_KEEP)
 *   reset    as destroy, in the primary context, with cuDevicePrimaryCtxReset
 *   others   memory another allocator gave back but the driver still holds is not the pool's
 *            to take: with a pooled free waiting for the GPU, 70% of the device from the
 *            driver's own pool (cuMemAllocAsync) freed with cuMemFreeAsync, then 30% asked with
 *            cuMemAlloc before any synchronization (the driver refuses it: CuPy's
 *            test_free_all_blocks_large_chunk), then again after cuCtxSynchronize (served)
 *
 * Prints "key<TAB>value" lines: free_call_us (how long cuMemFree took), back_ms (when the
 * memory was back on the device, sampled every 5 ms up to 1 s; -1 if never), and mode-specific
 * lines (fork: reaped_ms, when the parent had reaped its child). */
#include <dlfcn.h>
#include <sys/wait.h>
#include <time.h>

#include "workload.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
static int (*nvml_memory)(nvmlDevice_t, nvmlMemory_t *);
static nvmlDevice_t nvml_dev;

static void nvml_open(void) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) return;
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*handle)(unsigned int, nvmlDevice_t *) =
        (int (*)(unsigned int, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nvml_memory = (int (*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    if (!init || !handle || !nvml_memory || init() != 0 || handle(0, &nvml_dev) != 0) nvml_memory = NULL;
}

/* What the device holds: the driver's own count of live bytes, and NVML's used bytes. */
typedef struct {
    long long live, nvml;
} Held;

static Held held(void) {
    Held h = {-1, -1};
    size_t live, n;
    if (cusimGetUsage(0, &live, &n) == CUDA_SUCCESS) h.live = (long long)live;
    nvmlMemory_t m;
    if (nvml_memory && nvml_memory(nvml_dev, &m) == 0) h.nvml = (long long)m.used;
    return h;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Milliseconds from `t0` until the device holds no more than `base` again (sampled every 5 ms,
 * up to 1 s), without any synchronizing call; -1 if it never does. */
static double back_ms(double t0, Held base) {
    for (;;) {
        Held h = held();
        double t = now_ms() - t0;
        if (h.live <= base.live && (h.nvml < 0 || h.nvml <= base.nvml)) return t;
        if (t > 1000) return -1;
        sleep_ms(5);
    }
}

static CUstream stream;

/* Allocates `bytes`; with `pending`, queues work that uses the block behind a 100 ms stall. */
static CUdeviceptr allocate(unsigned long long bytes, int pending) {
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, bytes));
    if (pending) {
        if (!stream) CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
        CHECK(cusimEnqueueFill(stream, 0, 0, 0, 100000));
        CHECK(cuMemsetD8Async(p, 0x5a, 4096, stream));
    }
    return p;
}

/* Frees `p`, printing how long the call took; returns when the call returned. */
static double timed_free(CUdeviceptr p) {
    double t0 = now_ms();
    CHECK(cuMemFree(p));
    double t = now_ms();
    printf("free_call_us\t%.0f\n", (t - t0) * 1e3);
    return t0;
}

/* After a context went with a give-back pending: new allocations, written and read back after
 * the give-back thread had every chance to free something it should not. */
static void new_allocations_stay(void) {
    CUdeviceptr q[4];
    unsigned char pattern[4096], back[4096];
    memset(pattern, 0xa7, sizeof pattern);
    for (int i = 0; i < 4; i++) {
        CHECK(cuMemAlloc(&q[i], 256 * MiB));
        CHECK(cuMemcpyHtoD(q[i], pattern, sizeof pattern));
    }
    sleep_ms(300);
    int intact = 1;
    for (int i = 0; i < 4; i++) {
        CUdeviceptr base;
        size_t size;
        intact &= cuMemGetAddressRange(&base, &size, q[i]) == CUDA_SUCCESS && base == q[i];
        CHECK(cuMemcpyDtoH(back, q[i], sizeof back));
        intact &= memcmp(back, pattern, sizeof back) == 0;
        CHECK(cuMemFree(q[i]));
    }
    printf("new_allocations_intact\t%d\n", intact);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "now";
    CHECK(cuInit(0));
    nvml_open();
    printf("nvml\t%d\n", nvml_memory != NULL);
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    /* The pool exists, with a small block live, before the baseline. */
    CUdeviceptr small;
    CHECK(cuMemAlloc(&small, 4096));
    Held base = held();

    if (!strcmp(mode, "now") || !strcmp(mode, "pending") || !strcmp(mode, "keep")) {
        int keep = !strcmp(mode, "keep");
        CUdeviceptr p = allocate(keep ? 256 * MiB : 3 * GiB, !strcmp(mode, "pending"));
        double t0 = timed_free(p);
        printf("back_ms\t%.0f\n", back_ms(t0, base));
        if (keep) {
            /* Kept by the pool: free to the program, taken on the device. */
            size_t free_b, total;
            CHECK(cuMemGetInfo(&free_b, &total));
            Held h = held();
            printf("keep.taken_on_device\t%d\n", h.live - base.live >= (long long)(256 * MiB));
            CUdeviceptr again;
            CHECK(cuMemAlloc(&again, 256 * MiB));
            printf("keep.reused\t%d\n", again == p);
            CHECK(cuMemFree(again));
        }
    } else if (!strcmp(mode, "others")) {
        size_t free_b, total;
        CHECK(cuMemGetInfo(&free_b, &total));
        /* Work on two streams, so that the free waits for a fence (not one stream's order). */
        CUdeviceptr waiting = allocate(MiB, 1);
        CHECK(cuMemsetD8Async(waiting, 0, 4096, 0));
        CHECK(cuMemFree(waiting));
        CUdeviceptr big, rest;
        CHECK(cuMemAllocAsync(&big, total / 10 * 7, 0));
        CHECK(cuMemFreeAsync(big, 0));
        CUresult first = cuMemAlloc(&rest, total / 10 * 3);
        printf("others.before_sync\t%d\n", (int)first);
        if (first == CUDA_SUCCESS) CHECK(cuMemFree(rest));
        CHECK(cuCtxSynchronize());
        CUresult after = cuMemAlloc(&rest, total / 10 * 3);
        printf("others.after_sync\t%d\n", (int)after);
        if (after == CUDA_SUCCESS) CHECK(cuMemFree(rest));
    } else if (!strcmp(mode, "exit")) {
        CUdeviceptr p = allocate(3 * GiB, 1);
        timed_free(p);
        printf("exiting\t1\n");
        return 0;
    } else if (!strcmp(mode, "fork")) {
        CUdeviceptr p = allocate(3 * GiB, 1);
        double t0 = timed_free(p);
        pid_t child = fork();
        if (child == 0) {
            CUdeviceptr c;
            int ok = cuMemAlloc(&c, 8 * MiB) == CUDA_SUCCESS && cuMemFree(c) == CUDA_SUCCESS;
            _exit(ok ? 0 : 3);
        }
        int status = -1;
        waitpid(child, &status, 0);
        /* The child's life (its report written at its exit) is in back_ms: the parent looks only
         * once it has reaped the child. */
        printf("reaped_ms\t%.0f\n", now_ms() - t0);
        printf("child_status\t%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
        printf("back_ms\t%.0f\n", back_ms(t0, base));
    } else if (!strcmp(mode, "destroy")) {
        CUcontext mine;
        CHECK(cuCtxCreate(&mine, NULL, 0, dev));
        CUdeviceptr p = allocate(256 * MiB, 1);
        CHECK(cuMemFree(p));
        CHECK(cuCtxDestroy(mine));
        /* The context took its memory with it. */
        printf("back_ms\t%.0f\n", back_ms(now_ms(), base));
        CHECK(cuCtxSetCurrent(ctx));
        stream = NULL;
        new_allocations_stay();
    } else if (!strcmp(mode, "reset")) {
        CUdeviceptr p = allocate(256 * MiB, 1);
        CHECK(cuMemFree(p));
        CHECK(cuDevicePrimaryCtxReset(dev));
        /* The reset took the context's memory with it, the small block's too. */
        printf("back_ms\t%.0f\n", back_ms(now_ms(), base));
        CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
        CHECK(cuCtxSetCurrent(ctx));
        stream = NULL;
        new_allocations_stay();
        return 0;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    CHECK(cuMemFree(small));
    return 0;
}
